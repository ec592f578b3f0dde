//! `lllm batch` end to end: the real binary against `lllm-mock` on 127.0.0.1
//! (or the in-process `mock/echo`), checking the output directory, exit codes,
//! stderr and what reached the server. No timing assertions: latencies only
//! make runs long enough to be killed or interrupted in the middle.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{MockServer, Test};
use serde_json::{Value, json};

/// A one-agent tactic on an OpenAI-compatible mock server, priced at $1 per
/// million input tokens and $2 per million output tokens.
/// A mock script that echoes `count` requests and holds every later one
/// (no answer until the client gives up), so a test can stop a run in its
/// middle without racing it.
fn answers_then_hold(count: usize) -> String {
    format!(
        "replies:\n{}default: {{fault: timeout}}\n",
        "  - {echo: true}\n".repeat(count)
    )
}

fn tactic(base_url: &str) -> String {
    format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 0
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: openai, base_url: "{base_url}", retry_base_ms: 10, retry_cap_ms: 50}}
pricing:
  test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
"#
    )
}

const ECHO_TACTIC: &str = "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\n";

/// `count` task lines `{"id": "t<i>", "task": "<prefix(i)>task <i>"}`.
fn task_lines(count: usize, prefix: impl Fn(usize) -> &'static str) -> String {
    (0..count)
        .map(|i| {
            json!({"id": format!("t{i}"), "task": format!("{}task {i}", prefix(i))}).to_string()
                + "\n"
        })
        .collect()
}

fn read_lines(test: &Test, relative: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(relative))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is JSON"))
        .collect()
}

/// Result lines by id (asserting each id appears once).
fn results_once(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    let mut by_id = BTreeMap::new();
    for line in read_lines(test, &format!("{dir}/results.jsonl")) {
        let id = line["id"].as_str().unwrap().to_string();
        assert!(by_id.insert(id.clone(), line).is_none(), "`{id}` twice");
    }
    by_id
}

