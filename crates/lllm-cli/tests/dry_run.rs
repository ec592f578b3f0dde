//! `lllm run --dry-run`: the first turns' exact request bodies, nothing sent,
//! nothing recorded, no secret shown.

mod common;

use common::{MockServer, Test};

#[test]
fn prints_the_exact_first_requests_and_sends_nothing() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "replies:\n  - {text: never}\n");
    let yaml = format!(
        r#"global: {{model_name: local/test-model, model_args: {{temperature: 0.1}}}}
agent_configs:
  - name: writer
    system_prompt: "You write for {{{{ audience }}}}."
  - name: critic
    model_name: claude/claude-haiku-4-5
providers:
  local: {{api: openai, base_url: "{url}", api_key_env: TEST_KEY}}
  claude: {{api: anthropic, base_url: "{host}", api_key_env: TEST_KEY}}
flow:
  - parallel:
    steps:
      - {{step: draft, agent: writer, text: "Draft on {{{{ task }}}}"}}
      - {{step: check, agent: critic, text: "Check {{{{ task }}}}"}}
  - {{step: late, agent: writer, text: "{{{{ draft.content }}}}"}}
"#,
        url = server.base_url(),
        host = server.url
    );
    let test = test
        .file("t.yaml", &yaml)
        .env("TEST_KEY", "sk-dry-secret-42");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "owls",
        "--var",
        "audience=children",
        "--dry-run",
    ]);
    output.expect_code(0);
    let stdout = &output.stdout;
    assert!(
        stdout.contains(
            "── request 1 of 2 · agent `writer` · dialog `main` · model local/test-model"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("POST {}/chat/completions", server.base_url())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("POST {}/v1/messages", server.url)),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"content\": \"You write for children.\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"content\": \"Draft on owls\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"temperature\": 0.1"), "{stdout}");
    // The Anthropic body has its own shape: the system prompt at top level.
    assert!(stdout.contains("\"system\": "), "{stdout}");
    assert!(
        !stdout.contains("late"),
        "later turns need replies: {stdout}"
    );
    assert!(
        output.stderr.contains("2 requests shown, nothing sent"),
        "{}",
        output.stderr
    );
    for text in [&output.stdout, &output.stderr] {
        assert!(!text.contains("sk-dry-secret-42"));
    }
    assert!(server.requests().is_empty(), "nothing reaches the server");
    for records in ["sessions", ".local/share/lllm/sessions"] {
        assert!(!test.path(records).exists(), "a dry run writes no record");
    }
}

#[test]
fn a_dry_run_checks_the_tactic_like_a_real_run() {
    let test = Test::new().file(
        "t.yaml",
        "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: a, text: \"{{ missing }}\"}\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "x", "--dry-run"]);
    output.expect_code(2);
    assert!(output.stderr.contains("`missing`"), "{}", output.stderr);
    assert!(output.stdout.is_empty());
}
