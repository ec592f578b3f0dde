//! A tactic's contract through the real binaries (issue 30): `lllm run` and
//! `lllm batch` check every task against `input_schema` before anything is
//! sent (exit 2, one line per bad task and problem, naming where the task
//! came from and the JSON pointer), counted at `lllm-mock`; a good task
//! still reaches it.

mod common;

use common::{MockServer, Test};

/// A tactic with a contract on a local `lllm-mock`.
fn tactic(server: &MockServer) -> String {
    format!(
        "tactic_type: triage\n\
         global: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: a}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\"}}\n\
         input_schema:\n\
         \x20 type: object\n\
         \x20 required: [ticket]\n\
         \x20 properties:\n\
         \x20   ticket: {{type: string, minLength: 1}}\n\
         \x20   priority: {{type: integer, minimum: 1, maximum: 3}}\n\
         flow:\n  - {{step: sort, agent: a, text: \"Sort: {{{{ ticket }}}}\"}}\n",
        server.base_url()
    )
}

fn setup() -> (Test, MockServer) {
    let test = Test::new().env("OPENAI_API_KEY", "sk-test");
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server));
    (test, server)
}

/// The `error:` lines of a refused command, its exit code checked.
#[track_caller]
fn refused(output: &common::Output) -> Vec<String> {
    output.expect_code(2);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    output.stderr.lines().map(str::to_string).collect()
}

