//! The session store and `lllm logs`, end to end on the real binary: what
//! `lllm run` and `lllm batch` register, found again by tag, state and text;
//! `show` of a batch session; `reindex` after the index is deleted; writers
//! at once; a broken store only warns; no secret reaches the store. Each test
//! has its own store (`LLLM_HOME` in its temp dir).

mod common;

use common::{MockServer, Test};
use serde_json::Value;

/// Echoes the task, except a task holding `FAIL`, which gets an HTTP 400
/// (no retries): a failed session.
const TACTIC: &str = "tactic_type: echoer
global: {model_name: mock/script, max_llm_recall: 0}
agent_configs: [{name: a, system_prompt: You repeat.}]
providers:
  mock: {script: replies.yaml}
";

const REPLIES: &str = "rules:
  - when: {contains: FAIL}
    reply: {fault: {status: 400}}
default: {echo: true}
";

fn test() -> Test {
    let test = Test::new()
        .file("t.yaml", TACTIC)
        .file("replies.yaml", REPLIES);
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

/// `lllm logs ARGS --json`, one value per line.
#[track_caller]
fn logs(test: &Test, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    all.push("--json");
    let output = test.run(&all);
    output.expect_code(0).json_lines()
}

fn task_ids(listed: &[Value]) -> Vec<String> {
    listed
        .iter()
        .map(|session| session["task_id"].as_str().unwrap_or("-").to_string())
        .collect()
}

fn tasks(listed: &[Value]) -> Vec<String> {
    listed
        .iter()
        .map(|session| session["task"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Two runs and a batch of three (one failing), tagged.
fn fill(test: &Test) {
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "snowy owl",
        "--tag",
        "team=birds",
        "--meta",
        "note=first",
    ])
    .expect_code(0);
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "FAIL now",
        "--tag",
        "team=birds",
        "-q",
    ])
    .expect_code(1);
    std::fs::write(
        test.path("tasks.jsonl"),
        concat!(
            r#"{"id": "b1", "task": "grey wolf", "tags": {"team": "mammals"}, "metadata": {"source": "zoo"}}"#,
            "\n",
            r#"{"id": "b2", "task": "FAIL again"}"#,
            "\n",
            r#"{"id": "b3", "task": "barn owl", "tags": {"team": "birds"}}"#,
            "\n",
        ),
    )
    .unwrap();
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
        "--tag",
        "run=r1",
        "-j",
        "1",
    ])
    .expect_code(1);
}

#[test]
fn runs_and_a_batch_are_found_by_tag_state_text_and_time() {
    let test = test();
    fill(&test);
    let all = logs(&test, &[]);
    assert_eq!(all.len(), 5);
    // Newest first: the batch's tasks ran after the two runs.
    assert_eq!(tasks(&all[3..]), ["FAIL now", "snowy owl"]);
    let birds = logs(&test, &["--tag", "team=birds"]);
    let mut found = tasks(&birds);
    found.sort();
    assert_eq!(found, ["FAIL now", "barn owl", "snowy owl"]);
    // Tags AND: the batch's own tag with a line's tag.
    assert_eq!(
        task_ids(&logs(&test, &["--tag", "team=birds", "--tag", "run=r1"])),
        ["b3"]
    );
    let mut failed = tasks(&logs(&test, &["--state", "failure"]));
    failed.sort();
    assert_eq!(failed, ["FAIL again", "FAIL now"]);
    assert_eq!(
        logs(&test, &["--state", "success", "--tag", "run=r1"]).len(),
        2
    );
    assert_eq!(task_ids(&logs(&test, &["-s", "wolf"])), ["b1"]);
    assert_eq!(logs(&test, &["--search", "owl"]).len(), 2);
    assert_eq!(logs(&test, &["--tactic", "echoer", "-n", "2"]).len(), 2);
    assert_eq!(logs(&test, &["--tactic", "other"]).len(), 0);
    assert_eq!(logs(&test, &["--model", "mock/script"]).len(), 5);
    assert_eq!(logs(&test, &["--since", "1h"]).len(), 5);
    assert_eq!(logs(&test, &["--until", "1h"]).len(), 0);
    assert_eq!(
        logs(&test, &["--since", "2000-01-01", "--until", "2000-01-02"]).len(),
        0
    );
    // Bad input: one error line, exit 2.
    let bad = test.run(&["logs", "--since", "yesterday"]);
    bad.expect_code(2);
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("`yesterday` is not a time"),
        "{}",
        bad.stderr
    );
    test.run(&["logs", "--tag", "novalue"]).expect_code(2);
    test.run(&["run", "t.yaml", "--task", "x", "--tag", "novalue"])
        .expect_code(2);
}

