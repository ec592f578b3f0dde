//! The response cache end to end on the real binary, against `lllm-mock`: a
//! second unchanged batch sends nothing, costs $0 and says so in its results,
//! summary and records; a changed prompt, `--no-cache`, an error and an
//! expired reply are sent again; `lllm cache stats` and `clear`. Each test has
//! its own store (`LLLM_HOME` in its temp dir).

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

fn tactic(base_url: &str, extra: &str) -> String {
    format!(
        r#"tactic_type: cached
global:
  model_name: local/test-model
  max_llm_recall: 0
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: openai, base_url: "{base_url}", retry_base_ms: 10, retry_cap_ms: 50}}
pricing:
  test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
{extra}"#
    )
}

fn test() -> Test {
    let test = Test::new();
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

fn task_lines(count: usize) -> String {
    (0..count)
        .map(|i| json!({"id": format!("t{i}"), "task": format!("task {i}")}).to_string() + "\n")
        .collect()
}

fn read_lines(test: &Test, relative: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(relative))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is JSON"))
        .collect()
}

fn batch(test: &Test, out: &str, flags: &[&str]) {
    test.batch("t.yaml", out, flags).expect_code(0);
}

fn chat_requests(server: &MockServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|request| request["path"] == "/v1/chat/completions")
        .count()
}

#[test]
fn a_second_unchanged_batch_sends_nothing_and_costs_nothing() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .file("tasks.jsonl", &task_lines(25));

    batch(&test, "first", &["--cache"]);
    assert_eq!(chat_requests(&server), 25);
    let first = read_lines(&test, "first/results.jsonl");
    assert!(first.iter().all(|line| line["cost"].as_f64() > Some(0.0)));
    assert!(first.iter().all(|line| line.get("cache_hits").is_none()));

    batch(&test, "second", &["--cache"]);
    assert_eq!(chat_requests(&server), 25, "the second batch sent requests");
    let mut second = read_lines(&test, "second/results.jsonl");
    assert_eq!(second.len(), 25);
    let mut first = first;
    let id = |line: &Value| line["id"].as_str().unwrap_or_default().to_string();
    first.sort_by_key(id);
    second.sort_by_key(id);
    for (before, after) in first.iter().zip(&second) {
        assert_eq!(after["id"], before["id"]);
        assert_eq!(after["state"], "success");
        assert_eq!(after["delivery"], before["delivery"]);
        assert_eq!(after["cost"], 0.0);
        assert_eq!(after["cost_known"], true);
        assert_eq!(after["calls"], 0);
        assert_eq!(after["cache_hits"], 1);
        assert_eq!(after["usage"]["total_tokens"], 0);
    }
    let summary = test.read_json("second/summary.json");
    assert_eq!(summary["calls"], 0);
    assert_eq!(summary["cache_hits"], 25);
    assert_eq!(summary["cost"], 0.0);
    let sessions = read_lines(&test, "second/sessions.jsonl");
    let invoke = &sessions[0]["agent_calls"][0]["invokes"][0];
    assert_eq!(invoke["cached"], true, "{invoke}");

    // What the cache holds and saved.
    let stats = test.run(&["cache", "stats", "--json"]);
    stats.expect_code(0);
    let stats: Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(stats["entries"], 25);
    assert_eq!(stats["hits"], 25);
    let spent: f64 = first.iter().filter_map(|line| line["cost"].as_f64()).sum();
    let saved = stats["saved_usd"].as_f64().unwrap();
    assert!(
        (saved - spent).abs() < 1e-12,
        "saved {saved}, spent {spent}"
    );
    assert_eq!(stats["models"][0]["model"], "test-model");
    let table = test.run(&["cache", "stats"]);
    assert!(
        table.stdout.contains("replies  25 (0 expired)"),
        "{}",
        table.stdout
    );

    // A changed prompt is another request.
    std::fs::write(
        test.path("t.yaml"),
        tactic(&server.base_url(), "").replace("You are terse.", "You are brief."),
    )
    .unwrap();
    batch(&test, "edited", &["--cache"]);
    assert_eq!(chat_requests(&server), 50);

    // Without the flag, nothing is cached or answered from the cache.
    batch(&test, "plain", &[]);
    assert_eq!(chat_requests(&server), 75);
}