fn states(results: &BTreeMap<String, Value>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in results.values() {
        *counts
            .entry(line["state"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    counts
}

#[test]
fn every_task_gets_one_result_and_one_record_whatever_the_order() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "latency_ms: {min: 1, max: 30}\ndefault: {echo: true}\n",
    );
    let mut tasks = task_lines(40, |_| "");
    // A line with its own tactic, relative to the TASKS file's directory.
    tasks.push_str("{\"id\": \"own\", \"task\": \"mine\", \"tactic\": \"echo.yaml\"}\n");
    tasks.push_str("\"a bare string\"\n\n");
    // The `--tactic` file named from the TASKS directory: the same tactic.
    tasks.push_str("{\"id\": \"same\", \"task\": \"hi\", \"tactic\": \"../t.yaml\"}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("in/echo.yaml", ECHO_TACTIC)
        .file("in/tasks.jsonl", &tasks);
    let output = test.run(&[
        "batch",
        "in/tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "8",
    ]);
    output.expect_code(0);

    let results = results_once(&test, "out");
    assert_eq!(results.len(), 43);
    for i in 0..40 {
        let line = &results[&format!("t{i}")];
        assert_eq!(line["state"], "success");
        assert_eq!(line["delivery"], format!("task {i}"));
        assert_eq!(line["calls"], 1);
        assert!(line["cost"].as_f64().unwrap() > 0.0);
        assert!(line["session_id"].is_string());
    }
    assert_eq!(results["own"]["delivery"], "mine");
    assert_eq!(results["line-42"]["delivery"], "a bare string");
    assert_eq!(results["same"]["delivery"], "hi");

    let records = read_lines(&test, "out/sessions.jsonl");
    assert_eq!(records.len(), 43);
    let record_ids: BTreeSet<&str> = records
        .iter()
        .map(|record| record["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(record_ids, results.keys().map(String::as_str).collect());
    assert!(
        records
            .iter()
            .all(|record| record["format"] == "lllm.session/3")
    );
    // The bare string and `same` too; the `own` line's tactic runs in-process.
    assert_eq!(server.requests().len(), 42);

    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["format"], "lllm.batch-summary/1");
    assert_eq!(
        (summary["total"].as_u64(), summary["success"].as_u64()),
        (Some(43), Some(43))
    );
    assert_eq!(summary["calls"], 43);
    assert_eq!(summary["cost_known"], true);
    // The run's own totals are the directory's: the same as counting the file.
    let tokens: u64 = results
        .values()
        .map(|line| line["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let cost: f64 = results
        .values()
        .map(|line| line["cost"].as_f64().unwrap())
        .sum();
    assert_eq!(summary["tokens"]["total_tokens"], tokens);
    assert!((summary["cost"].as_f64().unwrap() - cost).abs() < 1e-12);
    assert!(
        output.stderr.contains("lllm batch summary"),
        "{}",
        output.stderr
    );

    // The same directory again without --resume is refused: runs never mix.
    let again = test.run(&["batch", "in/tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    again.expect_code(2);
    assert!(again.stderr.contains("--resume"), "{}", again.stderr);
}

#[test]
fn several_threads_run_the_same_batch_and_zero_is_refused() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "latency_ms: {min: 1, max: 10}\ndefault: {echo: true}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(60, |_| ""));
    let batch = |dir: &str, threads: &str| {
        test.run(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            dir,
            "-j",
            "16",
            "--threads",
            threads,
        ])
    };
    batch("one", "1").expect_code(0);
    batch("three", "3").expect_code(0);
    let deliveries = |dir: &str| -> BTreeMap<String, Value> {
        results_once(&test, dir)
            .into_iter()
            .map(|(id, line)| {
                assert_eq!(line["state"], "success", "{line}");
                (id, line["delivery"].clone())
            })
            .collect()
    };
    let one = deliveries("one");
    assert_eq!(one.len(), 60);
    assert_eq!(one, deliveries("three"));
    assert_eq!(read_lines(&test, "three/sessions.jsonl").len(), 60);
    assert_eq!(server.requests().len(), 120);

    let zero = batch("zero", "0");
    zero.expect_code(2);
    assert!(zero.stderr.contains("--threads"), "{}", zero.stderr);
    assert!(!test.path("zero").exists());
}

#[test]
fn resume_after_a_kill_finishes_every_task_exactly_once() {
    let test = Test::new();
    // Twenty answers, then requests are held: the kill always lands in the
    // middle of the run, however fast or slow the machine is.
    let server = MockServer::start(test.dir.path(), &answers_then_hold(20));
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(200, |_| ""));
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "4",
        "-q",
    ];
    let mut child = test.spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_lines(&test, "out/results.jsonl").len() < 20 {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let before = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let finished_before = before.lines().count();
    assert!(finished_before < 200, "the kill landed after the end");
    // What a kill in the middle of a write leaves behind: a torn last line.
    let mut torn = before;
    torn.push_str("{\"id\": \"t199\", \"sta");
    std::fs::write(test.path("out/results.jsonl"), torn).unwrap();

    // The rest is answered by a server that holds nothing.
    let held = server.requests().len();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    std::fs::write(test.path("t.yaml"), tactic(&server.base_url())).unwrap();
    // Without `-q`: the warning is what is checked.
    let output = test.run(&[&args[..args.len() - 1], &["--resume"]].concat());
    output.expect_code(0);
    assert!(
        output.stderr.contains("torn last line"),
        "{}",
        output.stderr
    );
    let results = results_once(&test, "out");
    assert_eq!(results.len(), 200, "none lost");
    assert_eq!(states(&results)["success"], 200);
    // Only tasks in flight at the kill (4), or finished but not yet written
    // (a few), may have been sent twice.
    let requests = held + server.requests().len();
    assert!(requests <= 200 + 8, "{requests} requests");
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], 200);
    assert_eq!(
        summary["this_run"]["tasks"].as_u64().unwrap() as usize,
        200 - finished_before
    );
}

#[test]
fn resume_keeps_failures_and_retry_errors_runs_them_again() {
    let test = Test::new();
    // The first three requests naming FLAKY fail for good (400 is never retried).
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: FLAKY}\n    reply: {fault: {status: 400, message: flaky}}\n    times: 3\ndefault: {echo: true}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &task_lines(10, |i| if i % 3 == 1 { "FLAKY " } else { "" }),
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "out",
            "-q",
        ];
        args.extend_from_slice(extra);
        test.run(&args)
    };
    run(&[]).expect_code(1);
    let first = results_once(&test, "out");
    assert_eq!(states(&first)["failure"], 3);
    assert!(first["t1"]["error"].as_str().unwrap().contains("flaky"));
    assert_eq!(server.requests().len(), 10);

    // --resume: failures are results; nothing runs.
    run(&["--resume"]).expect_code(1);
    assert_eq!(server.requests().len(), 10);

    // --retry-errors: exactly the three failed tasks run again, and succeed.
    run(&["--retry-errors"]).expect_code(0);
    assert_eq!(server.requests().len(), 13);
    let lines = read_lines(&test, "out/results.jsonl");
    assert_eq!(lines.len(), 13);
    let retried: BTreeSet<&str> = lines[10..]
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(retried, BTreeSet::from(["t1", "t4", "t7"]));
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        (summary["success"].as_u64(), summary["failure"].as_u64()),
        (Some(10), Some(0))
    );
}

