//! A batch during an outage (issue 27): its provider's circuit breaker
//! pauses the tasks after 5 connection failures in a row, probes with one
//! call, and resumes when the server answers again; past `--max-outage` the
//! batch gives up and leaves the rest `skipped`. The summary says why tasks
//! failed. Against `lllm-mock` killed mid-batch and started again on the
//! same port; nothing here waits on a clock: the test acts on the lines the
//! batch prints.

mod common;

use std::io::{BufRead, BufReader};

use common::{MockServer, Test, closed_port};
use serde_json::Value;

const TASKS: usize = 40;

/// A tactic whose provider `local` is at `port`; no retry, so a task fails
/// at its first connection failure unless the breaker holds it.
fn tactic(port: &str) -> String {
    format!(
        "tactic_type: t\nproviders:\n  local: {{api: openai, base_url: \"http://127.0.0.1:{port}/v1\"}}\n\
         global: {{model_name: local/m, max_llm_recall: 0}}\n\
         pricing:\n  local/m: {{input_per_million: 1, output_per_million: 1}}\n\
         agent_configs:\n  - {{name: a}}\n"
    )
}

fn tasks() -> String {
    (0..TASKS)
        .map(|index| format!("{{\"id\": \"t{index}\", \"task\": \"task {index}\"}}\n"))
        .collect()
}

/// Each result line of `out`, by id.
fn results(test: &Test, out: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(&format!("{out}/results.jsonl")))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The task texts a server was sent.
fn tasks_seen(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|request| request["path"] == "/v1/chat/completions")
        .filter_map(|request| {
            let messages = request["body"]["messages"].as_array()?;
            messages.last()?["content"].as_str().map(str::to_string)
        })
        .collect()
}

fn state_count(results: &[Value], state: &str) -> usize {
    results
        .iter()
        .filter(|result| result["state"] == state)
        .count()
}

#[test]
fn a_batch_pauses_while_its_server_is_down_and_resumes_when_it_answers() {
    let test = Test::new();
    let first = MockServer::start(test.dir.path(), "latency_ms: 20\ndefault: {echo: true}\n");
    let port = first.url.rsplit(':').next().unwrap().to_string();
    let test = test
        .file("t.yaml", &tactic(&port))
        .file("tasks.jsonl", &tasks());
    let mut batch = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "2",
        "--progress-interval",
        "0.05",
    ]);
    let stderr = BufReader::new(batch.stderr.take().unwrap());
    let mut first = Some(first);
    let mut second = None;
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        // Six tasks done: the server goes away in the middle of the batch.
        let done = line
            .strip_prefix("lllm batch: ")
            .and_then(|rest| rest.split('/').next())
            .and_then(|done| done.parse::<usize>().ok());
        if done.is_some_and(|done| done >= 6) && first.is_some() {
            drop(first.take());
        }
        // Paused: it comes back on the same port.
        if line.contains("pausing its new tasks") && second.is_none() {
            second = Some(MockServer::start_with(
                test.dir.path(),
                "default: {echo: true}\n",
                &["--port", &port],
            ));
        }
        lines.push(line);
    }
    let status = batch.wait().unwrap();
    let stderr = lines.join("\n");
    let second = second.unwrap_or_else(|| panic!("never paused:\n{stderr}"));
    assert!(
        stderr.contains(
            "lllm batch: `local` is down (5 connection failures in a row); pausing its new tasks, \
             next probe in 1.0 s"
        ),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains(" · paused: `local` is down (")),
        "the progress line says so:\n{stderr}"
    );
    assert!(
        stderr.contains("lllm batch: `local` answers again after "),
        "{stderr}"
    );

    let results = results(&test, "out");
    assert_eq!(results.len(), TASKS, "every task has its result");
    let failed = state_count(&results, "failure");
    // The five failures that opened the breaker and the one other task that
    // was in flight (-j 2): nothing started while the server was down but
    // the probe, which failed nothing.
    assert!(
        (5..=6).contains(&failed),
        "{failed} failed; without the pause every task after the kill would:\n{stderr}"
    );
    assert_eq!(state_count(&results, "success"), TASKS - failed);
    assert_eq!(state_count(&results, "skipped"), 0);
    for result in results.iter().filter(|result| result["state"] == "failure") {
        let error = result["error"].as_str().unwrap();
        assert!(
            error.contains("127.0.0.1") && error.contains(&port),
            "a connection failure: {error}"
        );
    }
    // The second server answered the tasks left, each once.
    let seen = tasks_seen(&second);
    assert!(!seen.is_empty());
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no task sent twice: {seen:?}");
    for task in &seen {
        let id = format!("t{}", task.trim_start_matches("task "));
        let result = results.iter().find(|result| result["id"] == id).unwrap();
        assert_eq!(result["state"], "success", "{id}");
    }

    // The summary says why, and which.
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["failure"], failed);
    assert_eq!(
        summary["failed_ids"].as_array().unwrap().len(),
        failed.min(10)
    );
    let reasons = summary["failure_reasons"].as_array().unwrap();
    let counted: u64 = reasons
        .iter()
        .map(|reason| reason["count"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, failed as u64);
    assert!(
        stderr.contains("\n  reasons    ") && stderr.contains("\n  failed ids "),
        "{stderr}"
    );
    assert_eq!(status.code(), Some(if failed > 0 { 1 } else { 0 }));

    // Left cleanly: `--retry-errors` runs the failed ones, and only them.
    let before = seen.len();
    test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "--retry-errors",
        "-q",
    ])
    .expect_code(0);
    assert_eq!(tasks_seen(&second).len(), before + failed);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], TASKS);
    assert_eq!(summary["failure_reasons"], serde_json::json!([]));
}