#[test]
fn json_lines_carry_the_session_heading() {
    let test = test();
    fill(&test);
    let first = logs(&test, &["--query", "snowy"]);
    assert_eq!(first.len(), 1);
    let session = &first[0];
    let keys: Vec<&str> = session
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "session_id",
            "tactic",
            "tactic_path",
            "task_id",
            "state",
            "models",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "cost",
            "cost_known",
            "started_at",
            "ended_at",
            "latency_ms",
            "tags",
            "metadata",
            "task",
            "delivery",
            "error",
            "record_path"
        ]
    );
    assert_eq!(session["state"], "success");
    assert_eq!(session["tactic"], "echoer");
    assert_eq!(session["models"], serde_json::json!(["mock/script"]));
    assert_eq!(session["tags"], serde_json::json!({"team": "birds"}));
    assert_eq!(session["metadata"], serde_json::json!({"note": "first"}));
    assert_eq!(session["delivery"], "snowy owl");
    // The record file the run wrote, which holds the metadata too.
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(session["record_path"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(record["session_id"], session["session_id"]);
    assert_eq!(record["metadata"]["note"], "first");
    // A batch line's metadata, and the batch's tag merged into its tags.
    let wolf = &logs(&test, &["-s", "wolf"])[0];
    assert_eq!(wolf["metadata"], serde_json::json!({"source": "zoo"}));
    assert_eq!(
        wolf["tags"],
        serde_json::json!({"team": "mammals", "run": "r1"})
    );
    assert!(
        wolf["record_path"]
            .as_str()
            .unwrap()
            .ends_with("sessions.jsonl")
    );
    assert!(wolf["record_offset"].as_u64().is_some());
    // `cost --json`: the groups, then the total.
    let output = test.run(&["logs", "cost", "--by", "tag:team", "--json"]);
    output.expect_code(0);
    let rows: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let total = rows.last().unwrap();
    assert_eq!(total["group"], "total");
    assert_eq!(total["sessions"], 5);
    assert_eq!(total["failures"], 2);
    let birds = rows.iter().find(|row| row["group"] == "birds").unwrap();
    assert_eq!(birds["sessions"], 3);
    let text = test.run(&["logs", "cost", "--by", "day"]);
    text.expect_code(0);
    assert!(
        text.stdout.lines().last().unwrap().starts_with("total"),
        "{}",
        text.stdout
    );
    test.run(&["logs", "cost", "--by", "week"]).expect_code(2);
}

#[test]
fn show_reads_a_batch_session_from_its_line() {
    let test = test();
    fill(&test);
    let wolf = &logs(&test, &["-s", "wolf"])[0];
    let id = wolf["session_id"].as_str().unwrap();
    // Run from elsewhere: the record path is absolute.
    let shown = test.run(&["logs", "show", id]);
    shown.expect_code(0);
    let replayed = test.run(&["replay", "out/sessions.jsonl", "--id", id]);
    replayed.expect_code(0);
    assert_eq!(shown.stdout, replayed.stdout);
    assert!(shown.stdout.contains("grey wolf"));
    // The whole id is not needed, a unique prefix is enough.
    let json = test.run(&["logs", "show", &id[..id.len() - 4], "--json"]);
    json.expect_code(0);
    let record: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(record["session_id"], id);
    assert_eq!(record["task_id"], "b1");
    let missing = test.run(&["logs", "show", "ffffffff"]);
    missing.expect_code(2);
    assert!(
        missing.stderr.contains("no session `ffffffff`"),
        "{}",
        missing.stderr
    );
}

#[test]
fn reindex_after_the_index_is_deleted_lists_the_same() {
    let test = test();
    fill(&test);
    let before = test.run(&["logs", "--json"]);
    before.expect_code(0);
    for name in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(test.path("home").join(name));
    }
    let output = test.run(&["logs", "reindex"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains("5 sessions indexed"),
        "{}",
        output.stderr
    );
    let after = test.run(&["logs", "--json"]);
    assert_eq!(before.stdout, after.stdout);
    // Records the store never saw, found under `--from` (the runs' records
    // are in the store's `sessions/` by default: all but those go).
    for entry in std::fs::read_dir(test.path("home")).unwrap() {
        let path = entry.unwrap().path();
        if !path.ends_with("sessions") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let output = test.run(&["logs", "reindex", "--from", "out", "home/sessions"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains("5 sessions indexed"),
        "{}",
        output.stderr
    );
    let again = test.run(&["logs", "--json"]);
    assert_eq!(before.stdout, again.stdout);
    test.run(&["logs", "reindex", "--from", "nowhere"])
        .expect_code(2);
}

#[test]
fn a_batch_and_a_run_at_once_are_both_registered() {
    let test = test();
    let lines: String = (0..200)
        .map(|i| format!("{{\"id\": \"t{i}\", \"task\": \"task {i}\"}}\n"))
        .collect();
    std::fs::write(test.path("tasks.jsonl"), lines).unwrap();
    let batch = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
    ]);
    for i in 0..5 {
        let output = test.run(&[
            "run",
            "t.yaml",
            "--task",
            &format!("single {i}"),
            "--tag",
            "kind=run",
            "-q",
        ]);
        output.expect_code(0);
        assert_eq!(output.stderr, "");
    }
    let finished = common::Output::of(batch.wait_with_output().unwrap());
    finished.expect_code(0);
    assert_eq!(finished.stderr, "");
    assert_eq!(logs(&test, &["-n", "1000"]).len(), 205);
    assert_eq!(logs(&test, &["--tag", "kind=run"]).len(), 5);
    // A second shard-like batch into another directory, at the same time as a third.
    let one = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "a",
        "-q",
        "--tag",
        "shard=a",
    ]);
    let two = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "b",
        "-q",
        "--tag",
        "shard=b",
    ]);
    for child in [one, two] {
        let output = common::Output::of(child.wait_with_output().unwrap());
        output.expect_code(0);
        assert_eq!(output.stderr, "");
    }
    assert_eq!(logs(&test, &["--tag", "shard=a", "-n", "1000"]).len(), 200);
    assert_eq!(logs(&test, &["--tag", "shard=b", "-n", "1000"]).len(), 200);
}

