//! Records written by the library's verbs: a program's `call`, `bcall`,
//! `ccall` and `quick` leave their records in the session store with no code
//! of their own, so the real `lllm logs` lists them and `lllm replay` renders
//! them; a directory named in code gets the files, `Records::none()` and
//! `LLLM_RECORDS=off` write nothing, a record that cannot be written costs
//! the run nothing, and two processes writing to one store lose nothing.
//!
//! The library reads where the store is from its process's environment, so
//! each case runs in a child process: this test binary again, with a cleared
//! environment (HOME, XDG_DATA_HOME and XDG_CONFIG_HOME in the test's
//! directory) and `LLLM_TEST_CHILD` naming what the child does. A test run
//! as the parent starts its children and checks what they left.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use futures_util::StreamExt;
use lllm::{Ctx, Flow, FlowResult, Records, Registry, Tactic, Task};
use serde_json::Value;

const CHILD: &str = "LLLM_TEST_CHILD";

const ECHO: &str = "agent_configs: [{name: echo, model_name: mock/echo}]";

/// The test's directory as the children and `lllm` see it.
struct Home {
    test: common::Test,
}

impl Home {
    fn new() -> Home {
        let test = common::Test::new();
        let data = test.path("data").display().to_string();
        let config = test.path("config").display().to_string();
        Home {
            test: test
                .env("XDG_DATA_HOME", &data)
                .env("XDG_CONFIG_HOME", &config),
        }
    }

    /// Where `lllm logs` and the library find the store.
    fn store(&self) -> PathBuf {
        self.test.path("data/lllm")
    }

    /// This test binary again, running `test` as the child `mode` in the
    /// test's environment (and `extra` variables).
    fn child(&self, test: &str, mode: &str, extra: &[(&str, &str)]) -> Command {
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .current_dir(self.test.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.test.dir.path())
            .env("XDG_DATA_HOME", self.test.path("data"))
            .env("XDG_CONFIG_HOME", self.test.path("config"))
            .env(CHILD, mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in extra {
            command.env(name, value);
        }
        command
    }

    #[track_caller]
    fn run_child(&self, test: &str, mode: &str, extra: &[(&str, &str)]) -> common::Output {
        let output = self.child(test, mode, extra).output().expect("start child");
        let output = common::Output::of(output);
        output.expect_code(0);
        output
    }

    /// `lllm logs --json`: one object per session.
    fn logs(&self) -> Vec<Value> {
        let output = self.test.run(&["logs", "--json", "-n", "100000"]);
        output.expect_code(0).json_lines()
    }
}

/// Every file under `dir`, recursively (none when it does not exist).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn echo() -> Tactic {
    Tactic::from_yaml(ECHO, "/nonexistent", &Registry::new()).expect("the echo tactic")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The child's side: the runs `mode` names, each through a verb with the
/// tactic's default records (the store of the environment).
fn child(mode: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let tactic = echo();
        match mode {
            "verbs" => {
                assert_eq!(tactic.call("by call").await.unwrap(), "by call");
                let all = tactic.bcall(["by bcall"]).await;
                assert_eq!(all[0].as_deref().unwrap(), "by bcall");
                assert_eq!(tactic.try_bcall(["by try_bcall"]).await.unwrap().len(), 1);
                let mut stream = tactic.ccall(["by ccall"]);
                while let Some((_, result)) = stream.next().await {
                    assert_eq!(result.unwrap(), "by ccall");
                }
                let records = tactic.bcall(["by records"]).records().await;
                assert_eq!(records.len(), 1);
                let reply = lllm::quick("by quick").model("mock/echo").await.unwrap();
                assert_eq!(reply.content, "by quick");
                // `run` is the building block: it writes nothing.
                let record = tactic.run(Task::new("by run")).await;
                assert_eq!(record.delivery.as_deref(), Some("by run"));
            }
            "none" => {
                let tactic = tactic.with_records(Records::none());
                assert_eq!(tactic.call("nowhere").await.unwrap(), "nowhere");
                let results = tactic.bcall(["a", "b"]).await;
                assert!(results.iter().all(Result::is_ok));
                let reply = lllm::quick("q")
                    .model("mock/echo")
                    .write_records(Records::none());
                assert_eq!(reply.await.unwrap().content, "q");
            }
            "off" => {
                // `LLLM_RECORDS=off` in the environment: the default is nowhere.
                assert_eq!(tactic.call("off").await.unwrap(), "off");
                assert_eq!(tactic.ccall(["x", "y"]).count().await, 2);
            }
            "unwritable" => {
                // `LLLM_RECORDS` names a store under a file: every run still
                // returns its result; one warning says where.
                for number in 0..3 {
                    let text = format!("still answered {number}");
                    assert_eq!(tactic.call(text.as_str()).await.unwrap(), text);
                }
                let all = tactic.bcall(["a", "b", "c"]).concurrency(3).await;
                assert!(all.iter().all(Result::is_ok));
            }
            "many" => {
                let tasks = (0..200).map(|number| Task::new(format!("task {number}")));
                let mut stream = tactic.ccall(tasks).concurrency(32);
                let mut done = 0;
                while let Some((_, result)) = stream.next().await {
                    result.unwrap();
                    done += 1;
                }
                assert_eq!(done, 200);
            }
            other => panic!("unknown child mode `{other}`"),
        }
    });
}

