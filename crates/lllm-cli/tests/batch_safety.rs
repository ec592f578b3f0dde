//! `lllm batch`: nothing lost, nothing done twice. Two processes on one
//! output directory (the second is refused, naming the first), SIGTERM
//! handled like Ctrl-C, a full disk in the middle of a run, and `replay --id`
//! on a task that ran more than once. Real processes against `lllm-mock`;
//! the tests wait for what they need to see, never for a time.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{MockServer, Output, Test};
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
fn latest(test: &Test, dir: &str) -> BTreeMap<String, Value> {
    read_lines(test, &format!("{dir}/results.jsonl"))
        .into_iter()
        .map(|line| (line["id"].as_str().unwrap().to_string(), line))
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

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_second_batch_on_one_directory_is_refused_and_nothing_is_lost_or_paid_twice() {
    let test = Test::new();
    // Task t10 is held by the server (once) until its client gives up, so
    // the first batch is certainly still running when the second starts.
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: hold}\n    reply: {fault: timeout}\n    times: 1\ndefault: {echo: true}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &task_lines(20, |i| {
            if i == 10 {
                "hold".into()
            } else {
                format!("task {i}")
            }
        }),
    );
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "--grace",
        "0",
    ];
    let first = test.spawn(&args);
    wait_for("ten results and the held request", || {
        read_lines(&test, "out/results.jsonl").len() == 10 && server.requests().len() == 11
    });
    let committed = std::fs::read(test.path("out/results.jsonl")).unwrap();

    let first_pid = first.id();
    let pid = format!("pid {first_pid}");
    for extra in [&["--resume"][..], &["--retry-errors"][..], &[][..]] {
        let second = test.run(&[&args[..], extra].concat());
        second.expect_code(2);
        assert!(
            second
                .stderr
                .contains("is being written by another `lllm batch`")
                && second.stderr.contains(&pid),
            "{}",
            second.stderr
        );
        assert_eq!(second.stderr.lines().count(), 1, "{}", second.stderr);
    }
    assert_eq!(
        std::fs::read(test.path("out/results.jsonl")).unwrap(),
        committed,
        "the second run touched nothing"
    );
    assert_eq!(server.requests().len(), 11, "the second run sent nothing");

    // SIGTERM (a job engine's stop) ends the first like Ctrl-C: the held task
    // is cancelled (`--grace 0`) with its result, the summary says so, 130.
    signal(&first, "TERM");
    let stopped = Output::of(first.wait_with_output().unwrap());
    stopped.expect_code(130);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["interrupted"], true, "{summary}");
    assert_eq!(latest(&test, "out")["t10"]["state"], "skipped");

    // Its lock file stays behind, and does not block the next run.
    let lock = std::fs::read_to_string(test.path("out/.lock")).unwrap();
    assert!(lock.contains(&format!("\"pid\":{first_pid}")), "{lock}");
    test.run(&[&args[..], &["--resume", "-q"]].concat())
        .expect_code(0);
    let results = latest(&test, "out");
    assert_eq!(results.len(), 20);
    assert!(results.values().all(|line| line["state"] == "success"));
    // 10 before, the held one, then t10 again and the 9 after it: every
    // task was sent once, but for the one cancelled in flight.
    assert_eq!(server.requests().len(), 21);
}

#[test]
fn a_lock_left_by_a_killed_batch_does_not_block() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: hold}\n    reply: {fault: timeout}\n    times: 1\ndefault: {echo: true}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &task_lines(6, |i| {
            if i == 3 {
                "hold".into()
            } else {
                format!("task {i}")
            }
        }),
    );
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "1",
        "-q",
    ];
    let mut killed = test.spawn(&args);
    wait_for("the held request", || server.requests().len() == 4);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let lock = std::fs::read_to_string(test.path("out/.lock")).unwrap();
    assert!(lock.contains(&format!("\"pid\":{}", killed.id())), "{lock}");
    test.run(&[&args[..], &["--resume"]].concat())
        .expect_code(0);
    assert_eq!(latest(&test, "out").len(), 6);
}

/// `lllm` run by `sh` with a file size limit of `blocks` × 512 bytes: a
/// write past it fails (EFBIG, as on a full disk) instead of killing it.
fn run_with_file_limit(test: &Test, blocks: u32, args: &[&str]) -> Output {
    run_limited(test, &format!("trap '' XFSZ; ulimit -f {blocks}"), args)
}

/// `lllm` run by `sh` after `setup` (a `ulimit`), in the test's directory.
fn run_limited(test: &Test, setup: &str, args: &[&str]) -> Output {
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("{setup}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_lllm"))
        .args(args)
        .current_dir(test.dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", test.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Output::of(output)
}