#[test]
fn a_broken_store_warns_and_the_run_succeeds() {
    // The store's directory is a file: it cannot be created.
    let test = test().file("home", "not a directory");
    // Records go to the store's `sessions/` by default: here beside it.
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "hello",
        "--record",
        "r/record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "hello\n");
    assert!(
        output
            .stderr
            .contains("warning: cannot open the session store"),
        "{}",
        output.stderr
    );
    let sessions: Vec<_> = std::fs::read_dir(test.path("r")).unwrap().collect();
    assert_eq!(sessions.len(), 1);
    std::fs::write(test.path("tasks.jsonl"), "\"one\"\n\"two\"\n").unwrap();
    // Without `-q`, which silences warnings.
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(0);
    assert_eq!(
        output
            .stderr
            .matches("warning: cannot open the session store")
            .count(),
        1,
        "{}",
        output.stderr
    );
    assert_eq!(
        std::fs::read_to_string(test.path("out/results.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );

    // A corrupt index file.
    let test = self::test().file("home/index.sqlite", &"garbage ".repeat(1000));
    let output = test.run(&["run", "t.yaml", "--task", "hello"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "hello\n");
    assert!(output.stderr.contains("warning:"), "{}", output.stderr);
    let listed = test.run(&["logs"]);
    listed.expect_code(2);
    assert_eq!(listed.stderr.lines().count(), 1, "{}", listed.stderr);

    // `--no-store`: nothing registered, no store made (the record is
    // written in its `sessions/` all the same).
    let test = self::test();
    test.run(&["run", "t.yaml", "--task", "hello", "--no-store", "-q"])
        .expect_code(0);
    assert!(!test.path("home/index.sqlite").exists());
    assert_eq!(
        std::fs::read_dir(test.path("home/sessions"))
            .unwrap()
            .count(),
        1
    );
    let empty = test.run(&["logs"]);
    empty.expect_code(2);
    assert!(
        empty.stderr.contains("no session store"),
        "{}",
        empty.stderr
    );
    // `--store DIR` instead of the default.
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "hello",
        "--store",
        "elsewhere",
        "-q",
    ])
    .expect_code(0);
    assert_eq!(logs(&test, &["--store", "elsewhere"]).len(), 1);
}

#[test]
fn no_secret_reaches_the_store() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let key = "sk-test-f00dcafe0123456789";
    let tactic = format!(
        "tactic_type: keyed\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\", api_key_env: TEST_KEY}}\n",
        server.base_url()
    );
    let test = test.file("k.yaml", &tactic).env("TEST_KEY", key);
    test.run(&["run", "k.yaml", "--task", "hello", "-q"])
        .expect_code(0);
    std::fs::write(test.path("tasks.jsonl"), "\"one\"\n").unwrap();
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "k.yaml",
        "-o",
        "out",
        "-q",
    ])
    .expect_code(0);
    assert_eq!(logs(&test, &[]).len(), 2);
    // The requests were really sent (with the key).
    assert_eq!(server.requests().len(), 2);
    // The index, the cache and the run's record under `sessions/`.
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for entry in std::fs::read_dir(test.path("home")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .map(|entry| entry.unwrap().path()),
            );
        } else {
            files.push(path);
        }
    }
    assert!(files.iter().any(|path| {
        path.ends_with("sessions")
            || path
                .extension()
                .is_some_and(|extension| extension == "json")
    }));
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(key), "the key is in {}", path.display());
        assert!(
            !text.contains("f00dcafe"),
            "part of the key is in {}",
            path.display()
        );
    }
}

