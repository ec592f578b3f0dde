//! Scoring what a batch delivers (issue 32), end to end on the real binary:
//! every assertion kind passing and failing, a judge tactic and the tactic
//! under test each against its own `lllm-mock` (so the calls of each are
//! counted apart), `--fail-under`, `--repeat`, `lllm eval` (which sends
//! only judge calls), bad assertions refused before anything is sent, and
//! the shipped example run as CI would run it.

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

/// The tactic under test: it echoes its task (so each line's delivery is
/// its task), on a priced model behind `lllm-mock` with 20 ms of latency.
fn echo_tactic(base_url: &str, asserts: &str) -> String {
    format!(
        r#"tactic_type: echo
global:
  model_name: local/test-model
  max_llm_recall: 0
agent_configs:
  - name: assistant
    system_prompt: "Echo."
providers:
  local: {{api: openai, base_url: "{base_url}"}}
pricing:
  test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
{asserts}"#
    )
}

const ECHO_SCRIPT: &str = "latency_ms: 20\ndefault: {echo: true}\n";

/// A judge whose server passes a delivery that is `good` (score 0.9) and
/// fails any other (score 0.2).
fn judge_tactic(base_url: &str) -> String {
    format!(
        r#"tactic_type: judge
output_schema:
  type: object
  required: [score, pass, reason]
  properties:
    score: {{type: number}}
    pass: {{type: boolean}}
    reason: {{type: string}}
global:
  model_name: local/judge-model
  max_llm_recall: 0
agent_configs:
  - name: judge
    system_prompt: "Grade."
providers:
  local: {{api: openai, base_url: "{base_url}"}}
pricing:
  judge-model: {{input_per_million: 1.0, output_per_million: 1.0}}
flow:
  - step: grade
    agent: judge
    text: "Rubric: {{{{ rubric }}}}\nDelivery: {{{{ delivery }}}}"
"#
    )
}

const JUDGE_SCRIPT: &str = r#"rules:
  - when: {contains: "Delivery: good"}
    reply: {text: '{"score": 0.9, "pass": true, "reason": "it is good"}'}
default: {text: '{"score": 0.2, "pass": false, "reason": "it is not good"}'}
"#;

/// A command grader: passes a delivery ending in `!`, and says whether it
/// could see lllm's key (it must not).
const COMMAND_GRADER: &str = r#"import json, os, sys
given = json.load(sys.stdin)
ok = given["delivery"].endswith("!")
key = "present" if "OPENAI_API_KEY" in os.environ else "absent"
print(json.dumps({"score": 1 if ok else 0, "reason": f"key {key}, task {given['task']}"}))
"#;

/// Every kind: its assertion item, a task (echoed as the delivery) that
/// passes it and one that fails it.
fn kinds() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    vec![
        (
            "equals",
            json!({"type": "equals", "value": "Paris"}),
            "Paris",
            "Rome",
        ),
        (
            "contains",
            json!({"type": "contains", "value": "ari"}),
            "Paris",
            "Rome",
        ),
        (
            "icontains",
            json!({"type": "icontains", "value": "PARIS"}),
            "paris",
            "Rome",
        ),
        (
            "not-contains",
            json!({"type": "not-contains", "value": "sorry"}),
            "Sure",
            "sorry, no",
        ),
        (
            "contains-any",
            json!({"type": "contains-any", "value": ["x", "Rome"]}),
            "Rome",
            "Paris",
        ),
        (
            "contains-all",
            json!({"type": "contains-all", "value": ["a", "b"]}),
            "ab",
            "a",
        ),
        (
            "icontains-all",
            json!({"type": "icontains-all", "value": ["A", "B"]}),
            "ab",
            "b",
        ),
        (
            "starts-with",
            json!({"type": "starts-with", "value": "Yes"}),
            "Yes, it is",
            "No",
        ),
        (
            "regex",
            json!({"type": "regex", "value": "^[0-9]{3}$"}),
            "123",
            "12a",
        ),
        (
            "not-regex",
            json!({"type": "not-regex", "value": "(?i)as an ai"}),
            "Hi",
            "As an AI",
        ),
        ("is-json", json!({"type": "is-json"}), "[1, 2]", "not json"),
        (
            "json-schema",
            json!({"type": "json-schema", "value": {"type": "object", "required": ["label"]}}),
            r#"{"label": "spam"}"#,
            r#"{"name": "spam"}"#,
        ),
        (
            "contains-json",
            json!({"type": "contains-json"}),
            r#"Here: {"a": 1}."#,
            "Here: none.",
        ),
        (
            "json-path",
            json!({"type": "json-path", "path": "$.items[0].label", "value": "spam"}),
            r#"{"items": [{"label": "spam"}]}"#,
            r#"{"items": [{"label": "ham"}]}"#,
        ),
        (
            "cost",
            json!({"type": "cost", "threshold": 1.0}),
            "cheap",
            "cheap",
        ),
        (
            "latency",
            json!({"type": "latency", "threshold": 600000}),
            "quick",
            "quick",
        ),
        (
            "calls",
            json!({"type": "calls", "threshold": 1}),
            "one call",
            "one call",
        ),
        (
            "command",
            json!({"type": "command", "value": ["python3", "grader.py"]}),
            "wow!",
            "wow",
        ),
        (
            "llm-rubric",
            json!({"type": "llm-rubric", "value": "Is it good?", "judge": "judge.yaml"}),
            "good",
            "bad",
        ),
    ]
}

