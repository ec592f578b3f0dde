//! What servers say about time, end to end: hostile `Retry-After`,
//! `retry-after-ms` and rate-limit reset headers sent by `lllm-mock` on
//! 127.0.0.1 must never crash a run or a batch task, every pause a server asks
//! for is capped at the provider's retry cap, retries switched off mean a 429
//! fails the request instead of pausing the provider, and Anthropic's
//! `anthropic-ratelimit-*` headers pace requests like OpenAI's `x-ratelimit-*`.
//!
//! Runs are bounded by a generous deadline driven by the test (a hang fails
//! the test instead of blocking the suite); the only timing assertions are
//! lower bounds, which a busy machine can only make easier to meet.

mod common;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{MockServer, Output, Test};
use serde_json::Value;

/// A one-agent tactic on an OpenAI-compatible (or Anthropic) mock server.
fn tactic(api: &str, base_url: &str, recall: u32, retry_cap_ms: u64) -> String {
    format!(
        r#"tactic_type: wire
global:
  model_name: local/test-model
  max_llm_recall: {recall}
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: {api}, base_url: "{base_url}", api_key_env: TEST_KEY, retry_base_ms: 10, retry_cap_ms: {retry_cap_ms}}}
"#
    )
}

/// Waits for `child` for at most a minute (a run that should take well under
/// a second); a run still going then is a hang: it is killed and the test fails.
fn finish(mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait for lllm").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = Output::of(child.wait_with_output().expect("collect lllm"));
            panic!(
                "lllm did not finish within a minute\n--- stderr\n{}",
                output.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Output::of(child.wait_with_output().expect("collect lllm"))
}

fn results(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    std::fs::read_to_string(test.path(&format!("{dir}/results.jsonl")))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON result line"))
        .map(|line| (line["id"].as_str().unwrap_or_default().to_string(), line))
        .collect()
}

/// The time between two logged requests, from the mock's `ts` stamps.
fn gap(first: &Value, second: &Value) -> Duration {
    let at = |entry: &Value| {
        chrono::DateTime::parse_from_rfc3339(entry["ts"].as_str().expect("a ts stamp"))
            .expect("an RFC 3339 stamp")
    };
    (at(second) - at(first)).to_std().unwrap_or(Duration::ZERO)
}

#[test]
fn hostile_retry_after_values_on_a_429_are_ignored_or_capped() {
    // (header, value, what the record keeps as the server's ask in ms: None
    // when the value is ignored).
    let cases: &[(&str, &str, Option<u64>)] = &[
        ("retry-after", "inf", None),
        ("retry-after", "NaN", None),
        ("retry-after", "-5", None),
        ("retry-after", "soon", None),
        ("retry-after", "1e20", Some(86_400_000)),
        ("retry-after", "999999", Some(86_400_000)),
        ("retry-after", "0.02", Some(20)),
        ("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT", Some(0)),
        ("retry-after", "Sunday, 06-Nov-94 08:49:37 GMT", Some(0)),
        ("retry-after", "Sun Nov  6 08:49:37 1994", Some(0)),
        (
            "retry-after",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            Some(86_400_000),
        ),
        ("retry-after-ms", "1e30", Some(86_400_000)),
        ("retry-after-ms", "-1", None),
        ("retry-after-ms", "nan", None),
    ];
    let script: String = std::iter::once("replies:\n".to_string())
        .chain(cases.iter().map(|(name, value, _)| {
            format!(
                "  - fault: {{status: 429}}\n    headers: {{{name}: \"{value}\"}}\n  - text: ok\n"
            )
        }))
        .collect();
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), &script);
    let test = test
        .file("t.yaml", &tactic("openai", &server.base_url(), 1, 50))
        .env("TEST_KEY", "k");
    for (name, value, asked) in cases {
        let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--record", "r.json"]));
        output.expect_code(0);
        assert_eq!(output.stdout, "ok\n", "{name}: {value}");
        assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
        let record = test.read_json("r.json");
        let call = &record["agent_calls"][0];
        let error = &call["llm_recalls"][0]["error"];
        assert_eq!(error["status"], 429, "{name}: {value}");
        assert_eq!(
            error["retry_after"].as_u64(),
            *asked,
            "{name}: {value} as recorded"
        );
        let waited = call["invokes"][0]["waited_ms"].as_u64().unwrap_or(0);
        assert!(
            waited <= 50,
            "{name}: {value}: waited {waited} ms, above retry_cap_ms"
        );
    }
}