/// A batch of `count` tasks, each over 200 characters with its own word at
/// the end (`wordN`, past what a row's preview keeps), registered but not
/// yet text-indexed: the first search indexes them from the records.
fn long_batch(test: &Test, count: usize, out: &str) {
    let filler = "lorem ipsum ".repeat(30);
    let lines: String = (0..count)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"task\": \"{filler}\\\"quoted\\\" line\\nend word{i}\"}}\n"
            )
        })
        .collect();
    std::fs::write(test.path("long.jsonl"), lines).unwrap();
    test.run(&["batch", "long.jsonl", "--tactic", "t.yaml", "-o", out, "-q"])
        .expect_code(0);
}

#[test]
fn a_search_finds_any_word_or_phrase_of_sessions_registered_before_it() {
    let test = test();
    long_batch(&test, 3, "out");
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "a single run with a tawny owl",
        "-q",
    ])
    .expect_code(0);
    // Words past the 200-character preview, of the task and of the delivery
    // (an echo), a phrase across a newline, punctuation kept out of FTS5.
    assert_eq!(task_ids(&logs(&test, &["-s", "word1"])), ["t1"]);
    assert_eq!(logs(&test, &["-s", "\"line end\""]).len(), 3);
    assert_eq!(logs(&test, &["-s", "\"end line\""]).len(), 0);
    assert_eq!(logs(&test, &["-s", "\"tawny owl\" single"]).len(), 1);
    // Registered after the first search: found by the next one.
    long_batch(&test, 5, "more");
    assert_eq!(logs(&test, &["-s", "word4"]).len(), 1);
    assert_eq!(logs(&test, &["-s", "word1"]).len(), 2);
    // `cost` filters by text too.
    let cost = test.run(&["logs", "cost", "-s", "quoted", "--json"]);
    cost.expect_code(0);
    let total: Value = serde_json::from_str(cost.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(total["sessions"], 8);
    // After `reindex` (which indexes the text it reads), the same.
    test.run(&["logs", "reindex", "-q"]).expect_code(0);
    assert_eq!(logs(&test, &["-s", "word1"]).len(), 2);
    assert_eq!(logs(&test, &["-s", "tawny"]).len(), 1);
}

/// A record gone before the first search: its session is still found by
/// the start of its text (the row's preview), with a warning naming it.
#[test]
fn a_search_whose_records_are_gone_finds_the_preview_and_warns() {
    let test = test();
    long_batch(&test, 2, "out");
    std::fs::remove_file(test.path("out/sessions.jsonl")).unwrap();
    let output = test.run(&["logs", "-s", "lorem", "--json"]);
    output.expect_code(0);
    assert_eq!(output.stdout.lines().count(), 2);
    assert!(
        output.stderr.contains("sessions.jsonl"),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("first 200 characters"),
        "{}",
        output.stderr
    );
    // The words past the preview are not known without the record.
    assert_eq!(logs(&test, &["-s", "word1"]).len(), 0);
}

