//! `lllm batch --via batch-api` against the Batch API emulation of the real
//! `lllm-mock` on 127.0.0.1, for OpenAI and for Anthropic: a three-round
//! tool-using tactic over 50 tasks, killed (SIGKILL) twice while a provider
//! batch is in flight and resumed, ends with the results, records and
//! deliveries of a direct run, at half its cost, and the mock's log shows
//! every request submitted and run exactly once.
//!
//! Nothing here waits on time: the mock keeps a batch in progress for one
//! retrieval (`--batch-polls 1`), the killed runs retrieve a batch once and
//! then wait an hour (`--poll-interval 3600`), and the test kills them when
//! the mock's log shows that retrieval.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{MockServer, Test};
use serde_json::{Value, json};

const TASKS: usize = 50;

/// Round 1 asks for tool `step_a`, round 2 (after its result) for `step_b`,
/// round 3 answers with the last tool result.
const SCRIPT: &str = r#"
rules:
  - when: {last_role: tool, contains: "B-DONE"}
    reply: {echo: true, usage: {prompt_tokens: 300, completion_tokens: 30}}
  - when: {last_role: tool, contains: "A-DONE"}
    reply: {tool_calls: [{name: step_b, arguments: {}}], usage: {prompt_tokens: 200, completion_tokens: 20}}
  - when: {last_role: user}
    reply: {tool_calls: [{name: step_a, arguments: {}}], usage: {prompt_tokens: 100, completion_tokens: 10}}
"#;

/// The tactic, for provider `provider` (its YAML entry).
fn tactic(provider: &str) -> String {
    format!(
        r#"tactic_type: rounds
global:
  model_name: remote/metered
  max_llm_recall: 2
agent_configs:
  - name: assistant
    system_prompt: "Run step_a, then step_b, then report."
    tools: [step_a, step_b]
providers:
  remote: {provider}
tools:
  - name: step_a
    description: The first step
    parameters: {{type: object, properties: {{}}}}
    command: [echo, A-DONE]
  - name: step_b
    description: The second step
    parameters: {{type: object, properties: {{}}}}
    command: [echo, B-DONE]
pricing:
  metered: {{input_per_million: 100.0, output_per_million: 100.0}}
"#
    )
}

fn tasks() -> String {
    (0..TASKS)
        .map(|i| {
            json!({"id": format!("t{i:02}"), "task": format!("Task number {i}")}).to_string() + "\n"
        })
        .collect()
}

fn results(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    let text =
        std::fs::read_to_string(test.path(&format!("{dir}/results.jsonl"))).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a result line"))
        .map(|line| (line["id"].as_str().unwrap().to_string(), line))
        .collect()
}

fn sessions(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(test.path(&format!("{dir}/sessions.jsonl"))).unwrap();
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record line"))
        .map(|line| (line["task_id"].as_str().unwrap().to_string(), line))
        .collect()
}

/// The ids of the batches the mock's log shows retrieved (a `GET` of the batch).
fn retrieved(server: &MockServer, prefix: &str) -> BTreeSet<String> {
    server
        .requests()
        .into_iter()
        .filter(|entry| entry["method"] == "GET")
        .filter_map(|entry| {
            let path = entry["path"].as_str()?.strip_prefix(prefix)?.to_string();
            (!path.contains('/') && !path.is_empty()).then_some(path)
        })
        .collect()
}