/// The failing item of kinds that fail by their bound, not their task.
fn failing_item(kind: &str, item: &Value) -> Value {
    match kind {
        "cost" => json!({"type": "cost", "threshold": 0.0000001}),
        "latency" => json!({"type": "latency", "threshold": 1}),
        "calls" => json!({"type": "calls", "threshold": 0}),
        _ => item.clone(),
    }
}

/// A test dir with the tactic, the judge, the command grader and a line
/// passing and a line failing each kind; the two servers.
fn every_kind() -> (Test, MockServer, MockServer) {
    let test = Test::new();
    let tactic_server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let judge_server = MockServer::start(test.dir.path(), JUDGE_SCRIPT);
    let mut lines = String::new();
    for (kind, item, good, bad) in kinds() {
        lines += &(json!({"id": format!("{kind}-pass"), "task": good, "asserts": [item]})
            .to_string()
            + "\n");
        let failing = failing_item(kind, &item);
        lines += &(json!({"id": format!("{kind}-fail"), "task": bad, "asserts": [failing]})
            .to_string()
            + "\n");
    }
    let test = test
        .file("t.yaml", &echo_tactic(&tactic_server.base_url(), ""))
        .file("judge.yaml", &judge_tactic(&judge_server.base_url()))
        .file("grader.py", COMMAND_GRADER)
        .file("tasks.jsonl", &lines)
        .env("OPENAI_API_KEY", "sk-test-secret-key");
    (test, tactic_server, judge_server)
}

fn read_lines(test: &Test, relative: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(relative))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is JSON"))
        .collect()
}

fn by_id(lines: &[Value]) -> std::collections::BTreeMap<String, Value> {
    lines
        .iter()
        .map(|line| (line["id"].as_str().unwrap().to_string(), line.clone()))
        .collect()
}

