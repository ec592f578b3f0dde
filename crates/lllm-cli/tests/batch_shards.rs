//! `lllm batch --shards N` in job arrays as Slurm and Kubernetes run them:
//! stepped arrays, one element resubmitted on its own, and an output
//! directory that records its shard, so a `--resume` of another shard is
//! refused. The environment variables are the ones Slurm sets (checked on
//! Slurm 22.05 and in its documentation).

mod common;

use std::collections::BTreeSet;

use common::{Output, Test};
use serde_json::{Value, json};

const ECHO_TACTIC: &str = "tactic_type: echo\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\n";

fn test_with_tasks(count: usize) -> Test {
    let tasks: String = (0..count)
        .map(|i| json!({"id": format!("t{i}"), "task": format!("task {i}")}).to_string() + "\n")
        .collect();
    Test::new()
        .file("echo.yaml", ECHO_TACTIC)
        .file("tasks.jsonl", &tasks)
}

fn ids(test: &Test, dir: &str) -> BTreeSet<String> {
    std::fs::read_to_string(test.path(&format!("{dir}/results.jsonl")))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            line["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// `lllm batch -q` as array task `id` of `--array=min-max:step` would run it.
fn array_task(test: &Test, id: u64, shape: (u64, u64, u64), args: &[&str]) -> Output {
    array_task_saying(test, id, shape, &[args, &["-q"]].concat())
}

/// [`array_task`] without `-q`: its warnings are said.
fn array_task_saying(
    test: &Test,
    id: u64,
    (min, max, step): (u64, u64, u64),
    args: &[&str],
) -> Output {
    let count = (max - min) / step + 1;
    let mut command =
        test.command(&[&["batch", "tasks.jsonl", "--tactic", "echo.yaml"][..], args].concat());
    for (name, value) in [
        ("SLURM_ARRAY_JOB_ID", 1000),
        ("SLURM_ARRAY_TASK_ID", id),
        ("SLURM_ARRAY_TASK_MIN", min),
        ("SLURM_ARRAY_TASK_MAX", max),
        ("SLURM_ARRAY_TASK_STEP", step),
        ("SLURM_ARRAY_TASK_COUNT", count),
    ] {
        command.env(name, value.to_string());
    }
    Output::of(command.output().unwrap())
}

#[test]
fn a_stepped_array_runs_every_shard() {
    let test = test_with_tasks(40);
    // `#SBATCH --array=0-6:2`: tasks 0, 2, 4 and 6 are the four shards.
    let mut union = BTreeSet::new();
    for id in [0, 2, 4, 6] {
        let dir = format!("out-{id}");
        array_task(&test, id, (0, 6, 2), &["--shards", "4", "-o", &dir]).expect_code(0);
        let shard = ids(&test, &dir);
        assert!(!shard.is_empty(), "array task {id} ran nothing");
        assert!(union.is_disjoint(&shard), "array task {id} repeats tasks");
        union.extend(shard);
        let summary = test.read_json(&format!("{dir}/summary.json"));
        assert_eq!(summary["shard"], format!("{}/4", id / 2 + 1));
    }
    assert_eq!(union.len(), 40, "every task ran in some shard");
    // A list whose places cannot be computed is refused, not guessed.
    let mut command = test.command(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "--shards",
        "3",
        "-o",
        "odd",
    ]);
    for (name, value) in [
        ("SLURM_ARRAY_TASK_ID", "9"),
        ("SLURM_ARRAY_TASK_MIN", "1"),
        ("SLURM_ARRAY_TASK_MAX", "9"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ] {
        command.env(name, value);
    }
    let output = Output::of(command.output().unwrap());
    output.expect_code(2);
    assert!(
        output.stderr.contains("not evenly spaced"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_resubmitted_element_continues_its_own_shard_or_is_refused() {
    let test = test_with_tasks(40);
    // `#SBATCH --array=0-3` with `--shards 4 --resume -o out-$SLURM_ARRAY_TASK_ID`;
    // element 2 stopped early (here: `--limit 2`).
    let whole = (0, 3, 1);
    array_task(
        &test,
        2,
        whole,
        &["--shards", "4", "-o", "out-2", "--limit", "2"],
    )
    .expect_code(0);
    assert_eq!(ids(&test, "out-2").len(), 2);
    let recorded = test.read_json("out-2/batch.json");
    assert_eq!(recorded["shard"], "3/4");
    assert_eq!(recorded["tasks"], "tasks.jsonl");

    // `sbatch --array=2 job.sh`: Slurm now says the array has one task.
    let alone = (2, 2, 1);
    let output = array_task_saying(
        &test,
        2,
        alone,
        &["--shards", "4", "-o", "out-2", "--resume"],
    );
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("continuing shard 3/4 recorded in `out-2`"),
        "{}",
        output.stderr
    );
    // Shard 3/4 is now complete, and is what `--shard 3/4` runs.
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "--shard",
        "3/4",
        "-o",
        "check",
        "-q",
    ])
    .expect_code(0);
    assert_eq!(ids(&test, "out-2"), ids(&test, "check"));

    // An element that never ran has no record of its shard: refused, with the flag.
    let output = array_task(
        &test,
        1,
        (1, 1, 1),
        &["--shards", "4", "-o", "out-1", "--resume"],
    );
    output.expect_code(2);
    assert!(
        output.stderr.contains("as when one element is resubmitted")
            && output
                .stderr
                .contains("pass `--shard 2/4` if the array was `--array=0-3`"),
        "{}",
        output.stderr
    );
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(!test.path("out-1/results.jsonl").exists(), "nothing ran");
}

#[test]
fn a_resume_with_another_shard_is_refused_naming_the_one_that_continues_it() {
    let test = test_with_tasks(40);
    let run = |args: &[&str]| {
        test.run(
            &[
                &["batch", "tasks.jsonl", "--tactic", "echo.yaml", "-q"][..],
                args,
            ]
            .concat(),
        )
    };
    run(&["--shard", "3/4", "-o", "out", "--limit", "2"]).expect_code(0);
    let before = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    // The old hint for a resubmitted element (`--shards 1`) would have run the
    // whole file into shard 3's directory.
    for (args, this_run) in [
        (&["--shard", "1/4"][..], "this run is shard 1/4"),
        (&[][..], "this run is the whole file"),
        (&["--shard", "3/8"][..], "this run is shard 3/8"),
    ] {
        let output = run(&[args, &["-o", "out", "--resume"]].concat());
        output.expect_code(2);
        let expected = format!(
            "error: `out` holds shard 3/4 of `tasks.jsonl`, and {this_run}; hint: pass \
             `--shard 3/4` to continue it, or choose another `-o` directory\n"
        );
        assert_eq!(output.stderr, expected);
    }
    let mut command = test.command(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "--shards",
        "1",
        "-o",
        "out",
        "--resume",
    ]);
    // `sbatch --array=2` of a script with `--shards 1`, the old hint.
    for (name, value) in [
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_MIN", "2"),
        ("SLURM_ARRAY_TASK_MAX", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "1"),
    ] {
        command.env(name, value);
    }
    let output = Output::of(command.output().unwrap());
    output.expect_code(2);
    assert!(
        output.stderr.contains("pass `--shard 3/4`"),
        "{}",
        output.stderr
    );
    assert_eq!(
        std::fs::read_to_string(test.path("out/results.jsonl")).unwrap(),
        before
    );

    // The right shard continues it; an edited task file only warns.
    let edited = std::fs::read_to_string(test.path("tasks.jsonl")).unwrap()
        + "{\"id\": \"new\", \"task\": \"x\"}\n";
    std::fs::write(test.path("tasks.jsonl"), edited).unwrap();
    // Without `-q`, which silences the warning.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "--shard",
        "3/4",
        "-o",
        "out",
        "--resume",
    ]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("changed since the run in `out` began"),
        "{}",
        output.stderr
    );
    let output = run(&["--shard", "3/4", "-o", "out", "--resume"]);
    output.expect_code(0);
    assert_eq!(output.stderr, "", "the record follows the file");
}
