//! The event stream from code (issue 29): `Tactic::events` for one run and
//! `ccall(..).events()` for many, on the offline `mock/script` provider.
//! Order within a run, tagging by task, one closing event per run, a
//! stream that moves into a spawned task, and dropping it stops the run.
//! No test depends on timing: a "slow" reply waits an hour, so a test that
//! needed it to finish would hang, not flake.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use lllm::{Ctx, Event, EventKind, Flow, FlowResult, Registry, Tactic, Task};

/// `tool` asks for the `shout` tool once, `slow` waits an hour; anything
/// else is echoed.
const SCRIPT: &str = r#"
rules:
  - when: {contains: slow}
    reply: {echo: true, delay_ms: 3600000}
  - when: {contains: "tool please"}
    reply: {tool_calls: [{name: shout, arguments: {text: hi}}]}
default: {echo: true}
"#;

const TACTIC: &str = "
tactic_type: scripted
global: {model_name: mock/script, max_llm_recall: 0}
agent_configs: [{name: echo, tools: [shout]}]
providers: {mock: {script: script.yaml}}
tools:
  - {name: shout, description: Says it loudly., command: [echo, LOUD]}
";

fn scripted(registry: &Registry) -> (tempfile::TempDir, Tactic) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    let tactic = Tactic::from_yaml(TACTIC, dir.path(), registry).unwrap();
    (dir, tactic)
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|event| event.kind.name()).collect()
}

#[tokio::test]
async fn a_runs_events_come_in_order_and_end_with_one_result() {
    let (_dir, tactic) = scripted(&Registry::new());
    // `'static` and `Send`: the stream is read in a spawned task.
    let stream = tactic.events(Task::new("tool please").id("t-1"));
    let events: Vec<Event> = tokio::spawn(stream.collect()).await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            "model_call_started",
            "model_call_finished",
            "tool_call",
            "tool_result",
            "model_call_started",
            "text_delta",
            "model_call_finished",
            "result",
        ]
    );
    let EventKind::ToolCall { call_id, name, .. } = &events[2].kind else {
        panic!("{:?}", events[2])
    };
    assert_eq!(name, "shout");
    let EventKind::ToolResult {
        call_id: answered,
        result,
        ..
    } = &events[3].kind
    else {
        panic!("{:?}", events[3])
    };
    assert_eq!((answered, result.as_deref()), (call_id, Some("LOUD")));
    let EventKind::ModelCallFinished { step, .. } = &events[6].kind else {
        panic!("{:?}", events[6])
    };
    assert_eq!(*step, 1, "the second request is the tool round's");
    let EventKind::Result {
        state, session_id, ..
    } = &events[7].kind
    else {
        panic!("{:?}", events[7])
    };
    assert_eq!(state, "success");
    assert!(!session_id.is_empty());
    // A single run's events name its task; ids are unique and time ordered.
    assert!(
        events
            .iter()
            .all(|event| event.metadata["task_id"] == "t-1")
    );
    let mut ids: Vec<&str> = events.iter().map(|event| event.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), events.len());
    assert!(
        events
            .windows(2)
            .all(|pair| pair[0].timestamp <= pair[1].timestamp)
    );
}

#[tokio::test]
async fn ccall_events_are_tagged_by_task_each_task_closing_last() {
    let (_dir, tactic) = scripted(&Registry::new());
    let tasks = (0..5).map(|number| Task::new(format!("task {number}")).id(format!("id-{number}")));
    let events: Vec<Event> = tactic.ccall(tasks).concurrency(3).events().collect().await;
    for index in 0..5u64 {
        let own: Vec<&Event> = events
            .iter()
            .filter(|event| event.metadata["task_index"] == index)
            .collect();
        assert!(
            own.iter()
                .all(|event| event.metadata["task_id"] == format!("id-{index}"))
        );
        let own_kinds: Vec<&str> = own.iter().map(|event| event.kind.name()).collect();
        assert_eq!(
            own_kinds,
            [
                "model_call_started",
                "text_delta",
                "model_call_finished",
                "result"
            ],
            "task {index}"
        );
        let EventKind::Result { delivery, .. } = &own[3].kind else {
            panic!("{:?}", own[3])
        };
        assert_eq!(delivery, &format!("task {index}"));
    }
    assert_eq!(events.len(), 5 * 4, "every event is some task's");
}

/// Counts the flows dropped before they finished.
struct Guard(Arc<AtomicUsize>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Asks the model twice, holding a guard while it waits.
struct Twice(Arc<AtomicUsize>);

impl Flow for Twice {
    const NAME: &'static str = "scripted";
    const AGENTS: &'static [&'static str] = &["echo"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let _guard = Guard(self.0.clone());
        let echo = cx.agent("echo")?;
        echo.open("main")?;
        echo.receive("first")?;
        echo.respond().await?;
        echo.receive(task.text())?;
        Ok(echo.respond().await?.content)
    }
}

#[tokio::test]
async fn a_programmed_flow_streams_too_and_dropping_the_stream_stops_the_run() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let registry = Registry::new().flow(Twice(dropped.clone()));
    let (_dir, tactic) = scripted(&registry);

    let events: Vec<Event> = tactic.events("second").collect().await;
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["first", "second"]);
    assert!(events.last().unwrap().kind.is_closing());
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the flow ended");

    // The second request waits an hour: read until it starts, then drop.
    let mut stream = tactic.events("slow");
    let mut started = 0;
    while let Some(event) = stream.next().await {
        if let EventKind::ModelCallStarted { .. } = event.kind {
            started += 1;
            if started == 2 {
                break;
            }
        }
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "still running");
    drop(stream);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "dropping the stream dropped the run"
    );
}

#[tokio::test]
async fn a_failed_run_ends_with_one_error_event_and_its_record() {
    let yaml =
        "agent_configs: [{name: a, model_name: mock/script}]\nproviders: {mock: {script: s.yaml}}";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.yaml"),
        "replies: [{fault: {status: 400}}]",
    )
    .unwrap();
    let tactic = Tactic::from_yaml(yaml, dir.path(), &Registry::new()).unwrap();
    let mut stream = tactic.events("hi");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    assert_eq!(
        kinds(&events),
        ["model_call_started", "model_call_finished", "error"]
    );
    let EventKind::Error {
        message,
        session_id,
        ..
    } = &events[2].kind
    else {
        panic!("{:?}", events[2])
    };
    assert!(message.contains("400"), "{message}");
    let record = stream.into_record().unwrap();
    assert_eq!(&record.session_id, session_id);
    assert_eq!(record.state, lllm::tactic::RunState::Failure);
}