#[test]
fn every_assertion_kind_passes_and_fails_with_its_reason() {
    let (test, tactic_server, judge_server) = every_kind();
    // Half the lines pass: a floor of one half holds, a higher one fails.
    let output = test.batch("t.yaml", "out", &["--fail-under", "0.5"]);
    output.expect_code(0);
    let results = by_id(&read_lines(&test, "out/results.jsonl"));
    let kinds = kinds();
    assert_eq!(results.len(), kinds.len() * 2);
    for (kind, _, _, _) in &kinds {
        for (suffix, pass) in [("pass", true), ("fail", false)] {
            let result = &results[&format!("{kind}-{suffix}")];
            assert_eq!(result["state"], "success", "{result}");
            let scores = result["scores"].as_array().expect("scores");
            assert_eq!(scores.len(), 1, "{result}");
            let score = &scores[0];
            // Written without the fields at their defaults (docs/evals.md):
            // no `type` its name starts with, no `weight` 1, no `score`
            // that is 1 for a pass or 0 for a failure, and no reason for a
            // passing check whose reason would repeat its name.
            let name = score["name"].as_str().expect("a name");
            assert_eq!(name.split(' ').next(), Some(*kind), "{score}");
            assert_eq!(score.get("type"), None, "{score}");
            assert_eq!(score["pass"], pass, "{kind}-{suffix}: {score}");
            assert_eq!(result["pass"], pass, "{kind}-{suffix}: {result}");
            assert_eq!(score.get("weight"), None, "{score}");
            let says_only_its_name = pass
                && [
                    "equals",
                    "contains",
                    "icontains",
                    "not-contains",
                    "starts-with",
                    "regex",
                    "not-regex",
                    "is-json",
                ]
                .contains(kind);
            let reason = score.get("reason").and_then(Value::as_str);
            if says_only_its_name {
                assert_eq!(reason, None, "{score}");
            } else {
                assert!(!reason.unwrap_or_default().is_empty(), "a reason: {score}");
            }
            let expected_score = match (*kind, pass) {
                ("llm-rubric", true) => Some(0.9),
                ("llm-rubric", false) => Some(0.2),
                _ => None,
            };
            assert_eq!(
                score.get("score").and_then(Value::as_f64),
                expected_score,
                "{score}"
            );
            let line_score = expected_score.unwrap_or(if pass { 1.0 } else { 0.0 });
            assert_eq!(result["score"], line_score, "{result}");
        }
    }
    // The judge's own words, and a command grader that ran without lllm's key.
    assert_eq!(
        results["llm-rubric-fail"]["scores"][0]["reason"],
        "it is not good"
    );
    assert_eq!(
        results["command-pass"]["scores"][0]["reason"],
        "key absent, task wow!"
    );
    let slow = results["latency-fail"]["scores"][0]["reason"]
        .as_str()
        .unwrap();
    assert!(slow.contains("over 1 ms"), "{slow}");
    // One call per task to the tactic's server, one per rubric to the judge's.
    assert_eq!(tactic_server.requests().len(), kinds.len() * 2);
    assert_eq!(judge_server.requests().len(), 2);
    // The judges' records are kept beside the results, replayable.
    let judged = read_lines(&test, "out/judges.jsonl");
    assert_eq!(judged.len(), 2);
    assert!(judged.iter().all(|record| {
        record["task_id"]
            .as_str()
            .unwrap()
            .starts_with("llm-rubric-")
    }));
    let replayed = test.run(&[
        "replay",
        "out/judges.jsonl",
        "--id",
        "llm-rubric-pass/judge-0",
    ]);
    replayed.expect_code(0);
    assert!(
        replayed.stdout.contains("it is good"),
        "{}",
        replayed.stdout
    );

    let summary = test.read_json("out/summary.json");
    let scores = &summary["scores"];
    assert_eq!(scores["scored"], kinds.len() * 2);
    assert_eq!(scores["passed"], kinds.len());
    assert_eq!(scores["failed"], kinds.len());
    assert_eq!(scores["pass_rate"], 0.5);
    assert_eq!(scores["fail_under"], 0.5);
    // The first ten, in the order their results were written.
    let failing = scores["failing_ids"].as_array().unwrap();
    assert_eq!(failing.len(), 10);
    assert!(
        failing
            .iter()
            .all(|id| id.as_str().unwrap().ends_with("-fail")),
        "{failing:?}"
    );
    assert!(scores.get("spread").is_none(), "no --repeat: {scores}");

    // A floor above the pass rate: exit 3, and the table says why.
    let gated = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "gated",
        "--fail-under",
        "0.6",
    ]);
    gated.expect_code(3);
    assert!(
        gated
            .stderr
            .contains("pass rate  50.0% (19 of 38 scored passed) · below --fail-under 0.6"),
        "{}",
        gated.stderr
    );
    assert!(
        gated.stderr.contains("-fail` … (19 in all)"),
        "{}",
        gated.stderr
    );
}

