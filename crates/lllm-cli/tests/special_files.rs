//! Files a user names that are not regular files (issue 12): a named pipe
//! would block the open until a writer comes, `/dev/zero` never ends. Every
//! file lllm reads because a user named it — a tactic, its `base`, a
//! sub-tactic, a mock script, a price file, a task file, a tasks file, a
//! record — is one line of error and exit 2, never a hang or a full memory.

#![cfg(unix)]

mod common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::{Output, Test};

/// Waits for `child` at most a minute (each of these runs refuses at once);
/// a run still going then is a hang: it is killed and the test fails.
fn finish(mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait for lllm").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = Output::of(child.wait_with_output().expect("collect lllm"));
            panic!("lllm hung\n--- stderr\n{}", output.stderr);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Output::of(child.wait_with_output().expect("collect lllm"))
}

fn fifo(test: &Test, name: &str) {
    nix::unistd::mkfifo(&test.path(name), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
}

const TACTIC: &str =
    "agent_configs:\n  - name: a\n    model_name: mock/echo\n    system_prompt: hi\n";

#[test]
fn files_that_are_not_regular_are_refused_at_once() {
    let test = Test::new()
        .file("t.yaml", TACTIC)
        .file("base_pipe.yaml", &format!("base: pipe.yaml\n{TACTIC}"))
        .file("base_zero.yaml", &format!("base: /dev/zero\n{TACTIC}"))
        .file(
            "sub.yaml",
            &format!("{TACTIC}flow:\n  - {{step: s, tactic: pipe.yaml}}\n"),
        )
        .file(
            "script.yaml",
            "agent_configs:\n  - name: a\n    model_name: scripted/script\n    system_prompt: hi\nproviders:\n  scripted: {api: mock, script: pipe.yaml}\n",
        );
    fifo(&test, "pipe.yaml");
    fifo(&test, "tasks.jsonl");
    fifo(&test, "record.json");
    fifo(&test, "sessions.jsonl");
    let cases: &[(&[&str], &str)] = &[
        (&["run", "pipe.yaml", "--task", "x"], "a named pipe"),
        (&["run", "base_pipe.yaml", "--task", "x"], "a named pipe"),
        (
            &["run", "base_zero.yaml", "--task", "x"],
            "a character device",
        ),
        (&["run", "sub.yaml", "--task", "x"], "a named pipe"),
        (&["run", "script.yaml", "--task", "x"], "a named pipe"),
        (
            &["run", "t.yaml", "--task-file", "pipe.yaml"],
            "a named pipe",
        ),
        (
            &["run", "t.yaml", "--task-file", "/dev/zero"],
            "a character device",
        ),
        (
            &["run", "t.yaml", "--task", "x", "--prices", "/dev/zero"],
            "a character device",
        ),
        (
            &["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"],
            "a named pipe",
        ),
        (&["replay", "record.json"], "a named pipe"),
        (&["replay", "sessions.jsonl"], "a named pipe"),
    ];
    for (args, what) in cases {
        let output = finish(test.command(args).spawn().expect("start lllm"));
        assert_eq!(output.code, 2, "{args:?}\n{}", output.stderr);
        let lines: Vec<&str> = output.stderr.lines().collect();
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with("error: ") && line.contains(what)),
            "{args:?}: {}",
            output.stderr
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    assert!(!test.path("out").exists(), "a refused batch leaves nothing");
}

#[test]
fn a_task_file_too_large_for_any_model_is_refused() {
    let test = Test::new().file("t.yaml", TACTIC);
    let big = std::fs::File::create(test.path("big.txt")).unwrap();
    // Sparse: no disk is spent on it.
    big.set_len(257 << 20).unwrap();
    let output = test.run(&["run", "t.yaml", "--task-file", "big.txt"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("more than the 256 MiB"),
        "{}",
        output.stderr
    );
}
