//! `-v` / `-vv` / `-vvv`, `RUST_LOG` and `LLLM_LOG`: the requests and
//! replies lllm traces on stderr, against `lllm-mock`, with a key, a custom
//! header and URL credentials that must never show, at any level.

mod common;

use common::{MockServer, Test, closed_port};

const KEY: &str = "sk-verbose-key-0123456789";
const CUSTOM: &str = "custom-header-secret-42";
const USER: &str = "traceuser";
const PASSWORD: &str = "hunter2-in-the-url";

/// A tactic on `server` with every kind of secret: the key from the
/// environment, a custom header, and `user:password@` in the base URL.
fn test(server: &MockServer) -> Test {
    let origin = server.url.strip_prefix("http://").unwrap_or(&server.url);
    let tactic = format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 3
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local:
    api: openai
    base_url: "http://{USER}:{PASSWORD}@{origin}/v1"
    api_key_env: TEST_KEY
    headers: {{x-custom: "{CUSTOM}"}}
    retry_base_ms: 10
    retry_cap_ms: 50
pricing:
  local/test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
"#
    );
    Test::new().file("t.yaml", &tactic).env("TEST_KEY", KEY)
}

/// A server that fails once with a 500, then answers.
fn flaky(test_dir: &std::path::Path) -> MockServer {
    MockServer::start(
        test_dir,
        "replies:\n  - fault: {status: 500}\n  - text: \"the answer\"\n",
    )
}

/// The lines of `stderr` that are trace events (the fmt layer's level column).
fn trace_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| {
            [" INFO ", " DEBUG ", " TRACE ", " WARN ", " ERROR "]
                .iter()
                .any(|level| line.contains(level))
        })
        .collect()
}

#[track_caller]
fn assert_no_secret(stderr: &str) {
    for secret in [KEY, CUSTOM, USER, PASSWORD] {
        assert!(!stderr.contains(secret), "`{secret}` shown:\n{stderr}");
    }
}

