//! `lllm merge`: the shards of `lllm batch --shard K/N` made into the whole
//! run (ids, summary, records), missing and duplicated ids reported, bad
//! inputs refused before anything is written, the output's lock; and the
//! Slurm and Kubernetes examples run as their engines would run them.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Output, Test};
use serde_json::{Value, json};

const ECHO_TACTIC: &str = "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\n";

const TASKS: usize = 30;

fn test_with_tasks() -> Test {
    let tasks: String = (0..TASKS)
        .map(|i| {
            json!({
                "id": format!("t{i}"),
                "task": format!("task {i}"),
                "tags": {"group": format!("g{}", i % 3)},
                "args": {"n": i},
            })
            .to_string()
                + "\n"
        })
        .collect();
    Test::new()
        .file("echo.yaml", ECHO_TACTIC)
        .file("tasks.jsonl", &tasks)
}

fn lines(test: &Test, file: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(file))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn ids(test: &Test, dir: &str) -> BTreeSet<String> {
    lines(test, &format!("{dir}/results.jsonl"))
        .iter()
        .map(|line| line["id"].as_str().unwrap().to_string())
        .collect()
}

/// `whole` (one unsharded run) and `s1`…`s3` (`--shard K/3`).
fn batches(test: &Test) {
    test.batch("echo.yaml", "whole", &[]).expect_code(0);
    for k in 1..=3 {
        test.batch(
            "echo.yaml",
            &format!("s{k}"),
            &["--shard", &format!("{k}/3")],
        )
        .expect_code(0);
    }
}

/// The summary's counts and spend (not this invocation's wall time).
fn totals(summary: &Value) -> Value {
    json!([
        summary["total"],
        summary["success"],
        summary["failure"],
        summary["skipped"],
        summary["not_run"],
        summary["calls"],
        summary["tokens"],
        summary["cost"],
        summary["shard"],
    ])
}