#[test]
fn a_full_disk_mid_run_stops_the_batch_with_one_error_and_loses_nothing_committed() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(40, |i| format!("task {i}")));
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        "2",
        "-q",
        // The session store (SQLite) would meet the file limit too; here
        // only the output directory's files are under test.
        "--no-store",
    ];
    // 8 KiB per file: a few session records fit, then writes fail. How many
    // lines the first write carries depends on how fast the tasks finish
    // against the writer (it gathers what is ready), so it may already fail:
    // nothing is then committed, which is as intact as a longer prefix.
    let output = run_with_file_limit(&test, 16, &args);
    output.expect_code(1);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    assert!(
        errors[0].contains("cannot write `out/sessions.jsonl`")
            && errors[0].contains("what was written before is intact")
            && errors[0].contains("`--resume`"),
        "{}",
        errors[0]
    );
    // Every committed result of a task that ran has its record; at most the
    // last record is torn. (A task cancelled by the failed write is a
    // `skipped` line with no session: whether it fits depends on timing.)
    let results = read_lines(&test, "out/results.jsonl");
    assert!(results.len() < 40, "{}", results.len());
    let sessions = std::fs::read_to_string(test.path("out/sessions.jsonl")).unwrap();
    let records: Vec<Value> = sessions
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(sessions.lines().count() <= records.len() + 1);
    for result in &results {
        if result["session_id"].is_null() {
            assert_eq!(result["state"], "skipped", "{result}");
            continue;
        }
        assert!(
            records
                .iter()
                .any(|record| record["session_id"] == result["session_id"]),
            "no record for {result}"
        );
    }

    // With room again, `--resume` cuts the torn line and finishes the run.
    let output = test.run(&[&args[..], &["--resume"]].concat());
    output.expect_code(0);
    let results = latest(&test, "out");
    assert_eq!(results.len(), 40);
    assert!(results.values().all(|line| line["state"] == "success"));
}

/// The task ids the mock was sent requests for (each task's text is
/// `task ID`), with how many each.
fn paid(server: &MockServer) -> BTreeMap<String, usize> {
    let mut paid = BTreeMap::new();
    for request in server.requests() {
        let messages = request["body"]["messages"].as_array().unwrap();
        let text = messages.last().unwrap()["content"].as_str().unwrap();
        let id = text.strip_prefix("task ").unwrap().to_string();
        *paid.entry(id).or_insert(0) += 1;
    }
    paid
}

#[test]
fn a_failed_write_loses_at_most_the_tasks_in_flight_and_names_the_finished_ones() {
    // Issue 26: a failed write dropped everything queued for the writer
    // (111-159 paid tasks at -j 16), unnamed. Now a task holds its slot
    // until its lines are on disk, a failed write is cut back and retried
    // task by task, and what still does not fit is named.
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let tasks = 300;
    let jobs = 16;
    let test = test.file("t.yaml", &tactic(&server.base_url())).file(
        "tasks.jsonl",
        &(0..tasks)
            .map(|i| {
                json!({"id": format!("t{i:03}"), "task": format!("task t{i:03}")}).to_string()
                    + "\n"
            })
            .collect::<String>(),
    );
    let jobs_text = jobs.to_string();
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-j",
        &jobs_text,
        "-q",
        "--no-store",
    ];
    // 64 KiB per file: a few dozen records fit, then writes fail.
    let output = run_with_file_limit(&test, 128, &args);
    output.expect_code(1);
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    let error = errors[0];
    assert!(
        error.contains("cannot write `out/sessions.jsonl`")
            && error.contains("what was written before is intact")
            && error.contains("`--resume` runs them again"),
        "{error}"
    );

    // Both files are whole (the failed writes were cut back): every record
    // has its result line, every success its record. Tasks the stop caught
    // before they started have a `skipped` result and no record.
    let results = read_lines(&test, "out/results.jsonl");
    let records = read_lines(&test, "out/sessions.jsonl");
    let ids = |lines: &[Value], key: &str, state: Option<&str>| -> BTreeSet<String> {
        lines
            .iter()
            .filter(|line| state.is_none_or(|state| line["state"] == state))
            .map(|line| line[key].as_str().unwrap().to_string())
            .collect()
    };
    let recorded = ids(&records, "task_id", None);
    let finished = ids(&results, "id", Some("success"));
    assert_eq!(recorded.len(), records.len(), "one record per task");
    assert!(recorded.is_subset(&ids(&results, "id", None)));
    assert!(finished.is_subset(&recorded));
    for line in results.iter().filter(|line| line["state"] != "success") {
        assert_eq!(line["state"], "skipped", "{line}");
        assert_eq!(line["error"], "cancelled: the output could not be written");
    }
    assert!(!finished.is_empty() && finished.len() < tasks);

    // What was paid for and is not on disk as finished: at most the tasks
    // in flight.
    let paid_before = paid(&server);
    let lost: BTreeSet<&String> = paid_before
        .keys()
        .filter(|id| !finished.contains(*id))
        .collect();
    assert!(
        lost.len() <= jobs,
        "{} paid tasks are not on disk, more than -j {jobs}: {lost:?}",
        lost.len()
    );
    // The finished ones among them are named, with their count.
    let named: Vec<&str> = error
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| word.starts_with('t') && word.len() == 4)
        .collect();
    assert!(!named.is_empty(), "{error}");
    for id in &named {
        assert!(lost.contains(&id.to_string()), "{id} is named but on disk");
    }
    // Their count is said; past the first ten, the rest as "and N more".
    let count: usize = error
        .split(" finished task")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no count of the finished tasks: {error}"));
    assert!(count >= named.len() && count <= jobs, "{error}");
    let verb = if count == 1 { "task was" } else { "tasks were" };
    assert!(
        error.contains(&format!("{count} finished {verb} not written")),
        "{error}"
    );
    if count > named.len() {
        assert!(
            error.contains(&format!("and {} more", count - named.len())),
            "{error}"
        );
    } else {
        assert_eq!(count, named.len(), "{error}");
    }

    // With room again, `--resume` finishes the run and pays again only for
    // the tasks that were not on disk.
    let output = test.run(&[&args[..], &["--resume"]].concat());
    output.expect_code(0);
    let results = latest(&test, "out");
    assert_eq!(results.len(), tasks);
    assert!(results.values().all(|line| line["state"] == "success"));
    for (id, times) in paid(&server) {
        let expected = if lost.contains(&id) { 2 } else { 1 };
        assert_eq!(times, expected, "task {id} was paid for {times} times");
    }
}

