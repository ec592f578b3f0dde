//! Pre-flight end to end (issue 12): every place a template or an expression
//! appears, times every way it can fail before anything is sent, is bad input
//! (exit 2, one `error:` line naming the place) for `lllm run` and `lllm
//! batch`; valid templates using minijinja's builtins pass; the problems of
//! every phase are listed together, each at its file, line and column (at
//! most fifty); a prompt directory that would block or loop is an error,
//! never a hang.

mod common;

use std::time::{Duration, Instant};

use common::Test;

/// Ways a template or an expression fails before anything is sent, as
/// (name, template, expression). Each needs only the task (a string).
const FAILURES: &[(&str, &str, &str)] = &[
    ("syntax", "{{ task ", "task !"),
    ("filter", "{{ task | nosuch }}", "task | nosuch"),
    (
        "test",
        "{% if task is nosuch %}x{% endif %}",
        "task is nosuch",
    ),
    ("function", "{{ nosuch() }}", "nosuch()"),
    ("undefined", "{{ nothere }}", "nothere"),
    ("type", "{{ task + 1 }}", "task + 1"),
    ("attribute", "{{ task.foo.bar }}", "task.foo.bar"),
    ("method", "{{ task.upper() }}", "task.upper()"),
];

/// Where templates and expressions appear; each yields the files of a tactic
/// (`t.yaml` and what it needs) with `template` or `expression` there.
const PLACES: &[&str] = &[
    "prompt file",
    "inline text",
    "step argument",
    "result",
    "if",
    "stop",
    "until",
    "foreach",
    "inline system prompt",
    "system prompt file",
    "sub-tactic task",
    "sub-tactic argument",
    "handler",
];

fn files(place: &str, template: &str, expression: &str) -> Vec<(&'static str, String)> {
    let quoted = |text: &str| serde_json::to_string(text).unwrap();
    let (template, expression) = (quoted(template), quoted(expression));
    let mut files = Vec::new();
    let mut system = String::new();
    let mut extra = String::new();
    let flow = match place {
        "prompt file" => {
            files.push((
                "prompts/p.md",
                serde_json::from_str::<String>(&template).unwrap(),
            ));
            "  - {step: s, agent: a, prompt: p}\n".to_string()
        }
        "inline text" => format!("  - {{step: s, agent: a, text: {template}}}\n"),
        "step argument" => {
            format!("  - {{step: s, agent: a, text: 'x {{{{ v }}}}', args: {{v: {template}}}}}\n")
        }
        "result" => {
            extra = format!("result: {template}\n");
            "  - {step: s, agent: a, text: x}\n".to_string()
        }
        "if" => format!("  - {{step: s, agent: a, text: x, if: {expression}}}\n"),
        "stop" => format!("  - {{step: s, agent: a, text: x, stop: {expression}}}\n"),
        "until" => format!(
            "  - loop: {{max: 2, until: {expression}}}\n    steps:\n      - {{step: s, agent: a, text: x}}\n"
        ),
        "foreach" => format!(
            "  - parallel: {{foreach: {expression}}}\n    steps:\n      - {{step: s, agent: a, text: x}}\n"
        ),
        "inline system prompt" => {
            system = format!("    system_prompt: {template}\n");
            String::new()
        }
        "system prompt file" => {
            files.push((
                "prompts/sys.md",
                serde_json::from_str::<String>(&template).unwrap(),
            ));
            system = "    system_prompt_path: sys\n".into();
            String::new()
        }
        "sub-tactic task" => {
            files.push((
                "sub.yaml",
                "global: {model_name: mock/echo}\nagent_configs:\n  - name: b\n".into(),
            ));
            format!("  - {{step: s, tactic: sub.yaml, task: {template}}}\n")
        }
        "sub-tactic argument" => {
            files.push((
                "sub.yaml",
                "global: {model_name: mock/echo}\nagent_configs:\n  - name: b\nflow:\n  - {step: t, agent: b, text: '{{ v }}'}\n".into(),
            ));
            format!("  - {{step: s, tactic: sub.yaml, args: {{v: {template}}}}}\n")
        }
        "handler" => {
            files.push((
                "prompts/p.md",
                format!("---\nhandler: {{exception: {template}}}\n---\nhi"),
            ));
            "  - {step: s, agent: a, prompt: p}\n".to_string()
        }
        other => panic!("no place {other}"),
    };
    let mut tactic =
        format!("global: {{model_name: mock/echo}}\nagent_configs:\n  - name: a\n{system}");
    if !flow.is_empty() {
        tactic.push_str("flow:\n");
        tactic.push_str(&flow);
    }
    tactic.push_str(&extra);
    files.push(("t.yaml", tactic));
    files
}