#[test]
fn hostile_reset_headers_on_a_200_never_cost_a_batch_task_its_result() {
    let values = ["inf", "1e20", "NaN", "-1s", "99999999999999999999h", "soon"];
    let script: String = std::iter::once("replies:\n".to_string())
        .chain(values.iter().map(|value| {
            format!(
                "  - text: ok\n    headers: {{x-ratelimit-limit-requests: \"100\", x-ratelimit-remaining-requests: \"0\", x-ratelimit-reset-requests: \"{value}\", x-ratelimit-limit-tokens: \"6000000\", x-ratelimit-remaining-tokens: \"1\", x-ratelimit-reset-tokens: \"{value}\"}}\n"
            )
        }))
        .collect();
    let tasks: String = (0..values.len())
        .map(|i| format!("{{\"id\": \"t{i}\", \"task\": \"task {i}\"}}\n"))
        .collect();
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), &script);
    let test = test
        .file("t.yaml", &tactic("openai", &server.base_url(), 0, 50))
        .file("tasks.jsonl", &tasks)
        .env("TEST_KEY", "k");
    let output = finish(test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "-q",
    ]));
    output.expect_code(0);
    let results = results(&test, "out");
    assert_eq!(results.len(), values.len(), "{}", output.stderr);
    assert!(results.values().all(|line| line["state"] == "success"));
    let records = std::fs::read_to_string(test.path("out/sessions.jsonl")).unwrap();
    assert_eq!(records.lines().count(), values.len());
}

#[test]
fn a_429_asking_for_days_pauses_no_longer_than_the_retry_cap() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 429, retry_after_s: 999999}\n  - text: ok\n",
    );
    let test = test
        .file("t.yaml", &tactic("openai", &server.base_url(), 2, 300))
        .env("TEST_KEY", "k");
    let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--record", "r.json"]));
    output.expect_code(0);
    assert_eq!(output.stdout, "ok\n");
    let record = test.read_json("r.json");
    let call = &record["agent_calls"][0];
    assert_eq!(call["llm_recalls"][0]["error"]["status"], 429);
    assert_eq!(call["invokes"][0]["waited_ms"], 300, "the retry cap");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(gap(&requests[0], &requests[1]) >= Duration::from_millis(250));
}

#[test]
fn with_retries_off_a_429_fails_its_task_and_pauses_no_one() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 429, retry_after_s: 999999}\ndefault: {text: ok}\n",
    );
    let test = test
        // A cap of an hour: only "no retries, no pause" lets this batch end.
        .file(
            "t.yaml",
            &tactic("openai", &server.base_url(), 0, 3_600_000),
        )
        .file(
            "tasks.jsonl",
            "{\"id\": \"first\", \"task\": \"a\"}\n{\"id\": \"second\", \"task\": \"b\"}\n",
        )
        .env("TEST_KEY", "k");
    let output = finish(test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "-q",
    ]));
    output.expect_code(1);
    let results = results(&test, "out");
    assert_eq!(results["first"]["state"], "failure");
    assert!(
        results["first"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("429"),
        "{}",
        results["first"]
    );
    assert_eq!(results["second"]["state"], "success");
    assert_eq!(server.requests().len(), 2, "no retry");
}

/// Two calls in a row on one provider (two steps of a flow).
fn two_steps(api: &str, base_url: &str) -> String {
    tactic(api, base_url, 0, 60_000)
        + "flow:\n  - {step: one, agent: assistant, text: \"first\"}\n  - {step: two, agent: assistant, text: \"second\"}\n"
}

#[test]
fn anthropic_rate_limit_headers_pace_the_next_request() {
    // Each window, spent, refilling a sixtieth of its limit a second: the
    // second request (one request; its prompt and max_tokens 4096 as
    // tokens) fits 1.5 s later or more, whatever the reset says.
    for (window, limit, reset_s) in [
        ("requests", 40, 2),
        ("tokens", 160_000, 3600),
        ("input_tokens", 40, 2),
        ("output_tokens", 160_000, 2),
    ] {
        let test = Test::new();
        let server = MockServer::start(
            test.dir.path(),
            &format!(
                "replies:\n  - text: one\n    rate_limit: {{{window}: {{limit: {limit}, remaining: 0, reset_s: {reset_s}}}}}\n  - text: two\n"
            ),
        );
        let test = test
            .file("t.yaml", &two_steps("anthropic", &server.base_url()))
            .env("TEST_KEY", "k");
        let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--no-record"]));
        output.expect_code(0);
        assert_eq!(output.stdout, "two\n");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0]["path"], "/v1/messages");
        let waited = gap(&requests[0], &requests[1]);
        assert!(
            waited >= Duration::from_millis(1500),
            "{window}: the second request came {waited:?} after the first"
        );
    }
}

