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
    // No key reaches a file or a message.
    for (_, key) in env {
        for file in [
            "batch-api.jsonl",
            "results.jsonl",
            "sessions.jsonl",
            "summary.json",
        ] {
            let text = std::fs::read_to_string(test.path(&format!("via/{file}"))).unwrap();
            assert!(!text.contains(key), "the key is in {file}");
        }
        assert!(!output.stderr.contains(key));
    }
}

#[test]
fn three_rounds_through_the_openai_batch_api_survive_kills() {
    rounds_survive_kills(
        r#"{api: openai, base_url: "{url}/v1", api_key_env: MOCK_KEY}"#,
        "/v1/batches/",
        &[("MOCK_KEY", "sk-openai-test-key-9931")],
    );
}

#[test]
fn three_rounds_through_anthropic_message_batches_survive_kills() {
    rounds_survive_kills(
        r#"{api: anthropic, base_url: "{url}", api_key_env: MOCK_KEY}"#,
        "/v1/messages/batches/",
        &[("MOCK_KEY", "sk-ant-test-key-4417")],
    );
}

/// A started mock with the script and flags, and a test directory holding
/// the tactic (OpenAI) and `count` tasks.
fn openai_setup(script: &str, flags: &[&str], count: usize) -> (Test, MockServer) {
    let test = Test::new();
    let server = MockServer::start_with(test.dir.path(), script, flags);
    let provider = format!(r#"{{api: openai, base_url: "{}/v1"}}"#, server.url);
    let tasks: String = (0..count)
        .map(|i| {
            json!({"id": format!("t{i:02}"), "task": format!("Task number {i}")}).to_string() + "\n"
        })
        .collect();
    let test = test
        .file("t.yaml", &tactic(&provider))
        .file("tasks.jsonl", &tasks);
    (test, server)
}

/// `lllm batch … --via batch-api` into `out`, polling every 10 ms.
fn batched(extra: &[&str]) -> Vec<String> {
    polling("0.01", extra)
}

/// `lllm batch … --via batch-api` into `out`, polling every `poll` seconds.
fn polling(poll: &str, extra: &[&str]) -> Vec<String> {
    let flags = [
        "--via",
        "batch-api",
        "--poll-interval",
        poll,
        "--poll-max",
        poll,
    ];
    [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
    ]
    .iter()
    .chain(flags.iter())
    .chain(extra.iter())
    .map(|arg| arg.to_string())
    .collect()
}

fn arguments(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}

/// The errors of a record's invokes, in order (`null` for a success).
fn invoke_errors(record: &Value) -> Vec<Value> {
    record["agent_calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|call| call["invokes"].as_array().unwrap().clone())
        .map(|invoke| invoke["error"].clone())
        .collect()
}

#[test]
fn a_failed_request_fails_its_call_and_is_retried_in_the_next_round() {
    // Task 7's first call errs once (a 500: retried in round 2); task 9's
    // is refused (a 400: never retried, the task fails).
    let script = format!(
        "rules:\n  - when: {{contains: \"Task number 7\"}}\n    reply: {{fault: {{status: 500}}}}\n    times: 1\n  - when: {{contains: \"Task number 9\"}}\n    reply: {{fault: {{status: 400, message: refused}}}}\n{}",
        SCRIPT.trim_start().trim_start_matches("rules:\n")
    );
    let (test, server) = openai_setup(&script, &[], 10);
    let output = test.run(&arguments(&batched(&[])));
    output.expect_code(1);
    let results = results(&test, "out");
    for (id, result) in &results {
        match id.as_str() {
            "t09" => {
                assert_eq!(result["state"], "failure", "{result}");
                assert!(
                    result["error"].as_str().unwrap().contains("refused"),
                    "{result}"
                );
            }
            _ => assert_eq!(result["state"], "success", "{result}"),
        }
    }
    let records = sessions(&test, "out");
    let errors = invoke_errors(&records["t07"]);
    assert_eq!(errors.len(), 4, "one failed attempt, then three rounds");
    assert_eq!(errors[0]["status"], 500, "{errors:?}");
    assert!(errors[1..].iter().all(Value::is_null), "{errors:?}");
    assert_eq!(
        invoke_errors(&records["t09"]).len(),
        1,
        "a 400 is not retried"
    );
    let ran: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|entry| entry.get("custom_id").is_some())
        .collect();
    assert_eq!(ran.len(), 8 * 3 + 4 + 1);
    let batches: BTreeSet<String> = ran.iter().map(|entry| entry["batch"].to_string()).collect();
    assert_eq!(batches.len(), 4, "task 7 takes a round more");
}

#[test]
fn expired_requests_fail_their_calls_until_the_retries_run_out() {
    let (test, server) = openai_setup(SCRIPT, &["--batch-expire", "1"], 4);
    let output = test.run(&arguments(&batched(&[])));
    output.expect_code(1);
    let results = results(&test, "out");
    assert_eq!(results.len(), 4);
    let records = sessions(&test, "out");
    for (id, result) in &results {
        assert_eq!(result["state"], "failure", "{result}");
        assert!(
            result["error"].as_str().unwrap().contains("expired"),
            "{result}"
        );
        let errors = invoke_errors(&records[id]);
        assert!(
            errors.len() > 1,
            "an expired request is retried: {errors:?}"
        );
        assert!(
            errors.iter().all(|error| error["code"] == "batch_expired"),
            "{errors:?}"
        );
    }
    let created: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|entry| entry.get("custom_ids").is_some())
        .collect();
    let attempts = invoke_errors(&records["t00"]).len();
    assert_eq!(created.len(), attempts, "one round per attempt");
    assert!(
        created
            .iter()
            .all(|entry| entry["custom_ids"].as_array().unwrap().len() == 4)
    );
}