/// Runs `lllm` with `args` and SIGKILLs it once the mock's log shows
/// `batches` batches retrieved (the run then waits an hour to poll again).
fn kill_after_retrievals(
    test: &Test,
    server: &MockServer,
    prefix: &str,
    batches: usize,
    args: &[&str],
) {
    let mut child = test.spawn(args);
    let started = Instant::now();
    while retrieved(server, prefix).len() < batches {
        if let Some(status) = child.try_wait().expect("poll lllm") {
            let output = child.wait_with_output().expect("lllm output");
            panic!(
                "lllm ended ({status}) before batch {batches} was retrieved:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no batch {batches} retrieved after two minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL lllm");
    child.wait().expect("reap lllm");
}

/// The whole scenario for one provider: `provider` is its tactic entry,
/// `prefix` the path its batches are retrieved at.
fn rounds_survive_kills(provider: &str, prefix: &str, env: &[(&str, &str)]) {
    let test = Test::new();
    let server = MockServer::start_with(test.dir.path(), SCRIPT, &["--batch-polls", "1"]);
    let provider = provider.replace("{url}", &server.url);
    let mut test = test
        .file("t.yaml", &tactic(&provider))
        .file("tasks.jsonl", &tasks());
    for (key, value) in env {
        test = test.env(key, value);
    }

    // The direct run: what the batched one must give.
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "direct",
        "-q",
    ])
    .expect_code(0);
    let direct_requests = server.requests().len();

    let via = |poll: &'static str| -> Vec<&'static str> {
        vec![
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "via",
            "-q",
            "--via",
            "batch-api",
            "--poll-interval",
            poll,
            "--poll-max",
            poll,
        ]
    };
    // Killed while round 1 is in flight.
    kill_after_retrievals(&test, &server, prefix, 1, &via("3600"));
    assert!(
        results(&test, "via").is_empty(),
        "no task can have finished"
    );
    // Resumed, and killed while round 2 is in flight.
    let mut resumed = via("3600");
    resumed.push("--resume");
    kill_after_retrievals(&test, &server, prefix, 2, &resumed);
    assert!(
        results(&test, "via").is_empty(),
        "no task can have finished"
    );
    // Resumed to the end.
    let mut last = via("0.01");
    last.push("--resume");
    let output = test.run(&last);
    output.expect_code(0);

    // Nothing submitted twice, nothing run twice, nothing lost.
    let log = server.requests();
    let mut submitted = Vec::new();
    for entry in &log[direct_requests..] {
        if let Some(custom_ids) = entry.get("custom_ids").and_then(Value::as_array) {
            submitted.extend(custom_ids.iter().map(|id| id.as_str().unwrap().to_string()));
        }
    }
    let unique: BTreeSet<&String> = submitted.iter().collect();
    assert_eq!(unique.len(), submitted.len(), "a custom_id submitted twice");
    assert_eq!(
        submitted.len(),
        3 * TASKS,
        "three calls per task, each submitted once"
    );
    let ran: Vec<&Value> = log
        .iter()
        .filter(|entry| entry.get("custom_id").is_some())
        .collect();
    assert_eq!(ran.len(), 3 * TASKS, "each submitted request ran once");
    let bodies: BTreeSet<String> = ran.iter().map(|entry| entry["body"].to_string()).collect();
    assert_eq!(
        bodies.len(),
        3 * TASKS,
        "no request body was submitted twice"
    );
    let batches: BTreeSet<&str> = ran
        .iter()
        .map(|entry| entry["batch"].as_str().unwrap())
        .collect();
    assert_eq!(batches.len(), 3, "one provider batch per round");

    // Results and records as the direct run's, at half the price.
    let (direct, via) = (results(&test, "direct"), results(&test, "via"));
    assert_eq!(direct.len(), TASKS);
    assert_eq!(via.len(), TASKS);
    for (id, expected) in &direct {
        let got = &via[id];
        assert_eq!(got["state"], "success", "{got}");
        assert_eq!(got["delivery"], expected["delivery"], "task {id}");
        assert_eq!(got["calls"], expected["calls"], "task {id}");
        assert_eq!(got["usage"], expected["usage"], "task {id}");
        let (paid, full) = (
            got["cost"].as_f64().unwrap(),
            expected["cost"].as_f64().unwrap(),
        );
        assert!(
            (paid - full / 2.0).abs() < 1e-12,
            "task {id}: {paid} is not half of {full}"
        );
    }
    let (direct_records, via_records) = (sessions(&test, "direct"), sessions(&test, "via"));
    for (id, expected) in &direct_records {
        let got = &via_records[id];
        let invokes = |record: &Value| -> Vec<(Value, Value)> {
            record["agent_calls"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|call| call["invokes"].as_array().unwrap().clone())
                .map(|invoke| {
                    (
                        invoke["response"]["content"].clone(),
                        invoke["error"].clone(),
                    )
                })
                .collect()
        };
        assert_eq!(invokes(got), invokes(expected), "task {id}");
        assert_eq!(got["delivery"], expected["delivery"]);
    }
    let summary = |dir: &str| test.read_json(&format!("{dir}/summary.json"));
    let (paid, full) = (
        summary("via")["cost"].as_f64().unwrap(),
        summary("direct")["cost"].as_f64().unwrap(),
    );
    assert!(full > 0.0);
    assert!(
        (paid - full / 2.0).abs() < 1e-9,
        "{paid} is not half of {full}"
    );
    // The journal tells the three rounds.
    let journal = std::fs::read_to_string(test.path("via/batch-api.jsonl")).unwrap();
    let kinds: Vec<String> = journal
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("submission"), 3, "{journal}");
    assert_eq!(count("batch"), 3);
    assert_eq!(count("ended"), 3);
    assert_eq!(count("answer"), 3 * TASKS);
}

#[test]
fn three_rounds_through_the_openai_batch_api_survive_kills() {
    rounds_survive_kills(
        r#"{api: openai, base_url: "{url}/v1"}"#,
        "/v1/batches/",
        &[],
    );
}

#[test]
fn three_rounds_through_anthropic_message_batches_survive_kills() {
    rounds_survive_kills(
        r#"{api: anthropic, base_url: "{url}", api_key_env: MOCK_KEY}"#,
        "/v1/messages/batches/",
        &[("MOCK_KEY", "sk-ant-test-key")],
    );
}