/// Issue 27: after `--retry-errors`, `summary.json`'s `calls` counted every
/// run of a task while its other totals seemed not to, and nothing said
/// which. Every spend total is over every result line (a failed run that
/// used tokens included); the task counts are by each task's latest result.
#[test]
fn after_retry_errors_every_spend_total_counts_every_run() {
    let test = Test::new();
    // The first reply to FLAKY does not parse (and costs tokens); later
    // replies do.
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: FLAKY}\n    reply: {text: \"no tags\", usage: {prompt_tokens: 100, completion_tokens: 10}}\n    times: 1\n\
         default: {text: \"<answer>ok</answer>\", usage: {prompt_tokens: 10, completion_tokens: 5}}\n",
    );
    let yaml = format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 0
  max_exception_retry: 0
agent_configs:
  - name: assistant
providers:
  local: {{api: openai, base_url: "{}"}}
pricing:
  test-model: {{input_per_million: 1.0, output_per_million: 2.0}}
flow:
  - step: ask
    agent: assistant
    prompt: ask
"#,
        server.base_url()
    );
    let test = test
        .file("t.yaml", &yaml)
        .file(
            "prompts/ask.md",
            "---\nparser: {type: tags, required_xml_tags: [answer]}\n---\n{{ task }}",
        )
        .file(
            "tasks.jsonl",
            "{\"id\": \"a\", \"task\": \"fine\"}\n{\"id\": \"b\", \"task\": \"FLAKY\"}\n",
        );
    test.batch("t.yaml", "out", &[]).expect_code(1);
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "--retry-errors",
    ]);
    output.expect_code(0);
    let lines = read_lines(&test, "out/results.jsonl");
    assert_eq!(lines.len(), 3);
    // Results are written as tasks end, in whichever order that is.
    let failed = lines
        .iter()
        .find(|line| line["id"] == "b" && line["state"] == "failure")
        .expect("b's failed run has its line");
    assert_eq!(
        failed["usage"]["total_tokens"], 110,
        "the failed run used tokens"
    );
    let sum = |key: &dyn Fn(&Value) -> f64| lines.iter().map(key).sum::<f64>();
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        summary["calls"].as_f64(),
        Some(sum(&|line| line["calls"].as_f64().unwrap()))
    );
    assert_eq!(summary["calls"], 3);
    assert_eq!(
        summary["tokens"]["total_tokens"].as_f64(),
        Some(sum(&|line| line["usage"]["total_tokens"].as_f64().unwrap()))
    );
    assert_eq!(summary["tokens"]["total_tokens"], 140);
    let cost = sum(&|line| line["cost"].as_f64().unwrap());
    assert!(
        (summary["cost"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{summary}"
    );
    assert_eq!(
        (&summary["total"], &summary["success"], &summary["failure"]),
        (&json!(2), &json!(2), &json!(0)),
        "the tasks, by their latest result"
    );
    assert_eq!(summary["this_run"]["calls"], 1);
    // The table says so.
    assert!(
        output.stderr.contains(
            "(calls, tokens and cost: every result, 1 of earlier runs of a task included)"
        ),
        "{}",
        output.stderr
    );
}

#[test]
fn fail_fast_cancels_what_is_left_at_the_first_failure() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "latency_ms: 20\nrules:\n  - when: {contains: FAIL}\n    reply: {fault: {status: 400}}\ndefault: {echo: true}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &task_lines(60, |i| if i == 2 { "FAIL " } else { "" }),
    );
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "2",
        "--fail-fast",
    ]);
    output.expect_code(1);
    let results = results_once(&test, "out");
    assert_eq!(results.len(), 60, "every task is accounted for");
    let counts = states(&results);
    assert_eq!(counts["failure"], 1);
    assert!(counts["skipped"] >= 50, "{counts:?}");
    let skipped = results.values().find(|l| l["state"] == "skipped").unwrap();
    assert!(skipped["error"].as_str().unwrap().contains("--fail-fast"));
    assert!(server.requests().len() < 10);
    assert!(output.stderr.contains("fail-fast"), "{}", output.stderr);
    // A task cancelled while running keeps its record (what it spent is on disk).
    let sessions = std::fs::read_to_string(test.path("out/sessions.jsonl")).unwrap();
    let session_ids: Vec<String> = sessions
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["session_id"].to_string()
        })
        .collect();
    for line in results.values() {
        if !line["session_id"].is_null() {
            assert!(
                session_ids.contains(&line["session_id"].to_string()),
                "no record for {line}"
            );
        }
    }
}

