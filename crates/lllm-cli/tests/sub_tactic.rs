//! Sub-tactics: a step that runs another tactic file as a unit, its session
//! nested in the parent's record, validated with the parent, replayable.

mod common;

use common::Test;

const SHORTEN: &str = r#"global: {model_name: mock/echo}
agent_configs:
  - name: shortener
flow:
  - step: cut
    agent: shortener
    text: "{{ style }}: {{ task }}"
"#;

fn parent(sub_step: &str) -> String {
    format!(
        r#"global: {{model_name: mock/echo}}
agent_configs:
  - name: writer
flow:
  - step: draft
    agent: writer
    text: "draft of {{{{ task }}}}"
{sub_step}
  - step: final
    agent: writer
    text: "final: {{{{ short.content }}}}"
"#
    )
}

const SUB_STEP: &str = r#"  - step: short
    tactic: sub/shorten.yaml
    task: "{{ draft.content }}"
    args: {style: terse}"#;

#[test]
fn a_step_runs_another_tactic_and_its_session_nests_in_the_record() {
    let test = Test::new()
        .file("flows/parent.yaml", &parent(SUB_STEP))
        .file("flows/sub/shorten.yaml", SHORTEN);
    let output = test.run(&[
        "run",
        "flows/parent.yaml",
        "--task",
        "owls",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "final: terse: draft of owls\n");
    assert!(output.stderr.contains("3 calls"), "{}", output.stderr);

    let record = test.read_json("r.json");
    let subs = record["sub_tactic_sessions"].as_array().unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["tactic"]["name"], "shorten");
    assert_eq!(subs[0]["task"], "draft of owls");
    assert_eq!(subs[0]["args"]["style"], "terse");
    assert_eq!(subs[0]["delivery"], "terse: draft of owls");
    assert_eq!(subs[0]["format"], "lllm.session/3");
    let steps = record["steps"].as_array().unwrap();
    assert_eq!(steps[1]["step"], "short");
    assert_eq!(steps[1]["sub_tactic"], 0);
    assert_eq!(
        steps[1]["agent_call"], 1,
        "placed after the parent's first call"
    );
    assert!(steps[0].get("sub_tactic").is_none());
    assert_eq!(record["agent_calls"].as_array().unwrap().len(), 2);
    let own: u64 = record["agent_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["cost"]["total_tokens"].as_u64().unwrap())
        .sum();
    let nested = subs[0]["cost"]["total_tokens"].as_u64().unwrap();
    assert!(nested > 0);
    assert_eq!(
        record["cost"]["total_tokens"].as_u64().unwrap(),
        own + nested,
        "the run's cost includes the sub-tactic's"
    );

    // The human rendering shows the nested session.
    let shown = test.run(&["replay", "r.json"]);
    shown.expect_code(0);
    assert!(
        shown.stdout.contains("step `short` ran tactic `shorten`:"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("  | session "), "{}", shown.stdout);
}

#[test]
fn sub_tactics_in_a_parallel_foreach_nest_in_branch_order() {
    let test = Test::new()
        .file(
            "parent.yaml",
            r#"global: {model_name: mock/echo}
agent_configs:
  - name: writer
flow:
  - parallel: {foreach: "task | split(',')", as: topic}
    steps:
      - step: short
        tactic: shorten.yaml
        task: "{{ topic }}"
        args: {style: "{{ topic | upper }}"}
  - step: all
    agent: writer
    text: "{{ short | map(attribute='content') | join(' / ') }}"
"#,
        )
        .file("shorten.yaml", SHORTEN);
    let output = test.run(&[
        "run",
        "parent.yaml",
        "--task",
        "a,b,c",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "A: a / B: b / C: c\n");
    let record = test.read_json("r.json");
    let tasks: Vec<&str> = record["sub_tactic_sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sub| sub["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["a", "b", "c"]);
    let indices: Vec<i64> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|step| step["sub_tactic"].as_i64())
        .collect();
    assert_eq!(indices, [0, 1, 2]);

    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(0);
    assert!(
        rerun.stdout.contains("identical: 4 model calls"),
        "{}",
        rerun.stdout
    );
}

#[test]
fn rerun_replays_sub_tactic_calls_and_finds_a_change_inside_one() {
    let test = Test::new()
        .file("parent.yaml", &parent(SUB_STEP))
        .file("sub/shorten.yaml", SHORTEN);
    test.run(&["run", "parent.yaml", "--task", "owls", "--record", "r.json"])
        .expect_code(0);
    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(0);
    assert!(
        rerun.stdout.contains("identical: 3 model calls"),
        "{}",
        rerun.stdout
    );

    std::fs::write(
        test.path("sub/shorten.yaml"),
        SHORTEN.replace("{{ style }}: {{ task }}", "{{ style }} - {{ task }}"),
    )
    .unwrap();
    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(1);
    assert!(
        rerun
            .stderr
            .contains("diverged at model call 2: agent `shortener`, dialog `main`, round 0"),
        "{}",
        rerun.stderr
    );
}

#[test]
fn problems_inside_a_sub_tactic_are_listed_with_the_parent_before_anything_runs() {
    // The sub-tactic needs `style`, which the step does not pass; the
    // sub-tactic file also names an unknown agent.
    let test = Test::new()
        .file(
            "parent.yaml",
            &parent("  - step: short\n    tactic: sub/shorten.yaml\n    task: \"{{ draft.content }}\""),
        )
        .file("sub/shorten.yaml", SHORTEN)
        .file(
            "broken.yaml",
            &parent("  - step: short\n    tactic: sub/broken.yaml"),
        )
        .file(
            "sub/broken.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: b, text: x}\n",
        );
    let output = test.run(&["run", "parent.yaml", "--task", "owls", "--no-record"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("step `short` (tactic `./sub/shorten.yaml`)")
            && output.stderr.contains("`style`"),
        "{}",
        output.stderr
    );

    let output = test.run(&["run", "broken.yaml", "--task", "owls", "--no-record"]);
    output.expect_code(2);
    // Where the step is, then where in the sub-tactic the problem is.
    assert!(
        output.stderr.lines().any(|line| line
            == "error: broken.yaml:8:5: step `short` (tactic `./sub/broken.yaml`): \
                ./sub/broken.yaml:5:15: step `s` uses agent `b`, which is not in \
                `agent_configs`"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_missing_file_a_cycle_and_agent_keys_on_a_tactic_step_are_errors() {
    let test = Test::new()
        .file("missing.yaml", &parent("  - step: short\n    tactic: nowhere.yaml"))
        .file(
            "a.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: x\nflow:\n  - {step: b, tactic: b.yaml}\n",
        )
        .file(
            "b.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: x\nflow:\n  - {step: a, tactic: a.yaml}\n",
        )
        .file(
            "mixed.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: x\nflow:\n  - {step: s, tactic: a.yaml, agent: x, text: hi}\n",
        );
    let output = test.run(&["run", "missing.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    assert!(output.stderr.contains("nowhere.yaml"), "{}", output.stderr);

    let output = test.run(&["run", "a.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("cycle") && output.stderr.contains("a.yaml → "),
        "{}",
        output.stderr
    );

    let output = test.run(&["run", "mixed.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("takes no `agent`") && output.stderr.contains("takes no `text`"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_failed_sub_tactic_fails_the_step_and_is_kept_in_the_record() {
    let test = Test::new()
        .file("parent.yaml", &parent("  - step: short\n    tactic: sub/fails.yaml"))
        .file(
            "sub/fails.yaml",
            // Fails on a step's output, which no pre-flight can know.
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: first, agent: a, text: x}\n  - parallel: {foreach: \"first.content\"}\n    steps:\n      - {step: s, agent: a, text: x}\n",
        );
    let output = test.run(&["run", "parent.yaml", "--task", "owls", "--record", "r.json"]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("step `short`: tactic `fails` failed:")
            && output.stderr.contains("is not a list"),
        "{}",
        output.stderr
    );
    let record = test.read_json("r.json");
    assert_eq!(record["state"], "failure");
    assert_eq!(record["sub_tactic_sessions"][0]["state"], "failure");
}

#[test]
fn a_model_override_reaches_sub_tactics() {
    // The sub-tactic names a server that does not exist; `--model` replaces it.
    let sub = "global: {model_name: nowhere/model}\nproviders:\n  nowhere: {api: openai, base_url: \"http://127.0.0.1:9/v1\"}\nagent_configs:\n  - name: shortener\nflow:\n  - {step: cut, agent: shortener, text: \"{{ style }}: {{ task }}\"}\n";
    let test = Test::new()
        .file("parent.yaml", &parent(SUB_STEP))
        .file("sub/shorten.yaml", sub);
    let output = test.run(&[
        "run",
        "parent.yaml",
        "--task",
        "owls",
        "--model",
        "mock/echo",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "final: terse: draft of owls\n");
    let record = test.read_json("r.json");
    let sub = &record["sub_tactic_sessions"][0];
    assert_eq!(sub["agent_calls"][0]["model"], "mock/echo");
    assert_eq!(
        sub["tactic"]["config"]["agent_configs"][0]["model_name"],
        "mock/echo"
    );
}