#[test]
fn every_template_mistake_is_bad_input_before_anything_is_sent() {
    let mut wrong = Vec::new();
    for place in PLACES {
        for (failure, template, expression) in FAILURES {
            let mut test =
                Test::new().file("tasks.jsonl", "{\"id\": \"1\", \"task\": \"hello\"}\n");
            for (name, content) in files(place, template, expression) {
                test = test.file(name, &content);
            }
            for command in [
                &["run", "t.yaml", "--task", "hello", "--no-record"][..],
                &["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"][..],
            ] {
                let output = test.run(command);
                let errors: Vec<&str> = output
                    .stderr
                    .lines()
                    .filter(|line| line.contains("error:") || line.contains("tasks.jsonl:"))
                    .collect();
                // Exit 2, and the one problem said once, not drowned in others.
                if output.code != 2 || errors.is_empty() || output.stderr.lines().count() > 3 {
                    wrong.push(format!(
                        "{} · {place} · {failure}: exit {}\n{}",
                        command[0], output.code, output.stderr
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cases:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn valid_templates_with_minijinja_builtins_pass_and_render() {
    let text = r#"{% set ns = namespace(total=0) %}{% for n in range(1, 4) %}{% set ns.total = ns.total + n %}{% endfor -%}
{{ ns.total }} {{ dict(a=1).a }} {{ tone | default('plain') }} {{ missing | d('-') }}
{%- if notes is defined %} {{ notes }}{% endif %}
{% for word in task.split(' ') if false %}{% endfor -%}
{% for word in task | split(' ') %}{{ loop.index }}{{ loop.cycle('a', 'b') }}{% if not loop.last %},{% endif %}{% endfor %}
{% macro shout(text) %}{{ text | upper }}{{ caller() if caller is defined }}{% endmacro -%}
{% call shout(task) %}!{% endcall %}
{% set block %}{{ task | length }}{% endset %}{% with twice = block ~ block %}{{ twice }}{% endwith %}
{% filter title %}{{ task }}{% endfilter %}"#;
    // `task.split(' ')` sits in a loop whose filter is false: it never runs,
    // but a method on a value can never work, so it is still reported. The
    // rest is valid; check both.
    let valid = text.replace(
        "{% for word in task.split(' ') if false %}{% endfor -%}\n",
        "",
    );
    let tactic = |text: &str| {
        format!(
            "global: {{model_name: mock/echo}}\nagent_configs:\n  - name: a\nflow:\n  - step: s\n    agent: a\n    text: {}\n",
            serde_json::to_string(text).unwrap()
        )
    };
    let test = Test::new().file("t.yaml", &tactic(&valid));
    let output = test.run(&["run", "t.yaml", "--task", "owls at night", "--no-record"]);
    output.expect_code(0);
    assert_eq!(
        output.stdout,
        "6 1 plain -\n1a,2b,3a\nOWLS AT NIGHT!\n1313\nOwls At Night\n"
    );
    let test = Test::new().file("t.yaml", &tactic(text));
    let output = test.run(&["run", "t.yaml", "--task", "owls", "--no-record"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("`task.split()`"),
        "{}",
        output.stderr
    );
}

#[test]
fn an_optional_task_argument_is_not_required() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: a, text: \"{{ task }} in a {{ tone | default('plain') }} tone{% if notes is defined %} ({{ notes }}){% endif %}\"}\n";
    let test = Test::new().file("t.yaml", tactic).file(
        "tasks.jsonl",
        "{\"id\": \"1\", \"task\": \"owls\"}\n{\"id\": \"2\", \"task\": \"bats\", \"args\": {\"tone\": \"dry\", \"notes\": \"short\"}}\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "owls", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "owls in a plain tone\n");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "bats",
        "--var",
        "tone=dry",
        "--var",
        "notes=short",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "bats in a dry tone (short)\n");
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(0);
}

#[test]
fn a_step_field_that_does_not_exist_is_named_with_the_ones_that_do() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: draft, agent: a, text: x}\n  - {step: review, agent: a, text: \"{{ draft.contnet }}\"}\n  - parallel: {foreach: \"['a', 'b']\"}\n    steps:\n      - {step: note, agent: a, text: \"{{ item }}\"}\n  - {step: last, agent: a, text: \"{{ note.content }}\", if: \"draft.parsed.raw != ''\"}\n";
    let test = Test::new().file("t.yaml", tactic);
    let output = test.run(&["run", "t.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains(
            "step `review`: prompt `review (inline)` reads `draft.contnet`, but a step's output has only `content`, `parsed`, `model` and `cost`; did you mean `content`?"
        ),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("reads `note.content`, but step `note` ran once per `foreach` element, so it is a list of outputs"),
        "{}",
        output.stderr
    );
}

#[test]
fn problems_of_every_phase_are_listed_at_once() {
    // The config names an unknown agent; a prompt file and an inline text
    // have template mistakes; a value the task breaks. All four lines.
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: nobody, text: x}\n  - {step: t, agent: a, prompt: p}\n  - {step: u, agent: a, text: \"{{ task | lenght }}\"}\n  - {step: v, agent: a, text: \"{{ task + 1 }}\"}\n";
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("prompts/p.md", "line one\n{% if %}\n");
    let output = test.run(&["run", "t.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    for expected in [
        "step `s` uses agent `nobody`, which is not in `agent_configs`",
        "prompts/p.md:2:",
        "unknown filter `lenght`; did you mean `length`?",
        "tried to use + operator on unsupported types string and number",
    ] {
        assert!(
            output.stderr.contains(expected),
            "{expected}:\n{}",
            output.stderr
        );
    }
    // A build problem (an unknown tool) and the task's check (a variable no
    // one provides) together too.
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    tools: [nosuch]\nflow:\n  - {step: s, agent: a, text: \"{{ topic }}\"}\n";
    let test = Test::new().file("t.yaml", tactic);
    let output = test.run(&["run", "t.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    for expected in [
        "agent `a` names tool `nosuch`, which is not defined under `tools:`",
        "prompt `s (inline)` needs `topic`",
    ] {
        assert!(
            output.stderr.contains(expected),
            "{expected}:\n{}",
            output.stderr
        );
    }
}

/// A tactic with one problem of each kind (issue 27: five problems took
/// three runs, and a wrong type had no line).
const MANY_PROBLEMS: &str = r#"global: {model_name: mock/echo}
agent_configs:
  - name: writer
    max_llm_recall: lots
    tools: 5
flow:
  - step: draft
    agent: writer
    prompt: missing
    colour: red
  - step: review
    agent: writer
    text: "{{ draft.content }} {{ "
  - step: summary
    agent: writer
    prompt: summary
result: "{{ summary.content | nofilter }}"
flavour: sweet
"#;

/// The `error:` lines of `output`.
fn error_lines(output: &common::Output) -> Vec<&str> {
    output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect()
}

#[test]
fn every_problem_of_a_tactic_is_listed_with_its_place_in_one_run() {
    let test = Test::new()
        .file("t.yaml", MANY_PROBLEMS)
        .file(
            "prompts/notes.md",
            "---\nparsr: json\n---\nNotes on {% if %}\n",
        )
        .file(
            "prompts/summary.md",
            "Summarize {{ draft.content }} for {{ audience }}.\n",
        )
        .file("tasks.jsonl", "{\"id\": \"a\", \"task\": \"hi\"}\n");
    // Unknown keys, a wrong type, a number out of range, a prompt file's
    // front matter and template, a missing prompt file, a template that
    // does not compile, an unknown filter: each once, at its line and
    // column (a prompt file's template at its line), in one run. Nothing
    // the config's problems caused is added (the agent with a wrong `tools`
    // still exists; the steps after a broken one still know its name).
    let structural = [
        "error: t.yaml:18:1: unknown key `flavour`",
        "error: t.yaml:5:5: `agent_configs[0].tools`: invalid type: integer `5`, expected a sequence",
        "error: t.yaml:4:5: agent `writer`: `max_llm_recall: lots` must be a whole number from 0 to 100 (retries)",
        "error: t.yaml:10:5: `flow[0]`: unknown key `colour`",
        "error: ./prompts/notes.md:2:1: unknown front-matter key `parsr`; did you mean `parser`?",
        "error: ./prompts/notes.md:4: unexpected end of block",
        "error: t.yaml:9:5: step `draft`: unknown prompt `missing` (known: `summary`)",
        "error: t.yaml:13:5: prompt `review (inline)` line 1: unexpected end of input, expected expression",
        "error: t.yaml:17:1: prompt `result` line 1: unknown filter `nofilter`",
    ];
    // With the task, the names its templates need too.
    let unknown_variable = "error: t.yaml:16:5: step `summary`: prompt `summary` needs `audience` \
                            (available: `args`, `draft`, `review`, `task`)";
    for args in [
        &["run", "t.yaml", "--task", "hi", "--no-record"][..],
        &["run", "t.yaml", "--task", "hi", "--dry-run"][..],
    ] {
        let output = test.run(args);
        output.expect_code(2);
        let mut expected = structural.to_vec();
        expected.push(unknown_variable);
        assert_eq!(error_lines(&output), expected, "{args:?}");
    }
    // A batch checks the names templates need per task line, once its
    // tactic loads; the tactic's own problems are all listed first.
    let output = test.batch("t.yaml", "out", &[]);
    output.expect_code(2);
    assert_eq!(error_lines(&output), structural);
    assert!(!test.path("out/results.jsonl").exists(), "nothing ran");
}

#[test]
fn a_config_with_problems_still_has_its_providers_and_tools_checked_but_not_echoed() {
    // An unknown key, a provider and a tool with problems of their own; a
    // model naming an unknown provider and an agent naming an unknown tool
    // are problems too, listed in the same run. A model of the provider with
    // problems, or an agent naming the tool with problems, is no other.
    let tactic = "global: {model_name: nowhere/m}\n\
                  agent_configs:\n  - name: a\n    tools: [nosuch, broken]\n  \
                  - name: b\n    model_name: bad/m\n\
                  tools:\n  - {name: broken, command: []}\n\
                  providers:\n  bad: {api: bogus}\n\
                  colour: red\n";
    let test = Test::new().file("t.yaml", tactic);
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(2);
    assert_eq!(
        error_lines(&output),
        [
            "error: t.yaml:11:1: unknown key `colour`",
            "error: t.yaml:10:9: provider `bad`: unknown `api: bogus`; use `openai`, `anthropic` or `mock`",
            "error: t.yaml:8:20: tool `broken` has no `command` (a list: program and arguments)",
            "error: t.yaml:1:10: unknown provider `nowhere` in model `nowhere/m`; define it under `providers:`",
            "error: t.yaml:4:5: agent `a` names tool `nosuch`, which is not defined under `tools:` or registered by the program",
        ]
    );
}

#[test]
fn a_tactic_with_very_many_problems_lists_the_first_fifty() {
    let mut tactic = String::from("global: {model_name: mock/echo}\nagent_configs: [{name: a}]\n");
    for index in 0..60 {
        tactic.push_str(&format!("key{index}: 1\n"));
    }
    let test = Test::new().file("t.yaml", &tactic);
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(2);
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 51, "{}", output.stderr);
    assert_eq!(lines[0], "error: t.yaml:3:1: unknown key `key0`");
    assert_eq!(lines[49], "error: t.yaml:52:1: unknown key `key49`");
    assert_eq!(lines[50], "error: … and 10 more problems");
}

#[test]
fn a_runaway_template_fails_at_the_render_limit_naming_its_prompt() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: a, text: \"{{ task }}{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}\"}\n";
    let test = Test::new().file("t.yaml", tactic);
    let output = test.run(&["run", "t.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("prompt `s (inline)`: the template did more work than one render may"),
        "{}",
        output.stderr
    );
}

/// Runs `lllm` with `args` and waits at most a generous minute: a hang is a
/// failure, not a stuck test.
fn run_bounded(test: &Test, args: &[&str]) -> common::Output {
    let mut child = test.spawn(args);
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`lllm {}` hung", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    common::Output::of(child.wait_with_output().expect("output"))
}

#[cfg(unix)]
#[test]
fn a_prompt_directory_that_would_block_or_loop_is_an_error_not_a_hang() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    system_prompt_path: sys\n";
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("prompts/sys.md", "You are terse.")
        .file("prompts/sub/deep.md", "deep");
    let prompts = test.path("prompts");
    let fifo = prompts.join("pipe.md");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    std::os::unix::fs::symlink(prompts.join("self.md"), prompts.join("self.md")).unwrap();
    std::os::unix::fs::symlink("..", prompts.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("..", prompts.join("sub/again")).unwrap();
    let output = run_bounded(&test, &["run", "t.yaml", "--task", "t", "--no-record"]);
    output.expect_code(2);
    for expected in [
        "pipe.md: a named pipe, not a regular file",
        "self.md: cannot read: Too many levels of symbolic links",
        "sub/up: a symlink back to a directory that contains it",
        "sub/again: a symlink back to a directory that contains it",
    ] {
        assert!(
            output.stderr.contains(expected),
            "{expected}:\n{}",
            output.stderr
        );
    }
    // The good prompts load: `sys` is not reported missing.
    assert!(
        !output.stderr.contains("unknown prompt"),
        "{}",
        output.stderr
    );
}

/// Two links from each of 31 directories to the next: 2^30 paths for a walk
/// that follows links, which used to hang a run (and grow its memory).
#[cfg(unix)]
fn link_ladder(levels: &std::path::Path) {
    for level in 0..=30 {
        std::fs::create_dir_all(levels.join(format!("lv{level}"))).unwrap();
    }
    for level in 0..30 {
        for name in ["a", "b"] {
            let next = format!("../lv{}", level + 1);
            std::os::unix::fs::symlink(&next, levels.join(format!("lv{level}/{name}"))).unwrap();
        }
    }
}

#[cfg(unix)]
#[test]
fn a_prompt_directory_of_links_loads_without_walking_through_them() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    system_prompt_path: sys\n";
    // Inside the prompt directory: each directory is read once.
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("prompts/sys.md", "You are terse.")
        .file("prompts/lv30/leaf.md", "leaf");
    link_ladder(&test.path("prompts"));
    std::os::unix::fs::symlink("lv0", test.path("prompts/l0")).unwrap();
    let output = run_bounded(&test, &["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("prompts/l0: not followed: a symlink to `lv0`"),
        "{}",
        output.stderr
    );
    // Outside it (a shared prompt library): read under the link's name,
    // each directory once.
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("prompts/sys.md", "You are terse.")
        .file("lv30/leaf.md", "leaf");
    link_ladder(test.dir.path());
    std::os::unix::fs::symlink("../lv0", test.path("prompts/l0")).unwrap();
    let output = run_bounded(&test, &["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(0);
    // A link back up to a directory holding the prompts is a loop: named.
    std::os::unix::fs::symlink("..", test.path("prompts/up")).unwrap();
    let output = run_bounded(&test, &["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(2);
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    assert!(
        errors[0].contains("prompts/up: a symlink back to a directory that contains it"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_prompt_directory_past_the_walk_limit_is_one_error() {
    let tactic = "global: {model_name: mock/echo}\nagent_configs:\n  - {name: a, system_prompt: hi}\nprompts: many\n";
    let test = Test::new().file("t.yaml", tactic);
    // 100,091 entries: 101 directories of 990 files.
    for directory in 0..=100 {
        let directory = test.path(&format!("many/d{directory}"));
        std::fs::create_dir_all(&directory).unwrap();
        for file in 0..990 {
            std::fs::write(directory.join(format!("f{file}")), "").unwrap();
        }
    }
    let output = run_bounded(&test, &["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains(
            "many: the prompt directory holds more than 100000 files and directories \
             (counted through its subdirectories); hint: point `prompts:` at a directory that \
             holds only prompts"
        ),
        "{}",
        output.stderr
    );
}