/// Searches at once, while a batch registers: each finds every session
/// registered before it started (they share the catch-up of 300 sessions'
/// text), and the batch's sessions are found once it is done.
#[test]
fn searches_at_once_with_a_batch_registering_find_every_session() {
    let test = test();
    long_batch(&test, 300, "first");
    let lines: String = (0..300)
        .map(|i| format!("{{\"id\": \"s{i}\", \"task\": \"second batch {i}\"}}\n"))
        .collect();
    std::fs::write(test.path("second.jsonl"), lines).unwrap();
    let batch = test.spawn(&[
        "batch",
        "second.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "second",
        "-q",
    ]);
    let searches: Vec<_> = (0..3)
        .map(|_| test.spawn(&["logs", "-s", "\"line end\"", "-n", "1000", "--json"]))
        .collect();
    for search in searches {
        let output = common::Output::of(search.wait_with_output().unwrap());
        output.expect_code(0);
        assert_eq!(output.stdout.lines().count(), 300, "{}", output.stderr);
    }
    common::Output::of(batch.wait_with_output().unwrap()).expect_code(0);
    assert_eq!(
        logs(&test, &["-s", "second batch", "-n", "1000"]).len(),
        300
    );
    assert_eq!(
        logs(&test, &["-s", "\"second batch\"", "-n", "1000"]).len(),
        300
    );
    assert_eq!(logs(&test, &["-s", "lorem", "-n", "1000"]).len(), 300);
}

/// Issue 26: a record path is bytes, not text. A batch written under a
/// directory whose name is not UTF-8 and holds a newline, and a run's record
/// there too, are shown from the index and again after `reindex` rebuilt it
/// from `records.list` alone.
#[cfg(unix)]
#[test]
fn paths_that_are_not_text_or_hold_a_newline_survive_show_and_reindex() {
    use std::os::unix::ffi::OsStrExt;
    let test = test().file("tasks.jsonl", "{\"id\": \"a\", \"task\": \"grey wolf\"}\n");
    let odd = std::ffi::OsStr::from_bytes(b"out-\xff\nnew line");
    let mut batch = test.command(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-q", "-o"]);
    common::Output::of(batch.arg(odd).output().unwrap()).expect_code(0);
    let mut run = test.command(&["run", "t.yaml", "--task", "snowy owl", "-q", "--record"]);
    let record = std::path::Path::new(odd).join("run.json");
    common::Output::of(run.arg(&record).output().unwrap()).expect_code(0);

    let shown = |test: &Test| {
        let mut tasks: Vec<String> = logs(test, &[])
            .iter()
            .map(|session| {
                let id = session["session_id"].as_str().unwrap();
                let output = test.run(&["logs", "show", id, "--json"]);
                output.expect_code(0);
                let record: Value = serde_json::from_str(&output.stdout).unwrap();
                assert_eq!(record["session_id"], id);
                record["task"].as_str().unwrap().to_string()
            })
            .collect();
        tasks.sort();
        tasks
    };
    assert_eq!(shown(&test), ["grey wolf", "snowy owl"]);
    for name in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(test.path("home").join(name));
    }
    let output = test.run(&["logs", "reindex"]);
    output.expect_code(0);
    assert_eq!(
        output.stderr.lines().collect::<Vec<_>>(),
        [format!(
            "lllm: 2 sessions indexed in `{}`",
            test.path("home/index.sqlite").display()
        )]
    );
    assert_eq!(shown(&test), ["grey wolf", "snowy owl"]);
}

/// Issue 26: one bad entry of `records.list` spoiled nothing but itself —
/// before, one byte that was not UTF-8 made `reindex` index nothing,
/// silently, exit 0.
#[test]
fn a_bad_line_of_records_list_is_skipped_with_a_note_naming_it() {
    let test = test();
    fill(&test);
    let home = test.path("home");
    for name in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(home.join(name));
    }
    let list = home.join("records.list");
    let mut bytes = b"garbage \xff\xfe not a path\n".to_vec();
    bytes.extend(std::fs::read(&list).unwrap());
    std::fs::write(&list, bytes).unwrap();
    let output = test.run(&["logs", "reindex"]);
    output.expect_code(0);
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", output.stderr);
    assert!(
        lines[0].starts_with(&format!(
            "warning: `{}` line 1: cannot read",
            list.display()
        )),
        "{}",
        output.stderr
    );
    assert!(lines[1].contains("5 sessions indexed"), "{}", output.stderr);
    assert_eq!(logs(&test, &[]).len(), 5);
}

/// Issue 26: `reindex` rebuilds an index file that is not a database
/// instead of refusing it, and says so in one line.
#[test]
fn reindex_rebuilds_an_index_that_is_not_a_database() {
    let test = test();
    fill(&test);
    let before = logs(&test, &[]);
    let index = test.path("home/index.sqlite");
    std::fs::write(&index, "garbage ".repeat(1000)).unwrap();
    test.run(&["logs"]).expect_code(2);
    let output = test.run(&["logs", "reindex"]);
    output.expect_code(0);
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", output.stderr);
    assert!(
        lines[0].starts_with(&format!(
            "warning: `{}` is not a readable session index (",
            index.display()
        )) && lines[0].contains(&format!("moved it to `{}.damaged`", index.display())),
        "{}",
        output.stderr
    );
    assert!(lines[1].contains("5 sessions indexed"), "{}", output.stderr);
    assert_eq!(logs(&test, &[]), before);
    assert!(test.path("home/index.sqlite.damaged").is_file());
}