#[test]
fn the_verbs_write_records_that_lllm_logs_lists_and_lllm_replay_renders() {
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let home = Home::new();
    home.run_child(
        "the_verbs_write_records_that_lllm_logs_lists_and_lllm_replay_renders",
        "verbs",
        &[],
    );
    let sessions = home.logs();
    let tasks: BTreeSet<&str> = sessions
        .iter()
        .map(|session| session["task"].as_str().unwrap())
        .collect();
    // One session per verb's run, `run`'s not among them.
    assert_eq!(
        tasks,
        BTreeSet::from([
            "by call",
            "by bcall",
            "by try_bcall",
            "by ccall",
            "by records",
            "by quick"
        ])
    );
    assert_eq!(sessions.len(), 6);
    // Each record is a file in the store's `sessions/`, as `lllm run`'s.
    let records = home.store().join("sessions");
    for session in &sessions {
        let id = session["session_id"].as_str().unwrap();
        let file = records.join(format!("{id}.json"));
        assert!(file.is_file(), "{}", file.display());
        let shown = home.test.run(&["replay", file.to_str().unwrap()]);
        shown.expect_code(0);
        assert!(
            shown.stdout.contains(&format!("session {id}")),
            "{}",
            shown.stdout
        );
        let show = home.test.run(&["logs", "show", id]);
        show.expect_code(0);
        assert!(
            show.stdout.contains(session["task"].as_str().unwrap()),
            "{}",
            show.stdout
        );
    }
}

#[test]
fn records_none_and_lllm_records_off_write_nothing() {
    let test = "records_none_and_lllm_records_off_write_nothing";
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let home = Home::new();
    let none = home.run_child(test, "none", &[]);
    let off = home.run_child(test, "off", &[("LLLM_RECORDS", "off")]);
    assert_eq!(files_under(&home.test.path("data")), Vec::<PathBuf>::new());
    // Nothing in the test's directory either (no `sessions/` where it ran).
    assert_eq!(
        files_under(home.test.dir.path()),
        Vec::<PathBuf>::new(),
        "{}{}",
        none.stderr,
        off.stderr
    );
}