#[test]
fn anthropic_headers_with_room_left_do_not_slow_anything_down() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: one\n    rate_limit: {requests: {limit: 50, remaining: 49, reset_s: 3600}}\n  - text: two\n",
    );
    // Pauses may last an hour here: were the window taken as spent, the run
    // would wait that long and `finish` would fail it at its deadline.
    let tactic = tactic("anthropic", &server.base_url(), 0, 3_600_000)
        + "flow:\n  - {step: one, agent: assistant, text: \"first\"}\n  - {step: two, agent: assistant, text: \"second\"}\n";
    let test = test.file("t.yaml", &tactic).env("TEST_KEY", "k");
    let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--no-record"]));
    output.expect_code(0);
    assert_eq!(output.stdout, "two\n");
}

#[test]
fn openai_rate_limit_headers_pace_the_next_request() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: one\n    rate_limit: {requests: {limit: 40, remaining: 0, reset_s: 1.5}}\n  - text: two\n",
    );
    let test = test
        .file("t.yaml", &two_steps("openai", &server.base_url()))
        .env("TEST_KEY", "k");
    let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--no-record"]));
    output.expect_code(0);
    let requests = server.requests();
    // 40 a minute: the next request fits 1.5 s later, not at the reset.
    assert!(gap(&requests[0], &requests[1]) >= Duration::from_millis(1400));
}

#[test]
fn a_streamed_reply_s_rate_limit_headers_count_too() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - tool_calls: [{name: current_time}]\n    rate_limit: {output_tokens: {limit: 8000, remaining: 10, reset_s: 2}}\n  - text: done\n",
    );
    let tactic = tactic("anthropic", &server.base_url(), 0, 60_000).replace(
        "    system_prompt: \"You are terse.\"\n",
        "    system_prompt: \"You are terse.\"\n    tools: [current_time]\n",
    ) + "builtin_tools:\n  current_time: null\n";
    let test = test.file("t.yaml", &tactic).env("TEST_KEY", "k");
    let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--stream", "--no-record"]));
    output.expect_code(0);
    assert_eq!(output.stdout, "done\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], true, "streamed");
    let waited = gap(&requests[0], &requests[1]);
    assert!(
        waited >= Duration::from_millis(1500),
        "the second request came {waited:?} after the first"
    );
}

#[test]
fn a_batch_paused_by_a_429_says_so_while_it_waits() {
    use std::io::{BufRead, BufReader};
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 429, retry_after_s: 999999}\ndefault: {text: ok}\n",
    );
    let test = test
        // Long enough that the test, not the pause, decides when it ends.
        .file("t.yaml", &tactic("openai", &server.base_url(), 1, 600_000))
        .file("tasks.jsonl", "\"one\"\n\"two\"\n")
        .env("TEST_KEY", "k");
    let mut child = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "--progress-interval",
        "0.05",
    ]);
    let stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(line) if line.ends_with("waiting: back-off after a 429") => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "no waiting reason shown:\n{}", seen.join("\n"));
}

/// Tokens of one call's count at most (docs/limits.md, "Numbers and their ranges").
const MAX_CALL_TOKENS: u64 = 100_000_000;

const HUGE_USAGE: &str =
    "usage: {prompt_tokens: 18446744073709551615, completion_tokens: 18446744073709551615}";

#[test]
fn token_counts_from_the_wire_are_clamped_to_a_call_s_maximum() {
    // Counts of 2^64-1 were taken as sent: a run cost $36.9 trillion at $1
    // per million tokens, a batch's summary said $1.1e14, and `--max-cost 1`
    // recorded a spend of $3.7e13.
    let pricing = "pricing:\n  local/test-model: {input_per_million: 1, output_per_million: 1, max_output_tokens: 100}\n";
    // Each count clamped: prompt and completion at 10^8 tokens, $100 each.
    let per_call = 200.0;
    for api in ["openai", "anthropic"] {
        let test = Test::new();
        let server = MockServer::start(
            test.dir.path(),
            &format!("default: {{text: ok, {HUGE_USAGE}}}\n"),
        );
        let tactic = tactic(api, &server.base_url(), 0, 50) + pricing;
        let test = test
            .file("t.yaml", &tactic)
            .file("tasks.jsonl", "\"one\"\n\"two\"\n\"three\"\n")
            .env("TEST_KEY", "k");
        let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--json", "-q"]));
        output.expect_code(0);
        let run: Value = serde_json::from_str(&output.stdout).unwrap();
        assert_eq!(
            run["tokens"],
            serde_json::json!({"prompt": MAX_CALL_TOKENS, "completion": MAX_CALL_TOKENS,
                "total": MAX_CALL_TOKENS}),
            "{api}"
        );
        assert_eq!(run["cost"], per_call, "{api}");

        let output = finish(test.spawn(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "out",
            "-j",
            "1",
            "-q",
        ]));
        output.expect_code(0);
        let summary = test.read_json("out/summary.json");
        assert_eq!(summary["success"], 3, "{api}: {summary}");
        assert_eq!(
            summary["tokens"]["prompt_tokens"],
            3 * MAX_CALL_TOKENS,
            "{api}"
        );
        assert_eq!(
            summary["tokens"]["total_tokens"],
            3 * MAX_CALL_TOKENS,
            "{api}"
        );
        assert_eq!(summary["cost"], 3.0 * per_call, "{api}");

        // The budget sees the clamped cost: the first task's $200 reaches
        // `--max-cost 1`, and nothing more is started.
        let output = finish(test.spawn(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "capped",
            "-j",
            "1",
            "-q",
            "--max-cost",
            "1",
        ]));
        output.expect_code(1);
        let summary = test.read_json("capped/summary.json");
        assert_eq!(summary["cost"], per_call, "{api}: {summary}");
        assert_eq!(summary["skipped"], 2, "{api}: {summary}");
    }
}