#[test]
fn shards_split_the_run_into_disjoint_parts_that_cover_it() {
    let test = Test::new()
        .file("echo.yaml", ECHO_TACTIC)
        .file("tasks.jsonl", &task_lines(60, |_| ""));
    let mut union = BTreeSet::new();
    let mut shard_two = BTreeSet::new();
    for k in 1..=3 {
        let dir = format!("out-{k}");
        let shard = format!("{k}/3");
        let output = test.run(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "echo.yaml",
            "-o",
            &dir,
            "--shard",
            &shard,
            "-q",
        ]);
        output.expect_code(0);
        let ids: BTreeSet<String> = results_once(&test, &dir).into_keys().collect();
        assert!(
            !ids.is_empty() && ids.len() < 60,
            "shard {k}: {}",
            ids.len()
        );
        assert!(union.is_disjoint(&ids));
        union.extend(ids.iter().cloned());
        if k == 2 {
            shard_two = ids;
        }
    }
    assert_eq!(union.len(), 60);

    // A job array: Kubernetes' 0-based JOB_COMPLETION_INDEX 1 is shard 2/3.
    let test = test.env("JOB_COMPLETION_INDEX", "1");
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "-o",
        "job",
        "--shards",
        "3",
        "-q",
    ])
    .expect_code(0);
    let ids: BTreeSet<String> = results_once(&test, "job").into_keys().collect();
    assert_eq!(ids, shard_two);

    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "-o",
        "x",
        "--shard",
        "0/3",
    ]);
    output.expect_code(2);
    assert!(output.stderr.contains("`1/3`"), "{}", output.stderr);

    // --limit takes the first N tasks of the shard; --resume then finishes the shard.
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "-o",
        "limited",
        "--shard",
        "2/3",
        "-q",
    ];
    test.run(&[&args[..], &["--limit", "3"]].concat())
        .expect_code(0);
    let first: Vec<String> = results_once(&test, "limited").into_keys().collect();
    assert_eq!(first.len(), 3);
    test.run(&[&args[..], &["--resume"]].concat())
        .expect_code(0);
    let ids: BTreeSet<String> = results_once(&test, "limited").into_keys().collect();
    assert_eq!(ids, shard_two);
}