#[test]
fn a_server_down_past_max_outage_ends_the_batch_and_resume_runs_the_rest() {
    // A port nothing listens on: bound, then closed.
    let port = closed_port().to_string();
    let test = Test::new()
        .file("t.yaml", &tactic(&port))
        .file("tasks.jsonl", &tasks());
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "4",
        "--max-outage",
        "1",
    ]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("lllm batch: `local` has been down for 1.0 s (")
            && output.stderr.contains(
                "giving up on it: its waiting calls fail and no more tasks start (`--max-outage`)"
            ),
        "{}",
        output.stderr
    );
    let results = results(&test, "out");
    assert_eq!(results.len(), TASKS);
    let failed = state_count(&results, "failure");
    let skipped = state_count(&results, "skipped");
    // The five that opened the breaker, the others in flight (-j 4) and the
    // probe; every other task never started.
    assert!((5..=9).contains(&failed), "{failed}: {}", output.stderr);
    assert_eq!(skipped, TASKS - failed);
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        summary["stopped"],
        "a provider stayed unreachable past --max-outage"
    );
    for result in results.iter().filter(|result| result["state"] == "skipped") {
        assert_eq!(
            result["error"],
            "a provider stayed unreachable past --max-outage"
        );
    }
    assert!(
        output
            .stderr
            .contains("\n  stopped    a provider stayed unreachable past --max-outage\n"),
        "{}",
        output.stderr
    );

    // The server is back: `--resume` runs what was skipped.
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {echo: true}\n",
        &["--port", &port],
    );
    test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "--resume",
        "-q",
    ])
    .expect_code(1);
    assert_eq!(tasks_seen(&server).len(), skipped);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], skipped);
    assert_eq!(summary["failure"], failed);
}

#[test]
fn max_outage_is_checked_when_parsed() {
    let test = Test::new()
        .file("t.yaml", &tactic("9"))
        .file("tasks.jsonl", &tasks());
    for bad in ["0", "-1", "1e9", "nan"] {
        let output = test.run(&[
            "batch",
            "tasks.jsonl",
            "-t",
            "t.yaml",
            "-o",
            "out",
            "--max-outage",
            bad,
        ]);
        output.expect_code(2);
        assert!(
            output
                .stderr
                .contains("must be a number from 1 to 604800 (seconds)"),
            "{bad}: {}",
            output.stderr
        );
    }
}

#[test]
fn a_batch_says_its_latest_retry_on_the_progress_line_not_a_line_per_call() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 503, message: overloaded}\n  - fault: {status: 503, message: overloaded}\ndefault: {echo: true}\n",
    );
    let tactic = format!(
        "tactic_type: t\nproviders:\n  local: {{api: openai, base_url: \"{}\", retry_base_ms: 10}}\n\
         global: {{model_name: local/m}}\n\
         pricing:\n  local/m: {{input_per_million: 1, output_per_million: 1}}\n\
         agent_configs:\n  - {{name: a}}\n",
        server.base_url()
    );
    let test = test
        .file("t.yaml", &tactic)
        .file("tasks.jsonl", "\"one\"\n\"two\"\n");
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "--progress-interval",
        "3600",
    ]);
    output.expect_code(0);
    // The last progress line (the run's end, right after the retries).
    let last = output
        .stderr
        .lines()
        .rfind(|line| line.starts_with("lllm batch: 2/2 done"))
        .unwrap_or_else(|| panic!("{}", output.stderr));
    assert!(
        last.contains(" · retrying: local: HTTP 503: overloaded"),
        "{last}"
    );
    assert!(
        !output.stderr.contains("lllm: waiting"),
        "no line per retry in a batch:\n{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("  calls      4 (2 retries)"),
        "{}",
        output.stderr
    );
}

#[test]
fn errors_the_server_answers_with_pause_nothing() {
    // A server that refuses every request: it is up, so every task runs
    // (and fails on its own), and no provider is said to be down.
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {fault: {status: 400, message: refused}}\n",
    );
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let test = test
        .file("t.yaml", &tactic(&port))
        .file("tasks.jsonl", &tasks());
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "4",
    ]);
    output.expect_code(1);
    assert!(!output.stderr.contains("is down"), "{}", output.stderr);
    assert_eq!(tasks_seen(&server).len(), TASKS);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["failure"], TASKS);
    assert_eq!(summary["failure_reasons"][0]["count"], TASKS);
    assert!(
        summary["failure_reasons"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 400"),
        "{summary}"
    );
    // The first ten in the order their results came (-j 4: about file order).
    let ids = summary["failed_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 10);
    let mut unique: Vec<&str> = ids.iter().map(|id| id.as_str().unwrap()).collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 10, "{ids:?}");
}