#[test]
fn weights_and_a_task_threshold_decide_the_pass() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let asserts = "asserts:\n  - {type: contains, value: Paris, weight: 3}\n";
    let test = test
        .file("t.yaml", &echo_tactic(&server.base_url(), asserts))
        .file(
            "tasks.jsonl",
            &[
                // The tactic's 3 (pass) and the line's 1 (fail): 0.75, failing.
                json!({"id": "strict", "task": "Paris", "expected": "Rome"}),
                // The same, with a threshold the score reaches: passing.
                json!({"id": "lenient", "task": "Paris", "expected": "Rome", "threshold": 0.7}),
                // Weight 0: shown, counted nowhere.
                json!({"id": "note", "task": "Paris", "asserts": [{"type": "equals", "value": "x", "weight": 0}]}),
                // No assertion of its own, the tactic's only.
                json!({"id": "plain", "task": "Rome"}),
            ]
            .iter()
            .map(|line| line.to_string() + "\n")
            .collect::<String>(),
        );
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let results = by_id(&read_lines(&test, "out/results.jsonl"));
    let seen = |id: &str| (results[id]["score"].clone(), results[id]["pass"].clone());
    assert_eq!(seen("strict"), (json!(0.75), json!(false)));
    assert_eq!(seen("lenient"), (json!(0.75), json!(true)));
    assert_eq!(seen("note"), (json!(1.0), json!(true)));
    assert_eq!(seen("plain"), (json!(0.0), json!(false)));
    assert_eq!(results["strict"]["scores"][1]["name"], "equals \"Rome\"");
    assert_eq!(results["strict"]["scores"][0]["weight"], 3.0);
}

#[test]
fn lines_without_assertions_have_no_scores_and_the_summary_none() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let test = test
        .file("t.yaml", &echo_tactic(&server.base_url(), ""))
        .file("tasks.jsonl", "{\"id\": \"a\", \"task\": \"x\"}\n");
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let result = &read_lines(&test, "out/results.jsonl")[0];
    for key in ["scores", "score", "pass"] {
        assert!(result.get(key).is_none(), "{key}: {result}");
    }
    assert!(test.read_json("out/summary.json").get("scores").is_none());
    // A gate with nothing to gate fails, saying so.
    let gated = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "gated",
        "--fail-under",
        "0.5",
    ]);
    gated.expect_code(3);
    assert!(
        gated.stderr.contains("no task was scored"),
        "{}",
        gated.stderr
    );
}

#[test]
fn repeat_runs_each_line_under_its_own_ids_and_reports_the_spread() {
    let test = Test::new();
    // Every other reply is wrong: the spread of a task's runs shows it.
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - {text: yes}\n  - {text: no}\n  - {text: yes}\n  - {text: no}\n  - {text: yes}\n  - {text: no}\n",
    );
    let test = test
        .file("t.yaml", &echo_tactic(&server.base_url(), ""))
        .file(
            "tasks.jsonl",
            "{\"id\": \"q\", \"task\": \"Say yes.\", \"expected\": \"yes\"}\n",
        );
    let output = test.batch("t.yaml", "out", &["--repeat", "3", "-j", "1"]);
    output.expect_code(0);
    let results = read_lines(&test, "out/results.jsonl");
    let ids: Vec<&str> = results
        .iter()
        .map(|line| line["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["q#1", "q#2", "q#3"]);
    assert!(results.iter().all(|line| line["repeat_of"] == "q"));
    let passes: Vec<bool> = results
        .iter()
        .map(|line| line["pass"].as_bool().unwrap())
        .collect();
    assert_eq!(passes, [true, false, true]);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["total"], 3);
    assert_eq!(
        summary["scores"]["spread"],
        json!({"q": {"runs": 3, "passed": 2, "min_score": 0.0, "max_score": 1.0}})
    );
    assert_eq!(summary["scores"]["failing_ids"], json!(["q#2"]));
    // The records are the runs' own.
    let records = read_lines(&test, "out/sessions.jsonl");
    let task_ids: Vec<&str> = records
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(task_ids, ["q#1", "q#2", "q#3"]);
    // A resume knows every run is done: nothing is sent again.
    let sent = server.requests().len();
    test.batch("t.yaml", "out", &["--repeat", "3", "--resume"])
        .expect_code(0);
    assert_eq!(server.requests().len(), sent);
}