#[test]
fn preflight_reports_every_bad_line_at_once_and_sends_nothing() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let tasks = [
        r#"{"id": "a", "task": "fine", "args": {"topic": "owls"}}"#,
        r#"{"id": "b", "task": "x", "args": {"topic": "owls"}"#,
        r#"{"id": "c", "task": "x", "arg": {"topic": "owls"}}"#,
        r#"{"id": "d", "task": "no topic"}"#,
        r#"{"id": "a", "task": "again", "args": {"topic": "owls"}}"#,
        r#"[1, 2]"#,
    ]
    .join("\n");
    let topic_tactic = tactic(&server.base_url()).replace("You are terse.", "Topic: {{ topic }}");
    let test = test
        .file("t.yaml", &topic_tactic)
        .file("tasks.jsonl", &tasks);
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(2);
    for expected in [
        "tasks.jsonl:2: column",
        "tasks.jsonl:3: unknown key `arg`",
        "did you mean `args`",
        "tasks.jsonl:4:",
        "needs `topic`",
        "tasks.jsonl:5: duplicate id `a` (first on line 1)",
        "tasks.jsonl:6: a task line is a JSON object or a string",
    ] {
        assert!(
            output.stderr.contains(expected),
            "{expected:?} missing:\n{}",
            output.stderr
        );
    }
    assert!(server.requests().is_empty(), "nothing was sent");
    // The run created the directory to lock it, and removed it again.
    assert!(!test.path("out").exists());

    // --skip-invalid records bad lines as failed, but duplicate ids stay an error.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--skip-invalid",
    ]);
    output.expect_code(2);
    let fixed = tasks.replace(
        r#""id": "a", "task": "again""#,
        r#""id": "e", "task": "again""#,
    );
    let test = test.file("tasks.jsonl", &fixed);
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--skip-invalid",
        "-q",
    ]);
    output.expect_code(1);
    let results = results_once(&test, "out");
    assert_eq!(states(&results)["success"], 2);
    assert_eq!(states(&results)["failure"], 4);
    assert!(results["d"]["error"].as_str().unwrap().contains("line 4"));
    assert!(
        results["line-2"]["error"]
            .as_str()
            .unwrap()
            .contains("JSON")
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn progress_says_when_tasks_wait_out_a_back_off_before_retrying() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 503, message: busy}\ndefault: {echo: true}\n",
    );
    let tactic = tactic(&server.base_url())
        .replace("max_llm_recall: 0", "max_llm_recall: 1")
        .replace(
            "retry_base_ms: 10, retry_cap_ms: 50",
            "retry_base_ms: 600, retry_cap_ms: 600",
        );
    let test = test
        .file("t.yaml", &tactic)
        .file("tasks.jsonl", &task_lines(1, |_| ""));
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--progress-interval",
        "0.05",
    ]);
    output.expect_code(0);
    assert_eq!(server.requests().len(), 2, "one retry");
    assert!(
        output
            .stderr
            .lines()
            .any(|line| line.starts_with("lllm batch: 0/1 done")
                && line.contains(
                    " · waiting: back-off before retrying · retrying: local: HTTP 503: busy"
                )),
        "{}",
        output.stderr
    );
}

#[test]
fn progress_is_plain_lines_when_not_a_terminal_and_silent_when_quiet() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "latency_ms: 25\ndefault: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(40, |_| ""));
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "2",
        "--progress-interval",
        "0.05",
    ]);
    output.expect_code(0);
    let progress: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("lllm batch: "))
        .collect();
    assert!(progress.len() >= 2, "{}", output.stderr);
    assert!(
        progress
            .iter()
            .all(|line| line.contains(" done · ") && line.contains("tasks/s"))
    );
    assert!(
        progress
            .last()
            .unwrap()
            .starts_with("lllm batch: 40/40 done"),
        "{progress:?}"
    );
    assert!(!output.stderr.contains('\r'), "no bar redraws in a log");
    assert!(output.stderr.contains("lllm batch summary"));

    let quiet = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "quiet",
        "-q",
    ]);
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "");
}

