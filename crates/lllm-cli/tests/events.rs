//! `lllm run --events` (issue 29): the run's events as JSON lines on
//! stdout, in the envelope of upstream's `TacticEvent`, offline against
//! `mock/script`; nothing else on stdout, and no secret in any event.

mod common;

use common::{MockServer, Test};
use serde_json::Value;

/// A review step that may call the `shout` tool and must answer with a
/// `<verdict>` tag, on the scripted `replies`.
fn review(replies: &str) -> Test {
    Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/script, max_exception_retry: 2}
agent_configs: [{name: critic, system_prompt: You review., tools: [shout]}]
providers:
  mock: {script: replies.yaml, retry_base_ms: 0}
tools:
  - name: shout
    description: Says it loudly.
    command: [echo, LOUD]
flow:
  - step: review
    agent: critic
    prompt: review
",
        )
        .file(
            "prompts/review.md",
            "---\nparser: {type: tags, required_xml_tags: [verdict]}\n---\nReview: {{ task }}\n",
        )
        .file("replies.yaml", replies)
}

/// Every stdout line as JSON, each checked to be one event envelope.
#[track_caller]
fn events(stdout: &str) -> Vec<Value> {
    assert!(stdout.ends_with('\n'), "{stdout}");
    stdout
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
            let keys: Vec<&str> = event
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                ["id", "timestamp", "kind", "data", "metadata"],
                "{line}"
            );
            event
        })
        .collect()
}

/// The place of the first event of `kind` whose data holds `field: value`.
#[track_caller]
fn place(events: &[Value], kind: &str, field: &str, value: Value) -> usize {
    events
        .iter()
        .position(|event| event["kind"] == kind && event["data"][field] == value)
        .unwrap_or_else(|| panic!("no `{kind}` with {field} = {value} in {events:#?}"))
}

#[test]
fn a_run_prints_its_events_as_json_lines_a_tool_call_before_its_result_and_one_result_last() {
    let test = review(
        "replies:
  - fault: {status: 500}
  - tool_calls: [{name: shout, arguments: {text: hi}}]
  - text: Looks fine to me.
  - text: <verdict>ok</verdict>
",
    );
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "a draft",
        "--events",
        "--no-record",
    ]);
    output.expect_code(0);
    let events = events(&output.stdout);
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();

    // The first attempt failed with a 500 and was retried: attempt 2 follows.
    let retry = place(&events, "retry", "attempt", 1.into());
    assert!(
        events[retry]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("500")
    );
    assert!(retry < place(&events, "model_call_started", "attempt", 2.into()));
    // The tool call, then its result, with the same call id.
    let call = place(&events, "tool_call", "name", "shout".into());
    let call_id = events[call]["data"]["call_id"].clone();
    assert_eq!(events[call]["data"]["arguments"]["text"], "hi");
    let result = place(&events, "tool_result", "call_id", call_id);
    assert!(call < result, "{kinds:?}");
    assert_eq!(events[result]["data"]["result"], "LOUD");
    // The reply without a verdict was repaired, after the tool round.
    let repair = place(&events, "repair", "repair", 1.into());
    assert!(result < repair, "{kinds:?}");
    assert!(
        events[repair]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("verdict")
    );
    // The repaired reply streamed in, and is the delivery.
    let text = place(
        &events,
        "text_delta",
        "text",
        "<verdict>ok</verdict>".into(),
    );
    assert!(repair < text, "{kinds:?}");
    // Exactly one closing event, the last line.
    let closing: Vec<&&str> = kinds
        .iter()
        .filter(|kind| ["result", "error"].contains(kind))
        .collect();
    assert_eq!(closing, [&"result"], "{kinds:?}");
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "result");
    assert_eq!(last["data"]["delivery"], "<verdict>ok</verdict>");
    assert_eq!(last["data"]["state"], "success");
    assert_eq!(
        last["data"]["usage"]["total_tokens"],
        events_tokens(&events)
    );
    // Every request that was sent finished, with its tokens.
    let started = kinds
        .iter()
        .filter(|kind| **kind == "model_call_started")
        .count();
    let finished = kinds
        .iter()
        .filter(|kind| **kind == "model_call_finished")
        .count();
    assert_eq!(
        (started, finished),
        (4, 3),
        "one retried attempt: {kinds:?}"
    );
    // The summary still goes to stderr.
    assert!(output.stderr.contains("lllm: success"), "{}", output.stderr);
}

