//! `lllm run` and its session record at the edges: stopped by SIGTERM (a job
//! engine's or a container's stop) it writes the record as Ctrl-C does, and a
//! record that cannot be written (a path under a file, a path that is a
//! directory, a full disk) neither hides the delivery nor leaves a
//! temporary file behind.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{MockServer, Output, Test};
use serde_json::Value;

fn tactic(base_url: &str) -> String {
    format!(
        "tactic_type: test\nglobal: {{model_name: local/m, max_llm_recall: 0}}\nagent_configs:\n  - {{name: a, system_prompt: \"Be brief.\"}}\nproviders:\n  local: {{api: openai, base_url: \"{base_url}\"}}\n"
    )
}

const ECHO: &str =
    "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a}\n";

#[cfg(unix)]
#[test]
fn sigterm_stops_a_run_like_ctrl_c_and_its_record_is_written() {
    let test = Test::new();
    // The request is held until the client gives up: the run is in flight.
    let server = MockServer::start(test.dir.path(), "default: {fault: timeout}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url()));
    for signal in ["TERM", "INT"] {
        let record = format!("{signal}.json");
        let child = test.spawn(&["run", "t.yaml", "--task", "hello", "--record", &record]);
        let sent = server.requests().len();
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.requests().len() == sent {
            assert!(Instant::now() < deadline, "the request never arrived");
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let output = Output::of(child.wait_with_output().unwrap());
        output.expect_code(130);
        assert!(
            output.stderr.contains("failure: interrupted"),
            "{}",
            output.stderr
        );
        let record = test.read_json(&record);
        assert_eq!(record["state"], "failure");
        assert_eq!(record["error"], "interrupted");
        assert_eq!(record["task"], "hello");
    }
}

/// A paid tool-call turn (1,000 tokens in, 500 out: $0.002 at these
/// prices), then a request the server holds until the client gives up.
fn paid_then_held(base_url: &str) -> String {
    format!(
        "tactic_type: test\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs:\n  - {{name: a, system_prompt: \"Be brief.\", tools: [current_time]}}\n\
         builtin_tools:\n  current_time: null\n\
         providers:\n  local: {{api: openai, base_url: \"{base_url}\"}}\n\
         pricing:\n  local/m: {{input_per_million: 1.0, output_per_million: 2.0}}\n"
    )
}

const PAID_THEN_HELD: &str = "replies:\n  - tool_calls: [{name: current_time}]\n    usage: {prompt_tokens: 1000, completion_tokens: 500}\ndefault: {fault: timeout}\n";

/// Sends SIGINT to `child` once `server` has seen `requests` requests.
fn interrupt_after(server: &MockServer, requests: usize, child: &std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.requests().len() < requests {
        assert!(Instant::now() < deadline, "the requests never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[cfg(unix)]
#[test]
fn an_interrupted_call_keeps_what_its_finished_requests_cost() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), PAID_THEN_HELD);
    let test = test.file("t.yaml", &paid_then_held(&server.base_url()));
    let child = test.spawn(&["run", "t.yaml", "--task", "hello", "--record", "r.json"]);
    interrupt_after(&server, 2, &child);
    let output = Output::of(child.wait_with_output().unwrap());
    output.expect_code(130);
    // The summary line counts the paid request, and the one in flight,
    // whose cost is not known (issue 27: it said `1 call`, and `0 calls`
    // for a run interrupted in its first request).
    assert!(
        output
            .stderr
            .contains("2 calls · 1500 tokens (1000 in, 500 out) · $0.002000 + unknown"),
        "{}",
        output.stderr
    );
    let record = test.read_json("r.json");
    assert_eq!(record["error"], "interrupted");
    assert_eq!(record["cost"]["prompt_tokens"], 1000, "{record}");
    assert_eq!(record["cost"]["completion_tokens"], 500);
    let calls = record["agent_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the call in flight is recorded");
    assert_eq!(calls[0]["state"], "failure");
    assert_eq!(calls[0]["error"], "interrupted");
    let invokes = calls[0]["invokes"].as_array().unwrap();
    assert_eq!(invokes.len(), 2);
    assert_eq!(invokes[1]["error"]["code"], "interrupted");
    assert_eq!(invokes[1]["step"], 1);
    assert_eq!(calls[0]["interrupts"].as_array().unwrap().len(), 1);
    assert_eq!(calls[0]["cost"]["total_tokens"], 1500);
    assert!(calls[0]["ended_at"].is_string());

    // A batch stopped at once (`--grace 0`) counts it in its result line and
    // summary too.
    let server = MockServer::start(test.dir.path(), PAID_THEN_HELD);
    let test = test
        .file("b.yaml", &paid_then_held(&server.base_url()))
        .file("tasks.jsonl", "\"hello\"\n");
    let child = test.spawn(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "b.yaml",
        "-o",
        "out",
        "--grace",
        "0",
        "-q",
    ]);
    interrupt_after(&server, 2, &child);
    let output = Output::of(child.wait_with_output().unwrap());
    output.expect_code(130);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let line: Value = serde_json::from_str(results.lines().next().unwrap()).unwrap();
    assert_eq!(line["error"], "interrupted", "{line}");
    assert_eq!(line["calls"], 2, "{line}");
    assert_eq!(line["cost_known"], false, "{line}");
    assert_eq!(line["usage"]["prompt_tokens"], 1000, "{line}");
    assert!(
        (line["cost"].as_f64().unwrap() - 0.002).abs() < 1e-9,
        "{line}"
    );
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["calls"], 2, "{summary}");
    assert!(
        (summary["cost"].as_f64().unwrap() - 0.002).abs() < 1e-9,
        "{summary}"
    );
}

