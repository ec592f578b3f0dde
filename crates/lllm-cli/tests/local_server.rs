//! Concurrency that fits a local server: `lllm-mock --slots N` serves N
//! requests at once and queues the rest first come first served, as
//! llama-server does with `--parallel N`, and says N at `GET /props`. lllm
//! asks once, starts no more tasks than the server serves (the default
//! `-j 16` included), says so in the progress line, and leaves the user's
//! `max_concurrency` alone (with a warning when it is more than the server
//! has). Nothing here measures time: the mock's own log says whether a
//! request waited in its queue and in which order it was served.

mod common;

use common::{MockServer, Test};
use serde_json::Value;

fn tactic(base_url: &str, provider_extra: &str) -> String {
    format!(
        r#"tactic_type: test
global:
  model_name: local/small-model
  max_llm_recall: 0
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: openai, base_url: "{base_url}"{provider_extra}}}
pricing:
  local/small-model: {{input_per_million: 0, output_per_million: 0}}
"#
    )
}

fn tasks(count: usize) -> String {
    (0..count)
        .map(|i| format!("{{\"id\": \"t{i}\", \"task\": \"task {i}\"}}\n"))
        .collect()
}

/// The model requests of the mock's log (it never logs `/props`).
fn model_requests(server: &MockServer) -> Vec<Value> {
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|request| request["path"] == "/v1/chat/completions"),
        "{requests:?}"
    );
    requests
}

/// Which task a request was for: its last message is the task's text.
fn task_of(request: &Value) -> usize {
    let messages = request["body"]["messages"].as_array().unwrap();
    let text = messages.last().unwrap()["content"].as_str().unwrap();
    text.strip_prefix("task ").unwrap().parse().unwrap()
}

#[test]
fn a_batch_at_the_default_j_keeps_to_the_server_s_slots_and_starves_no_task() {
    let test = Test::new();
    // Each request holds its slot 50 ms: 40 of them at 4 a time take a
    // while, so a batch sending 16 at once would queue 12 in the server.
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {echo: true}\n",
        &["--slots", "4", "--latency-ms", "50"],
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .file("tasks.jsonl", &tasks(40));
    // No `-j`: the default 16. Progress lines often, as a log gets them.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--progress-interval",
        "0.05",
    ]);
    output.expect_code(0);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], 40, "{summary}");

    let requests = model_requests(&server);
    assert_eq!(requests.len(), 40);
    // Nothing waited in the server's queue, where its time would count
    // against the request's timeout, and the slots were used.
    let queued: Vec<&Value> = requests
        .iter()
        .filter(|request| request["queued"] != false)
        .collect();
    assert!(queued.is_empty(), "waited in the server: {queued:?}");
    let busy: Vec<u64> = requests
        .iter()
        .map(|request| request["busy"].as_u64().unwrap())
        .collect();
    let most = busy.iter().max().copied().unwrap_or_default();
    assert!((2..=4).contains(&most), "busy at once: {busy:?}");
    // No task waits for the others: tasks are served in file order, give
    // or take the few that start together (`n` is the order of service).
    for request in &requests {
        let (task, served) = (task_of(request), request["n"].as_u64().unwrap() as usize);
        assert!(
            task.abs_diff(served) <= 8,
            "task {task} was served {served}th: {requests:?}"
        );
    }
    // The progress line says why fewer than 16 run.
    assert!(
        output
            .stderr
            .contains("4 of 16 running: `local` has 4 slots"),
        "{}",
        output.stderr
    );
}

#[test]
fn run_v_and_batch_v_name_the_learned_limit_once() {
    let test = Test::new();
    let server =
        MockServer::start_with(test.dir.path(), "default: {text: ok}\n", &["--slots", "2"]);
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .file("tasks.jsonl", &tasks(12));
    let learned = format!(
        "provider `local`: the server has 2 slots (`{}/props`)",
        server.url
    );
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record", "-v"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "ok\n");
    assert_eq!(
        output.stderr.matches(&learned).count(),
        1,
        "{}",
        output.stderr
    );
    let output = test.batch("t.yaml", "out", &["-v"]);
    output.expect_code(0);
    assert_eq!(
        output.stderr.matches(&learned).count(),
        1,
        "{}",
        output.stderr
    );
    // Without `-v`, nothing is said of it.
    let quiet = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    quiet.expect_code(0);
    assert!(!quiet.stderr.contains("slots"), "{}", quiet.stderr);
}

#[test]
fn the_user_s_max_concurrency_wins_and_is_warned_about_once_when_above_the_slots() {
    let test = Test::new();
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {echo: true}\n",
        &["--slots", "2", "--latency-ms", "50"],
    );
    let test = test
        .file(
            "t.yaml",
            &tactic(&server.base_url(), ", max_concurrency: 3"),
        )
        .file("tasks.jsonl", &tasks(24));
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(0);
    let warning = "warning: provider `local`: `max_concurrency: 3` is more than the 2 slots the \
                   server has";
    let warnings: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", output.stderr);
    assert!(warnings[0].starts_with(warning), "{}", warnings[0]);
    // Three at a time, as the user said: the third waits in the server.
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 24);
    assert!(
        requests.iter().any(|request| request["queued"] == true),
        "{requests:?}"
    );
    // At or below the slots, nothing is said.
    let test = test.file(
        "t.yaml",
        &tactic(&server.base_url(), ", max_concurrency: 2"),
    );
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(0);
    assert!(!output.stderr.contains("warning:"), "{}", output.stderr);
}

#[test]
fn a_server_that_does_not_say_its_slots_gets_the_adaptive_limit() {
    let test = Test::new();
    // Ollama and vLLM answer `/props` with a 404.
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {text: ok}\n",
        &["--slots", "2", "--no-props"],
    );
    let test = test.file("t.yaml", &tactic(&server.base_url(), ""));
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record", "-v"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains(
            "provider `local`: the server does not say how many requests it serves at once"
        ) && output.stderr.contains("lllm starts at 4"),
        "{}",
        output.stderr
    );
}