#[test]
fn the_in_process_mock_clamps_its_script_s_counts_too() {
    // `mock/script` summed prompt and completion with a wrapping `+`:
    // 2^64-2 tokens (a panic in a debug build).
    let test = Test::new()
        .file("script.yaml", &format!("default: {{text: ok, {HUGE_USAGE}}}\n"))
        .file(
            "t.yaml",
            "global: {model_name: mock/script}\nagent_configs:\n  - {name: a}\nproviders:\n  mock: {script: script.yaml}\n",
        );
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--json", "-q"]);
    output.expect_code(0);
    let run: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(
        run["tokens"],
        serde_json::json!({"prompt": MAX_CALL_TOKENS, "completion": MAX_CALL_TOKENS,
            "total": MAX_CALL_TOKENS})
    );
}

/// Three calls in a row on one provider (three steps of a flow).
fn three_steps(api: &str, base_url: &str, retry_cap_ms: u64) -> String {
    tactic(api, base_url, 0, retry_cap_ms)
        + "flow:\n  - {step: one, agent: assistant, text: \"first\"}\n  - {step: two, agent: assistant, text: \"second\"}\n  - {step: three, agent: assistant, text: \"third\"}\n"
}

#[test]
fn a_window_the_headers_state_holds_a_request_no_longer_than_the_retry_cap_and_says_so() {
    // One request a minute and none left: the server's window would hold
    // each later request a minute or two (past `finish`'s deadline); the
    // retry cap of 0.2 s holds it that long, then it goes.
    for api in ["openai", "anthropic"] {
        let test = Test::new();
        let server = MockServer::start(
            test.dir.path(),
            "replies:\n  - text: one\n    rate_limit: {requests: {limit: 1, remaining: 0, reset_s: 60}}\n  - text: two\n  - text: three\n",
        );
        let test = test
            .file("t.yaml", &three_steps(api, &server.base_url(), 200))
            .env("TEST_KEY", "k");
        let output = finish(test.spawn(&["-v", "run", "t.yaml", "--task", "hi", "--no-record"]));
        output.expect_code(0);
        assert_eq!(output.stdout, "three\n");
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        for pair in requests.windows(2) {
            assert!(gap(&pair[0], &pair[1]) >= Duration::from_millis(200));
        }
        // `-v` says how long each waits and why.
        let waits: Vec<&str> = output
            .stderr
            .lines()
            .filter(|line| line.contains("rate limit: waiting"))
            .collect();
        assert_eq!(waits.len(), 2, "{api}:\n{}", output.stderr);
        for line in waits {
            assert!(line.contains(" INFO "), "{line}");
            assert!(
                line.contains(
                    "rate limit: waiting 0.2 s for the server's requests window (it asks "
                ) && line.contains(
                    "`retry_cap_ms` caps a request's wait for it at 0.2 s, then it goes)"
                ),
                "{line}"
            );
        }
    }
}

#[test]
fn an_inflated_usage_does_not_stall_the_provider() {
    // A reply claiming 10^12 prompt tokens against a token window of a
    // million: the next requests still go.
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: one\n    usage: {prompt_tokens: 1000000000000, completion_tokens: 1}\n    rate_limit: {tokens: {limit: 1000000, remaining: 1000000, reset_s: 1}}\n  - text: two\n  - text: three\n",
    );
    let test = test
        .file("t.yaml", &three_steps("openai", &server.base_url(), 200))
        .env("TEST_KEY", "k");
    let output = finish(test.spawn(&["run", "t.yaml", "--task", "hi", "--no-record"]));
    output.expect_code(0);
    assert_eq!(output.stdout, "three\n");
}