#[test]
fn the_tactic_and_provider_settings_turn_it_on_and_the_flags_win() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), "cache: true\n"))
        .file("tasks.jsonl", &task_lines(3));
    batch(&test, "a", &[]);
    batch(&test, "b", &[]);
    assert_eq!(chat_requests(&server), 3);
    batch(&test, "c", &["--no-cache"]);
    assert_eq!(chat_requests(&server), 6);

    // A provider's `cache: false` wins over the tactic's, and `--cache` over both.
    let off = tactic(&server.base_url(), "cache: true\n")
        .replace("retry_cap_ms: 50}", "retry_cap_ms: 50, cache: false}");
    std::fs::write(test.path("t.yaml"), off).unwrap();
    batch(&test, "d", &[]);
    assert_eq!(chat_requests(&server), 9);
    batch(&test, "e", &["--cache"]);
    assert_eq!(chat_requests(&server), 9);
}

#[test]
fn errors_are_never_cached() {
    let test = test();
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: FAIL}\n    reply: {fault: {status: 400}}\ndefault: {echo: true}\n",
    );
    let tasks = [
        json!({"id": "ok", "task": "fine"}),
        json!({"id": "bad", "task": "FAIL here"}),
    ]
    .iter()
    .map(|line| format!("{line}\n"))
    .collect::<String>();
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .file("tasks.jsonl", &tasks);
    let run = |out: &str| {
        test.batch("t.yaml", out, &["--cache"]).expect_code(1);
    };
    run("first");
    assert_eq!(chat_requests(&server), 2);
    run("second");
    // Only the failing task was sent again.
    assert_eq!(chat_requests(&server), 3);
    let second = read_lines(&test, "second/results.jsonl");
    let bad = second.iter().find(|line| line["id"] == "bad").unwrap();
    assert_eq!(bad["state"], "failure");
    assert_eq!(bad["calls"], 1);
}

#[test]
fn a_run_says_what_came_from_the_cache_and_clear_empties_it() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url(), ""));
    let run = || {
        let output = test.run(&[
            "run", "t.yaml", "--task", "hello", "--cache", "--record", "r.json",
        ]);
        output.expect_code(0);
        output
    };
    let first = run();
    assert_eq!(first.stdout.trim(), "hello");
    assert!(!first.stderr.contains("from the cache"), "{}", first.stderr);
    let second = run();
    assert_eq!(second.stdout.trim(), "hello");
    assert!(
        second.stderr.contains("0 calls") && second.stderr.contains("1 from the cache"),
        "{}",
        second.stderr
    );
    assert_eq!(chat_requests(&server), 1);
    let record = test.read_json("r.json");
    assert_eq!(record["agent_calls"][0]["invokes"][0]["cached"], true);
    assert_eq!(record["cost"]["cost"], 0.0);
    // `replay` shows the hit.
    let replay = test.run(&["replay", "r.json"]);
    replay.expect_code(0);
    assert!(replay.stdout.contains("cached"), "{}", replay.stdout);

    let cleared = test.run(&["cache", "clear", "--json"]);
    cleared.expect_code(0);
    assert_eq!(cleared.stdout.trim(), r#"{"removed":1}"#);
    run();
    assert_eq!(chat_requests(&server), 2);
}

#[test]
fn replies_past_their_time_to_live_are_sent_again_and_cleared() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url(), "cache_ttl_s: 1\n"));
    let run = || {
        test.run(&["run", "t.yaml", "--task", "hi", "--cache", "--no-record"])
            .expect_code(0);
    };
    run();
    // Past a second, whatever the machine's speed.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let stats = test.run(&["cache", "stats", "--json"]);
    let stats: Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(
        (stats["entries"].as_u64(), stats["expired"].as_u64()),
        (Some(1), Some(1))
    );
    run();
    assert_eq!(chat_requests(&server), 2);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let cleared = test.run(&["cache", "clear", "--expired"]);
    cleared.expect_code(0);
    assert!(
        cleared.stderr.contains("removed 1 expired cached reply"),
        "{}",
        cleared.stderr
    );
}

