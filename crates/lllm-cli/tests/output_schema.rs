//! A tactic's `output_schema` (issue 29) through the real binaries: `lllm
//! run` holds the delivering call to it and repairs a reply that does not
//! fit, `lllm batch` does so for every task, and a schema that does not
//! compile is one error line naming where, exit 2, before anything runs.

mod common;

use common::Test;
use serde_json::Value;

/// A tactic on `mock/script` whose delivery must be a verdict.
const TACTIC: &str = "agent_configs: [{name: judge, model_name: mock/script}]
providers: {mock: {script: script.yaml}}
output_schema:
  type: object
  required: [accept, reason]
  properties:
    accept: {type: boolean}
    reason: {type: string}
";

/// Each run's replies: one that does not fit, then one that does.
const SCRIPT: &str = r#"replies:
  - '{"accept": "yes"}'
  - '{"accept": true, "reason": "sound"}'
"#;

const VERDICT: &str = r#"{"accept": true, "reason": "sound"}"#;

fn test() -> Test {
    Test::new()
        .file("t.yaml", TACTIC)
        .file("script.yaml", SCRIPT)
}

/// Every repair of a record's calls.
fn repairs(record: &Value) -> Vec<String> {
    record["agent_calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|call| call["exception_retries"].as_array().unwrap().clone())
        .map(|repair| repair["error"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn run_repairs_a_delivery_that_does_not_fit_the_schema() {
    let test = test();
    let output = test.run(&["run", "t.yaml", "--task", "2 + 2 = 4", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, format!("{VERDICT}\n"));
    let record = test.read_json("r.json");
    assert_eq!(record["state"], "success");
    let repairs = repairs(&record);
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert!(
        repairs[0].starts_with("reply does not match the JSON schema:"),
        "{}",
        repairs[0]
    );
    assert!(repairs[0].contains("`/accept`"), "{}", repairs[0]);
}

#[test]
fn run_fails_when_the_repairs_are_spent() {
    let test = test().file(
        "script.yaml",
        "replies: ['{\"accept\": \"yes\"}', 'no JSON', 'still none', '{}']\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "judge", "--record", "r.json"]);
    assert_ne!(output.code, 0, "{}", output.stderr);
    assert!(output.stdout.is_empty(), "{}", output.stdout);
    assert!(
        output
            .stderr
            .contains("still does not parse after 3 repairs"),
        "{}",
        output.stderr
    );
    let record = test.read_json("r.json");
    assert_eq!(record["state"], "failure");
    assert_eq!(repairs(&record).len(), 3);
}

#[test]
fn batch_holds_every_task_to_the_schema() {
    let test = test().file(
        "tasks.jsonl",
        "{\"id\": \"one\", \"task\": \"2 + 2 = 4\"}\n{\"id\": \"two\", \"task\": \"1 + 1 = 3\"}\n",
    );
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let text = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let results: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(results.len(), 2);
    for result in &results {
        assert_eq!(result["state"], "success", "{result}");
        assert_eq!(result["delivery"], VERDICT);
        assert_eq!(result["calls"], 2, "one request and one repair: {result}");
    }
    let sessions = std::fs::read_to_string(test.path("out/sessions.jsonl")).unwrap();
    for line in sessions.lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        assert_eq!(repairs(&record).len(), 1);
    }
}

/// `(tactic, the start of the one error line)`.
const BAD_SCHEMAS: &[(&str, &str)] = &[
    (
        "agent_configs: [{name: a, model_name: mock/echo}]\noutput_schema:\n  type: object\n  properties:\n    n: {type: 5}\n",
        "t.yaml:5:9: `output_schema` is not a valid JSON Schema at `/properties/n/type`: ",
    ),
    (
        "agent_configs: [{name: a, model_name: mock/echo}]\noutput_schema: a verdict\n",
        "t.yaml:2:1: `output_schema` is a string, not a JSON Schema; write a mapping such as",
    ),
];

#[test]
fn a_schema_that_does_not_compile_is_one_line_naming_where() {
    for (tactic, expected) in BAD_SCHEMAS {
        let test = Test::new().file("t.yaml", tactic);
        let output = test.run(&["run", "t.yaml", "--task", "hi"]);
        output.expect_code(2);
        assert!(output.stdout.is_empty(), "{}", output.stdout);
        let lines: Vec<&str> = output.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", output.stderr);
        assert!(
            lines[0].contains(expected),
            "expected {expected:?} in\n{}",
            output.stderr
        );
    }
}
