//! `lllm batch --max-cost`: against `lllm-mock` replying with known usage at
//! known prices, the spend never crosses the budget — counted from the
//! results, from `summary.json`, and from what the server answered (the
//! bill) — with many tasks at once, each making several calls (a tool round,
//! retried 500s), and tasks of different costs.

mod common;

use std::collections::BTreeMap;

use common::{MockServer, Test};
use serde_json::{Value, json};

/// $100 per million tokens in and out: $0.0001 a token.
const PRICE: f64 = 100.0 / 1e6;

/// The first three calls of all fail with a 500 and are retried.
const FAULTS: &str = r#"
rules:
  - when: {last_role: user}
    reply: {fault: {status: 500}}
    times: 3
"#;

/// The first call of a task asks for the current time (a tool), the second
/// answers. Tasks with "long" in them get a longer first reply.
const SCRIPT: &str = r#"
  - when: {last_role: tool}
    reply: {text: "done", usage: {prompt_tokens: 80, completion_tokens: 20}}
  - when: {last_role: user, contains: "long"}
    reply: {tool_calls: [{name: current_time, arguments: {}}], usage: {prompt_tokens: 50, completion_tokens: 90}}
  - when: {last_role: user}
    reply: {tool_calls: [{name: current_time, arguments: {}}], usage: {prompt_tokens: 50, completion_tokens: 10}}
"#;

fn tactic(base_url: &str, model_args: &str) -> String {
    format!(
        r#"tactic_type: budget
global:
  model_name: local/metered
  model_args: {model_args}
  max_llm_recall: 3
agent_configs:
  - name: assistant
    system_prompt: "Answer with the time."
    tools: [current_time]
builtin_tools:
  current_time: null
providers:
  local: {{api: openai, base_url: "{base_url}", retry_base_ms: 1, retry_cap_ms: 5}}
pricing:
  metered: {{input_per_million: 100.0, output_per_million: 100.0}}
"#
    )
}

/// What the server's replies cost: the bill, from its request log.
fn billed(server: &MockServer) -> (f64, usize) {
    let mut total = 0.0;
    let mut answered = 0;
    for request in server.requests() {
        if request["status"] != 200 {
            continue;
        }
        answered += 1;
        let messages = request["body"]["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        let tokens = if last["role"] == "tool" {
            80 + 20
        } else if last["content"].as_str().unwrap().contains("long") {
            50 + 90
        } else {
            50 + 10
        };
        total += tokens as f64 * PRICE;
    }
    (total, answered)
}

fn results(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(test.path(&format!("{dir}/results.jsonl"))).unwrap();
    let mut by_id = BTreeMap::new();
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let id = line["id"].as_str().unwrap().to_string();
        assert!(by_id.insert(id.clone(), line).is_none(), "`{id}` twice");
    }
    by_id
}

#[test]
fn the_spend_never_crosses_the_budget_across_concurrent_multi_call_tasks() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), &format!("{FAULTS}{SCRIPT}"));
    let padding = "Please say what time it is, in words a child would understand. ".repeat(3);
    let tasks: String = (0..40)
        .map(|i| {
            let kind = if i % 3 == 1 { "long" } else { "short" };
            json!({"id": format!("t{i:02}"), "task": format!("{padding}({kind} answer {i})")})
                .to_string()
                + "\n"
        })
        .collect();
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), "{max_tokens: 100}"))
        .file("tasks.jsonl", &tasks);
    let budget = 0.2;
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "8",
        "--max-cost",
        "0.2",
        "-q",
    ]);
    output.expect_code(1);

    let results = results(&test, "out");
    assert_eq!(results.len(), 40, "every task has a result");
    let (mut success, mut skipped, mut spent) = (0, 0, 0.0);
    for (id, result) in &results {
        spent += result["cost"].as_f64().unwrap();
        match result["state"].as_str().unwrap() {
            "success" => success += 1,
            "skipped" => {
                skipped += 1;
                let error = result["error"].as_str().unwrap();
                assert!(error.contains("--max-cost budget reached"), "{id}: {error}");
            }
            other => panic!("{id}: {other}: {result}"),
        }
    }
    assert!(
        success >= 3 && skipped >= 1,
        "{success} success, {skipped} skipped"
    );
    let summary = test.read_json("out/summary.json");
    let summary_cost = summary["cost"].as_f64().unwrap();
    let (bill, answered) = billed(&server);
    assert!(bill <= budget, "billed ${bill} of ${budget}");
    assert!(
        spent <= budget && summary_cost <= budget,
        "{spent} {summary_cost}"
    );
    assert!(
        (bill - summary_cost).abs() < 1e-9,
        "{bill} vs {summary_cost}"
    );
    assert!((bill - spent).abs() < 1e-9, "{bill} vs {spent}");
    // Every answered call is in a result; the 500s were retried, not billed.
    let calls: u64 = results.values().map(|r| r["calls"].as_u64().unwrap()).sum();
    let failed = server
        .requests()
        .iter()
        .filter(|request| request["status"] == 500)
        .count();
    assert_eq!(failed, 3);
    assert_eq!(calls as usize, answered + failed);
    // The budget was used, not left idle: at least half of it.
    assert!(bill >= budget / 2.0, "only ${bill} of ${budget} spent");

    // `--resume` with the same budget counts what was spent: nothing more fits
    // a whole task... and whatever it runs keeps the total under the budget.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--resume",
        "--max-cost",
        "0.2",
        "-q",
    ]);
    output.expect_code(1);
    let (bill, _) = billed(&server);
    assert!(bill <= budget, "billed ${bill} of ${budget} after --resume");
}

#[test]
fn calls_that_cannot_be_bounded_are_refused_before_anything_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), &format!("rules:{SCRIPT}"));
    let base = tactic(&server.base_url(), "{max_tokens: 100}");
    let test = test
        .file("tasks.jsonl", "\"what time is it\"\n")
        // No price for the model.
        .file("unpriced.yaml", &base.replace("  metered: {", "  other: {"))
        // No bound on a reply: no max_tokens, no output limit in the table.
        .file(
            "unbounded.yaml",
            &tactic(&server.base_url(), "{temperature: 0}"),
        )
        // A sub-tactic whose model has no price: its calls pass the budget too.
        .file(
            "parent.yaml",
            "tactic_type: parent\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a}\n\
             flow:\n  - {step: inner, tactic: unpriced.yaml}\n",
        );
    for (tactic, expected) in [
        (
            "unpriced.yaml",
            "`--max-cost` needs a price for every model, and `local/metered` has none",
        ),
        (
            "unbounded.yaml",
            "`--max-cost` needs a bound on each reply, and `local/metered` has none",
        ),
        ("parent.yaml", "`local/metered` has none"),
    ] {
        let output = test.run(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            tactic,
            "-o",
            "out",
            "--max-cost",
            "1",
        ]);
        output.expect_code(2);
        assert!(
            output.stderr.contains(expected),
            "{tactic}: {}",
            output.stderr
        );
    }
    assert!(server.requests().is_empty(), "nothing was sent");
    // A bound in the price table is enough: `max_output_tokens`.
    let bounded = tactic(&server.base_url(), "{temperature: 0}").replace(
        "output_per_million: 100.0}",
        "output_per_million: 100.0, max_output_tokens: 100}",
    );
    let test = test.file("bounded.yaml", &bounded);
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "bounded.yaml",
        "-o",
        "ok",
        "--max-cost",
        "1",
        "-q",
    ]);
    output.expect_code(0);
}