#[test]
fn eval_rescores_sending_only_judge_calls() {
    let (test, tactic_server, judge_server) = every_kind();
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let (tactic_calls, judge_calls) = (
        tactic_server.requests().len(),
        judge_server.requests().len(),
    );
    let before = read_lines(&test, "out/results.jsonl");

    // The same assertions again: the same scores, and only the judge asked.
    test.run(&["eval", "out", "-q"]).expect_code(0);
    let again = read_lines(&test, "out/results.jsonl");
    assert_eq!(again, before);
    assert_eq!(tactic_server.requests().len(), tactic_calls);
    assert_eq!(judge_server.requests().len(), judge_calls + 2);

    // Other assertions for every task: a rubric (judged for each line) and a regex.
    let test = test.file(
        "strict.yaml",
        "- {type: llm-rubric, value: Is it good?, judge: judge.yaml}\n- {type: regex, value: \"^[a-z]+$\"}\n",
    );
    let output = test.run(&[
        "eval",
        "out",
        "--asserts",
        "strict.yaml",
        "--fail-under",
        "0.5",
    ]);
    output.expect_code(3);
    assert!(
        output.stderr.contains("lllm eval summary"),
        "{}",
        output.stderr
    );
    assert_eq!(
        tactic_server.requests().len(),
        tactic_calls,
        "no task ran again"
    );
    assert_eq!(
        judge_server.requests().len(),
        judge_calls + 2 + before.len(),
        "one judge call per result"
    );
    let results = by_id(&read_lines(&test, "out/results.jsonl"));
    assert_eq!(results.len(), before.len());
    let good = &results["llm-rubric-pass"];
    assert_eq!(good["pass"], true, "{good}");
    assert_eq!(good["scores"].as_array().unwrap().len(), 2);
    assert_eq!(results["equals-pass"]["pass"], false);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["scores"]["passed"], 1);
    assert_eq!(summary["scores"]["fail_under"], 0.5);
    // The rest of the summary is the batch's.
    assert_eq!(summary["success"], before.len());
}

#[test]
fn bad_assertions_are_one_line_each_and_nothing_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let base = server.base_url();
    let cases: Vec<(&str, String, String, &str)> = vec![
        (
            "unknown kind in the tactic",
            echo_tactic(&base, "asserts:\n  - {type: contians, value: a}\n"),
            "{\"id\": \"a\", \"task\": \"x\"}\n".into(),
            "t.yaml:13:6: `asserts`: unknown assertion type `contians`; did you mean `contains`?",
        ),
        (
            "a regex that does not compile, in a line",
            echo_tactic(&base, ""),
            "{\"id\": \"a\", \"task\": \"x\"}\n{\"id\": \"b\", \"task\": \"x\", \"asserts\": [{\"type\": \"regex\", \"value\": \"(\"}]}\n".into(),
            "tasks.jsonl:2: `asserts[0].value`: `value` is not a regular expression that compiles: unclosed group",
        ),
        (
            "a schema that is not a schema",
            echo_tactic(&base, "asserts:\n  - type: is-json\n    value: {type: 12}\n"),
            "{\"id\": \"a\", \"task\": \"x\"}\n".into(),
            "t.yaml:14:5: `asserts`: `value` is not a valid JSON Schema",
        ),
        (
            "a judge without the verdict's output",
            echo_tactic(&base, "asserts:\n  - {type: llm-rubric, value: good?, judge: plain.yaml}\n"),
            "{\"id\": \"a\", \"task\": \"x\"}\n".into(),
            "`asserts`: judge `plain.yaml`: a judge tactic must declare its verdict",
        ),
        (
            "a threshold past 1 on a line",
            echo_tactic(&base, ""),
            "{\"id\": \"a\", \"task\": \"x\", \"threshold\": 2}\n".into(),
            "tasks.jsonl:1: `threshold` is the score, from 0 to 1, at which the task passes",
        ),
    ];
    for (what, tactic, lines, words) in cases {
        let test = Test::new()
            .file("t.yaml", &tactic)
            .file(
                "plain.yaml",
                "global: {model_name: mock/echo}\nagent_configs: [{name: a}]\n",
            )
            .file("tasks.jsonl", &lines);
        let output = test.batch("t.yaml", "out", &[]);
        output.expect_code(2);
        assert!(output.stderr.contains(words), "{what}:\n{}", output.stderr);
        assert!(!output.stderr.contains("panicked"), "{what}");
    }
    assert_eq!(server.requests().len(), 0, "nothing was sent");
}

