//! `api_type: response` end to end: the real binary against `lllm-mock`'s
//! Responses API on 127.0.0.1 — a tool loop and a streamed run.

mod common;

use common::{MockServer, Test};

fn tactic(base_url: &str) -> String {
    format!(
        r#"global: {{model_name: local/gpt-4.1, api_type: response}}
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
    tools: [shout]
providers:
  local: {{base_url: "{base_url}", retry_base_ms: 10}}
tools:
  - name: shout
    description: Upper-case a text
    parameters: {{type: object, properties: {{text: {{type: string}}}}}}
    command: [python3, -c, "import json,sys; print(json.load(sys.stdin)['text'].upper())"]
"#
    )
}

#[test]
fn a_tool_loop_over_the_responses_api() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls: [{id: call_1, name: shout, arguments: {text: "hey"}}]
  - text: "It says HEY."
"#,
    );
    let test = test.file("t.yaml", &tactic(&server.base_url()));
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "Shout hey",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "It says HEY.\n");
    let requests = server.requests();
    assert_eq!(requests[0]["path"], "/v1/responses");
    assert_eq!(requests[0]["body"]["tools"][0]["name"], "shout");
    let input = requests[1]["body"]["input"].as_array().unwrap().clone();
    let call = &input[input.len() - 2];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["call_id"], "call_1");
    let result = input.last().unwrap();
    assert_eq!(result["type"], "function_call_output");
    assert!(result["output"].as_str().unwrap().contains("HEY"));
    let output = test.run(&["replay", "record.json", "--json"]);
    output.expect_code(0);
    let record: serde_json::Value = serde_json::from_str(&output.stdout).unwrap();
    let invokes = record["agent_calls"][0]["invokes"].as_array().unwrap();
    let delivered = &invokes.last().unwrap()["response"];
    assert_eq!(delivered["api_type"], "response");
}

#[test]
fn streams_over_the_responses_api() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: \"streamed response text\"}\n",
    );
    let test = test.file("t.yaml", &tactic(&server.base_url()));
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--stream", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "streamed response text\n");
    assert_eq!(server.requests()[0]["body"]["stream"], true);
}

#[test]
fn the_second_turn_sends_the_first_answer_as_a_typed_message_item() {
    // llama-server refuses an input item it cannot place ("Cannot determine
    // type of 'item'"), and so does lllm-mock: the assistant's first answer
    // must go back as `{"type": "message", "role": "assistant", …}`.
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: \"First answer.\"\n  - text: \"Second answer.\"\n",
    );
    let yaml = format!(
        r#"global: {{model_name: local/gpt-4.1, api_type: response}}
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{base_url: "{}", retry_base_ms: 10}}
flow:
  - {{step: first, agent: assistant, text: "One?"}}
  - {{step: second, agent: assistant, text: "Two?"}}
"#,
        server.base_url()
    );
    let test = test.file("t.yaml", &yaml);
    let output = test.run(&["run", "t.yaml", "--task", "go", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "Second answer.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "no request was refused: {requests:?}");
    let input = requests[1]["body"]["input"].as_array().unwrap().clone();
    assert!(
        input.iter().all(|item| item["type"].is_string()),
        "every item has a type: {input:?}"
    );
    assert_eq!(
        input[2],
        serde_json::json!({"type": "message", "role": "assistant",
                           "content": [{"type": "output_text", "text": "First answer.", "annotations": []}]})
    );
    assert!(input.iter().all(|item| item.get("name").is_none()));
}
