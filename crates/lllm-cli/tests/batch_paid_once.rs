//! `lllm batch`: nothing paid for is paid twice (issue 26). A record on disk
//! is a finished task: `--resume` rebuilds a missing result line from it
//! instead of running the task again (plain and compressed records, and
//! after a SIGKILL); the TASKS file is read once, so lines appended or
//! rewritten during a run are not run; a duplicate id never runs twice; a
//! `null` task is refused before anything is sent. Real processes against
//! `lllm-mock`, which counts what was paid for; the tests wait for what they
//! need to see, never for a time.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{MockServer, Test};
use serde_json::{Value, json};

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
  local: {{api: openai, base_url: "{base_url}"}}
"#
    )
}

/// `count` task lines `{"id": "tNN", "task": TEXT}`.
fn task_lines(count: usize, text: impl Fn(usize) -> String) -> String {
    (0..count)
        .map(|i| json!({"id": format!("t{i:02}"), "task": text(i)}).to_string() + "\n")
        .collect()
}

fn read_lines(test: &Test, relative: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(relative))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is JSON"))
        .collect()
}

/// Each id's latest result.
fn latest(test: &Test) -> BTreeMap<String, Value> {
    read_lines(test, "out/results.jsonl")
        .into_iter()
        .map(|line| (line["id"].as_str().unwrap().to_string(), line))
        .collect()
}

