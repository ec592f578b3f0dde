//! Every shipped tactic runs offline on its scripted `mock/` replies, from any
//! working directory, and says what the README says it does.

mod common;

use common::Test;

fn run_example(tactic: &str, task: &str) -> common::Output {
    let root = env!("CARGO_MANIFEST_DIR");
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
    assert!(output.stderr.contains("3 call(s)"), "{}", output.stderr);
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
        output.stderr.contains("4 call(s)"),
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
        output.stderr.contains("4 call(s)"),
        "three notes and a summary: {}",
        output.stderr
    );
}
