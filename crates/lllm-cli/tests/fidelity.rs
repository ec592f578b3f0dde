//! Where lllm meets prompts and tactics ported from the Python framework:
//! `{var}` placeholders under the Jinja renderer are warned about, keys lllm
//! does not honour (`addon_args`, an agent's `stream`) are refused before
//! anything runs (exit 2), and `max_workers` is checked.

mod common;

use common::Test;

const TACTIC: &str = "global: {model_name: mock/echo}
agent_configs:
  - name: writer
flow:
  - {step: draft, agent: writer, prompt: ported/summary, args: {topic: owls}}
";

#[test]
fn a_python_placeholder_under_jinja_is_a_warning_naming_file_line_and_fixes() {
    let test = Test::new().file("t.yaml", TACTIC).file(
        "prompts/ported/summary.md",
        "---\nmetadata: {origin: python}\n---\nSummarize the notes.\nOn {topic}, please.\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "notes", "--dry-run"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains(
            "/prompts/ported/summary.md:5: prompt `ported/summary` holds `{topic}`, a Python \
             `str.format` placeholder that Jinja sends literally; add `renderer: format` to its \
             front matter or write `{{ topic }}`"
        ),
        "{}",
        output.stderr
    );
    assert!(output.stderr.starts_with("warning: "), "{}", output.stderr);
    // What the warning says happens: the placeholder goes out as written.
    assert!(
        output.stdout.contains("On {topic}, please."),
        "{}",
        output.stdout
    );

    // Either fix silences it and renders the value.
    for fixed in [
        "---\nrenderer: format\n---\nSummarize the notes.\nOn {topic}, please.\n",
        "Summarize the notes.\nOn {{ topic }}, please.\n",
    ] {
        let test = Test::new()
            .file("t.yaml", TACTIC)
            .file("prompts/ported/summary.md", fixed);
        let output = test.run(&["run", "t.yaml", "--task", "notes", "--dry-run"]);
        output.expect_code(0);
        assert!(!output.stderr.contains("warning"), "{}", output.stderr);
        assert!(
            output.stdout.contains("On owls, please."),
            "{}",
            output.stdout
        );
    }
}

#[test]
fn addon_args_and_an_agent_stream_key_are_refused_before_anything_runs() {
    let test = Test::new().file("t.yaml", TACTIC).file(
        "prompts/ported/summary.md",
        "---\naddon_args: {web_search: true}\n---\nOn {{ topic }}.\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "notes"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains(
            "summary.md:2:1: `addon_args` (the Python framework's provider add-ons such as \
             `web_search` or `computer_use`) are not supported; hint: remove them"
        ),
        "{}",
        output.stderr
    );
    assert!(!test.path("runs").exists(), "nothing ran, nothing recorded");

    let test = Test::new()
        .file(
            "t.yaml",
            &TACTIC.replace("  - name: writer\n", "  - name: writer\n    stream: true\n"),
        )
        .file("prompts/ported/summary.md", "On {{ topic }}.\n");
    let output = test.run(&["run", "t.yaml", "--task", "notes"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("agent `writer`: `stream` is not an agent setting; hint:"),
        "{}",
        output.stderr
    );
}

#[test]
fn max_workers_out_of_range_is_a_config_error() {
    let test = Test::new()
        .file("t.yaml", &format!("max_workers: -1\n{TACTIC}"))
        .file("prompts/ported/summary.md", "On {{ topic }}.\n");
    let output = test.run(&["run", "t.yaml", "--task", "notes"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`max_workers: -1` must be a whole number from 1 to 100000 (tasks at once)"),
        "{}",
        output.stderr
    );
    let test = Test::new()
        .file("t.yaml", &format!("max_workers: 4\n{TACTIC}"))
        .file("prompts/ported/summary.md", "On {{ topic }}.\n");
    test.run(&["run", "t.yaml", "--task", "notes"])
        .expect_code(0);
}

#[test]
fn replay_renders_a_multipart_message_written_in_the_python_form() {
    let test = Test::new()
        .file("t.yaml", TACTIC)
        .file("prompts/ported/summary.md", "On {{ topic }}.\n");
    test.run(&["run", "t.yaml", "--task", "notes", "--record", "run.json"])
        .expect_code(0);
    // The user turn becomes text and two images, as the Python framework
    // writes content parts.
    let mut record = test.read_json("run.json");
    let dialog = &mut record["dialogs"][0];
    let user = dialog["messages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|message| message["role"] == "user")
        .unwrap();
    user["content"] = serde_json::json!([
        {"type": "text", "text": "On owls."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/owl.jpg"}},
    ]);
    std::fs::write(test.path("edited.json"), record.to_string()).unwrap();
    let output = test.run(&["replay", "edited.json"]);
    output.expect_code(0);
    assert!(
        output
            .stdout
            .contains("On owls. <image image/png> <image https://example.com/owl.jpg>"),
        "{}",
        output.stdout
    );
    // `--json` writes it back with its parts.
    let output = test.run(&["replay", "edited.json", "--json"]);
    output.expect_code(0);
    let written: serde_json::Value = serde_json::from_str(&output.stdout).unwrap();
    let user = written["dialogs"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "user")
        .unwrap();
    assert_eq!(user["content"], "On owls.");
    assert_eq!(user["parts"][0]["text"], "On owls.");
    assert_eq!(
        user["parts"][2]["image_url"]["url"],
        "https://example.com/owl.jpg"
    );
}

#[test]
fn a_sub_tactics_ported_prompt_is_warned_about_once() {
    let sub = "global: {model_name: mock/echo}
agent_configs:
  - name: shortener
flow:
  - {step: cut, agent: shortener, prompt: cut}
";
    let parent = "global: {model_name: mock/echo}
agent_configs:
  - name: writer
flow:
  - {step: one, tactic: sub/shorten.yaml}
  - {step: two, tactic: sub/shorten.yaml}
";
    let test = Test::new()
        .file("parent.yaml", parent)
        .file("sub/shorten.yaml", sub)
        .file("sub/prompts/cut.md", "Cut {task} short.\n");
    let output = test.run(&["run", "parent.yaml", "--task", "owls"]);
    output.expect_code(0);
    let warnings: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", output.stderr);
    assert!(
        warnings[0].contains("sub/prompts/cut.md:1: prompt `cut` holds `{task}`"),
        "{}",
        output.stderr
    );
}