/// The texts of the tasks the mock was sent, one per request (a task's
/// first request: the last message is its text), from request `from` on.
fn sent(server: &MockServer, from: usize) -> Vec<String> {
    server.requests()[from..]
        .iter()
        .map(|request| {
            let messages = request["body"]["messages"].as_array().unwrap();
            messages.last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Waits (up to a generous deadline) until `ready` holds.
#[track_caller]
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const ARGS: [&str; 9] = [
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

/// Runs 12 tasks to the end, then leaves `out` as a kill between records
/// and result lines would: the last 5 result lines gone (their records on
/// disk), and in plain form the last record torn as well. `--resume`
/// rebuilds the results of the whole records and runs only the torn one.
fn a_record_on_disk_is_not_paid_for_again(compress: bool) {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(12, |i| format!("task {i}")));
    let compress_flag: &[&str] = if compress { &["--compress"] } else { &[] };
    test.run(&[&ARGS[..], compress_flag].concat())
        .expect_code(0);
    let written = read_lines(&test, "out/results.jsonl");
    assert_eq!(written.len(), 12);
    let results_text = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let kept: String = results_text
        .lines()
        .take(7)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(test.path("out/results.jsonl"), kept).unwrap();
    let dropped: Vec<&Value> = written[7..].iter().collect();
    let torn = if compress {
        None
    } else {
        // Records are written in the order of result lines: the last record
        // is the last dropped result's; half of it is on disk.
        let text = std::fs::read_to_string(test.path("out/sessions.jsonl")).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let last = lines.pop().unwrap();
        let record: Value = serde_json::from_str(last).unwrap();
        assert_eq!(record["task_id"], dropped[4]["id"]);
        let mut damaged: String = lines.iter().map(|line| format!("{line}\n")).collect();
        damaged.push_str(&last[..last.len() / 2]);
        std::fs::write(test.path("out/sessions.jsonl"), damaged).unwrap();
        Some(dropped[4]["id"].as_str().unwrap().to_string())
    };
    let rebuilt = if compress { 5 } else { 4 };

    let before = server.requests().len();
    // Without `-q`, which silences the warning checked here.
    let output = test.run(&[&ARGS[..ARGS.len() - 1], &["--resume"]].concat());
    output.expect_code(0);
    let warnings: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.contains("rebuilt the result lines"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", output.stderr);
    assert!(
        warnings[0].contains(&format!("of {rebuilt} finished tasks from their records")),
        "{}",
        warnings[0]
    );
    // Only the task whose record was torn is sent again.
    let again = sent(&server, before);
    match &torn {
        Some(id) => assert_eq!(
            again,
            [format!("task {}", id[1..].parse::<usize>().unwrap())]
        ),
        None => assert!(again.is_empty(), "{again:?}"),
    }
    // A rebuilt line is the line the run would have written.
    let results = latest(&test);
    assert_eq!(results.len(), 12);
    for line in &dropped[..rebuilt] {
        assert_eq!(&results[line["id"].as_str().unwrap()], *line);
    }
    assert!(results.values().all(|line| line["state"] == "success"));
    let summary = test.read_json("out/summary.json");
    assert_eq!(
        (summary["total"].as_u64(), summary["success"].as_u64()),
        (Some(12), Some(12))
    );

    // Nothing more to rebuild or run.
    let before = server.requests().len();
    let output = test.run(&[&ARGS[..ARGS.len() - 1], &["--resume"]].concat());
    output.expect_code(0);
    assert!(!output.stderr.contains("rebuilt"), "{}", output.stderr);
    assert_eq!(server.requests().len(), before);

    // Records alone are results too: a run without `--resume` is refused,
    // and `--resume` rebuilds every line without sending anything.
    std::fs::remove_file(test.path("out/results.jsonl")).unwrap();
    let output = test.run(&ARGS);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("already holds the results of a batch"),
        "{}",
        output.stderr
    );
    let output = test.run(&[&ARGS[..ARGS.len() - 1], &["--resume"]].concat());
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("rebuilt the result lines of 12 finished tasks"),
        "{}",
        output.stderr
    );
    assert_eq!(server.requests().len(), before);
    assert_eq!(latest(&test).len(), 12);
}

#[test]
fn a_record_on_disk_is_a_finished_task_that_resume_does_not_pay_for_again() {
    a_record_on_disk_is_not_paid_for_again(false);
}

#[test]
fn a_compressed_record_on_disk_is_a_finished_task_too() {
    a_record_on_disk_is_not_paid_for_again(true);
}

#[test]
fn a_batch_killed_mid_run_resumes_without_paying_again_for_what_is_on_disk() {
    let test = Test::new();
    // Four tasks are held by the server (once each) until the client is
    // killed: with -j 4, the run is stuck on them with the others done.
    let held = [5, 11, 17, 23];
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: hold}\n    reply: {fault: timeout}\n    times: 4\ndefault: {echo: true}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &task_lines(30, |i| {
            if held.contains(&i) {
                format!("hold {i}")
            } else {
                format!("task {i}")
            }
        }),
    );
    let mut killed = test.spawn(&ARGS);
    wait_for("24 requests, the last four held", || {
        server.requests().len() == 24
    });
    killed.kill().unwrap();
    killed.wait().unwrap();

    // What reached the disk: whole record lines (a torn last one is cut).
    let records: BTreeSet<String> = std::fs::read_to_string(test.path("out/sessions.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|record| record["task_id"].as_str().unwrap().to_string())
        .collect();
    let output = test.run(&[&ARGS[..], &["--resume"]].concat());
    output.expect_code(0);
    let again: BTreeSet<String> = sent(&server, 24)
        .iter()
        .map(|text| {
            let number: usize = text.split(' ').nth(1).unwrap().parse().unwrap();
            format!("t{number:02}")
        })
        .collect();
    for id in &again {
        assert!(
            !records.contains(id),
            "task {id} had its record on disk, and was paid for again"
        );
    }
    let all: BTreeSet<String> = (0..30).map(|i| format!("t{i:02}")).collect();
    let expected: BTreeSet<String> = all.difference(&records).cloned().collect();
    assert_eq!(again, expected, "every task without a record runs, once");
    assert_eq!(server.requests().len(), 24 + again.len());
    let results = latest(&test);
    assert_eq!(results.len(), 30);
    assert!(results.values().all(|line| line["state"] == "success"));
}

#[test]
fn the_tasks_file_is_read_once_and_lines_changed_during_the_run_do_not_run() {
    let test = Test::new();
    // Task t00 calls a tool that waits for the file `go`: the run is
    // certainly under way while the test rewrites the TASKS file.
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: hold, last_role: user}\n    reply: {tool_calls: [{name: wait_go, arguments: {}}]}\n    times: 1\ndefault: {echo: true}\n",
    );
    let tactic = format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 2
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
    tools: [wait_go]
providers:
  local: {{api: openai, base_url: "{}"}}
tools:
  - name: wait_go
    description: Waits
    parameters: {{type: object, properties: {{}}}}
    command: [sh, -c, "while [ ! -e go ]; do sleep 0.01; done; echo GO"]
    timeout_s: 600
"#,
        server.base_url()
    );
    let text = |i: usize| {
        if i == 0 {
            "hold".to_string()
        } else {
            format!("task {i}")
        }
    };
    let test = test
        .file("t.yaml", &tactic)
        .file("tasks.jsonl", &task_lines(4, text));
    let args = [&ARGS[..6], &["-j", "1"]].concat();
    let mut running = test.spawn(&args);
    wait_for("the held task's tool call", || server.requests().len() == 1);
    // Rewritten in place (the same file): t02 changed, t04 and t05 added,
    // and t01 again.
    let mut rewritten = task_lines(4, |i| match i {
        2 => "rewritten".to_string(),
        i => text(i),
    });
    rewritten.push_str(
        &task_lines(6, |i| format!("task {i}"))
            .lines()
            .skip(4)
            .map(|line| format!("{line}\n"))
            .collect::<String>(),
    );
    rewritten.push_str(&(json!({"id": "t01", "task": "task 1 again"}).to_string() + "\n"));
    std::fs::write(test.path("tasks.jsonl"), &rewritten).unwrap();
    std::fs::write(test.path("go"), "").unwrap();
    let stderr = {
        use std::io::Read;
        let mut text = String::new();
        running
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text
    };
    assert!(running.wait().unwrap().success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("warning:") && line.contains("changed while the batch ran"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("`--resume`"), "{}", warnings[0]);
    // The four lines as they were, each once: t00's two requests (the tool
    // call, then its answer), t01 to t03 one each.
    let texts = sent(&server, 0);
    assert_eq!(texts.len(), 5, "{texts:?}");
    for expected in ["task 1", "task 2", "task 3"] {
        assert_eq!(
            texts.iter().filter(|text| *text == expected).count(),
            1,
            "{texts:?}"
        );
    }
    assert!(
        !texts
            .iter()
            .any(|text| text.contains("rewritten") || text.contains("again"))
    );
    let results = latest(&test);
    assert_eq!(
        results.keys().collect::<Vec<_>>(),
        ["t00", "t01", "t02", "t03"]
    );
    assert_eq!(results["t02"]["delivery"], "task 2");

    // The file as it is now has t01 twice: refused, nothing sent, even to
    // continue the run.
    for extra in [&["--resume"][..], &["--resume", "--skip-invalid"][..]] {
        let output = test.run(&[&args[..], extra].concat());
        output.expect_code(2);
        assert!(
            output
                .stderr
                .contains("tasks.jsonl:7: duplicate id `t01` (first on line 2)"),
            "{}",
            output.stderr
        );
    }
    assert_eq!(server.requests().len(), 5);
    // Without it, `--resume` runs the lines added (t02 is done).
    let fixed: String = rewritten
        .lines()
        .take(6)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(test.path("tasks.jsonl"), fixed).unwrap();
    let output = test.run(&[&args[..], &["--resume"]].concat());
    output.expect_code(0);
    assert_eq!(sent(&server, 5), ["task 4", "task 5"]);
}

#[test]
fn a_null_task_is_refused_before_anything_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        "{\"id\": \"a\", \"task\": \"fine\"}\nnull\n{\"id\": \"b\", \"task\": null}\n",
    );
    let output = test.run(&ARGS);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("tasks.jsonl:2: a task line is a JSON object or a string, not null"),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("tasks.jsonl:3: `task` is null"),
        "{}",
        output.stderr
    );
    assert!(server.requests().is_empty());
    assert!(!test.path("out").exists(), "a refused run leaves nothing");
}