fn interrupt(cancel: bool) {
    let (test, server) = openai_setup(SCRIPT, &["--batch-polls", "1"], 5);
    let mut first = polling("3600", &["--grace", "0"]);
    if cancel {
        first.push("--cancel-on-interrupt".into());
    }
    let child = test.spawn(&arguments(&first));
    let started = Instant::now();
    while retrieved(&server, "/v1/batches/").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no batch retrieved"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = common::Output::of(child.wait_with_output().unwrap());
    output.expect_code(130);
    let cancels = server
        .requests()
        .into_iter()
        .filter(|entry| {
            entry["path"]
                .as_str()
                .unwrap_or_default()
                .ends_with("/cancel")
        })
        .count();
    assert_eq!(cancels, usize::from(cancel), "{}", output.stderr);
    let journal = std::fs::read_to_string(test.path("out/batch-api.jsonl")).unwrap();
    assert_eq!(
        journal.contains("\"type\":\"cancelled\""),
        cancel,
        "{journal}"
    );

    test.run(&arguments(&batched(&["--resume"]))).expect_code(0);
    let results = results(&test, "out");
    assert!(results.values().all(|result| result["state"] == "success"));
    let log = server.requests();
    let submitted: usize = log
        .iter()
        .filter_map(|entry| entry.get("custom_ids").and_then(Value::as_array))
        .map(Vec::len)
        .sum();
    let ran = log
        .iter()
        .filter(|entry| entry.get("custom_id").is_some())
        .count();
    assert_eq!(ran, 15, "every call ran once");
    // A cancelled batch's requests are submitted again; a batch left running is polled again.
    assert_eq!(submitted, if cancel { 20 } else { 15 });
}

#[test]
fn ctrl_c_leaves_the_provider_batch_running_for_resume() {
    interrupt(false);
}

#[test]
fn ctrl_c_with_cancel_on_interrupt_cancels_the_provider_batch() {
    interrupt(true);
}

