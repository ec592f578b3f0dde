//! The native Anthropic provider end to end: the real binary against
//! `lllm-mock`'s Messages API on 127.0.0.1 — a tool loop, 529 recovery, streaming.

mod common;

use common::{MockServer, Test};

fn tactic(base_url: &str) -> String {
    format!(
        r#"global: {{model_name: claude/claude-haiku-4-5}}
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
    tools: [word_count]
providers:
  claude: {{api: anthropic, base_url: "{base_url}", api_key_env: TEST_KEY, retry_base_ms: 10}}
tools:
  - name: word_count
    description: Count words
    parameters: {{type: object, properties: {{text: {{type: string}}}}}}
    command: [python3, -c, "import json,sys; print(len(json.load(sys.stdin)['text'].split()))"]
"#
    )
}

#[test]
fn a_tool_loop_over_the_messages_api_recovers_from_529() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - fault: {status: 529, message: Overloaded}
  - tool_calls: [{id: toolu_1, name: word_count, arguments: {text: "one two"}}]
  - text: "Two words."
"#,
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .env("TEST_KEY", "sk-ant-secret");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "Count: one two",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "Two words.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["path"], "/v1/messages");
    let first = &requests[1]["body"];
    assert_eq!(first["system"], "You are terse.");
    assert_eq!(first["max_tokens"], 4096);
    assert_eq!(first["tools"][0]["input_schema"]["type"], "object");
    let last = requests[2]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    let record = test.read_json("record.json");
    assert_eq!(
        record["agent_calls"][0]["llm_recalls"][0]["error"]["status"],
        529
    );
    assert_eq!(
        record["agent_calls"][0]["llm_recalls"][0]["error"]["kind"],
        "transient"
    );
    let record_text = std::fs::read_to_string(test.path("record.json")).unwrap();
    assert!(!record_text.contains("sk-ant-secret") && !output.stderr.contains("sk-ant-secret"));
}

#[test]
fn streams_over_the_messages_api() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: \"streamed from claude\"}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--stream", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "streamed from claude\n");
    assert_eq!(server.requests()[0]["body"]["stream"], true);
}

#[test]
fn a_missing_anthropic_key_is_reported_before_sending() {
    let test = Test::new().file(
        "t.yaml",
        "global: {model_name: anthropic/claude-haiku-4-5}\nagent_configs:\n  - name: a\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "hi"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        output.stderr
    );
}