#[cfg(unix)]
#[test]
fn ctrl_c_or_sigterm_stops_with_130_and_resume_completes_the_run() {
    let test = Test::new();
    let answering = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("resume.yaml", &tactic(&answering.base_url()))
        .file("tasks.jsonl", &task_lines(300, |_| ""));
    // SIGTERM is what `kill`, Slurm at its time limit and container stops send.
    for signal in ["INT", "TERM"] {
        // Requests past the tenth are held, so the signal always comes mid-run.
        let held = MockServer::start(test.dir.path(), &answers_then_hold(10));
        let tactic_file = format!("t-{signal}.yaml");
        std::fs::write(test.path(&tactic_file), tactic(&held.base_url())).unwrap();
        let dir = format!("out-{signal}");
        let args = [
            "batch",
            "tasks.jsonl",
            "--tactic",
            &tactic_file,
            "-o",
            &dir,
            "-j",
            "4",
        ];
        let child = test.spawn(&args);
        let deadline = Instant::now() + Duration::from_secs(30);
        while read_lines(&test, &format!("{dir}/results.jsonl")).len() < 10 {
            assert!(Instant::now() < deadline, "no progress");
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(130),
            "{signal}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let summary = test.read_json(&format!("{dir}/summary.json"));
        assert_eq!(summary["interrupted"], true);
        assert!(summary["not_run"].as_u64().unwrap() > 0);

        // The held requests would hold the resume too: it runs on a server
        // that answers everything.
        let resume = [
            "batch",
            "tasks.jsonl",
            "--tactic",
            "resume.yaml",
            "-o",
            &dir,
            "-j",
            "4",
            "--resume",
            "-q",
        ];
        test.run(&resume).expect_code(0);
        // The tasks in flight at the signal (held by the server) were recorded
        // as interrupted and ran again; every other task has one line.
        let mut results: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for line in read_lines(&test, &format!("{dir}/results.jsonl")) {
            let id = line["id"].as_str().unwrap().to_string();
            results.entry(id).or_default().push(line);
        }
        assert_eq!(results.len(), 300);
        for (id, lines) in &results {
            let (last, earlier) = lines.split_last().unwrap();
            assert_eq!(last["state"], "success", "{id}");
            assert!(
                earlier
                    .iter()
                    .all(|line| line["state"] == "skipped" && line["error"] == "interrupted"),
                "{id} ran twice: {lines:?}"
            );
        }
    }
}

#[test]
fn an_output_directory_that_cannot_be_made_is_bad_usage() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(3, |_| ""))
        .file("taken", "a file, not a directory\n");
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "taken/out",
    ]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("cannot write to `taken/out`"),
        "{}",
        output.stderr
    );
    assert!(server.requests().is_empty(), "nothing was sent");
}

/// A line that is not UTF-8 (torn or corrupted) in `results.jsonl` or
/// `sessions.jsonl` is read like a line that is not JSON: `--resume`,
/// `replay`, `report`, `compare` and `logs reindex` skip it with a note naming the
/// file and the line; `merge`, which refuses such lines, names `file:line`.
#[test]
fn a_line_that_is_not_utf8_is_skipped_like_one_that_is_not_json() {
    let test = Test::new()
        .file(
            "t.yaml",
            "agent_configs: [{name: a, model_name: mock/echo}]\n",
        )
        .file(
            "tasks.jsonl",
            "{\"id\":\"a\",\"task\":\"x\"}\n{\"id\":\"b\",\"task\":\"y\"}\n",
        );
    test.batch("t.yaml", "out", &[]).expect_code(0);
    for file in ["out/results.jsonl", "out/sessions.jsonl"] {
        let mut bytes = std::fs::read(test.path(file)).unwrap();
        bytes.extend_from_slice(b"{\"id\":\"x\"\xff\n");
        std::fs::write(test.path(file), bytes).unwrap();
    }

    // Without `-q`, which silences warnings.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--resume",
    ]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("`out/results.jsonl`: ignored 1 line not readable as results (line 3)"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("cannot"), "{}", output.stderr);

    let output = test.run(&["replay", "out/sessions.jsonl", "--id", "a"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains(
            "note: `out/sessions.jsonl`: skipped 1 line not readable as session records (line 3)"
        ),
        "{}",
        output.stderr
    );

    let output = test.run(&["report", "out"]);
    output.expect_code(0);
    for note in [
        "`out/results.jsonl`: skipped 1 line not readable as result lines (line 3)",
        "`out/sessions.jsonl`: skipped 1 line not readable as session records (line 3)",
    ] {
        assert!(output.stderr.contains(note), "{}", output.stderr);
    }
    test.run(&["compare", "out", "out"]).expect_code(0);

    let output = test.run(&["logs", "reindex", "--from", "out"]);
    assert!(
        output
            .stderr
            .contains("line 3 skipped: not UTF-8 text (a torn or corrupted line)"),
        "{}",
        output.stderr
    );

    let output = test.run(&["merge", "out", "-o", "merged", "-q"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains("error: out/sessions.jsonl:3: not UTF-8 text (a torn or corrupted line)"),
        "{}",
        output.stderr
    );
}
