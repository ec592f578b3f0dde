//! One word for each kind of work, the same in the `run` summary line,
//! `lllm replay`, `results.jsonl`, `summary.json` and the batch's end table
//! (`lllm::words`): a call is a request sent, a retry a call repeated after
//! a provider error, with "1 retry", "2 retries", never "retry(ies)".

mod common;

use common::{MockServer, Test};
use serde_json::Value;

fn test(server: &MockServer) -> Test {
    let tactic = format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 3
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: openai, base_url: "{}", api_key_env: TEST_KEY, retry_base_ms: 10, retry_cap_ms: 50}}
pricing:
  local/test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
"#,
        server.base_url()
    );
    Test::new().file("t.yaml", &tactic).env("TEST_KEY", "k")
}

/// `text` with the number before ` s` (a duration) replaced by `<t>`.
fn without_seconds(text: &str) -> String {
    let mut out = String::new();
    for word in text.split(' ') {
        let is_seconds = word.parse::<f64>().is_ok() && out.ends_with("in ");
        out.push_str(if is_seconds { "<t>" } else { word });
        out.push(' ');
    }
    out.pop();
    out
}

#[test]
fn the_run_summary_and_replay_count_calls_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "replies:\n  - fault: {status: 500}\n  - text: ok\n",
            "2 calls (1 retry)",
            "2 calls, 1 retry",
            1,
        ),
        (
            "replies:\n  - fault: {status: 500}\n  - fault: {status: 503}\n  - text: ok\n",
            "3 calls (2 retries)",
            "3 calls, 2 retries",
            2,
        ),
        ("replies:\n  - text: ok\n", "1 call", "1 call, 0 retries", 0),
    ];
    for (script, summary, replayed, retries) in cases {
        let server = MockServer::start(dir.path(), script);
        let test = test(&server);
        let output = test.run(&["run", "t.yaml", "the task", "--record", "record.json"]);
        output.expect_code(0);
        assert_eq!(output.stdout, "ok\n");
        // A notice per retry, then the summary.
        let mut lines: Vec<&str> = output.stderr.lines().collect();
        let summary_line = lines.pop().unwrap_or_default();
        assert_eq!(lines.len(), retries, "{}", output.stderr);
        assert!(
            lines.iter().all(|line| line.starts_with("lllm: waiting ")),
            "{}",
            output.stderr
        );
        assert_eq!(
            without_seconds(summary_line),
            format!(
                "lllm: success in <t> s · {summary} · 7 tokens (6 in, 1 out) · $0.000008 · record record.json"
            )
        );

        let output = test.run(&["replay", "record.json"]);
        output.expect_code(0);
        let head = output.stdout.lines().next().unwrap_or_default();
        let record = test.read_json("record.json");
        let session = record["session_id"].as_str().unwrap();
        let latency = record["latency_ms"].as_u64().unwrap() as f64 / 1000.0;
        assert_eq!(
            head,
            format!(
                "session {session} · tactic `test` (t.yaml) · success · {summary} · 7 tokens · $0.000008 · {latency:.1} s"
            )
        );
        let call_line = output
            .stdout
            .lines()
            .find(|line| line.starts_with("agent call 1"))
            .unwrap_or_default();
        assert!(
            call_line.contains(&format!(
                " · success · {replayed}, 0 tool rounds, 0 repairs · "
            )),
            "{call_line}"
        );
    }
}

#[test]
fn a_call_that_failed_for_good_is_no_retry() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        dir.path(),
        "replies:\n  - fault: {status: 401, message: \"bad key\"}\n",
    );
    let test = test(&server);
    let output = test.run(&["run", "t.yaml", "the task", "--record", "record.json"]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("model `local/test-model` failed after 1 call: HTTP 401"),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains(" · 1 call · "), "{}", output.stderr);
    let output = test.run(&["replay", "record.json"]);
    // The failed attempt is recorded (`llm_recalls`), but nothing was retried.
    assert!(
        output.stdout.contains(" · failure · 1 call, 0 retries, "),
        "{}",
        output.stdout
    );
}

#[test]
fn results_and_summary_count_retries_apart() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        dir.path(),
        "replies:\n  - fault: {status: 500}\n  - text: ok\n  - text: ok\n",
    );
    let test = test(&server).file(
        "tasks.jsonl",
        "{\"id\": \"a\", \"task\": \"one\"}\n{\"id\": \"b\", \"task\": \"two\"}\n",
    );
    // One at a time, so that the 500 goes to the first task.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
    ]);
    output.expect_code(0);
    let results: Vec<Value> = std::fs::read_to_string(test.path("out/results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(results[0]["id"], "a");
    assert_eq!(
        (results[0]["calls"].as_u64(), results[0]["retries"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(results[1]["calls"], 1);
    assert!(
        results[1].get("retries").is_none(),
        "left out when 0: {}",
        results[1]
    );
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        (summary["calls"].as_u64(), summary["retries"].as_u64()),
        (Some(3), Some(1))
    );
    let calls_row = output
        .stderr
        .lines()
        .find(|line| line.trim_start().starts_with("calls "))
        .unwrap_or_default();
    assert_eq!(
        calls_row.split_whitespace().collect::<Vec<_>>(),
        ["calls", "3", "(1", "retry)"]
    );
    assert!(
        output.stderr.contains("this run   2 tasks in "),
        "{}",
        output.stderr
    );
    // A result line written before `retries` existed still reads (`--resume`).
    std::fs::write(
        test.path("out/results.jsonl"),
        "{\"id\": \"a\", \"state\": \"success\", \"delivery\": \"ok\", \"error\": null, \"cost\": 0.0, \"calls\": 2}\n\
         {\"id\": \"b\", \"state\": \"success\", \"delivery\": \"ok\", \"error\": null, \"cost\": 0.0, \"calls\": 1}\n",
    )
    .unwrap();
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--resume",
    ]);
    output.expect_code(0);
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        (summary["calls"].as_u64(), summary["retries"].as_u64()),
        (Some(3), Some(0))
    );
}