#[test]
fn dash_v_shows_each_request_reply_and_retry_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = flaky(dir.path());
    let test = test(&server);
    let output = test.run(&["-v", "run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "the answer\n", "stdout is the delivery only");
    let lines = trace_lines(&output.stderr);
    let place = format!(
        "http://***@{}/v1/chat/completions",
        server.url.strip_prefix("http://").unwrap()
    );
    let props = format!("{}/props", server.url);
    let expected = [
        // Once, before the first request: what lllm learned of the server.
        format!("call{{provider=local model=test-model}}:attempt{{number=1}}: lllm::provider::limit::cap: provider `local`: the server does not say how many requests it serves at once (no `{props}`)"),
        format!("call{{provider=local model=test-model}}:attempt{{number=1}}: lllm::provider::trace: POST {place} · "),
        format!("call{{provider=local model=test-model}}:attempt{{number=1}}: lllm::provider::trace: 500 from {place} · 100 bytes · "),
        "call{provider=local model=test-model}: lllm::provider::retry: HTTP 500, waiting 0.0 s (retry 1 of 3)".to_string(),
        format!("call{{provider=local model=test-model}}:attempt{{number=2}}: lllm::provider::trace: POST {place} · "),
        format!("call{{provider=local model=test-model}}:attempt{{number=2}}: lllm::provider::trace: 200 from {place} · "),
    ];
    assert_eq!(lines.len(), expected.len(), "{}", output.stderr);
    for (line, expected) in lines.iter().zip(&expected) {
        assert!(
            line.contains(expected.as_str()),
            "{line}\nexpected: {expected}"
        );
        assert!(line.contains(" INFO "), "{line}");
    }
    // No bodies at `-v`.
    assert!(!output.stderr.contains("the task"), "{}", output.stderr);
    assert_no_secret(&output.stderr);
}

#[test]
fn dash_vv_adds_the_bodies_and_the_long_flag_counts_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = flaky(dir.path());
    let test = test(&server);
    let output = test.run(&[
        "run",
        "--verbose",
        "--verbose",
        "t.yaml",
        "the task",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "the answer\n");
    let bodies: Vec<&str> = trace_lines(&output.stderr)
        .into_iter()
        .filter(|line| line.contains(" DEBUG "))
        .collect();
    assert_eq!(
        bodies.len(),
        4,
        "two requests, two replies:\n{}",
        output.stderr
    );
    assert!(bodies[0].contains(r#"request body: {"model":"test-model","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"the task"}]}"#), "{}", bodies[0]);
    assert!(
        bodies[1].contains("reply body: {\"error\":{\"message\":\"lllm-mock: scripted fault 500\""),
        "{}",
        bodies[1]
    );
    assert!(
        bodies[3].contains(r#""content":"the answer""#),
        "{}",
        bodies[3]
    );
    assert_no_secret(&output.stderr);
}

#[test]
fn rust_log_and_lllm_log_filters_win_over_dash_v() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(dir.path(), "default: {text: \"fine\"}\n");
    for variable in ["RUST_LOG", "LLLM_LOG"] {
        let test = test(&server).env(variable, "lllm=debug");
        let output = test.run(&["run", "t.yaml", "the task", "--no-record"]);
        output.expect_code(0);
        assert_eq!(output.stdout, "fine\n");
        assert!(
            output.stderr.contains("request body: "),
            "{variable}:\n{}",
            output.stderr
        );
        // A filter that names only the retry loop: `-vv` does not widen it.
        let test = test.env(variable, "lllm::provider::retry=info");
        let output = test.run(&["-vv", "run", "t.yaml", "the task", "--no-record"]);
        output.expect_code(0);
        assert_eq!(
            trace_lines(&output.stderr),
            Vec::<&str>::new(),
            "{variable}:\n{}",
            output.stderr
        );
    }
}

#[test]
fn no_secret_shows_at_any_level_streamed_or_not() {
    let runs: [(&[&str], Option<&str>); 4] = [
        (&["-vvv", "run", "t.yaml", "the task", "--no-record"], None),
        (&["run", "t.yaml", "the task", "--no-record"], Some("trace")),
        (
            &["run", "t.yaml", "the task", "--no-record", "--stream"],
            Some("trace"),
        ),
        (
            &["-vvv", "run", "t.yaml", "the task", "--no-record"],
            Some("lllm=trace,lllm_cli=trace"),
        ),
    ];
    for (args, filter) in runs {
        // The script is spent after two replies: a fresh server each run.
        let dir = tempfile::tempdir().unwrap();
        let server = flaky(dir.path());
        let mut test = test(&server);
        if let Some(filter) = filter {
            test = test.env("RUST_LOG", filter);
        }
        let output = test.run(args);
        output.expect_code(0);
        assert_eq!(output.stdout, "the answer\n", "{args:?}");
        assert!(
            trace_lines(&output.stderr).len() >= 5,
            "{args:?}:\n{}",
            output.stderr
        );
        assert_no_secret(&output.stderr);
        // Only lllm's own events: a bare level names no third-party crate.
        for line in trace_lines(&output.stderr) {
            assert!(
                line.contains(" lllm::") || line.contains(" lllm_cli::"),
                "{line}"
            );
        }
    }
}

#[test]
fn without_dash_v_or_a_filter_there_is_no_trace_line_only_the_retry_s_notice() {
    let dir = tempfile::tempdir().unwrap();
    let server = flaky(dir.path());
    let output = test(&server).run(&["run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "the answer\n");
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "the notice and the summary:\n{}",
        output.stderr
    );
    assert!(
        lines[0].starts_with("lllm: waiting ")
            && lines[0].contains(" to retry local/test-model: HTTP 500")
            && lines[0].ends_with("(attempt 2 of 4)"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("lllm: success"), "{}", lines[1]);
    assert!(trace_lines(&output.stderr).is_empty(), "{}", output.stderr);
    assert_no_secret(&output.stderr);
    // `-v` says it in its trace line, not twice; `-q` not at all.
    for (flag, notices) in [("-v", 0), ("-q", 0), ("--json", 1)] {
        let server = flaky(dir.path());
        let output = test(&server).run(&["run", "t.yaml", "the task", "--no-record", flag]);
        output.expect_code(0);
        assert_eq!(
            output.stderr.matches("lllm: waiting").count(),
            notices,
            "{flag}: {}",
            output.stderr
        );
        if flag == "-q" {
            assert_eq!(output.stderr, "");
        }
    }
}

#[test]
fn a_bad_filter_is_one_error_line_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = flaky(dir.path());
    let test = test(&server).env("RUST_LOG", "lllm=loud");
    let output = test.run(&["run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .starts_with("error: `RUST_LOG`: invalid filter `lllm=loud`"),
        "{}",
        output.stderr
    );
    assert!(server.requests().is_empty());
}

#[test]
fn a_batch_traces_every_task_one_whole_line_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(dir.path(), "default: {text: \"fine\"}\n");
    let tasks: String = (0..20)
        .map(|n| format!("{{\"id\": \"t{n}\", \"task\": \"task {n}\"}}\n"))
        .collect();
    let test = test(&server).file("tasks.jsonl", &tasks);
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-v",
        "-j",
        "8",
    ]);
    output.expect_code(0);
    let lines = trace_lines(&output.stderr);
    let sent = lines
        .iter()
        .filter(|line| line.contains(": POST http://***@"))
        .count();
    let received = lines
        .iter()
        .filter(|line| line.contains(": 200 from http://***@"))
        .count();
    assert_eq!((sent, received), (20, 20), "{}", output.stderr);
    // Every event is a line of its own: it starts the line, and no line
    // holds two events or an event and something else. All are a call's,
    // but the one line on what lllm learned of the server before the first.
    let learned = " INFO lllm::provider::limit::cap: provider `local`: the server does not say";
    assert_eq!(
        output.stderr.matches(learned).count(),
        1,
        "{}",
        output.stderr
    );
    for line in output.stderr.lines() {
        let events = line.matches("lllm::provider::").count();
        assert!(events <= 1, "{line}");
        if events == 1 {
            assert!(
                line.starts_with("20") && (line.contains(" INFO call{") || line.contains(learned)),
                "{line}"
            );
        }
    }
    assert_no_secret(&output.stderr);
}

#[test]
fn dash_vv_shows_tool_runs_without_the_keys_they_print() {
    let tactic = r#"global: {model_name: mock/script}
agent_configs:
  - name: a
    tools: [show]
providers:
  mock: {script: replies.yaml}
tools:
  - name: show
    command: [env]
    env: {PASSED_KEY: "${OPENAI_API_KEY}"}
"#;
    let replies = "replies:\n  - tool_calls: [{name: show, arguments: {}}]\n  - text: done\n";
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("replies.yaml", replies)
        .env("OPENAI_API_KEY", KEY);
    let output = test.run(&["-vv", "run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "done\n");
    let tool_lines: Vec<&str> = trace_lines(&output.stderr)
        .into_iter()
        .filter(|line| line.contains(" DEBUG ") && line.contains("lllm::tool: tool `show` "))
        .collect();
    assert_eq!(tool_lines.len(), 2, "{}", output.stderr);
    assert!(
        tool_lines[0].ends_with("tool `show` runs with {}"),
        "{}",
        tool_lines[0]
    );
    // The program printed the key it was passed; the trace shows `***`.
    assert!(
        tool_lines[1].contains("PASSED_KEY=***"),
        "{}",
        tool_lines[1]
    );
    assert_no_secret(&output.stderr);
    // Without `-vv`, no tool line.
    let output = test.run(&["-v", "run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(0);
    assert!(!output.stderr.contains("lllm::tool"), "{}", output.stderr);
}

#[test]
fn dash_v_shows_a_request_that_got_no_reply() {
    // A port nothing listens on: each attempt fails before any reply.
    let port = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let server = flaky(dir.path());
    let test = test(&server);
    let tactic = std::fs::read_to_string(test.path("t.yaml"))
        .unwrap()
        .replace(
            server.url.strip_prefix("http://").unwrap(),
            &format!("127.0.0.1:{port}"),
        );
    let test = test.file("t.yaml", &tactic);
    let output = test.run(&["-v", "run", "t.yaml", "the task", "--no-record"]);
    output.expect_code(1);
    let failures: Vec<&str> = trace_lines(&output.stderr)
        .into_iter()
        .filter(|line| line.contains("lllm::provider::trace: no reply after "))
        .collect();
    assert_eq!(
        failures.len(),
        4,
        "the first call and 3 retries:\n{}",
        output.stderr
    );
    let place = format!("http://***@127.0.0.1:{port}/v1/chat/completions");
    assert!(
        failures[0].ends_with(&format!("cannot connect to `{place}`")),
        "{}",
        failures[0]
    );
    assert!(
        output
            .stderr
            .contains("not retried (3 retries spent): cannot connect to"),
        "{}",
        output.stderr
    );
    assert_no_secret(&output.stderr);
}
