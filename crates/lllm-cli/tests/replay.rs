//! `lllm replay`: the rendering of a recorded run (snapshot, with ids and
//! timings normalized), `--json`, picking a session out of a JSONL file, and
//! clear errors for other record versions.

mod common;

use common::{Output, Test};
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
            } else if is_session_id(bare) {
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

/// A session id: a hyphenated UUID (8-4-4-4-12 hex digits).
fn is_session_id(word: &str) -> bool {
    let parts: Vec<&str> = word.split('-').collect();
    parts.iter().map(|part| part.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|part| part.chars().all(|c| c.is_ascii_hexdigit()))
}

fn example_run(test: &Test, record: &str) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
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
    let rendered =
        normalize(&output.stdout).replace(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."), "<root>");
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

/// What version 3 leaves out of a written record, put back as
/// docs/formats.md §5 says: the texts `shared` places (`[dialog, message,
/// byte]`), and each message's own dialog id (`null`: it had none).
fn put_back_texts_and_dialog_ids(record: &mut Value, shared: &Value) {
    for (name, place) in shared.as_object().unwrap() {
        let text = match name.as_str() {
            "task" => record["task"].as_str().unwrap().to_string(),
            "delivery" => record["delivery"].as_str().unwrap().to_string(),
            other => {
                let key = other.strip_prefix("prompt:").unwrap();
                record["prompts"][key]["template"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let at = |i: usize| place[i].as_u64().unwrap() as usize;
        let message = &mut record["dialogs"][at(0)]["messages"][at(1)];
        let mut content = message["content"].as_str().unwrap().to_string();
        content.insert_str(at(2), &text);
        message["content"] = Value::String(content);
    }
    for dialog in record["dialogs"].as_array_mut().unwrap() {
        let own = dialog["tree_node"]["dialog_id"].clone();
        for message in dialog["messages"].as_array_mut().unwrap() {
            let message = message.as_object_mut().unwrap();
            let metadata = message
                .entry("metadata")
                .or_insert_with(|| serde_json::json!({}))
                .as_object_mut()
                .unwrap();
            match metadata.get("dialog_id") {
                None => {
                    metadata.insert("dialog_id".into(), own.clone());
                }
                Some(Value::Null) => {
                    metadata.remove("dialog_id");
                }
                Some(_) => {}
            }
            if metadata.is_empty() {
                message.remove("metadata");
            }
        }
    }
}

#[test]
fn json_and_jsonl_and_bad_records() {
    let test = Test::new();
    example_run(&test, "a.json");
    example_run(&test, "b.json");
    let a: Value = test.read_json("a.json");
    let output = test.run(&["replay", "a.json", "--json"]);
    output.expect_code(0);
    let mut normalized: Value = serde_json::from_str(&output.stdout).unwrap();
    // Normalized: a fork's messages shared with its parent, left out on disk
    // (`inherited`), are back in full; everything else is as read.
    let mut compact = a.clone();
    let shared = compact
        .as_object_mut()
        .unwrap()
        .remove("shared")
        .expect("a written record has `shared`");
    assert!(shared.get("task").is_some(), "{shared}");
    put_back_texts_and_dialog_ids(&mut compact, &shared);
    let expanded = normalized["dialogs"].take();
    let on_disk = compact["dialogs"].take();
    let (expanded, on_disk) = (expanded.as_array().unwrap(), on_disk.as_array().unwrap());
    assert_eq!(expanded.len(), on_disk.len());
    assert!(
        on_disk
            .iter()
            .any(|dialog| dialog["inherited"].as_u64() > Some(0))
    );
    for (full, short) in expanded.iter().zip(on_disk) {
        assert!(full.get("inherited").is_none());
        let inherited = short["inherited"].as_u64().unwrap_or(0) as usize;
        let full_messages = full["messages"].as_array().unwrap();
        assert_eq!(
            full_messages.len(),
            short["messages"].as_array().unwrap().len() + inherited
        );
        assert_eq!(
            full_messages[inherited..],
            short["messages"].as_array().unwrap()[..]
        );
    }
    // Each invoke's response is written once, as the message after the
    // request's in its working dialog, and each call's delivery is its last
    // response: `--json` shows both in place.
    let held = |request: &Value| {
        let dialog = expanded
            .iter()
            .find(|dialog| dialog["tree_node"]["dialog_id"] == request["dialog_id"])
            .unwrap();
        let mut message =
            dialog["messages"][request["messages"].as_u64().unwrap() as usize].clone();
        let metadata = message["metadata"].as_object_mut().unwrap();
        metadata.shift_remove("dialog_id");
        if metadata.is_empty() {
            message.as_object_mut().unwrap().remove("metadata");
        }
        message
    };
    let mut shared = 0;
    let calls = normalized["agent_calls"].as_array_mut().unwrap();
    for (call, written) in calls
        .iter_mut()
        .zip(compact["agent_calls"].as_array_mut().unwrap())
    {
        assert!(written.get("delivery").is_none());
        let invokes = written["invokes"].as_array_mut().unwrap();
        for (shown, invoke) in call["invokes"].as_array().unwrap().iter().zip(invokes) {
            if invoke["response_in_dialog"] == true {
                shared += 1;
                assert!(invoke.get("response").is_none());
                assert_eq!(shown["response"], held(&invoke["request"]));
                let invoke = invoke.as_object_mut().unwrap();
                invoke.remove("response_in_dialog");
                invoke.insert("response".into(), shown["response"].clone());
            }
        }
        let last = call["invokes"].as_array().unwrap().last().unwrap()["response"].clone();
        assert_eq!(call["delivery"].take(), last);
        call.as_object_mut().unwrap().remove("delivery");
    }
    assert_eq!(
        shared, 3,
        "every reply of the example is held by its working dialog"
    );
    assert_eq!(normalized, compact, "--json prints the record as read");

    // A version-1 record (everything written out) reads the same.
    let mut version_1: Value = serde_json::from_str(&output.stdout).unwrap();
    version_1["format"] = Value::String("lllm.session/1".into());
    std::fs::write(test.path("v1.json"), version_1.to_string()).unwrap();
    let output = test.run(&["replay", "v1.json", "--json"]);
    output.expect_code(0);
    assert_eq!(
        serde_json::from_str::<Value>(&output.stdout).unwrap(),
        version_1
    );

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
        output.stderr.contains(
            "is a `lllm.session/0` record; this lllm reads `lllm.session/1`, `lllm.session/2`, `lllm.session/3`"
        ),
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

/// Copies the shipped example into the test dir so its prompts can be edited.
fn copy_example(test: &Test) {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    for folder in ["tactics", "prompts/summarize", "tools", "examples"] {
        std::fs::create_dir_all(test.path(folder)).unwrap();
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let entry = entry.unwrap();
            if entry.path().is_file() {
                std::fs::copy(entry.path(), test.path(folder).join(entry.file_name())).unwrap();
            }
        }
    }
}

#[test]
fn rerun_is_identical_until_a_prompt_changes() {
    let test = Test::new();
    copy_example(&test);
    let output = test.run(&[
        "run",
        "tactics/summarize.yaml",
        "--task-file",
        "examples/article.txt",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert_eq!(
        output.stdout,
        "identical: 3 model calls replayed, same delivery\n"
    );

    // From another directory the recorded (relative) tactic path is not
    // there: one line saying so and how to name the file.
    std::fs::create_dir(test.path("elsewhere")).unwrap();
    let elsewhere = |args: &[&str]| {
        let mut command = test.command(args);
        command.current_dir(test.path("elsewhere"));
        Output::of(command.output().unwrap())
    };
    let output = elsewhere(&["replay", "../r.json", "--rerun"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`tactics/summarize.yaml` is not here")
            && output.stderr.contains("--tactic FILE")
            && output.stderr.lines().count() == 1,
        "{}",
        output.stderr
    );
    let tactic = ["--tactic", "../tactics/summarize.yaml"];
    elsewhere(&[&["replay", "../r.json", "--rerun"][..], &tactic[..]].concat()).expect_code(0);

    // Edit the critic's prompt: the first two calls still match, the third does not.
    let review = std::fs::read_to_string(test.path("prompts/summarize/review.md")).unwrap();
    std::fs::write(
        test.path("prompts/summarize/review.md"),
        review.replace("Is the summary faithful", "Is it faithful"),
    )
    .unwrap();
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("diverged at model call 3: agent `critic`, dialog `main`, round 0"),
        "{}",
        output.stderr
    );
    // A line diff of the message, each line on a line of its own (issue 27:
    // both texts were on one line each, their line breaks shown as `\n`).
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert!(
        lines.contains(&"  message 1 (user `user`) differs (- recorded, + now):"),
        "{}",
        output.stderr
    );
    let removed: Vec<&&str> = lines
        .iter()
        .filter(|line| line.starts_with("    - "))
        .collect();
    let added: Vec<&&str> = lines
        .iter()
        .filter(|line| line.starts_with("    + "))
        .collect();
    assert_eq!(removed.len(), 1, "{}", output.stderr);
    assert_eq!(added.len(), 1, "{}", output.stderr);
    assert!(
        removed[0].contains("Is the summary faithful"),
        "{}",
        output.stderr
    );
    assert!(added[0].contains("Is it faithful"), "{}", output.stderr);
    assert!(
        !output.stderr.contains("\\n"),
        "no line break is shown escaped: {}",
        output.stderr
    );
}

#[test]
fn rerun_replays_recorded_errors_offline() {
    let test = Test::new();
    let server = common::MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 500}\n  - fault: {status: 429, retry_after_ms: 20}\n  - text: recovered\n",
    );
    let yaml = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - name: a\nproviders:\n  local: {{base_url: \"{}\", retry_base_ms: 10}}\n",
        server.base_url()
    );
    let test = test.file("t.yaml", &yaml);
    test.run(&["run", "t.yaml", "--task", "hi", "--record", "r.json"])
        .expect_code(0);
    drop(server);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert_eq!(
        output.stdout, "identical: 3 model calls replayed, same delivery\n",
        "{}",
        output.stderr
    );
}

#[test]
fn rerun_uses_the_model_the_run_was_given() {
    // The tactic names one model; the run used `--model`. The record knows
    // it, so `--rerun` asks for the same model and matches; `replay
    // --model` overrides it (and a different model is a divergence).
    let test = Test::new()
        .file("script.yaml", "replies:\n  - text: \"scripted answer\"\n")
        .file(
            "m.yaml",
            "global: {model_name: openai/gpt-4o-mini}\nagent_configs:\n  - {name: a, system_prompt: Be brief.}\nproviders:\n  mock: {api: mock, script: script.yaml}\n",
        );
    test.run(&[
        "run",
        "m.yaml",
        "--task",
        "hi",
        "--model",
        "mock/script",
        "--record",
        "r.json",
    ])
    .expect_code(0);
    assert_eq!(test.read_json("r.json")["tactic"]["model"], "mock/script");
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical"), "{}", output.stdout);
    let same = test.run(&["replay", "r.json", "--rerun", "--model", "mock/script"]);
    same.expect_code(0);
    let other = test.run(&["replay", "r.json", "--rerun", "--model", "mock/echo"]);
    other.expect_code(1);
    assert!(other.stderr.contains("lllm replay:"), "{}", other.stderr);
    // `--model` belongs to `--rerun`.
    test.run(&["replay", "r.json", "--model", "mock/echo"])
        .expect_code(2);
}

/// `record` with its dialogs replaced by its first one and a chain of
/// `count` forks, each a child of the one before, inheriting all of its
/// messages and listing one more (as `lllm` never writes: a crafted file).
fn chain_of_forks(record: &Value, count: usize) -> Value {
    let mut record = record.clone();
    let dialogs = record["dialogs"].as_array().unwrap();
    let (root, template) = (dialogs[0].clone(), dialogs[1].clone());
    let mut parent = root["tree_node"]["dialog_id"].clone();
    let listed = root["messages"].as_array().unwrap().len();
    let mut chain = vec![root];
    for index in 0..count {
        let mut fork = template.clone();
        fork["messages"] = serde_json::json!([{"role": "user", "content": "x"}]);
        fork["inherited"] = (listed + index).into();
        let id = Value::String(format!("{index:032x}"));
        fork["tree_node"]["dialog_id"] = id.clone();
        fork["tree_node"]["parent_id"] = parent;
        fork["tree_node"]["depth"] = (index + 1).into();
        fork["tree_node"]["children_ids"] = serde_json::json!([]);
        parent = id;
        chain.push(fork);
    }
    record["dialogs"] = Value::Array(chain);
    record
}

/// A record whose forks would expand past what readers take (4 million
/// messages: 3,000 forks listing one message each expand to 4.5 million)
/// is refused before anything is copied: one error line naming the file,
/// exit 2; readers of many records skip it with a note. A short chain reads.
#[test]
fn a_record_that_would_expand_past_the_limit_is_refused() {
    let test = Test::new();
    example_run(&test, "good.json");
    let good = test.read_json("good.json");
    let chain = chain_of_forks(&good, 3000);
    std::fs::write(test.path("chain.json"), chain.to_string()).unwrap();
    for args in [
        &["replay", "chain.json"][..],
        &["replay", "chain.json", "--json"],
        &["replay", "chain.json", "--rerun"],
    ] {
        let output = test.run(args);
        output.expect_code(2);
        assert_eq!(output.stdout, "", "{args:?}");
        let lines: Vec<&str> = output.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", output.stderr);
        assert!(
            lines[0].starts_with("error: cannot read `chain.json`: it would hold at least "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("more than the 4000000 lllm reads in one record"),
            "{}",
            lines[0]
        );
    }

    // As a line of a batch's `sessions.jsonl`: `replay --id` refuses it,
    // `report` and `logs reindex` skip it and read the others.
    let session = chain["session_id"].as_str().unwrap().to_string();
    let mut second = good.clone();
    second["session_id"] = Value::String("019a0000-0000-7000-8000-000000000000".into());
    std::fs::create_dir_all(test.path("out")).unwrap();
    std::fs::write(
        test.path("out/sessions.jsonl"),
        format!("{chain}\n{second}\n"),
    )
    .unwrap();
    let result = |id: &str, session: &str| {
        serde_json::json!({"id": id, "state": "success", "delivery": "d", "error": null,
                           "cost": 0.0, "session_id": session})
        .to_string()
    };
    std::fs::write(
        test.path("out/results.jsonl"),
        format!(
            "{}\n{}\n",
            result("t1", &session),
            result("t2", second["session_id"].as_str().unwrap())
        ),
    )
    .unwrap();
    let output = test.run(&["replay", "out/sessions.jsonl", "--id", &session]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .starts_with("error: cannot read `out/sessions.jsonl`: it would hold at least "),
        "{}",
        output.stderr
    );
    let output = test.run(&["report", "out"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains(
            "`out/sessions.jsonl`: skipped 1 line not readable as session records (line 1)"
        ),
        "{}",
        output.stderr
    );
    let page = std::fs::read_to_string(test.path("out/report.html")).unwrap();
    assert!(page.contains("019a0000-0000-7000-8000-000000000000"));
    let output = test.run(&["logs", "reindex", "--from", "out"]);
    assert!(
        output.stderr.contains("line 1 skipped: cannot read"),
        "{}",
        output.stderr
    );

    // A chain of real length (a tool loop of 50 rounds) reads in full.
    std::fs::write(
        test.path("short.json"),
        chain_of_forks(&good, 50).to_string(),
    )
    .unwrap();
    let output = test.run(&["replay", "short.json", "--json"]);
    output.expect_code(0);
    let read: Value = serde_json::from_str(&output.stdout).unwrap();
    let root = good["dialogs"][0]["messages"].as_array().unwrap().len();
    assert_eq!(
        read["dialogs"][50]["messages"].as_array().unwrap().len(),
        root + 50
    );
}