#[test]
fn bad_cache_settings_are_refused_before_anything_is_sent() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file(
        "t.yaml",
        &tactic(&server.base_url(), "cache_ttl_s: 0\n")
            .replace("retry_cap_ms: 50}", "retry_cap_ms: 50, cache_ttl_s: -5}"),
    );
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--cache"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("`cache_ttl_s: 0` must be"),
        "{}",
        output.stderr
    );
    assert!(
        output
            .stderr
            .contains("provider `local`: `cache_ttl_s: -5` must be"),
        "{}",
        output.stderr
    );
    assert_eq!(chat_requests(&server), 0);
    // An empty store: stats say so, clear removes nothing.
    let stats = test.run(&["cache", "stats", "--json"]);
    stats.expect_code(0);
    assert!(stats.stdout.contains(r#""entries":0"#), "{}", stats.stdout);
    assert!(!test.path("home/cache.sqlite").exists());
}

/// Issue 26: the key covers every byte that reaches the wire. Settings that
/// change the request body or its headers (`system_role: developer` and
/// `send_name` were answered from another request's entry) each miss the
/// others' entries, and each hits its own on a second run.
#[test]
fn requests_that_differ_on_the_wire_miss_each_others_entries() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("tasks.jsonl", &task_lines(2));
    let variants = [
        "retry_cap_ms: 50}",
        "retry_cap_ms: 50, system_role: developer}",
        "retry_cap_ms: 50, send_name: true}",
        "retry_cap_ms: 50, headers: {x-variant: a}}",
        "retry_cap_ms: 50, headers: {x-variant: b}}",
    ];
    let write = |variant: &str| {
        let tactic = tactic(&server.base_url(), "").replace("retry_cap_ms: 50}", variant);
        std::fs::write(test.path("t.yaml"), tactic).unwrap();
    };
    // The first three send bodies of their own; the last two the base's
    // body with a header of their own.
    let mut bodies = std::collections::BTreeSet::new();
    for (at, variant) in variants.iter().enumerate() {
        write(variant);
        batch(&test, &format!("first{at}"), &["--cache"]);
        assert_eq!(
            chat_requests(&server),
            2 * (at + 1),
            "{variant} was answered from the cache"
        );
        for request in &server.requests()[2 * at..] {
            bodies.insert(request["body"].to_string());
        }
    }
    assert_eq!(bodies.len(), 2 * 3, "{bodies:#?}");
    for (at, variant) in variants.iter().enumerate() {
        write(variant);
        batch(&test, &format!("again{at}"), &["--cache"]);
        assert_eq!(
            chat_requests(&server),
            2 * variants.len(),
            "{variant} was sent again"
        );
    }
}

/// The cache's rows, edited as a user (or anyone who can write the file)
/// could edit them.
fn edit_replies(test: &Test, reply: &Value) {
    let connection = rusqlite::Connection::open(test.path("home/cache.sqlite")).unwrap();
    let changed = connection
        .execute("UPDATE responses SET reply = ?1", [reply.to_string()])
        .unwrap();
    assert!(changed > 0);
}

/// Issue 26: a kept reply passes what a fresh one passes. An entry edited
/// to hold a reply no provider reply could pass (no text and no tool call)
/// is not delivered: the request is sent again and its reply replaces the
/// entry. One holding a key the run knows is scrubbed as a fresh reply is;
/// one holding a forged parse is parsed again by the prompt.
#[test]
fn a_kept_reply_edited_to_fail_the_checks_of_a_fresh_one_is_not_delivered() {
    let test = test().env("LOCAL_KEY", "sk-local-very-secret-4242");
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let keyed = tactic(&server.base_url(), "").replace(
        "retry_cap_ms: 50}",
        "retry_cap_ms: 50, api_key_env: LOCAL_KEY}",
    );
    let test = test.file("t.yaml", &keyed);
    let run = || {
        let output = test.run(&[
            "run", "t.yaml", "--task", "hello", "--cache", "--record", "r.json",
        ]);
        output.expect_code(0);
        output
    };
    run();
    assert_eq!(chat_requests(&server), 1);

    // Neither text nor a tool call: sent again, said once.
    edit_replies(
        &test,
        &json!({"role": "assistant", "content": "", "name": "x"}),
    );
    let output = run();
    assert_eq!(output.stdout.trim(), "hello");
    assert_eq!(chat_requests(&server), 2, "the edited entry was delivered");
    assert_eq!(
        output
            .stderr
            .matches("response cache: a kept reply fails the checks a fresh reply passes")
            .count(),
        1,
        "{}",
        output.stderr
    );
    // The fresh reply replaced it.
    run();
    assert_eq!(chat_requests(&server), 2);

    // A key the run knows: scrubbed as in a fresh reply.
    edit_replies(
        &test,
        &json!({"role": "assistant", "content": "the key is sk-local-very-secret-4242",
                "parsed": {"raw": "forged"}}),
    );
    let output = run();
    assert_eq!(output.stdout.trim(), "the key is ***");
    assert_eq!(chat_requests(&server), 2);
    let record = std::fs::read_to_string(test.path("r.json")).unwrap();
    assert!(!record.contains("sk-local-very-secret-4242"));
    assert!(!record.contains("forged"), "{record}");
}
