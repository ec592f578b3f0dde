//! Every command that writes to stdout ends quietly when its reader goes away
//! (`lllm replay … | head`): exit code as if the output had been read, no
//! panic, nothing on stderr about it. Each test spawns the real binary, reads a
//! few bytes of an output far larger than any pipe buffer (so the rest can
//! only fail to be written), and drops the reader. A closed stderr (`2>&1 |
//! head` after the head has gone) must not crash a command either.

mod common;

use std::io::Read;
use std::process::Child;

use common::{Output, Test};

const ECHO: &str = "tactic_type: echo\ndescription: DESCRIPTION\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\n";

/// 1.1 MiB of text: more than a pipe holds (64 KiB by default, 1 MiB at most
/// without privileges), so a writer must block until the reader reads or
/// goes away.
fn big_text() -> String {
    "all work and no play makes a dull log\n".repeat(1_153_434 / 38)
}

/// A test dir with the echo tactic (its description 1.1 MiB long) and a
/// 1.1 MiB task, and a record of a run on that task.
fn setup() -> Test {
    let text = big_text();
    let test = Test::new()
        .file(
            "echo.yaml",
            &ECHO.replace("DESCRIPTION", &format!("\"{}\"", text.replace('\n', " "))),
        )
        .file("task.txt", &text);
    test.run(&[
        "run",
        "echo.yaml",
        "--task-file",
        "task.txt",
        "--record",
        "record.json",
        "-q",
    ])
    .expect_code(0);
    test
}

/// Reads the first bytes of `child`'s stdout, closes it, and waits.
fn read_a_little_then_close(mut child: Child) -> Output {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("the output starts");
    drop(stdout);
    Output::of(child.wait_with_output().expect("wait for lllm"))
}

#[track_caller]
fn ends_quietly(output: &Output) {
    output.expect_code(0);
    assert!(
        !output.stderr.contains("panicked") && !output.stderr.contains("Broken pipe"),
        "{}",
        output.stderr
    );
}

#[test]
fn replay_and_replay_json_end_quietly_on_a_closed_pipe() {
    let test = setup();
    for args in [
        &["replay", "record.json"][..],
        &["replay", "record.json", "--json"][..],
    ] {
        let output = read_a_little_then_close(test.spawn(args));
        ends_quietly(&output);
        assert_eq!(output.stderr, "", "{args:?}");
    }
}

#[test]
fn show_config_and_dry_run_end_quietly_on_a_closed_pipe() {
    let test = setup();
    let output = read_a_little_then_close(test.spawn(&["run", "echo.yaml", "--show-config"]));
    ends_quietly(&output);
    assert_eq!(output.stderr, "");
    let output = read_a_little_then_close(test.spawn(&[
        "run",
        "echo.yaml",
        "--task-file",
        "task.txt",
        "--dry-run",
    ]));
    ends_quietly(&output);
}

#[test]
fn a_run_whose_reader_leaves_keeps_its_record_and_its_exit_code() {
    let test = setup();
    let output = read_a_little_then_close(test.spawn(&[
        "run",
        "echo.yaml",
        "--task-file",
        "task.txt",
        "--record",
        "again.json",
    ]));
    ends_quietly(&output);
    assert!(output.stderr.contains("lllm: success"), "{}", output.stderr);
    assert_eq!(test.read_json("again.json")["state"], "success");
}

#[test]
fn a_closed_stderr_crashes_nothing() {
    let test = setup().file("tasks.jsonl", "\"one\"\n\"two\"\n");
    let close_stderr = |args: &[&str]| {
        let mut child = test.spawn(args);
        drop(child.stderr.take());
        Output::of(child.wait_with_output().expect("wait for lllm"))
    };
    // A batch writes its summary table to stderr.
    let batch = close_stderr(&["batch", "tasks.jsonl", "--tactic", "echo.yaml", "-o", "out"]);
    batch.expect_code(0);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert_eq!(results.lines().count(), 2);
    // A run writes its summary line there, a bad one its error.
    close_stderr(&["run", "echo.yaml", "--task", "hi", "--no-record"]).expect_code(0);
    close_stderr(&["run", "missing.yaml", "--task", "hi"]).expect_code(2);
}
