//! The same noun the same way in every command (docs/run.md, "Flags: the same
//! everywhere"): the tactic is `-t/--tactic FILE` for `run`, `batch` and
//! `replay --rerun`; `-q` is `--quiet` wherever there is something to quiet;
//! `lllm logs` searches with `-s/--search`, and its old `-q` gets a hint.

mod common;

use common::Test;

const TACTIC: &str = "tactic_type: echoer
agent_configs: [{name: a, model_name: mock/echo, system_prompt: You repeat.}]
";

fn test() -> Test {
    let test = Test::new().file("t.yaml", TACTIC).file(
        "tasks.jsonl",
        "{\"id\": \"a\", \"task\": \"grey wolf\"}\n{\"id\": \"b\", \"task\": \"barn owl\"}\n",
    );
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

#[test]
fn run_takes_the_tactic_as_its_first_argument_or_dash_t() {
    let test = test();
    for args in [
        &["run", "t.yaml", "the task", "-q", "--no-record"][..],
        &["run", "-t", "t.yaml", "the task", "-q", "--no-record"],
        &["run", "the task", "--tactic", "t.yaml", "-q", "--no-record"],
    ] {
        let output = test.run(args);
        output.expect_code(0);
        assert_eq!(output.stdout, "the task\n", "{args:?}");
        assert_eq!(output.stderr, "", "{args:?}");
    }
    // The tactic twice, or the task twice: one error line, exit 2.
    let output = test.run(&["run", "-t", "t.yaml", "t.yaml", "the task"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: the tactic is given twice: `-t t.yaml` and `t.yaml`; hint: with `-t`, the only \
         argument is the task (`lllm run -t t.yaml \"the task\"`)\n"
    );
    let output = test.run(&["run", "-t", "t.yaml", "a", "--task", "b"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: the argument `TASK` cannot be used with `--task`; give the task once\n"
    );
    // Neither: clap's own usage error.
    let output = test.run(&["run"]);
    output.expect_code(2);
    assert!(output.stderr.contains("<TACTIC>"), "{}", output.stderr);

    // With `-t`, a piped stdin is the task as without it.
    let output = test
        .stdin("piped task")
        .run(&["run", "-t", "t.yaml", "-q", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "piped task\n");
}

#[test]
fn batch_and_replay_rerun_take_dash_t_and_dash_m() {
    let test = test();
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-q",
        "-n",
        "1",
    ]);
    output.expect_code(0);
    assert_eq!(output.stderr, "", "-q: nothing on stderr");
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert_eq!(results.lines().count(), 1, "-n 1 is --limit 1: {results}");

    let output = test.run(&["run", "t.yaml", "hello", "-q", "--record", "r.json"]);
    output.expect_code(0);
    let output = test.run(&[
        "replay",
        "r.json",
        "--rerun",
        "-t",
        "t.yaml",
        "-m",
        "mock/echo",
    ]);
    output.expect_code(0);
    assert_eq!(
        output.stdout,
        "identical: 1 model call replayed, same delivery\n"
    );
    // `-t` and `-m` belong to `--rerun`, as their long forms do.
    let output = test.run(&["replay", "r.json", "-t", "t.yaml"]);
    output.expect_code(2);
    assert!(output.stderr.contains("--rerun"), "{}", output.stderr);
}

#[test]
fn dash_q_is_quiet_in_every_command_that_prints_a_summary() {
    let test = test();
    test.run(&["batch", "tasks.jsonl", "-t", "t.yaml", "-o", "out", "-q"])
        .expect_code(0);
    for args in [
        &["run", "t.yaml", "x", "-q"][..],
        &[
            "batch",
            "tasks.jsonl",
            "-t",
            "t.yaml",
            "-o",
            "again",
            "--retry-errors",
            "-q",
        ],
        &["merge", "out", "-o", "merged", "-q"],
        &["logs", "reindex", "--from", "out", "-q"],
    ] {
        let loud = test.run(&args[..args.len() - 1]);
        assert!(
            !loud.stderr.is_empty(),
            "{args:?} says something without -q"
        );
        let quiet = test.run(args);
        assert_eq!(quiet.stderr, "", "{args:?}");
    }
}

#[test]
fn logs_searches_with_dash_s_and_the_old_dash_q_gets_a_hint() {
    let test = test();
    test.run(&["batch", "tasks.jsonl", "-t", "t.yaml", "-o", "out", "-q"])
        .expect_code(0);
    for flag in ["-s", "--search", "--query"] {
        let output = test.run(&["logs", flag, "wolf", "--json"]);
        output.expect_code(0);
        assert_eq!(
            output.stdout.lines().count(),
            1,
            "{flag}: {}",
            output.stdout
        );
        assert!(
            output.stdout.contains("grey wolf"),
            "{flag}: {}",
            output.stdout
        );
    }
    let output = test.run(&["logs", "-q", "wolf"]);
    output.expect_code(2);
    assert!(
        output.stderr.ends_with(
            "hint: `lllm logs` searches with `-s/--search TEXT`; `-q` is `--quiet` in every command\n"
        ),
        "{}",
        output.stderr
    );
    // Another command's unknown flag gets no such hint.
    let output = test.run(&["models", "--nonsense"]);
    output.expect_code(2);
    assert!(
        !output.stderr.contains("hint: `lllm logs`"),
        "{}",
        output.stderr
    );
}