/// Issue 26: `logs show` checks that the record it read is the session
/// asked for: a record file rewritten since it was indexed is named.
#[test]
fn show_names_a_record_that_is_another_session() {
    let test = test();
    for task in ["first", "second"] {
        test.run(&["run", "t.yaml", "--task", task, "-q", "--record", "r.json"])
            .expect_code(0);
    }
    let listed = logs(&test, &[]);
    let first = listed
        .iter()
        .find(|session| session["task"] == "first")
        .unwrap();
    let second = listed
        .iter()
        .find(|session| session["task"] == "second")
        .unwrap();
    let id = first["session_id"].as_str().unwrap();
    let output = test.run(&["logs", "show", id]);
    output.expect_code(2);
    assert_eq!(output.stdout, "");
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains(&format!(
            "the index places session `{id}` at `{}`, which holds session `{}`",
            test.path("r.json").display(),
            second["session_id"].as_str().unwrap()
        )),
        "{}",
        output.stderr
    );
    test.run(&["logs", "show", second["session_id"].as_str().unwrap()])
        .expect_code(0);
}

/// Issue 27: a task the budget stopped after it started was `skipped` in
/// `results.jsonl` but `failure` in `lllm logs`, and `--state skipped` was
/// refused. Its record says `skipped`, and so does every reader of it.
#[test]
fn a_task_the_budget_skipped_is_skipped_everywhere() {
    let test = test();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: done, usage: {prompt_tokens: 50, completion_tokens: 10}}\n",
    );
    let tactic = format!(
        "tactic_type: metered\nglobal:\n  model_name: local/metered\n  model_args: {{max_tokens: 100}}\n\
         agent_configs: [{{name: a}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\"}}\n\
         pricing:\n  metered: {{input_per_million: 100.0, output_per_million: 100.0}}\n",
        server.base_url()
    );
    let test = test
        .file("metered.yaml", &tactic)
        .file("tasks.jsonl", "{\"id\": \"a\", \"task\": \"owls\"}\n");
    // The first call could cost more than the whole budget: it is refused,
    // in a task that had started (it has a record).
    test.batch("metered.yaml", "out", &["--max-cost", "0.001"])
        .expect_code(1);
    assert!(server.requests().is_empty(), "nothing was sent");
    let result: Value = serde_json::from_str(
        std::fs::read_to_string(test.path("out/results.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(result["state"], "skipped");
    assert_eq!(result["calls"], 0, "a refused call was never sent");
    let record: Value = serde_json::from_str(
        std::fs::read_to_string(test.path("out/sessions.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(record["state"], "skipped");
    assert_eq!(record["error"], result["error"]);

    let listed = logs(&test, &["--state", "skipped"]);
    assert_eq!(task_ids(&listed), ["a"]);
    assert_eq!(listed[0]["state"], "skipped");
    assert!(logs(&test, &["--state", "failure"]).is_empty());
    let text = test.run(&["logs"]);
    assert!(text.stdout.contains(" skipped "), "{}", text.stdout);
    let id = listed[0]["session_id"].as_str().unwrap();
    let shown = test.run(&["logs", "show", id]);
    shown.expect_code(0);
    assert!(
        shown
            .stdout
            .lines()
            .next()
            .unwrap()
            .contains(" · skipped · "),
        "{}",
        shown.stdout
    );
    let cost = test.run(&["logs", "cost", "--json"]);
    cost.expect_code(0);
    let total: Value = serde_json::from_str(cost.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (&total["failures"], &total["skipped"]),
        (&0.into(), &1.into())
    );
    // Rebuilt from the record, the index says the same.
    test.run(&["logs", "reindex", "-q"]).expect_code(0);
    assert_eq!(task_ids(&logs(&test, &["--state", "skipped"])), ["a"]);
    // So does the report.
    test.run(&["report", "out"]).expect_code(0);
    let csv = std::fs::read_to_string(test.path("out/report.csv")).unwrap();
    assert!(
        csv.lines().nth(1).unwrap().starts_with("a,skipped,"),
        "{csv}"
    );
}