/// Issue 27: a run interrupted in its first request said `0 calls`, and
/// retries that had failed before the Ctrl-C were not recorded at all.
#[cfg(unix)]
#[test]
fn an_interrupted_run_counts_every_request_it_sent() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 500}\n  - fault: {status: 500}\ndefault: {fault: timeout}\n",
    );
    let tactic = format!(
        "tactic_type: test\nglobal: {{model_name: local/m, max_llm_recall: 5}}\n\
         agent_configs:\n  - {{name: a}}\n\
         providers:\n  local: {{api: openai, base_url: \"{}\", retry_base_ms: 1, retry_cap_ms: 5}}\n",
        server.base_url()
    );
    let test = test.file("t.yaml", &tactic);
    let child = test.spawn(&["run", "t.yaml", "--task", "hello", "--record", "r.json"]);
    interrupt_after(&server, 3, &child);
    let output = Output::of(child.wait_with_output().unwrap());
    output.expect_code(130);
    assert!(
        output.stderr.contains("failure: interrupted in ")
            && output.stderr.contains(" · 3 calls (2 retries) · "),
        "{}",
        output.stderr
    );
    let record = test.read_json("r.json");
    let invokes = record["agent_calls"][0]["invokes"].as_array().unwrap();
    let attempts: Vec<(u64, Option<&str>, Option<u64>)> = invokes
        .iter()
        .map(|invoke| {
            (
                invoke["attempt"].as_u64().unwrap(),
                invoke["error"]["code"].as_str(),
                invoke["error"]["status"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            (1, Some("server_error"), Some(500)),
            (2, Some("server_error"), Some(500)),
            (3, Some("interrupted"), None)
        ]
    );
    assert_eq!(record["cost_known"], false);
    // `lllm replay` shows it as the record has it.
    let shown = test.run(&["replay", "r.json"]);
    assert!(
        shown.stdout.contains("3 calls (2 retries)")
            && shown.stdout.contains("interrupted: the request was sent"),
        "{}",
        shown.stdout
    );
}

/// Entries of `dir` whose name ends with `.tmp`.
fn temporary_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

#[track_caller]
fn delivered_without_record(output: &Output, path: &str) {
    output.expect_code(1);
    assert_eq!(output.stdout, "deliver me\n", "the delivery is printed");
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    assert!(
        errors[0].starts_with(&format!("error: cannot write `{path}`: ")),
        "{}",
        errors[0]
    );
    assert!(output.stderr.contains("lllm: success"), "{}", output.stderr);
}

#[test]
fn a_record_that_cannot_be_written_still_delivers_and_leaves_no_temporary_file() {
    let test = Test::new()
        .file("echo.yaml", ECHO)
        .file("taken", "a file, not a directory\n");
    std::fs::create_dir(test.path("a-directory")).unwrap();
    let run = |record: &str| {
        test.run(&[
            "run",
            "echo.yaml",
            "--task",
            "deliver me",
            "--record",
            record,
        ])
    };

    // Its directory cannot be made: a file is in the way.
    delivered_without_record(&run("taken/r.json"), "taken/r.json");
    // The path is a directory: the temporary file is written, the rename fails.
    delivered_without_record(&run("a-directory"), "a-directory");
    assert_eq!(temporary_files(test.dir.path()), Vec::<String>::new());

    // A full disk: no more than 512 bytes may be written (as root too).
    let output = Output::of(
        Command::new("sh")
            .arg("-c")
            .arg("trap '' XFSZ; ulimit -f 1; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_lllm"))
            .args([
                "run",
                "echo.yaml",
                "--task",
                "deliver me",
                "--record",
                "full/r.json",
            ])
            .current_dir(test.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    delivered_without_record(&output, "full/r.json");
    assert!(
        output.stderr.contains("File too large"),
        "{}",
        output.stderr
    );
    assert_eq!(temporary_files(&test.path("full")), Vec::<String>::new());
    assert!(!test.path("full/r.json").exists());

    // The same run with room writes its record.
    let output = run("ok/r.json");
    output.expect_code(0);
    let record: Value = test.read_json("ok/r.json");
    assert_eq!(record["delivery"], "deliver me");
}

#[test]
fn runs_given_one_record_path_each_write_a_whole_record() {
    // They shared one temporary file (`.same.json.tmp`): a run's rename took
    // another's half-written file away, and that run failed with "No such
    // file or directory" and no record.
    let test = Test::new().file("echo.yaml", ECHO);
    let children: Vec<_> = (0..12)
        .map(|number| {
            test.spawn(&[
                "run",
                "echo.yaml",
                "--task",
                &format!("task {number}"),
                "--record",
                "same.json",
                "-q",
            ])
        })
        .collect();
    for child in children {
        let output = Output::of(child.wait_with_output().unwrap());
        output.expect_code(0);
        assert_eq!(output.stderr, "", "every record was written");
    }
    let record = test.read_json("same.json");
    assert_eq!(record["state"], "success");
    let task = record["task"].as_str().unwrap();
    assert_eq!(record["delivery"], task, "one run's record, whole");
    assert_eq!(temporary_files(test.dir.path()), Vec::<String>::new());
}
