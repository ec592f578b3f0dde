//! `lllm replay`: the rendering of a recorded run (snapshot, with ids and
//! timings normalized), `--json`, picking a session out of a JSONL file, and
//! clear errors for other record versions.

mod common;

use common::Test;
use serde_json::Value;

/// Replaces what changes from run to run: hex ids, session ids, timings.
fn normalize(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let mut normalized = Vec::with_capacity(words.len());
        for (index, word) in words.iter().enumerate() {
            let bare = word.trim_matches(|c: char| "[]():,`".contains(c));
            let next = words
                .get(index + 1)
                .map(|next| next.trim_end_matches([',', ')', ':']));
            let numeric = !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit() || c == '.');
            let replaced = if numeric && matches!(next, Some("ms") | Some("s")) {
                word.replace(bare, "<t>")
            } else if bare.len() == 8 && bare.chars().all(|c| c.is_ascii_hexdigit()) {
                word.replace(bare, "<id>")
            } else if bare.len() == 24 && bare.starts_with("20") && bare.as_bytes()[8] == b'_' {
                word.replace(bare, "<session>")
            } else {
                word.to_string()
            };
            normalized.push(replaced);
        }
        out.push_str(&normalized.join(" "));
        out.push('\n');
    }
    out
}

fn example_run(test: &Test, record: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = test.run(&[
        "run",
        &format!("{root}/tactics/summarize.yaml"),
        "--task-file",
        &format!("{root}/examples/article.txt"),
        "--record",
        record,
    ]);
    output.expect_code(0);
}

#[test]
fn renders_a_recorded_run() {
    let test = Test::new();
    example_run(&test, "record.json");
    let output = test.run(&["replay", "record.json"]);
    output.expect_code(0);
    let rendered = normalize(&output.stdout).replace(env!("CARGO_MANIFEST_DIR"), "<root>");
    let snapshot_path = format!(
        "{}/tests/snapshots/replay_summarize.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("LLLM_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot_path, &rendered).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot_path).unwrap();
    assert_eq!(
        rendered, expected,
        "replay rendering changed; set LLLM_UPDATE_SNAPSHOTS=1 to accept it on purpose"
    );
}

#[test]
fn json_and_jsonl_and_bad_records() {
    let test = Test::new();
    example_run(&test, "a.json");
    example_run(&test, "b.json");
    let a: Value = test.read_json("a.json");
    let output = test.run(&["replay", "a.json", "--json"]);
    output.expect_code(0);
    let normalized: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(normalized, a, "--json prints the record as read");

    let lines = format!(
        "{}\n{}\n",
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&test.read_json("b.json")).unwrap()
    );
    std::fs::write(test.path("sessions.jsonl"), lines).unwrap();
    let id = a["session_id"].as_str().unwrap();
    let output = test.run(&["replay", "sessions.jsonl", "--id", id]);
    output.expect_code(0);
    assert!(output.stdout.starts_with(&format!("session {id} ")));
    let output = test.run(&["replay", "sessions.jsonl"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("holds 2 sessions; pick one with `--id`"),
        "{}",
        output.stderr
    );
    let output = test.run(&["replay", "sessions.jsonl", "--id", "nope"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("no session `nope`"),
        "{}",
        output.stderr
    );

    let mut old = a.clone();
    old["format"] = Value::String("lllm.session/0".into());
    std::fs::write(test.path("old.json"), old.to_string()).unwrap();
    let output = test.run(&["replay", "old.json"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("is a `lllm.session/0` record; this lllm reads `lllm.session/1`"),
        "{}",
        output.stderr
    );
    let mut broken = a;
    broken["agent_calls"][0]["invokes"] = Value::String("x".into());
    std::fs::write(test.path("broken.json"), broken.to_string()).unwrap();
    let output = test.run(&["replay", "broken.json"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("agent_calls[0].invokes"),
        "{}",
        output.stderr
    );
    let output = test.run(&["replay", "missing.json"]);
    output.expect_code(2);
    assert!(!output.stderr.contains("panicked"));
}