/// The shipped example, as a CI job runs it: offline, gated.
#[test]
fn the_shipped_example_scores_offline_and_gates() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let test = Test::new();
    let tasks = format!("{root}/examples/evals/reviews.jsonl");
    let tactic = format!("{root}/examples/evals/sentiment.yaml");
    let output = test.run(&[
        "batch",
        &tasks,
        "-t",
        &tactic,
        "-o",
        "out",
        "--fail-under",
        "0.7",
    ]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("pass rate  75.0% (27 of 36 scored passed) · at or above --fail-under 0.7"),
        "{}",
        output.stderr
    );
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["scores"]["scored"], 36);
    let mut failing: Vec<&str> = summary["scores"]["failing_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    failing.sort();
    assert_eq!(
        failing,
        [
            "r13", "r14", "r21", "r22", "r24", "r28", "r29", "r34", "r36"
        ]
    );
    // Every task was judged, offline, and the judge agreed with the labels' form.
    let results = read_lines(&test, "out/results.jsonl");
    assert!(
        results
            .iter()
            .all(|line| line["scores"][2]["name"] == "judge" && line["scores"][2]["pass"] == true)
    );
    // Rescored with stricter assertions: below a higher floor.
    let strict = format!("{root}/examples/evals/strict.yaml");
    test.run(&["eval", "out", "--asserts", &strict, "--fail-under", "0.7"])
        .expect_code(3);
}

/// Shards scored apart, merged, then rescored as one output: the merged
/// summary keeps the scores, and `lllm eval` finds the tasks and the
/// tactic through the merged `batch.json`.
#[test]
fn merged_shards_keep_their_scores_and_rescore() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let lines: String = (0..12)
        .map(|i| {
            let task = if i % 3 == 0 { "no" } else { "yes" };
            json!({"id": format!("t{i}"), "task": task, "expected": "yes"}).to_string() + "\n"
        })
        .collect();
    let test = test
        .file("t.yaml", &echo_tactic(&server.base_url(), ""))
        .file("tasks.jsonl", &lines);
    for shard in ["1/2", "2/2"] {
        let out = format!("s{}", &shard[..1]);
        test.batch("t.yaml", &out, &["--shard", shard])
            .expect_code(0);
    }
    test.run(&["merge", "s1", "s2", "-o", "merged", "-q"])
        .expect_code(0);
    let scores = &test.read_json("merged/summary.json")["scores"];
    assert_eq!(
        (scores["scored"].clone(), scores["passed"].clone()),
        (json!(12), json!(8))
    );
    let sent = server.requests().len();
    let output = test.run(&["eval", "merged", "--fail-under", "0.9"]);
    output.expect_code(3);
    assert!(
        output
            .stderr
            .contains("pass rate  66.7% (8 of 12 scored passed)"),
        "{}",
        output.stderr
    );
    assert_eq!(server.requests().len(), sent, "nothing was sent");
}

/// A grader's reason is scrubbed of the run's secrets, as records are.
#[test]
fn a_grader_cannot_leak_the_key_into_results() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO_SCRIPT);
    let judge_server = MockServer::start(
        test.dir.path(),
        "default: {text: '{\"score\": 0, \"pass\": false, \"reason\": \"the key is sk-test-secret-key-0123456789\"}'}\n",
    );
    let tactic = echo_tactic(&server.base_url(), "").replace(
        "{api: openai, base_url:",
        "{api: openai, api_key_env: TEST_KEY, base_url:",
    );
    let judge = judge_tactic(&judge_server.base_url()).replace(
        "{api: openai, base_url:",
        "{api: openai, api_key_env: TEST_KEY, base_url:",
    );
    let test = test
        .file("t.yaml", &tactic)
        .file("judge.yaml", &judge)
        .file(
            "tasks.jsonl",
            &(json!({"id": "a", "task": "x", "asserts": [{"type": "llm-rubric", "value": "ok?", "judge": "judge.yaml"}]})
                .to_string()
                + "\n"),
        )
        .env("TEST_KEY", "sk-test-secret-key-0123456789");
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let text = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert!(!text.contains("sk-test-secret-key-0123456789"), "{text}");
    assert!(text.contains("the key is"), "{text}");
}