#[test]
fn run_refuses_an_input_that_does_not_fit_naming_where_it_came_from() {
    let (test, server) = setup();
    let test = test.file("ticket.txt", "Printer on fire");
    let run = |args: &[&str]| {
        let mut all = vec!["run", "t.yaml", "--no-record"];
        all.extend_from_slice(args);
        refused(&test.run(&all))
    };
    let string_hint = "; hint: give the input's fields with `--var KEY=VALUE`, or all of it \
                       with `--input JSON`";
    let mut cases: Vec<(Vec<&str>, Vec<String>)> = vec![
        (
            vec!["--var", "ticket=", "--var", "priority=2"],
            vec![
                "error: --var ticket: input at /ticket: \"\" is shorter than 1 character".into(),
                "error: --var priority: input at /priority: \"2\" is not of type \"integer\"; \
                 hint: `--var` values are text; give typed values with `--input JSON`"
                    .into(),
            ],
        ),
        (
            vec!["--var", "other=x"],
            vec!["error: --var: input: \"ticket\" is a required property".into()],
        ),
        (
            vec!["--input", r#"{"ticket": 7, "priority": 9}"#],
            vec![
                "error: --input: input at /ticket: 7 is not of type \"string\"".into(),
                "error: --input: input at /priority: 9 is greater than the maximum of 3".into(),
            ],
        ),
        (
            vec!["Printer on fire"],
            vec![format!(
                "error: TASK: input: \"Printer on fire\" is not of type \"object\"{string_hint}"
            )],
        ),
        (
            vec!["--task", "Printer on fire"],
            vec![format!(
                "error: --task: input: \"Printer on fire\" is not of type \"object\"{string_hint}"
            )],
        ),
        (
            vec!["--task-file", "ticket.txt"],
            vec![format!(
                "error: ticket.txt: input: \"Printer on fire\" is not of type \"object\"{string_hint}"
            )],
        ),
        (
            vec!["--input", "[1, 2]"],
            vec![
                "error: --input is a list; give a JSON object (the task's arguments) or a \
                 string (its text)"
                    .into(),
            ],
        ),
    ];
    cases.push((
        vec!["Printer on fire", "--input", "{}"],
        vec!["error: the argument `TASK` cannot be used with `--input`; give the task once".into()],
    ));
    cases.push((
        vec!["--input", "not json"],
        vec![
            "error: --input: not JSON: expected ident at line 1 column 2; hint: quote it for \
             the shell, as in `--input '{\"ticket\": \"…\"}'`"
                .into(),
        ],
    ));
    for (args, expected) in cases {
        assert_eq!(run(&args), expected, "{args:?}");
    }
    // Also with `--dry-run`, which shows requests without sending them.
    assert_eq!(
        run(&["--dry-run", "--var", "other=x"]),
        ["error: --var: input: \"ticket\" is a required property"]
    );
    assert_eq!(server.requests().len(), 0, "nothing reached the provider");

    // The input checked is the input sent: these fit, and each reaches it.
    for args in [
        vec!["--var", "ticket=Printer on fire"],
        vec!["--input", r#"{"ticket": "Printer on fire", "priority": 2}"#],
        vec![
            "--task",
            "ignored by the contract",
            "--var",
            "ticket=Printer on fire",
        ],
    ] {
        let mut all = vec!["run", "t.yaml", "--no-record", "-q"];
        all.extend_from_slice(&args);
        let output = test.run(&all);
        output.expect_code(0);
        assert_eq!(output.stdout, "Sort: Printer on fire\n", "{args:?}");
    }
    assert_eq!(server.requests().len(), 3);
    // From stdin.
    let piped = test.stdin("Printer on fire");
    let output = piped.run(&["run", "t.yaml", "--no-record"]);
    assert_eq!(
        refused(&output),
        [format!(
            "error: stdin: input: \"Printer on fire\" is not of type \"object\"{string_hint}"
        )]
    );
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn an_input_problem_comes_before_the_templates_it_would_break() {
    let (test, server) = setup();
    // No `ticket`: the flow's `{{ ticket }}` cannot render either, and the
    // contract's problem is the one said.
    let lines = refused(&test.run(&["run", "t.yaml", "--var", "x=1", "--no-record"]));
    assert_eq!(
        lines,
        ["error: --var: input: \"ticket\" is a required property"]
    );
    // A tactic with problems of its own still lists them all, the task's too.
    let broken = tactic(&server).replace(
        "agent_configs: [{name: a}]",
        "agent_configs: [{name: a, nosuch: 1, max_llm_recall: x}]",
    );
    let test = test.file("broken.yaml", &broken);
    let output = test.run(&["run", "broken.yaml", "--var", "x=1", "--no-record"]);
    let lines = refused(&output);
    assert!(
        lines.iter().any(|line| line.contains("max_llm_recall")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|line| line.contains("`ticket`")),
        "the template's problem with the task is listed too: {lines:?}"
    );
    assert_eq!(server.requests().len(), 0);
}

#[test]
fn batch_lists_every_bad_task_and_problem_before_anything_is_sent() {
    let (test, server) = setup();
    let lines = [
        r#"{"id": "good", "args": {"ticket": "Printer on fire"}}"#,
        r#"{"id": "two-problems", "task": "x", "args": {"ticket": "", "priority": "high"}}"#,
        r#"{"id": "text", "task": "Printer on fire"}"#,
        r#"{"id": "also-good", "task": "x", "args": {"ticket": "Mouse gone", "priority": 1}}"#,
        r#"{"id": "missing", "task": {"priority": 2}}"#,
    ];
    let test = test.file("tasks.jsonl", &(lines.join("\n") + "\n"));
    let output = test.run(&["batch", "tasks.jsonl", "-t", "t.yaml", "-o", "out", "-q"]);
    let errors = refused(&output);
    assert_eq!(
        errors,
        [
            "error: `tasks.jsonl` has problems, nothing was sent; hint: fix them, or pass \
             `--skip-invalid` to record those tasks as failed and run the rest",
            "error: tasks.jsonl:2: input at /ticket: \"\" is shorter than 1 character",
            "error: tasks.jsonl:2: input at /priority: \"high\" is not of type \"integer\"",
            "error: tasks.jsonl:3: input: \"Printer on fire\" is not of type \"object\"",
            "error: tasks.jsonl:5: input: \"ticket\" is a required property",
        ]
    );
    assert_eq!(server.requests().len(), 0, "nothing reached the provider");

    // `--skip-invalid`: the bad tasks are recorded as failed with all their
    // problems, the good ones run.
    let output = test.run(&[
        "batch",
        "tasks.jsonl",
        "-t",
        "t.yaml",
        "-o",
        "out",
        "-q",
        "--skip-invalid",
    ]);
    assert_eq!(output.code, 1, "{}", output.stderr);
    assert_eq!(server.requests().len(), 2);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let results: Vec<serde_json::Value> = results
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let two = results
        .iter()
        .find(|result| result["id"] == "two-problems")
        .expect("its result line");
    assert_eq!(two["state"], "failure");
    let error = two["error"].as_str().unwrap();
    assert!(
        error.contains("input at /ticket") && error.contains("input at /priority"),
        "{error}"
    );
}

#[test]
fn batch_caps_the_listing_and_says_how_many_more() {
    let (test, server) = setup();
    let lines: Vec<String> = (0..80)
        .map(|index| format!(r#"{{"id": "t{index}", "task": "x", "args": {{"ticket": {index}}}}}"#))
        .collect();
    let test = test.file("tasks.jsonl", &(lines.join("\n") + "\n"));
    let output = test.run(&["batch", "tasks.jsonl", "-t", "t.yaml", "-o", "out", "-q"]);
    let errors = refused(&output);
    assert_eq!(errors.len(), 52, "{}", output.stderr);
    assert_eq!(
        errors[1],
        "error: tasks.jsonl:1: input at /ticket: 0 is not of type \"string\""
    );
    assert_eq!(
        errors[50],
        "error: tasks.jsonl:50: input at /ticket: 49 is not of type \"string\""
    );
    assert_eq!(
        errors[51],
        "error: … and 30 more problems (80 bad lines in all)"
    );
    assert_eq!(server.requests().len(), 0);
}

#[test]
fn the_contract_keys_are_checked_where_they_are_written() {
    let test = Test::new().file(
        "t.yaml",
        "agent_configs: [{name: a, model_name: mock/echo}]\n\
         input_schema:\n  type: object\n  properties: {n: {type: integer}}\n\
         examples:\n  - input: {n: seven}\n\
         metadata: [owner]\n",
    );
    let lines = refused(&test.run(&["run", "t.yaml", "--var", "n=1", "--no-record"]));
    assert_eq!(
        lines,
        [
            "error: t.yaml:6:13: this example's `input` does not fit `input_schema` at `/n`: \
             \"seven\" is not of type \"integer\"",
            "error: t.yaml:7:1: `metadata` is a list; write a mapping of public notes such as \
             `{owner: support-team}`",
        ]
    );
}
