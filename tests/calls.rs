//! Calls from code on the offline `mock/script` provider: `bcall` keeps input
//! order, `try_bcall` stops at the first failure (no later task is pulled,
//! running ones are aborted), `ccall` yields runs as they finish and aborts
//! the rest when dropped; configs from a file, a string and the builder run
//! alike. No test depends on timing: a "slow" reply waits an hour, so a test
//! that needed it to finish would hang, not flake.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use lllm::config::{AgentEntry, TacticConfig};
use lllm::{Registry, Tactic, Task};
use serde_json::json;

/// `slow` waits an hour, `late` a little, `fail` is a permanent error (400,
/// never retried); anything else is echoed.
const SCRIPT: &str = r#"
rules:
  - when: {contains: slow}
    reply: {echo: true, delay_ms: 3600000}
  - when: {contains: late}
    reply: {echo: true, delay_ms: 20}
  - when: {contains: fail}
    reply: {fault: {status: 400}}
default: {echo: true}
"#;

const TACTIC: &str = "
tactic_type: scripted
global: {model_name: mock/script, max_llm_recall: 0}
agent_configs: [{name: echo}]
providers: {mock: {script: script.yaml}}
";

/// The scripted tactic, from YAML text beside its script.
fn scripted() -> (tempfile::TempDir, Tactic) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    let tactic = Tactic::from_yaml(TACTIC, dir.path(), &Registry::new()).unwrap();
    (dir, tactic)
}