#[test]
fn a_journal_without_resume_is_refused_and_cancel_needs_the_batch_api() {
    let (test, _server) = openai_setup(SCRIPT, &[], 2);
    let test = test.file(
        "out/batch-api.jsonl",
        "{\"type\":\"ended\",\"submission\":\"s\",\"state\":\"completed\"}\n",
    );
    let output = test.run(&arguments(&batched(&[])));
    output.expect_code(2);
    assert!(
        output.stderr.contains("batch-api.jsonl") && output.stderr.contains("--resume"),
        "{}",
        output.stderr
    );
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "other",
        "--cancel-on-interrupt",
    ]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains("--via batch-api"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_responses_api_tactic_goes_to_a_responses_batch_and_delivers_as_directly() {
    let (test, server) = openai_setup(SCRIPT, &[], 5);
    let tactic = std::fs::read_to_string(test.path("t.yaml")).unwrap();
    let tactic = tactic.replace(
        "  max_llm_recall: 2\n",
        "  max_llm_recall: 2\n  api_type: response\n",
    );
    let test = test.file("t.yaml", &tactic);
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
    test.run(&arguments(&batched(&[]))).expect_code(0);
    let (direct, via) = (results(&test, "direct"), results(&test, "out"));
    assert_eq!(via.len(), 5);
    for (id, expected) in &direct {
        assert_eq!(via[id]["delivery"], expected["delivery"], "task {id}");
        assert_eq!(via[id]["calls"], 3);
    }
    let endpoints: BTreeSet<String> = server
        .requests()
        .into_iter()
        .filter(|entry| entry["path"] == "/v1/batches" && entry["method"] == "POST")
        .map(|entry| entry["body"]["endpoint"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(endpoints, BTreeSet::from(["/v1/responses".to_string()]));
}

#[test]
fn a_base_url_s_query_goes_with_every_batch_api_request() {
    // Azure OpenAI takes its API version in the query: the files and batch
    // requests went to `{url}?api-version=…/files` (the path `/v1`).
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), SCRIPT);
    let provider = format!(
        r#"{{api: openai, base_url: "{}/v1?api-version=2024-06-01"}}"#,
        server.url
    );
    let tasks: String = (0..3)
        .map(|i| {
            json!({"id": format!("t{i}"), "task": format!("Task number {i}")}).to_string() + "\n"
        })
        .collect();
    let test = test
        .file("t.yaml", &tactic(&provider))
        .file("tasks.jsonl", &tasks);
    test.run(&arguments(&batched(&[]))).expect_code(0);
    assert_eq!(results(&test, "out").len(), 3);
    // The client's own requests (a batch's runs are logged with their `custom_id`).
    let sent: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|entry| entry.get("custom_id").is_none())
        .collect();
    let paths: BTreeSet<String> = sent
        .iter()
        .map(|entry| {
            let path = entry["path"].as_str().unwrap();
            // Ids made generic: `/v1/batches/batch_…` is `/v1/batches/ID`.
            let parts: Vec<&str> = path
                .split('/')
                .map(|part| {
                    if part.contains('_') || part.contains('-') {
                        "ID"
                    } else {
                        part
                    }
                })
                .collect();
            format!("{} {}", entry["method"].as_str().unwrap(), parts.join("/"))
        })
        .collect();
    for expected in [
        "POST /v1/files",
        "POST /v1/batches",
        "GET /v1/batches/ID",
        "GET /v1/files/ID/content",
    ] {
        assert!(paths.contains(expected), "{expected} in {paths:?}");
    }
    for entry in &sent {
        assert_eq!(entry["query"], "api-version=2024-06-01", "{entry}");
    }
}

/// Batches someone else creates at the mock through its HTTP API: `count`
/// of them, each of one request, newer than any lllm made before.
fn create_others(server: &MockServer, anthropic: bool, count: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let expect_ok = |response: reqwest::Response| async move {
            let status = response.status();
            let body = response.text().await.unwrap();
            assert!(status.is_success(), "{status}: {body}");
            serde_json::from_str::<Value>(&body).unwrap()
        };
        if anthropic {
            for i in 0..count {
                let body = json!({"requests": [{"custom_id": format!("other-{i}"),
                    "params": {"model": "metered", "max_tokens": 10,
                               "messages": [{"role": "user", "content": "hi"}]}}]});
                let response = client
                    .post(format!("{}/v1/messages/batches", server.url))
                    .header("x-api-key", "someone-else")
                    .header("anthropic-version", "2023-06-01")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                expect_ok(response).await;
            }
            return;
        }
        let boundary = "other-boundary";
        let line = json!({"custom_id": "other-0", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "metered", "messages": [{"role": "user", "content": "hi"}]}});
        let upload = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"other.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n{line}\n\r\n--{boundary}--\r\n"
        );
        let response = client
            .post(format!("{}/v1/files", server.url))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(upload)
            .send()
            .await
            .unwrap();
        let file = expect_ok(response).await;
        for _ in 0..count {
            let response = client
                .post(format!("{}/v1/batches", server.url))
                .json(&json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                              "completion_window": "24h"}))
                .send()
                .await
                .unwrap();
            expect_ok(response).await;
        }
    });
}

