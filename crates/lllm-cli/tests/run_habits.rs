//! The habits users bring from other LLM command lines, on `lllm run`: the
//! task as an argument or piped in, `-m` for the model, `--json` for
//! scripts. Offline (`mock/echo`), so each test is the binary alone.

mod common;

use common::Test;
use serde_json::Value;

const TACTIC: &str = "tactic_type: echoer
agent_configs: [{name: a, model_name: mock/echo, system_prompt: You repeat.}]
";

/// A second model the `-m` test switches to: the script answers `scripted`.
const SCRIPT: &str = "default: {text: scripted}\n";

fn test() -> Test {
    let test = Test::new().file("t.yaml", TACTIC).file("s.yaml", SCRIPT);
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

#[test]
fn the_task_is_an_argument_or_a_pipe() {
    let test = test();
    let output = test.run(&["run", "t.yaml", "what is 2+2", "-q", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "what is 2+2\n");

    let piped = test.stdin("from a pipe\n");
    let output = piped.run(&["run", "t.yaml", "-q", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "from a pipe\n\n");
    // `-` as the argument reads stdin too.
    let output = piped.run(&["run", "t.yaml", "-", "-q", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "from a pipe\n\n");
}

#[test]
fn no_task_at_all_is_one_error_line() {
    let test = test();
    // The test's stdin is /dev/null: empty, so no task.
    let output = test.run(&["run", "t.yaml"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(output.stderr.contains("no task given"), "{}", output.stderr);
    // Two ways at once is a usage error from the parser.
    let output = test.run(&["run", "t.yaml", "a", "--task", "b"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("cannot be used with"),
        "{}",
        output.stderr
    );
}

#[test]
fn dash_m_is_the_model() {
    let test = test().file(
        "t.yaml",
        "tactic_type: echoer
agent_configs: [{name: a, model_name: mock/echo, system_prompt: You repeat.}]
providers: {mock: {script: s.yaml}}
",
    );
    let output = test.run(&[
        "run",
        "t.yaml",
        "hello",
        "-m",
        "mock/script",
        "-q",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "scripted\n");
}

#[test]
fn json_prints_what_the_summary_line_says() {
    let test = test();
    let output = test.run(&["run", "t.yaml", "hi there", "--json", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stderr, "", "no summary line with --json");
    let summary: Value = serde_json::from_str(&output.stdout).expect("one JSON object");
    assert_eq!(summary["delivery"], "hi there");
    assert_eq!(summary["state"], "success");
    assert_eq!(summary["error"], Value::Null);
    assert_eq!(summary["calls"], 1);
    assert_eq!(summary["cache_hits"], 0);
    assert_eq!(summary["cost"], 0.0);
    assert_eq!(summary["record"], "r.json");
    assert!(summary["tokens"]["total"].as_u64().is_some());
    let record = test.read_json("r.json");
    assert_eq!(summary["session_id"], record["session_id"]);

    // A failure: the object says so, and the summary line is on stderr.
    let failing = test
        .file(
            "f.yaml",
            "tactic_type: failing
agent_configs: [{name: a, model_name: mock/script, system_prompt: x, max_llm_recall: 0}]
providers: {mock: {script: fault.yaml}}
",
        )
        .file("fault.yaml", "default: {fault: {status: 400}}\n");
    let output = failing.run(&["run", "f.yaml", "hi", "--json", "--no-record"]);
    output.expect_code(1);
    let summary: Value = serde_json::from_str(&output.stdout).expect("one JSON object");
    assert_eq!(summary["state"], "failure");
    assert_eq!(summary["delivery"], Value::Null);
    assert!(
        summary["error"].as_str().unwrap().contains("400"),
        "{summary}"
    );
    assert_eq!(summary["record"], Value::Null);
    assert!(output.stderr.contains("failure"), "{}", output.stderr);
}
