//! Compressed session records end to end (`lllm batch --compress`,
//! `sessions.jsonl.zst`): every reader takes them (replay, logs show,
//! logs reindex, merge, report), a resumed run cuts a torn last frame and
//! loses nothing its results claim, the setting follows flag > `LLLM_*` >
//! config file, and corrupt or hostile input is one error line.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use common::Test;
use lllm::jsonl::{Lines, ZSTD_MAGIC, unpack};
use serde_json::Value;

const ECHO_TACTIC: &str = "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\n";

fn tasks(count: usize) -> String {
    (0..count)
        .map(|i| {
            format!("{{\"id\": \"t{i}\", \"task\": \"a \\\"quoted\\\" task\\nnumber {i}\"}}\n")
        })
        .collect()
}

fn test(count: usize) -> Test {
    let test = Test::new()
        .file("t.yaml", ECHO_TACTIC)
        .file("tasks.jsonl", &tasks(count));
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

fn batch(test: &Test, extra: &[&str]) -> common::Output {
    test.batch("t.yaml", "out", extra)
}

/// [`batch`] without `-q`: its warnings are said.
fn batch_saying(test: &Test, extra: &[&str]) -> common::Output {
    test.run(
        &[
            &["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"][..],
            extra,
        ]
        .concat(),
    )
}

/// Every record of a records file (either form), with its place.
fn read_records(test: &Test, relative: &str) -> Vec<(u64, Value)> {
    let mut lines = Lines::open(&test.path(relative)).expect("open records");
    let mut read = Vec::new();
    loop {
        let place = lines.place().expect("a place");
        let mut line = String::new();
        if lines.read_line(&mut line).expect("read a line") == 0 {
            return read;
        }
        read.push((place, serde_json::from_str(&line).expect("a record")));
    }
}

fn results(test: &Test) -> Vec<Value> {
    std::fs::read_to_string(test.path("out/results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Deletes the session store's index and its list of record files, as
/// before a `logs reindex` from scratch.
fn forget_index(test: &Test) {
    for name in [
        "index.sqlite",
        "index.sqlite-wal",
        "index.sqlite-shm",
        "records.list",
    ] {
        let _ = std::fs::remove_file(test.path("home").join(name));
    }
}

fn is_compressed(test: &Test, relative: &str) -> bool {
    std::fs::read(test.path(relative))
        .unwrap()
        .starts_with(&ZSTD_MAGIC)
}

#[test]
fn a_compressed_batch_is_read_by_replay_logs_merge_and_report() {
    let test = test(12);
    batch(&test, &["--compress", "-j", "1"]).expect_code(0);
    assert!(is_compressed(&test, "out/sessions.jsonl.zst"));
    assert!(!test.path("out/sessions.jsonl").exists());
    let records = read_records(&test, "out/sessions.jsonl.zst");
    assert_eq!(records.len(), 12);

    // replay --id and logs show agree on every session (logs show reads one
    // frame at the stored place).
    for (_, record) in &records {
        let id = record["session_id"].as_str().unwrap();
        let replayed = test.run(&["replay", "out/sessions.jsonl.zst", "--id", id]);
        replayed.expect_code(0);
        let shown = test.run(&["logs", "show", id]);
        shown.expect_code(0);
        assert_eq!(shown.stdout, replayed.stdout);
        assert!(replayed.stdout.contains("quoted"), "{}", replayed.stdout);
    }
    let task = test.run(&["replay", "out/sessions.jsonl.zst", "--id", "t7"]);
    task.expect_code(0);
    assert!(task.stdout.contains("number 7"), "{}", task.stdout);

    // The first text search indexes the sessions from the compressed file.
    let found = |words: &str| -> Vec<String> {
        let output = test.run(&["logs", "-s", words, "--json"]);
        output.expect_code(0);
        let mut ids: Vec<String> = output
            .stdout
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["task_id"].to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(found("\"number 7\""), ["\"t7\""]);
    assert_eq!(found("quoted").len(), 12);

    // reindex finds `sessions.jsonl.zst` and stores places that show.
    let before = test.run(&["logs", "--json"]);
    before.expect_code(0);
    forget_index(&test);
    let reindexed = test.run(&["logs", "reindex", "--from", "out"]);
    reindexed.expect_code(0);
    assert!(
        reindexed.stderr.contains("12 sessions indexed"),
        "{}",
        reindexed.stderr
    );
    assert_eq!(test.run(&["logs", "--json"]).stdout, before.stdout);
    let last = records[11].1["session_id"].as_str().unwrap();
    test.run(&["logs", "show", last]).expect_code(0);

    // merge: either input form, the output's form as asked.
    test.run(&["merge", "out", "-o", "plain", "-q"])
        .expect_code(0);
    assert!(!is_compressed(&test, "plain/sessions.jsonl"));
    test.run(&["merge", "plain", "-o", "again", "-q", "--compress"])
        .expect_code(0);
    assert!(is_compressed(&test, "again/sessions.jsonl.zst"));
    let texts = |relative: &str| -> Vec<Value> {
        let mut lines: Vec<Value> = read_records(&test, relative)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        lines.sort_by_key(|record| record["session_id"].as_str().unwrap().to_string());
        lines
    };
    assert_eq!(
        texts("plain/sessions.jsonl"),
        texts("out/sessions.jsonl.zst")
    );
    assert_eq!(
        texts("again/sessions.jsonl.zst"),
        texts("out/sessions.jsonl.zst")
    );
    // A merge into the same directory in the other form leaves one form.
    test.run(&["merge", "out", "-o", "again", "-q"])
        .expect_code(0);
    assert!(!test.path("again/sessions.jsonl.zst").exists());

    // report: the session views come from the compressed file.
    let report = test.run(&["report", "out"]);
    report.expect_code(0);
    assert!(!report.stderr.contains("note:"), "{}", report.stderr);
    let html = std::fs::read_to_string(test.path("out/report.html")).unwrap();
    assert!(html.contains(last), "the page shows the session");
}

#[test]
fn resume_cuts_a_torn_last_frame_keeps_every_claimed_record_and_runs_the_rest() {
    let test = test(30);
    // Two runs, two writers: at least two frames.
    batch(&test, &["--compress", "--limit", "10"]).expect_code(0);
    batch(&test, &["--resume", "--limit", "20"]).expect_code(0);
    let path = test.path("out/sessions.jsonl.zst");
    let whole = std::fs::read(&path).unwrap();
    let records = read_records(&test, "out/sessions.jsonl.zst");
    assert_eq!(records.len(), 20);
    // A kill in the middle of the last frame: its tasks' result lines were
    // not written yet (a result follows its record).
    let last_frame = unpack(records.last().unwrap().0).0;
    assert!(last_frame > 0, "one frame only");
    let lost: BTreeSet<String> = records
        .iter()
        .filter(|(place, _)| unpack(*place).0 == last_frame)
        .map(|(_, record)| record["task_id"].as_str().unwrap().to_string())
        .collect();
    let torn = last_frame as usize + (whole.len() - last_frame as usize) / 2;
    std::fs::write(&path, &whole[..torn]).unwrap();
    let kept: Vec<Value> = results(&test)
        .into_iter()
        .filter(|result| !lost.contains(result["id"].as_str().unwrap()))
        .collect();
    let claimed: BTreeMap<String, String> = kept
        .iter()
        .map(|result| {
            (
                result["id"].as_str().unwrap().to_string(),
                result["session_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let text: String = kept.iter().map(|result| format!("{result}\n")).collect();
    std::fs::write(test.path("out/results.jsonl"), text).unwrap();

    // Readers read a torn frame as far as it goes, as a torn last line.
    let first = read_records(&test, "out/sessions.jsonl.zst")[0].1["session_id"].clone();
    test.run(&[
        "replay",
        "out/sessions.jsonl.zst",
        "--id",
        first.as_str().unwrap(),
    ])
    .expect_code(0);
    let merged = test.run(&["merge", "out", "-o", "merged", "-q"]);
    assert_ne!(merged.code, 2, "{}", merged.stderr);

    // Resumed without --compress: the directory's file stays compressed.
    let output = batch_saying(&test, &["--resume"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains("cut a torn last zstd frame"),
        "{}",
        output.stderr
    );
    assert!(is_compressed(&test, "out/sessions.jsonl.zst"));
    assert!(!test.path("out/sessions.jsonl").exists());
    let after = read_records(&test, "out/sessions.jsonl.zst");
    let sessions: BTreeSet<&str> = after
        .iter()
        .map(|(_, record)| record["session_id"].as_str().unwrap())
        .collect();
    for (id, session) in &claimed {
        assert!(
            sessions.contains(session.as_str()),
            "the record of `{id}` was lost"
        );
    }
    // Every task has one result, and its record; the lost ones ran again.
    let results = results(&test);
    let ids: BTreeSet<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!((results.len(), ids.len()), (30, 30));
    for result in &results {
        let session = result["session_id"].as_str().unwrap();
        assert!(sessions.contains(session), "no record for {result}");
    }
    // The torn frame's records are gone and written again, with the ten
    // tasks never run: one record per task.
    assert_eq!(after.len(), 30, "{} lost", lost.len());
    // `logs show` finds records of the first frame and of the resumed run's
    // frames (a frame past the cut) at their places.
    let (first_place, first) = &after[0];
    let (last_place, last) = after.last().unwrap();
    assert!(unpack(*last_place).0 > unpack(*first_place).0);
    for record in [first, last] {
        let id = record["session_id"].as_str().unwrap();
        let shown = test.run(&["logs", "show", id]);
        shown.expect_code(0);
        let replayed = test.run(&["replay", "out/sessions.jsonl.zst", "--id", id]);
        assert_eq!(shown.stdout, replayed.stdout);
    }
}

#[test]
fn the_setting_follows_flag_then_variable_then_config_file() {
    // Flags, variables, the config file, and the records file written.
    type Case<'a> = (
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        Option<&'a str>,
        &'a str,
    );
    let cases: &[Case] = &[
        (&[], &[], None, "sessions.jsonl"),
        (&["--compress"], &[], None, "sessions.jsonl.zst"),
        (&[], &[("LLLM_COMPRESS", "1")], None, "sessions.jsonl.zst"),
        (&[], &[], Some("compress: true\n"), "sessions.jsonl.zst"),
        (
            &[],
            &[("LLLM_COMPRESS", "0")],
            Some("compress: true\n"),
            "sessions.jsonl",
        ),
        (
            &["--compress=false"],
            &[("LLLM_COMPRESS", "1")],
            None,
            "sessions.jsonl",
        ),
        (
            &["--compress"],
            &[],
            Some("compress: false\n"),
            "sessions.jsonl.zst",
        ),
    ];
    for (flags, variables, config, written) in cases {
        let mut test = test(2);
        for (key, value) in *variables {
            test = test.env(key, value);
        }
        if let Some(config) = config {
            test = test.file(".config/lllm/config.yaml", config);
        }
        batch(&test, flags).expect_code(0);
        let listed: Vec<String> = std::fs::read_dir(test.path("out"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("sessions"))
            .collect();
        assert_eq!(listed, [*written], "{flags:?} {variables:?} {config:?}");
    }
    let bad = test(1).file(".config/lllm/config.yaml", "compress: 3\n");
    let output = batch(&bad, &[]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`compress` must be `true` or `false`"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_directory_decides_its_form_on_resume() {
    // --compress on a directory holding plain records: continued plain, with a note.
    let test = test(4);
    batch(&test, &["--limit", "2"]).expect_code(0);
    let output = batch_saying(&test, &["--resume", "--compress"]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("is not compressed: this run appends to it uncompressed"),
        "{}",
        output.stderr
    );
    assert!(!test.path("out/sessions.jsonl.zst").exists());
    assert_eq!(read_records(&test, "out/sessions.jsonl").len(), 4);
    // Records in both files: refused, nothing run.
    std::fs::copy(
        test.path("out/sessions.jsonl"),
        test.path("out/sessions.jsonl.zst"),
    )
    .unwrap();
    let output = batch(&test, &["--retry-errors"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("holds records in both `sessions.jsonl` and `sessions.jsonl.zst`"),
        "{}",
        output.stderr
    );
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
}

#[test]
fn corrupt_or_hostile_input_is_one_error_line_and_magic_decides_the_form() {
    let test = test(3);
    batch(&test, &["--compress"]).expect_code(0);
    let whole = std::fs::read(test.path("out/sessions.jsonl.zst")).unwrap();
    // Detected by its bytes, whatever its name.
    std::fs::write(test.path("renamed.jsonl"), &whole).unwrap();
    test.run(&["replay", "renamed.jsonl", "--id", "t1"])
        .expect_code(0);
    // A flipped byte inside the frame; magic then junk.
    let mut flipped = whole.clone();
    let middle = whole.len() / 2;
    flipped[middle] ^= 0x55;
    let mut junk = ZSTD_MAGIC.to_vec();
    junk.extend_from_slice(b"\xff\xff\xff\xff not a frame at all");
    for (name, bytes) in [("flipped", flipped), ("junk", junk)] {
        std::fs::create_dir_all(test.path(name)).unwrap();
        std::fs::write(test.path(&format!("{name}/sessions.jsonl.zst")), &bytes).unwrap();
        std::fs::copy(
            test.path("out/results.jsonl"),
            test.path(&format!("{name}/results.jsonl")),
        )
        .unwrap();
        let file = format!("{name}/sessions.jsonl.zst");
        for args in [
            vec!["replay", file.as_str(), "--id", "t2"],
            vec!["merge", name, "-o", "merged", "-q"],
            vec!["report", name],
        ] {
            let output = test.run(&args);
            output.expect_code(2);
            let lines: Vec<&str> = output.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{args:?}: {}", output.stderr);
            assert!(
                lines[0].starts_with("error: "),
                "{args:?}: {}",
                output.stderr
            );
            assert!(lines[0].contains(&file), "{args:?}: {}", output.stderr);
            assert!(
                lines[0].contains("zstd frame") || lines[0].contains("corrupt"),
                "{args:?}: {}",
                output.stderr
            );
            // This libzstd has no error strings: the message says what it is.
            assert!(
                !lines[0].contains("stripped") && lines[0].contains("(zstd error "),
                "{args:?}: {}",
                output.stderr
            );
        }
        let reindex = test.run(&["logs", "reindex", "--from", name]);
        assert!(reindex.stderr.contains(&file), "{}", reindex.stderr);
    }
    // Resuming over frames that do not parse is refused: nothing can follow them.
    std::fs::write(
        test.path("junk/batch.json"),
        std::fs::read(test.path("out/batch.json")).unwrap(),
    )
    .unwrap();
    let resume = test.batch("t.yaml", "junk", &["--resume"]);
    resume.expect_code(2);
    assert!(
        resume.stderr.contains("not a zstd frame at byte 0"),
        "{}",
        resume.stderr
    );
}

/// `lllm run --record FILE.json.zst` writes the record compressed; replay,
/// `logs show` and a reindex of the directory read it, and the record is the
/// one a plain `--record` writes.
#[test]
fn a_run_record_named_json_zst_is_compressed_and_read_everywhere() {
    let test = test(0);
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "a \"quoted\"\ntask",
        "--record",
        "r/run.json.zst",
    ])
    .expect_code(0);
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "a \"quoted\"\ntask",
        "--record",
        "p/run.json",
    ])
    .expect_code(0);
    assert!(is_compressed(&test, "r/run.json.zst"));
    assert!(!is_compressed(&test, "p/run.json"));
    let record: Value = serde_json::from_str(
        &lllm::jsonl::read_text(&test.path("r/run.json.zst"), 1 << 20).unwrap(),
    )
    .unwrap();
    let plain = test.read_json("p/run.json");
    assert_eq!(record["task"], "a \"quoted\"\ntask");
    assert_eq!(record["delivery"], plain["delivery"]);
    assert_eq!(record["format"], plain["format"]);

    let replayed = test.run(&["replay", "r/run.json.zst", "--json"]);
    replayed.expect_code(0);
    let replayed: Value = serde_json::from_str(&replayed.stdout).unwrap();
    assert_eq!(replayed["session_id"], record["session_id"]);
    assert_eq!(replayed["task"], record["task"]);

    let id = record["session_id"].as_str().unwrap();
    test.run(&["logs", "show", id]).expect_code(0);
    forget_index(&test);
    let reindexed = test.run(&["logs", "reindex", "--from", "r"]);
    reindexed.expect_code(0);
    assert!(
        reindexed.stderr.contains("1 session indexed"),
        "{}",
        reindexed.stderr
    );
    let shown = test.run(&["logs", "show", id]);
    shown.expect_code(0);
    assert!(shown.stdout.contains("quoted"), "{}", shown.stdout);
}