#[test]
fn a_file_size_limit_is_a_failed_write_and_not_a_kill() {
    // SIGXFSZ's default action kills the process; lllm handles it, so the
    // write fails (EFBIG) and the batch stops with its one error line.
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(40, |i| format!("task {i}")));
    let output = run_limited(
        &test,
        "ulimit -f 16",
        &[
            "batch",
            "tasks.jsonl",
            "-t",
            "t.yaml",
            "-o",
            "out",
            "-q",
            "--no-store",
        ],
    );
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("error: cannot write `out/sessions.jsonl`: File too large"),
        "{}",
        output.stderr
    );
    // What is on disk is whole (every line reads), and every record has its
    // result line.
    let results = read_lines(&test, "out/results.jsonl");
    for record in read_lines(&test, "out/sessions.jsonl") {
        assert!(
            results
                .iter()
                .any(|line| line["session_id"] == record["session_id"]),
            "no result line for {}",
            record["task_id"]
        );
    }
}

#[test]
fn replay_of_a_task_run_again_shows_its_latest_session_and_names_the_others() {
    let test = Test::new();
    // t1 fails the first time (a 400 is never retried), then succeeds.
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: \"task 1\"}\n    reply: {fault: {status: 400}}\n    times: 1\ndefault: {echo: true}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &task_lines(3, |i| format!("task {i}")));
    let args = [
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
    ];
    test.run(&args).expect_code(1);
    test.run(&[&args[..], &["--retry-errors"]].concat())
        .expect_code(0);
    let sessions = read_lines(&test, "out/sessions.jsonl");
    let t1: Vec<&Value> = sessions.iter().filter(|s| s["task_id"] == "t01").collect();
    assert_eq!(t1.len(), 2);
    let (old, new) = (
        t1[0]["session_id"].as_str().unwrap(),
        t1[1]["session_id"].as_str().unwrap(),
    );
    assert_eq!(t1[0]["state"], "failure");

    let output = test.run(&["replay", "out/sessions.jsonl", "--id", "t01"]);
    output.expect_code(0);
    assert!(
        output.stdout.starts_with(&format!("session {new} ")),
        "{}",
        output.stdout
    );
    assert!(output.stdout.contains("· success ·"), "{}", output.stdout);
    let note = output.stderr.trim();
    assert!(
        note.starts_with("note: task `t01` has 2 sessions"),
        "{note}"
    );
    assert!(
        note.contains(&format!("showing the latest, {new} (success")),
        "{note}"
    );
    assert!(note.contains(&format!("earlier: {old} (failure")), "{note}");
    assert!(note.contains("--id SESSION_ID"), "{note}");
    assert_eq!(output.stderr.lines().count(), 1);

    // The older one by its session id, without a note.
    let output = test.run(&["replay", "out/sessions.jsonl", "--id", old]);
    output.expect_code(0);
    assert!(output.stdout.starts_with(&format!("session {old} ")));
    assert!(output.stdout.contains("· failure ·"), "{}", output.stdout);
    assert_eq!(output.stderr, "");
    // A task that ran once: no note.
    let output = test.run(&["replay", "out/sessions.jsonl", "--id", "t00"]);
    output.expect_code(0);
    assert_eq!(output.stderr, "");
}