#[test]
fn a_record_that_cannot_be_written_is_one_warning_and_the_results_are_returned() {
    let test = "a_record_that_cannot_be_written_is_one_warning_and_the_results_are_returned";
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let home = Home::new();
    let blocker = home.test.path("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let store = blocker.join("store");
    let output = home.run_child(
        test,
        "unwritable",
        &[("LLLM_RECORDS", store.to_str().unwrap())],
    );
    let warnings: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", output.stderr);
    assert!(
        warnings[0].starts_with(&format!(
            "warning: cannot write session records in `{}`: ",
            store.join("sessions").display()
        )),
        "{}",
        warnings[0]
    );
}

#[test]
fn two_processes_writing_to_one_store_lose_nothing() {
    let test = "two_processes_writing_to_one_store_lose_nothing";
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let home = Home::new();
    // Both at once, each with 32 runs in flight.
    let first = home.child(test, "many", &[]).spawn().expect("first child");
    let second = home.child(test, "many", &[]).spawn().expect("second child");
    for child in [first, second] {
        let output = common::Output::of(child.wait_with_output().expect("a child"));
        output.expect_code(0);
        assert!(!output.stderr.contains("warning"), "{}", output.stderr);
    }
    let sessions = home.logs();
    assert_eq!(sessions.len(), 400);
    let ids: BTreeSet<&str> = sessions
        .iter()
        .map(|session| session["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 400);
    assert_eq!(files_under(&home.store().join("sessions")).len(), 400);
    // `records.list` names every file once.
    let list = std::fs::read_to_string(home.store().join("records.list")).unwrap();
    assert_eq!(list.lines().collect::<BTreeSet<_>>().len(), 400);
}

#[test]
fn a_directory_named_in_code_gets_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let records = runtime().block_on(async {
        echo()
            .bcall(["one", "two", "three"])
            .write_records(Records::dir(dir.path()))
            .records()
            .await
    });
    let mut written: Vec<String> = files_under(dir.path())
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let mut expected: Vec<String> = records
        .iter()
        .map(|record| format!("{}.json", record.session_id))
        .collect();
    expected.sort();
    assert_eq!(written, expected);
    for record in &records {
        let file = dir.path().join(format!("{}.json", record.session_id));
        assert_eq!(lllm::replay::load(&file, None).unwrap(), *record);
    }
}

/// A programmed tactic for the re-run below: two turns of one agent.
struct TwoTurns;

impl Flow for TwoTurns {
    const NAME: &'static str = "two_turns";
    const AGENTS: &'static [&'static str] = &["echo"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let [echo] = cx.agents(["echo"])?;
        echo.open("main")?;
        echo.receive(task.text())?;
        let first = echo.respond().await?;
        echo.receive(format!("again: {}", first.content))?;
        let second = echo.respond().await?;
        Ok(second.content)
    }
}

#[test]
fn a_programmed_tactic_built_in_code_reruns_identically_from_its_record_file() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new().flow(TwoTurns);
    let config = lllm::config::TacticConfig::builder()
        .set("tactic_type", "two_turns")
        .agent(lllm::config::AgentEntry::new("echo").model("mock/echo"))
        .build()
        .unwrap();
    let runtime = runtime();
    let tactic = Tactic::from_config(config, &registry)
        .unwrap()
        .with_records(Records::dir(dir.path()));
    let record = runtime.block_on(tactic.call_record("hello"));
    assert_eq!(record.delivery.as_deref(), Some("again: hello"));
    assert_eq!(record.tactic.body.as_deref(), Some("rust:two_turns"));
    let file = Records::dir(dir.path()).file_for(&record).unwrap();
    let rerun = runtime
        .block_on(lllm::replay::rerun(&file, &registry).into_future())
        .unwrap();
    assert!(rerun.is_identical(), "{:?}", rerun.difference());
    assert_eq!(rerun.replayed, 2);
    assert_eq!(rerun.record.delivery, record.delivery);
    // A different model diverges at the first call, and says where.
    let other = runtime
        .block_on(
            lllm::replay::rerun(&record, &registry)
                .model("mock/script")
                .into_future(),
        )
        .unwrap();
    assert!(!other.is_identical());
    assert!(
        other.difference().unwrap().contains("agent `echo`"),
        "{:?}",
        other.difference()
    );
    // Without the flow in the registry: an error naming the way.
    let error = runtime
        .block_on(lllm::replay::rerun(&file, &Registry::new()).into_future())
        .unwrap_err();
    assert!(error.to_string().contains("`two_turns`"), "{error}");
}