/// Issue 26: a batch created just before a kill, whose id never reached the
/// journal, is found by `--resume` however many batches were created since
/// (here 120, more than one page of the list): the list is read page by
/// page. The mock's log shows it created exactly once, and every task is
/// answered by it.
fn a_lost_batch_is_found_beyond_the_first_page(provider: &str, prefix: &str, anthropic: bool) {
    let test = Test::new();
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {echo: true}\n",
        &["--batch-polls", "1"],
    );
    let tactic = format!(
        r#"tactic_type: plain
global: {{model_name: remote/metered, max_llm_recall: 0}}
agent_configs: [{{name: assistant, system_prompt: "Repeat the task."}}]
providers:
  remote: {}
"#,
        provider.replace("{url}", &server.url)
    );
    let tasks: String = (0..3)
        .map(|i| json!({"id": format!("t{i}"), "task": format!("task {i}")}).to_string() + "\n")
        .collect();
    let test = test
        .file("t.yaml", &tactic)
        .file("tasks.jsonl", &tasks)
        .env("MOCK_KEY", "sk-test-key-5150");
    let creations = || {
        server
            .requests()
            .iter()
            .filter(|entry| {
                entry["method"] == "POST" && entry["path"] == prefix.trim_end_matches('/')
            })
            .count()
    };
    let mut args = polling("3600", &[]);
    kill_after_retrievals(&test, &server, prefix, 1, &arguments(&args));
    assert_eq!(creations(), 1);
    // The kill came between the batch's creation and its journal line.
    let journal_path = test.path("out/batch-api.jsonl");
    let journal = std::fs::read_to_string(&journal_path).unwrap();
    let cut: String = journal
        .lines()
        .filter(|line| !line.contains(r#""type":"batch""#))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(
        cut.lines().count() + 1,
        journal.lines().count(),
        "{journal}"
    );
    std::fs::write(&journal_path, cut).unwrap();
    create_others(&server, anthropic, 120);
    assert_eq!(creations(), 121);

    args = polling("0.01", &["--resume"]);
    let output = test.run(&arguments(&args));
    output.expect_code(0);
    assert_eq!(creations(), 121, "the lost batch was created again");
    let results = results(&test, "out");
    assert_eq!(results.len(), 3);
    for (id, line) in &results {
        assert_eq!(line["state"], "success", "{id}: {line}");
        assert_eq!(line["delivery"], format!("task {}", &id[1..]));
    }
    // More than one page of the list was read.
    let pages = server
        .requests()
        .iter()
        .filter(|entry| entry["method"] == "GET" && entry["path"] == prefix.trim_end_matches('/'))
        .count();
    assert!(pages >= 2, "{pages} pages");
}

#[test]
fn a_lost_openai_batch_is_found_beyond_the_first_page() {
    a_lost_batch_is_found_beyond_the_first_page(
        r#"{api: openai, base_url: "{url}/v1", api_key_env: MOCK_KEY}"#,
        "/v1/batches/",
        false,
    );
}

#[test]
fn a_lost_anthropic_batch_is_found_beyond_the_first_page() {
    a_lost_batch_is_found_beyond_the_first_page(
        r#"{api: anthropic, base_url: "{url}", api_key_env: MOCK_KEY}"#,
        "/v1/messages/batches/",
        true,
    );
}

/// Issue 26: a batch in a state lllm does not know is not polled forever.
/// The mock reports every batch in progress as `paused` and created two
/// days ago: past its 24-hour window and the hour after, its calls fail
/// with the reason at the first retrieval, and the run ends.
#[test]
fn a_batch_in_a_state_lllm_does_not_know_is_given_up_past_its_window() {
    for (provider, state) in [
        (r#"{api: openai, base_url: "{url}/v1"}"#, "paused"),
        (
            r#"{api: anthropic, base_url: "{url}", api_key_env: MOCK_KEY}"#,
            "archiving",
        ),
    ] {
        let test = Test::new();
        let server = MockServer::start_with(
            test.dir.path(),
            "default: {echo: true}\n",
            &[
                "--batch-polls",
                "1000000",
                "--batch-state",
                state,
                "--batch-age-s",
                "172800",
            ],
        );
        let tactic = format!(
            r#"tactic_type: plain
global: {{model_name: remote/metered, max_llm_recall: 3}}
agent_configs: [{{name: assistant, system_prompt: "Repeat the task."}}]
providers:
  remote: {}
"#,
            provider.replace("{url}", &server.url)
        );
        let test = test
            .file("t.yaml", &tactic)
            .file(
                "tasks.jsonl",
                "{\"id\": \"a\", \"task\": \"one\"}\n{\"id\": \"b\", \"task\": \"two\"}\n",
            )
            .env("MOCK_KEY", "sk-test-key-5150");
        let output = test.run(&arguments(&batched(&[])));
        output.expect_code(1);
        let results = results(&test, "out");
        assert_eq!(results.len(), 2, "{}", output.stderr);
        for line in results.values() {
            assert_eq!(line["state"], "failure", "{line}");
            let error = line["error"].as_str().unwrap();
            assert!(
                error.contains(&format!(
                    "is `{state}`, a state lllm does not know, 48 hours after its creation"
                )) && error.contains("past its 24-hour completion window"),
                "{error}"
            );
        }
        // Given up, not submitted again: a permanent error is not retried.
        let created = server
            .requests()
            .iter()
            .filter(|entry| entry["method"] == "POST" && entry.get("custom_ids").is_some())
            .count();
        assert_eq!(created, 1, "{state}");
    }
}