/// The tokens of every finished model call, added up.
fn events_tokens(events: &[Value]) -> u64 {
    events
        .iter()
        .filter(|event| event["kind"] == "model_call_finished")
        .map(|event| event["data"]["usage"]["total_tokens"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_failed_run_ends_with_one_error_event_and_writes_its_record() {
    let test = review("replies:\n  - fault: {status: 400}\n");
    let output = test.run(&[
        "run", "t.yaml", "--task", "x", "--events", "--record", "r.json",
    ]);
    output.expect_code(1);
    let events = events(&output.stdout);
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "error", "{events:#?}");
    assert!(
        last["data"]["message"].as_str().unwrap().contains("400"),
        "{last}"
    );
    assert_eq!(last["data"]["state"], "failure");
    let record = test.read_json("r.json");
    assert_eq!(last["data"]["session_id"], record["session_id"]);
    let finished = &events[events.len() - 2];
    assert_eq!(finished["kind"], "model_call_finished");
    assert!(finished["data"]["error"].as_str().unwrap().contains("400"));
    assert_eq!(finished["data"]["attempts"], 1, "a 400 is not retried");
    assert_eq!(
        events
            .iter()
            .filter(|event| event["kind"] == "retry")
            .count(),
        0
    );
}

#[test]
fn no_event_holds_a_secret_a_tool_or_the_model_echoed() {
    const KEY: &str = "sk-events-secret-0042";
    let test = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/script}
agent_configs: [{name: a, tools: [leak]}]
providers:
  mock: {script: replies.yaml}
  other: {api: openai, base_url: \"http://127.0.0.1:9/v1\", api_key_env: MY_LLM_TOKEN}
tools:
  - name: leak
    command: [env]
    env: {MY_LLM_TOKEN: \"${MY_LLM_TOKEN}\"}
",
        )
        .file(
            "replies.yaml",
            &format!(
                "replies:\n  - tool_calls: [{{name: leak, arguments: {{token: {KEY}}}}}]\n  - text: the key is {KEY}\n"
            ),
        )
        .env("MY_LLM_TOKEN", KEY);
    let output = test.run(&["run", "t.yaml", "--task", "go", "--events", "--no-record"]);
    output.expect_code(0);
    assert!(!output.stdout.contains(KEY), "{}", output.stdout);
    let events = events(&output.stdout);
    let result = place(&events, "tool_result", "name", "leak".into());
    let printed = events[result]["data"]["result"].as_str().unwrap();
    assert!(printed.contains("MY_LLM_TOKEN=***"), "{printed}");
    let call = place(&events, "tool_call", "name", "leak".into());
    assert_eq!(events[call]["data"]["arguments"]["token"], "***");
    assert_eq!(events.last().unwrap()["data"]["delivery"], "the key is ***");
}

#[test]
fn events_take_no_other_output_flag() {
    let test = review("replies: []\n");
    for other in ["--stream", "--json", "--dry-run"] {
        let output = test.run(&["run", "t.yaml", "--task", "x", "--events", other]);
        output.expect_code(2);
        assert!(
            output.stderr.contains("--events"),
            "{other}: {}",
            output.stderr
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn a_request_held_by_the_providers_concurrency_says_it_waited() {
    // Two parallel branches, one request at a time: the second waits for
    // the first. The first reply is held a while: with an instant one, a
    // loaded machine could pause the run's thread while the first request
    // went and came back whole, and the second would find the slot free
    // when it was first polled (seen once in CI, and with eight of this
    // test at once).
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies: [{text: ok, delay_ms: 2000}]\ndefault: {text: ok}\n",
    );
    let tactic = format!(
        "global: {{model_name: local/m}}
agent_configs: [{{name: a}}]
providers:
  local: {{api: openai, base_url: \"{}\", max_concurrency: 1}}
flow:
  - parallel: {{}}
    steps:
      - {{step: one, agent: a, text: one}}
      - {{step: two, agent: a, text: two}}
",
        server.base_url()
    );
    let test = test.file("t.yaml", &tactic);
    let output = test.run(&["run", "t.yaml", "--task", "x", "--events", "--no-record"]);
    output.expect_code(0);
    let events = events(&output.stdout);
    let wait = place(&events, "wait", "reason", "concurrency".into());
    assert!(events[wait]["data"]["waited_ms"].is_u64());
    assert_eq!(events[wait]["data"]["agent"], "a");
    assert_eq!(events[wait]["data"]["model"], "local/m");
    let started = events
        .iter()
        .filter(|event| event["kind"] == "model_call_started")
        .count();
    assert_eq!(started, 2);
}

#[test]
fn a_sub_tactics_events_come_between_its_started_and_finished() {
    let test = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/echo}
agent_configs: [{name: writer}]
flow:
  - {step: draft, agent: writer, text: \"draft of {{ task }}\"}
  - {step: short, tactic: sub.yaml, task: \"{{ draft.content }}\"}
",
        )
        .file(
            "sub.yaml",
            "tactic_type: shorten
global: {model_name: mock/echo}
agent_configs: [{name: shortener}]
flow:
  - {step: cut, agent: shortener, text: \"short: {{ task }}\"}
",
        );
    let output = test.run(&["run", "t.yaml", "--task", "x", "--events", "--no-record"]);
    output.expect_code(0);
    let events = events(&output.stdout);
    let started = place(&events, "sub_tactic_started", "step", "short".into());
    let finished = place(&events, "sub_tactic_finished", "step", "short".into());
    assert_eq!(events[started]["data"]["tactic"], "shorten");
    assert_eq!(events[finished]["data"]["state"], "success");
    assert!(
        events[finished]["data"]["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let inner = place(&events, "model_call_started", "agent", "shortener".into());
    assert!(started < inner && inner < finished, "{events:#?}");
    assert_eq!(
        events.last().unwrap()["data"]["delivery"],
        "short: draft of x"
    );
}