#[test]
fn shards_merge_into_the_unsharded_run() {
    let test = test_with_tasks();
    batches(&test);
    let output = test.run(&["merge", "s1", "s2", "s3", "-o", "merged"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains("lllm merge summary"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("missing"), "{}", output.stderr);
    assert!(!output.stderr.contains("duplicate"), "{}", output.stderr);
    assert_eq!(ids(&test, "merged"), ids(&test, "whole"));
    assert_eq!(ids(&test, "merged").len(), TASKS);
    assert_eq!(
        totals(&test.read_json("merged/summary.json")),
        totals(&test.read_json("whole/summary.json"))
    );
    // Each id once, with its delivery, tags and args (results join to inputs).
    let merged = lines(&test, "merged/results.jsonl");
    assert_eq!(merged.len(), TASKS);
    for line in &merged {
        let n: u64 = line["id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(line["delivery"], json!(format!("task {n}")));
        assert_eq!(line["args"], json!({"n": n}));
        assert_eq!(line["tags"], json!({"group": format!("g{}", n % 3)}));
    }
    // Every record, each result's session among them.
    let sessions: BTreeSet<String> = lines(&test, "merged/sessions.jsonl")
        .iter()
        .map(|record| record["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), TASKS);
    for line in &merged {
        assert!(sessions.contains(line["session_id"].as_str().unwrap()));
    }
    // The merged directory is the whole file's run: `--resume` has nothing to do.
    assert_eq!(test.read_json("merged/batch.json")["shard"], Value::Null);
    test.batch("echo.yaml", "merged", &["--resume"])
        .expect_code(0);
    assert_eq!(lines(&test, "merged/results.jsonl").len(), TASKS);
    assert_eq!(
        test.read_json("merged/summary.json")["this_run"]["tasks"],
        0
    );
    // An earlier merge's directory is replaced by the next merge.
    test.run(&["merge", "s1", "s2", "s3", "-o", "merged", "-q"])
        .expect_code(0);
    assert_eq!(lines(&test, "merged/results.jsonl").len(), TASKS);
}

#[test]
fn a_missing_shard_is_reported_by_its_ids_or_by_its_number() {
    let test = test_with_tasks();
    batches(&test);
    let absent = ids(&test, "s3");
    let output = test.run(&["merge", "s1", "s2", "-o", "merged"]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains(&format!("missing: {} ids of `tasks.jsonl`", absent.len())),
        "{}",
        output.stderr
    );
    for id in &absent {
        assert!(
            output.stderr.contains(&format!("`{id}`")),
            "{id}: {}",
            output.stderr
        );
    }
    let summary = test.read_json("merged/summary.json");
    assert_eq!(summary["total"], TASKS);
    assert_eq!(summary["not_run"], absent.len());
    // `lllm batch --resume` on the merged directory runs exactly those.
    test.batch("echo.yaml", "merged", &["--resume"])
        .expect_code(0);
    assert_eq!(ids(&test, "merged"), ids(&test, "whole"));

    // Without the task file the ids are unknown, the absent shard is not.
    std::fs::rename(test.path("tasks.jsonl"), test.path("moved.jsonl")).unwrap();
    let output = test.run(&["merge", "s1", "s2", "-o", "merged2"]);
    output.expect_code(1);
    assert!(
        output.stderr.contains("missing: no input holds shard 3/3"),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("hint: pass `--tasks FILE`"),
        "{}",
        output.stderr
    );
    // `--tasks` names it.
    let output = test.run(&[
        "merge",
        "s1",
        "s2",
        "-o",
        "merged3",
        "--tasks",
        "moved.jsonl",
    ]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains(&format!("missing: {} ids of `moved.jsonl`", absent.len())),
        "{}",
        output.stderr
    );
}

/// Copies `from` to `to` with the result line of `id` turned into a failure.
fn copy_with_failure(test: &Test, from: &str, to: &str, id: &str) {
    std::fs::create_dir(test.path(to)).unwrap();
    for file in ["sessions.jsonl", "batch.json"] {
        std::fs::copy(
            test.path(&format!("{from}/{file}")),
            test.path(&format!("{to}/{file}")),
        )
        .unwrap();
    }
    let results: String = lines(test, &format!("{from}/results.jsonl"))
        .into_iter()
        .map(|mut line| {
            if line["id"] == id {
                line["state"] = json!("failure");
                line["delivery"] = Value::Null;
                line["error"] = json!("it failed");
            }
            line.to_string() + "\n"
        })
        .collect();
    std::fs::write(test.path(&format!("{to}/results.jsonl")), results).unwrap();
}

#[test]
fn duplicates_are_reported_and_a_success_wins_then_the_newest() {
    let test = test_with_tasks();
    batches(&test);
    let s1_ids = ids(&test, "s1");
    let failed = s1_ids.iter().next().unwrap().clone();
    copy_with_failure(&test, "s1", "s1x", &failed);
    // `s1x` ran after `whole`, and is named last: its failure still loses.
    let output = test.run(&["merge", "whole", "s1x", "-o", "merged"]);
    output.expect_code(0);
    let reported: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("duplicate: "))
        .collect();
    assert_eq!(reported.len(), s1_ids.len(), "{}", output.stderr);
    assert!(
        output.stderr.contains(&format!(
            "duplicate: `{failed}` is in `whole`, `s1x`; kept the success from `whole`"
        )),
        "{}",
        output.stderr
    );
    // The others: both successes, `s1x`'s sessions ended last.
    let other = s1_ids.iter().nth(1).unwrap();
    assert!(
        output.stderr.contains(&format!(
            "duplicate: `{other}` is in `whole`, `s1x`; kept the success from `s1x`"
        )),
        "{}",
        output.stderr
    );
    let merged = lines(&test, "merged/results.jsonl");
    assert_eq!(merged.len(), TASKS);
    assert!(merged.iter().all(|line| line["state"] == "success"));
    let summary = test.read_json("merged/summary.json");
    assert_eq!(
        (summary["success"].clone(), summary["not_run"].clone()),
        (json!(TASKS), json!(0))
    );
    // Spend counts every line of every input: calls of both runs.
    assert_eq!(summary["calls"], TASKS + s1_ids.len());
    // `replay --id` shows the winner (its record is the id's last).
    let winner = merged
        .iter()
        .find(|line| line["id"] == failed.as_str())
        .unwrap();
    let replay = test.run(&["replay", "merged/sessions.jsonl", "--id", &failed, "--json"]);
    replay.expect_code(0);
    let shown: Value = serde_json::from_str(&replay.stdout).unwrap();
    assert_eq!(shown["session_id"], winner["session_id"]);
}

#[test]
fn bad_inputs_exit_2_and_write_nothing() {
    let test = test_with_tasks();
    batches(&test);
    // A bad line, named by file and line.
    copy_with_failure(&test, "s2", "bad", "none");
    let mut text = std::fs::read_to_string(test.path("bad/results.jsonl")).unwrap();
    text.push_str("{\"id\": \"x\", \"state\": \"done\"}\n");
    let line = text.lines().count();
    std::fs::write(test.path("bad/results.jsonl"), text).unwrap();
    let output = test.run(&["merge", "s1", "bad", "-o", "merged"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains(&format!(
            "error: bad/results.jsonl:{line}: not a result line"
        )),
        "{}",
        output.stderr
    );
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(!test.path("merged").exists());
    // A bad session record too.
    std::fs::write(test.path("bad/results.jsonl"), "").unwrap();
    std::fs::write(test.path("bad/sessions.jsonl"), "{\"task_id\": 1}\n").unwrap();
    let output = test.run(&["merge", "s1", "bad", "-o", "merged"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("bad/sessions.jsonl:1: not a session record"),
        "{}",
        output.stderr
    );
    assert!(!test.path("merged").exists());

    let refused = |args: &[&str], part: &str| {
        let output: Output = test.run(args);
        output.expect_code(2);
        assert!(output.stderr.contains(part), "{args:?}: {}", output.stderr);
    };
    refused(
        &["merge", "s1", "s2", "-o", "s1"],
        "`-o s1` is one of the directories to merge",
    );
    refused(
        &["merge", "s1", "s2", "-o", "./s2/"],
        "is one of the directories to merge",
    );
    refused(&["merge", "s1", "./s1", "-o", "merged"], "given twice");
    refused(
        &["merge", "s1", "nowhere", "-o", "merged"],
        "`nowhere` is not a batch directory",
    );
    refused(
        &["merge", "s1", "s2", "-o", "whole"],
        "holds a batch's results",
    );
    assert!(!test.path("merged").exists());
    assert_eq!(lines(&test, "whole/results.jsonl").len(), TASKS);
}

#[test]
fn a_merge_waits_for_no_one_and_refuses_a_held_output() {
    let test = test_with_tasks();
    batches(&test);
    std::fs::create_dir(test.path("merged")).unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(test.path("merged/.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let output = test.run(&["merge", "s1", "s2", "s3", "-o", "merged"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("is being written by another"),
        "{}",
        output.stderr
    );
    assert!(!test.path("merged/results.jsonl").exists());
    drop(lock);
    wait_until_unlocked(&test.path("merged/.lock"));
    // An input a batch is still writing is refused, not read half-done.
    let writing = std::fs::OpenOptions::new()
        .write(true)
        .open(test.path("s2/.lock"))
        .unwrap();
    writing.try_lock().unwrap();
    let output = test.run(&["merge", "s1", "s2", "s3", "-o", "merged"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`s2` is being written by a running `lllm batch`"),
        "{}",
        output.stderr
    );
    drop(writing);
    wait_until_unlocked(&test.path("s2/.lock"));
    test.run(&["merge", "s1", "s2", "s3", "-o", "merged", "-q"])
        .expect_code(0);
    assert_eq!(ids(&test, "merged").len(), TASKS);
}

/// Waits until nothing holds `path`'s lock. A lock dropped by this test can
/// outlive the drop: a child that another test's thread forked while it was
/// held shares it until that child execs (and closes it).
fn wait_until_unlocked(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        if file.try_lock().is_ok() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "`{}` stays locked",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// ---- The job-engine examples ------------------------------------------------

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A shell command in the test directory, with `lllm` (and `extra`) first on PATH.
fn shell(
    test: &Test,
    program: &str,
    args: &[&str],
    env: &[(&str, String)],
    extra: Option<&Path>,
) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_lllm")).parent().unwrap();
    let mut path =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect::<Vec<_>>();
    path.insert(0, bin.to_path_buf());
    if let Some(extra) = extra {
        path.insert(0, extra.to_path_buf());
    }
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(test.path(""))
        .env_clear()
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("HOME", test.path(""));
    for (key, value) in env {
        command.env(key, value);
    }
    Output::of(command.output().unwrap())
}

#[test]
fn the_slurm_scripts_run_a_sharded_batch_then_the_merge() {
    let dir = examples().join("slurm");
    let scripts = ["submit.sh", "batch.sbatch", "merge.sbatch"];
    let test = test_with_tasks();
    for script in scripts {
        let path = dir.join(script).display().to_string();
        shell(&test, "bash", &["-n", &path], &[], None).expect_code(0);
    }
    // submit.sh: the array, then the merge after it (a stand-in `sbatch`
    // records its arguments and answers a job id as `--parsable` does).
    let fake = test.path("fake-bin");
    std::fs::create_dir(&fake).unwrap();
    let sbatch = fake.join("sbatch");
    std::fs::write(
        &sbatch,
        "#!/bin/sh\necho \"$*\" >> \"$HOME/sbatch.log\"\necho '4242;cluster'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = vec![
        ("TASKS", "tasks.jsonl".to_string()),
        ("TACTIC", "echo.yaml".to_string()),
        ("OUT", "out".to_string()),
        ("SHARDS", "3".to_string()),
    ];
    let submit = dir.join("submit.sh").display().to_string();
    shell(&test, "bash", &[&submit], &env, Some(&fake)).expect_code(0);
    let log = std::fs::read_to_string(test.path("sbatch.log")).unwrap();
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(calls.len(), 2, "{log}");
    assert!(
        calls[0].contains("--array=0-2") && calls[0].ends_with("batch.sbatch"),
        "{log}"
    );
    assert!(
        calls[1].contains("--dependency=afterok:4242 ") && calls[1].ends_with("merge.sbatch"),
        "{log}"
    );

    // The array's elements as Slurm runs them, then the merge job.
    let batch = dir.join("batch.sbatch").display().to_string();
    for index in 0..3 {
        let mut env = env.clone();
        env.push(("SLURM_ARRAY_TASK_ID", index.to_string()));
        shell(&test, "bash", &[&batch], &env, None).expect_code(0);
    }
    let merge = dir.join("merge.sbatch").display().to_string();
    let output = shell(&test, "bash", &[&merge], &env, None);
    output.expect_code(0);
    assert_eq!(ids(&test, "out/merged").len(), TASKS);
    assert_eq!(test.read_json("out/merged/summary.json")["success"], TASKS);

    // Re-running one element (`sbatch --array=1`): it continues its shard.
    std::fs::remove_dir_all(test.path("out/shard-1")).unwrap();
    let output = shell(&test, "bash", &[&merge], &env, None);
    output.expect_code(1);
    assert!(output.stderr.contains("missing:"), "{}", output.stderr);
    let mut element = env.clone();
    element.push(("SLURM_ARRAY_TASK_ID", "1".to_string()));
    shell(&test, "bash", &[&batch], &element, None).expect_code(0);
    shell(&test, "bash", &[&merge], &env, None).expect_code(0);
    assert_eq!(ids(&test, "out/merged").len(), TASKS);
}

/// The shell command and the literal `env` of a Job's first container.
fn job_command(job: &serde_json::Value) -> (String, Vec<(String, String)>) {
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("/bin/sh"));
    assert_eq!(container["command"][1].as_str(), Some("-c"));
    let command = container["args"][0].as_str().unwrap().to_string();
    let env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|var| {
            Some((
                var["name"].as_str()?.to_string(),
                var["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    (command, env)
}

#[test]
fn the_kubernetes_jobs_run_a_sharded_batch_then_the_merge() {
    let dir = examples().join("k8s");
    let read = |name: &str| -> serde_json::Value {
        lllm::yaml::parse(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    let batch = read("batch-job.yaml");
    assert_eq!(batch["kind"].as_str(), Some("Job"));
    assert_eq!(batch["apiVersion"].as_str(), Some("batch/v1"));
    assert_eq!(batch["spec"]["completionMode"].as_str(), Some("Indexed"));
    let completions = batch["spec"]["completions"].as_u64().unwrap();
    assert_eq!(
        batch["spec"]["template"]["spec"]["restartPolicy"].as_str(),
        Some("Never")
    );
    let (command, env) = job_command(&batch);
    assert!(
        command.contains(&format!("--shards {completions} ")),
        "{command}"
    );
    assert_eq!(
        env.iter()
            .find(|(name, _)| name == "DATA")
            .map(|(_, v)| v.as_str()),
        Some("/data")
    );
    let merge = read("merge-job.yaml");
    assert_eq!(merge["kind"].as_str(), Some("Job"));
    let (merge_command, _) = job_command(&merge);

    // Each index as Kubernetes runs it (`JOB_COMPLETION_INDEX`), on a local DATA.
    let test = test_with_tasks().file("tactic.yaml", ECHO_TACTIC);
    let data = test.path("").display().to_string();
    for index in 0..completions {
        let env = vec![
            ("DATA", data.clone()),
            ("JOB_COMPLETION_INDEX", index.to_string()),
        ];
        shell(&test, "/bin/sh", &["-c", &command], &env, None).expect_code(0);
    }
    assert_eq!(
        (0..completions)
            .map(|index| ids(&test, &format!("out/shard-{index}")).len())
            .sum::<usize>(),
        TASKS
    );
    let output = shell(
        &test,
        "/bin/sh",
        &["-c", &merge_command],
        &[("DATA", data)],
        None,
    );
    output.expect_code(0);
    assert_eq!(ids(&test, "out/merged").len(), TASKS);
}

#[test]
fn result_lines_carry_tags_and_args_also_for_lines_that_did_not_run() {
    let tactic = "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo {{ who }}.\"}\n";
    let test = Test::new().file("t.yaml", tactic).file(
        "tasks.jsonl",
        "{\"id\":\"a\",\"task\":\"x\",\"args\":{\"who\":\"me\"},\"tags\":{\"k\":1}}\n\
         {\"id\":\"b\",\"task\":\"y\",\"tags\":{\"k\":2}}\n",
    );
    test.batch("t.yaml", "out", &["--skip-invalid"])
        .expect_code(1);
    let mut results = lines(&test, "out/results.jsonl");
    results.sort_by_key(|line| line["id"].as_str().unwrap().to_string());
    let joined: Vec<Value> = results
        .iter()
        .map(|line| json!([line["id"], line["state"], line["tags"], line["args"]]))
        .collect();
    assert_eq!(
        joined,
        [
            json!(["a", "success", {"k": 1}, {"who": "me"}]),
            json!(["b", "failure", {"k": 2}, {}]),
        ]
    );
}

#[test]
fn an_output_that_is_neither_new_empty_nor_a_merge_is_refused() {
    let test = test_with_tasks();
    batches(&test);
    // A directory of the user's own files: refused, left as it was (no
    // `.lock` either), whatever it holds.
    let test = test
        .file("notes/todo.txt", "precious")
        .file("notes/more/deep.md", "also");
    let output = test.run(&["merge", "s1", "s2", "s3", "-o", "notes"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr.trim(),
        "error: `notes` is not empty and holds no earlier merge (no `merge.json`; it holds \
         `more`, `todo.txt`); hint: merge into a new or empty directory"
    );
    let mut left: Vec<String> = std::fs::read_dir(test.path("notes"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["more", "todo.txt"]);
    assert_eq!(
        std::fs::read_to_string(test.path("notes/todo.txt")).unwrap(),
        "precious"
    );
    // A batch directory that has no results yet is no merge either.
    std::fs::create_dir(test.path("started")).unwrap();
    std::fs::copy(test.path("s1/batch.json"), test.path("started/batch.json")).unwrap();
    let output = test.run(&["merge", "s1", "s2", "s3", "-o", "started"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("it holds `batch.json`"),
        "{}",
        output.stderr
    );

    // New, empty, and an earlier merge's output are taken, as documented.
    std::fs::create_dir(test.path("empty")).unwrap();
    for dir in ["new", "empty", "new"] {
        test.run(&["merge", "s1", "s2", "s3", "-o", dir, "-q"])
            .expect_code(0);
        assert_eq!(ids(&test, dir).len(), TASKS);
    }
}
