//! YAML a user writes, end to end through the real binaries: flow
//! collections nested past the parser's limit (which used to take quadratic
//! time, a hang) and keys repeated in one mapping (which used to be silently
//! overwritten) are one error line naming the file and the line, exit 2, in
//! every file read as YAML: a tactic, prompt front matter, the user config
//! file and an `lllm-mock` script. So is a value of the wrong type or an
//! unknown key, found after the file parsed (issue 27), each at its line and
//! column, all of a file's at once.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Output, Test};

const ECHO: &str = "global: {model_name: mock/echo}\nagent_configs:\n  - {name: a}\n";

/// `[[[…]]]` nested `depth` deep: 300 KB at 150,000, which took libyaml
/// minutes to scan.
fn deep(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Waits for `child` for a generous two minutes: a hang fails the test
/// instead of stalling it.
fn bounded(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Output::of(child.wait_with_output().expect("output"))
}

#[track_caller]
fn one_error(output: &Output, expected: &str) {
    output.expect_code(2);
    assert_eq!(
        output
            .stderr
            .lines()
            .filter(|line| line.starts_with("error: "))
            .count(),
        1,
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains(expected),
        "{expected}\n{}",
        output.stderr
    );
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
}

const TOO_DEEP: &str = "collections nested deeper than 64 levels";

#[test]
fn nesting_past_the_limit_is_refused_in_every_yaml_file() {
    let test = Test::new()
        .file(
            "t.yaml",
            &format!("agent_configs:\n  - name: a\n    model_name: mock/echo\n    model_args: {{x: {}}}\n", deep(150_000)),
        )
        .file("p.yaml", &format!("{ECHO}  - {{name: b, system_prompt_path: deep}}\n"))
        .file("prompts/deep.md", &format!("---\nmetadata:\n  x: {}\n---\nHello", deep(150_000)))
        .file("ok.yaml", ECHO)
        .file("config.yaml", &format!("model: mock/echo\nproviders: {}\n", deep(150_000)));
    let run = |test: &Test, args: &[&str]| bounded(test.spawn(args), &args.join(" "));
    // The column of the 65th flow collection (`{` or `[`).
    let output = run(&test, &["run", "t.yaml", "hi", "--no-record"]);
    one_error(&output, &format!("t.yaml:4:{}: {TOO_DEEP}", 20 + 64));
    let output = run(&test, &["run", "p.yaml", "hi", "--no-record"]);
    one_error(&output, &format!("deep.md:3:{}: {TOO_DEEP}", 6 + 64));
    let test = test.env("LLLM_CONFIG", "config.yaml");
    let output = run(&test, &["run", "ok.yaml", "hi", "--no-record"]);
    one_error(&output, &format!("config.yaml:2:{}: {TOO_DEEP}", 12 + 64));

    let script = test.path("script.yaml");
    std::fs::write(&script, format!("default: {{text: {}}}\n", deep(150_000))).expect("write");
    let child = Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .arg("--script")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lllm-mock");
    let output = bounded(child, "lllm-mock");
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains(&format!("script.yaml:1:{}: {TOO_DEEP}", 16 + 64)),
        "{}",
        output.stderr
    );
}

#[test]
fn nesting_within_the_limit_and_brackets_in_text_still_load() {
    let tactic = format!(
        "{ECHO}  - name: b\n    system_prompt: |\n      Reply with {}\n    model_args: {{x: {}}}\n",
        "[".repeat(500),
        deep(56)
    );
    let test = Test::new().file("t.yaml", &tactic);
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    output.expect_code(0);
}

