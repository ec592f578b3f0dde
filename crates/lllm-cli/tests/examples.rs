//! Every shipped tactic runs offline on its scripted `mock/` replies, from any
//! working directory, and does what README.md and docs/tactics.md say it does.

mod common;

use common::Test;

fn run_example(tactic: &str, task: &str) -> common::Output {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let test = Test::new();
    let output = test.run(&[
        "run",
        &format!("{root}/tactics/{tactic}"),
        "--task",
        task,
        "--no-record",
    ]);
    output.expect_code(0);
    output
}

#[test]
fn the_summarize_example_drafts_checks_and_reviews() {
    let output = run_example("summarize.yaml", "A long text about parks.");
    assert!(output.stdout.contains("Critic: ok."), "{}", output.stdout);
    assert!(output.stderr.contains("3 calls"), "{}", output.stderr);
}

#[test]
fn the_critique_loop_revises_until_approved() {
    let output = run_example("critique_loop.yaml", "Explain what a hash map is.");
    assert!(
        output.stdout.contains("collision"),
        "the revised answer is delivered: {}",
        output.stdout
    );
    assert!(
        output.stderr.contains("4 calls"),
        "draft, review, revise, review: {}",
        output.stderr
    );
}

#[test]
fn the_research_agent_reads_its_notes() {
    let output = run_example("research.yaml", "When is the parks project due?");
    assert_eq!(
        output.stdout,
        "The parks project is due on 30 June 2027 (source: parks-project.md).\n"
    );
}

#[test]
fn map_then_summarize_runs_one_branch_per_topic() {
    let output = run_example("map_summarize.yaml", "tides,volcanoes,glaciers");
    assert_eq!(
        output.stdout,
        "Three notes were written in parallel and summarized here.\n"
    );
    assert!(
        output.stderr.contains("4 calls"),
        "three notes and a summary: {}",
        output.stderr
    );
}

#[test]
fn triage_sorts_a_ticket_into_json_that_fits_its_contract() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let test = Test::new();
    let tactic = format!("{root}/tactics/triage.yaml");
    let output = test.run(&[
        "run",
        &tactic,
        "--task",
        "Sort it.",
        "--var",
        "ticket=Our whole shop is down since nine.",
        "--no-record",
    ]);
    output.expect_code(0);
    let delivery: serde_json::Value = serde_json::from_str(&output.stdout).expect("JSON");
    assert_eq!(
        delivery,
        serde_json::json!({"category": "outage", "urgent": true})
    );
}

/// `examples/tasks.jsonl` runs every shipped tactic under `lllm batch`,
/// offline, several tasks each and all at once: each task (each tactic run)
/// is served its tactic's mock script from the start, as `lllm run` is.
#[test]
fn every_shipped_tactic_runs_in_a_batch() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let tasks_file = format!("{root}/examples/tasks.jsonl");
    let tasks: Vec<serde_json::Value> = std::fs::read_to_string(&tasks_file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // Every shipped tactic is in the file, more than once.
    let mut shipped: Vec<String> = std::fs::read_dir(format!("{root}/tactics"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && !name.ends_with(".mock.yaml"))
        .collect();
    shipped.sort();
    assert_eq!(shipped.len(), 6, "{shipped:?}");
    for tactic in &shipped {
        let uses = tasks
            .iter()
            .filter(|task| task["tactic"] == format!("../tactics/{tactic}"))
            .count();
        assert!(
            uses >= 2,
            "`{tactic}` has {uses} task(s) in examples/tasks.jsonl"
        );
    }

    let test = Test::new();
    // The lines name tactics outside the TASKS file's directory: only where
    // the user allows (`--tactics-dir`).
    let tactics_dir = format!("{root}/tactics");
    let refused = test.run(&["batch", &tasks_file, "-o", "refused", "-q"]);
    refused.expect_code(2);
    assert!(
        refused
            .stderr
            .contains("outside the TASKS file's directory")
            && refused.stderr.contains("--tactics-dir"),
        "{}",
        refused.stderr
    );
    let output = test.run(&[
        "batch",
        &tasks_file,
        "--tactics-dir",
        &tactics_dir,
        "-o",
        "out",
        "-j",
        "8",
        "-q",
    ]);
    output.expect_code(0);
    let results: Vec<serde_json::Value> = std::fs::read_to_string(test.path("out/results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(results.len(), tasks.len());
    for result in &results {
        assert_eq!(result["state"], "success", "{result}");
        let id = result["id"].as_str().unwrap();
        let delivery = result["delivery"].as_str().unwrap();
        let calls = result["calls"].as_u64().unwrap();
        // What `lllm run` of the same tactic delivers (the tests above).
        let (expected, expected_calls) = match id.split('-').next().unwrap() {
            "summarize" => ("Critic: ok.", 3),
            "critique" => ("collision", 4),
            "research" => ("due on 30 June 2027 (source: parks-project.md)", 3),
            "map" => (
                "Three notes were written in parallel and summarized here.",
                4,
            ),
            "triage" if id.ends_with("invoice") => ("\"billing\"", 1),
            "triage" => ("\"category\": \"outage\", \"urgent\": true", 1),
            "grader" if id.ends_with("label") => ("\"pass\": true", 1),
            "grader" => ("\"pass\": false", 1),
            other => panic!("unexpected task `{other}`"),
        };
        assert!(delivery.contains(expected), "{id}: {delivery}");
        assert_eq!(calls, expected_calls, "{id}");
    }
}

#[test]
fn every_shipped_tactic_bounds_its_replies() {
    // A small local model otherwise rambles into its context window (a
    // critic wrote 3,800 tokens and the repair turn overflowed 4,096).
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let test = Test::new();
    for tactic in [
        "summarize.yaml",
        "critique_loop.yaml",
        "map_summarize.yaml",
        "research.yaml",
        "triage.yaml",
        "grader.yaml",
    ] {
        let output = test.run(&["run", &format!("{root}/tactics/{tactic}"), "--show-config"]);
        output.expect_code(0);
        let config: serde_json::Value = serde_json::from_str(&output.stdout).expect("JSON");
        for agent in config["agent_configs"].as_array().expect("agents") {
            let bound = agent["model_args"]["max_tokens"].as_u64();
            assert!(
                bound.is_some_and(|tokens| tokens <= 4096),
                "{tactic}: agent {} has no max_tokens: {agent}",
                agent["name"]
            );
        }
    }
}