/// Waits until every spawned run is gone (aborted runs are dropped when the
/// runtime next gets to them); hangs if one is still running.
async fn no_run_left() {
    let metrics = tokio::runtime::Handle::current().metrics();
    while metrics.num_alive_tasks() > 0 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn bcall_gives_every_result_in_input_order() {
    let (_dir, tactic) = scripted();
    let tasks = ["late 0", "late 1", "2", "fail 3", "4", "late 5", "6"];
    let results = tactic.bcall(tasks).concurrency(4).await;
    assert_eq!(results.len(), tasks.len());
    for (index, (result, task)) in results.iter().zip(tasks).enumerate() {
        match result {
            Ok(text) => assert_eq!(text, task, "result {index}"),
            Err(error) => {
                assert_eq!(index, 3);
                assert!(error.to_string().contains("400"), "{error}");
                assert_eq!(error.record().task, "fail 3");
            }
        }
    }
    assert!(results[3].is_err());

    // `.records()`: one record per task, in order, failures included.
    let tasks = (0..20).map(|number| Task::new(format!("late {number}")).id(format!("t{number}")));
    let records = tactic.bcall(tasks).concurrency(3).records().await;
    let ids: Vec<_> = records
        .iter()
        .map(|record| record.task_id.clone().unwrap())
        .collect();
    let expected: Vec<_> = (0..20).map(|number| format!("t{number}")).collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn try_bcall_pulls_no_task_after_the_first_failure() {
    let (_dir, tactic) = scripted();
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let tasks = ["a", "fail", "b", "c", "d"].into_iter().inspect(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let error = tactic.try_bcall(tasks).concurrency(1).await.unwrap_err();
    assert_eq!(error.record().task, "fail");
    assert_eq!(
        pulled.load(Ordering::SeqCst),
        2,
        "b, c and d were never sent"
    );

    let everything = tactic.try_bcall(["x", "y"]).await.unwrap();
    assert_eq!(everything, ["x", "y"]);
}

#[tokio::test]
async fn try_bcall_aborts_the_runs_still_going() {
    let (_dir, tactic) = scripted();
    // Two runs wait an hour: the failure must not wait for them.
    let error = tactic
        .try_bcall(["slow 0", "fail", "slow 2"])
        .concurrency(3)
        .await
        .unwrap_err();
    assert_eq!(error.record().task, "fail");
    no_run_left().await;
}

#[tokio::test]
async fn ccall_yields_runs_as_they_finish_and_dropping_it_aborts_the_rest() {
    let (_dir, tactic) = scripted();
    // Owned tasks: the stream is 'static and moves into a spawned task.
    let tasks: Vec<String> = ["slow"]
        .into_iter()
        .map(String::from)
        .chain((1..=5).map(|number| number.to_string()))
        .collect();
    let stream = tactic.ccall(tasks).concurrency(2);
    let finished = tokio::spawn(async move {
        let mut stream = stream;
        let mut finished = Vec::new();
        // The slow run holds one slot; the others pass through the second.
        while finished.len() < 5 {
            let (index, result) = stream.next().await.unwrap();
            assert_eq!(result.unwrap(), index.to_string());
            finished.push(index);
        }
        finished
        // The stream is dropped here with the slow run in it.
    })
    .await
    .unwrap();
    assert_eq!(finished, [1, 2, 3, 4, 5]);
    no_run_left().await;

    // `.records()` yields every run's record, failures too.
    let mut records = tactic.ccall(["fail", "ok"]).concurrency(2).records();
    let mut states = Vec::new();
    while let Some((index, record)) = records.next().await {
        states.push((index, record.state));
    }
    states.sort_by_key(|(index, _)| *index);
    assert_eq!(
        states,
        [
            (0, lllm::tactic::RunState::Failure),
            (1, lllm::tactic::RunState::Success)
        ]
    );
}

#[tokio::test]
async fn many_tasks_are_pulled_lazily() {
    let (_dir, tactic) = scripted();
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    // An endless iterator: only what runs is ever pulled.
    let tasks = (0..).map(move |number: u64| {
        counter.fetch_add(1, Ordering::SeqCst);
        format!("{number}")
    });
    let mut stream = tactic.ccall(tasks).concurrency(3);
    for _ in 0..10 {
        stream.next().await.unwrap().1.unwrap();
    }
    // Ten finished, at most three in flight.
    assert!(
        pulled.load(Ordering::SeqCst) <= 13,
        "{}",
        pulled.load(Ordering::SeqCst)
    );
    drop(stream);
    no_run_left().await;
}

#[tokio::test]
async fn a_tactic_from_a_file_a_string_and_the_builder_runs_alike() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("prompts")).unwrap();
    std::fs::write(dir.path().join("prompts/sys.md"), "You repeat {{ task }}.").unwrap();
    let yaml = "
tactic_type: repeat
global: {model_name: mock/echo, model_args: {temperature: 0.5}}
agent_configs: [{name: writer, system_prompt_path: sys}]
max_workers: 3
";
    let path = dir.path().join("repeat.yaml");
    std::fs::write(&path, yaml).unwrap();
    let registry = Registry::new();
    let from_file = Tactic::load(&path, &registry).unwrap();
    let from_text = Tactic::from_yaml(yaml, dir.path(), &registry).unwrap();
    let config = TacticConfig::builder()
        .name("repeat")
        .base_dir(dir.path())
        .global(
            AgentEntry::defaults()
                .model("mock/echo")
                .arg("temperature", 0.5),
        )
        .agent(AgentEntry::new("writer").system_path("sys"))
        .set("max_workers", 3)
        .build()
        .unwrap();
    let from_code = Tactic::from_config(config, &registry).unwrap();

    let mut configs = Vec::new();
    for tactic in [from_file, from_text, from_code] {
        assert_eq!(tactic.default_concurrency(), 3, "max_workers");
        let record = tactic.run(Task::new("owls")).await;
        assert_eq!(record.delivery.as_deref(), Some("owls"));
        let system = &record.dialogs[0].messages[0];
        assert_eq!(system.content, "You repeat owls.");
        configs.push(record.tactic.config.value());
    }
    assert_eq!(configs[0], configs[1]);
    assert_eq!(configs[0], configs[2]);
    assert_eq!(
        configs[0]["agent_configs"][0]["model_args"],
        json!({"temperature": 0.5})
    );
}

#[tokio::test]
async fn bad_configs_from_code_are_errors_naming_the_problem() {
    let error = Tactic::from_yaml(
        "agent_configs: [{name: a, model_name: nope/x}]",
        ".",
        &Registry::new(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(error.contains("unknown provider `nope`"), "{error}");
    let error = Tactic::from_yaml("agent_configs: [{name: a}", ".", &Registry::new())
        .err()
        .unwrap()
        .to_string();
    assert!(error.starts_with("<yaml>:"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
}

#[tokio::test]
async fn runs_and_clones_share_the_providers_limits() {
    // A server that accepts and never answers: a request sent to it holds
    // the provider's only slot until its run is aborted.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (connected, mut connections) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
            let _ = connected.send(());
        }
    });
    let yaml = format!(
        "global: {{model_name: local/m, max_llm_recall: 0}}\nagent_configs: [{{name: a}}]\n\
         providers: {{local: {{api: openai, base_url: 'http://127.0.0.1:{port}/v1', \
         max_concurrency: 1, timeout_s: 3600}}}}\n"
    );
    let tactic = Tactic::from_yaml(&yaml, ".", &Registry::new()).unwrap();
    let clone = tactic.clone();
    assert_eq!(clone.waiting(), None);
    let mut stream = tactic.ccall(["one", "two"]).concurrency(2);
    // Polled once, the stream starts both runs; the first reaches the server
    // once lllm has asked a local server for its capacity (`/props`, one
    // connection, unanswered: unknown after its short timeout).
    std::future::poll_fn(|context| {
        let _ = stream.poll_next_unpin(context);
        std::task::Poll::Ready(())
    })
    .await;
    connections.recv().await.unwrap();
    connections.recv().await.unwrap();
    // The clone's provider is the runs' one: its only slot is taken.
    assert_eq!(
        clone.waiting(),
        Some(lllm::provider::limit::Waiting::Concurrency)
    );
    drop(stream);
    // The aborted run gives its slot back (the test hangs if it never does).
    while clone.waiting().is_some() {
        tokio::task::yield_now().await;
    }
    server.abort();
}