#[test]
fn a_repeated_key_is_an_error_at_its_line_in_every_yaml_file() {
    let test = Test::new()
        .file(
            "top.yaml",
            "agent_configs:\n  - {name: a, model_name: mock/echo}\nagent_configs:\n  - {name: b, model_name: mock/echo}\n",
        )
        .file(
            "agent.yaml",
            "agent_configs:\n  - name: a\n    model_name: mock/echo\n    name: b\n",
        )
        .file("p.yaml", &format!("{ECHO}  - {{name: b, system_prompt_path: twice}}\n"))
        .file("prompts/twice.md", "---\nparser: json\nmetadata: {v: 1}\nparser: tags\n---\nHello")
        .file("ok.yaml", ECHO)
        .file("config.yaml", "model: mock/echo\nmodel: mock/echo\n");
    let output = test.run(&["run", "top.yaml", "hi", "--no-record"]);
    one_error(&output, "top.yaml:3:1: duplicate key `agent_configs`");
    let output = test.run(&["run", "top.yaml", "hi", "--show-config"]);
    one_error(&output, "top.yaml:3:1: duplicate key `agent_configs`");
    let output = test.run(&["run", "agent.yaml", "hi", "--no-record"]);
    one_error(
        &output,
        "agent.yaml:4:5: agent_configs[0]: duplicate key `name`",
    );
    let output = test.run(&["run", "p.yaml", "hi", "--no-record"]);
    one_error(&output, "twice.md:4:1: duplicate key `parser`");
    let test = test.env("LLLM_CONFIG", "config.yaml");
    let output = test.run(&["run", "ok.yaml", "hi", "--no-record"]);
    one_error(&output, "config.yaml:2:1: duplicate key `model`");

    let script = test.path("script.yaml");
    std::fs::write(&script, "default: {text: a}\ndefault: {text: b}\n").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .arg("--script")
        .arg(&script)
        .output()
        .expect("run lllm-mock");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("script.yaml:2:1: duplicate key `default`"),
        "{stderr}"
    );
}

#[test]
fn a_wrong_type_or_unknown_key_names_its_line_and_column_in_every_yaml_file() {
    let test = Test::new()
        .file(
            "t.yaml",
            "agent_configs:\n  - name: a\n    model_name: mock/echo\n    tools: 5\n    system_prompt_path: p\n",
        )
        .file("prompts/p.md", "---\nmetadata: {v: 1}\ntools: yes\nrenderr: jinja\n---\nHi")
        .file("ok.yaml", ECHO)
        .file(
            "scripted/t.yaml",
            "global: {model_name: mock/script}\nagent_configs: [{name: a}]\nproviders:\n  mock: {script: script.yaml}\n",
        )
        .file("scripted/script.yaml", "replies:\n  - text: hi\n  - txt: oops\n")
        .file(
            "config.yaml",
            "model: mock/echo\nmodle: x\ncache: maybe\nproviders:\n  local: {base_url: \"http://127.0.0.1:1/v1\", timeout: 5}\n",
        );
    let errors = |output: &Output| -> Vec<String> {
        output.expect_code(2);
        assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
        output
            .stderr
            .lines()
            .filter_map(|line| line.strip_prefix("error: "))
            .map(str::to_string)
            .collect()
    };
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    assert_eq!(
        errors(&output),
        [
            "t.yaml:4:5: `agent_configs[0].tools`: invalid type: integer `5`, expected a sequence",
            "./prompts/p.md:4:1: unknown front-matter key `renderr`; did you mean `renderer`?",
            "./prompts/p.md:3:1: `tools` must be a list of names",
        ]
    );
    let output = test.run(&["run", "scripted/t.yaml", "hi", "--no-record"]);
    let lines = errors(&output);
    assert_eq!(lines.len(), 1, "{}", output.stderr);
    assert!(
        lines[0].ends_with(
            "scripted/script.yaml:3:5: replies[1]: unknown key `txt`; did you mean `text`?"
        ),
        "{}",
        output.stderr
    );
    let test = test.env("LLLM_CONFIG", "config.yaml");
    let output = test.run(&["run", "ok.yaml", "hi", "--no-record"]);
    let lines = errors(&output);
    assert_eq!(lines.len(), 3, "{}", output.stderr);
    for expected in [
        "config.yaml:2:1: unknown key `modle`",
        "config.yaml:3:1: `cache` must be `true` or `false`",
        "config.yaml:5:46: `providers.local.timeout`: unknown field `timeout`",
    ] {
        assert!(
            lines.iter().any(|line| line.starts_with(expected)),
            "{expected}\n{}",
            output.stderr
        );
    }
    let output = Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .arg("--script")
        .arg(test.path("scripted/script.yaml"))
        .output()
        .expect("run lllm-mock");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("script.yaml:3:5: replies[1]: unknown key `txt`; did you mean `text`?"),
        "{stderr}"
    );
}
