//! The native Anthropic provider end to end: the real binary against
//! `lllm-mock`'s Messages API on 127.0.0.1 — a tool loop, 529 recovery,
//! streaming, and the SDKs' conventions: the base URL is a host
//! (`ANTHROPIC_BASE_URL`), `ANTHROPIC_AUTH_TOKEN` is a bearer token.

mod common;

use common::{MockServer, Test, fingerprint};

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
    // The base URL is a host, as Anthropic's SDKs take it.
    let test = test
        .file("t.yaml", &tactic(&server.url))
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
    // A base URL ending in `/v1` (the form lllm once documented) means the same.
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

#[test]
fn anthropic_base_url_is_a_host_and_auth_token_is_a_bearer_token() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"hi there\"}\n");
    let test = test
        .file(
            "t.yaml",
            "global: {model_name: anthropic/claude-haiku-4-5}\nagent_configs:\n  - name: a\n",
        )
        .env("ANTHROPIC_BASE_URL", &server.url)
        .env("ANTHROPIC_AUTH_TOKEN", "gateway-token");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "hi there\n");
    let request = &server.requests()[0];
    assert_eq!(request["path"], "/v1/messages");
    // As the SDK sends it: `Authorization: Bearer …`.
    assert_eq!(request["auth"], fingerprint("Bearer gateway-token"));
    assert!(!output.stderr.contains("gateway-token"));
}

#[test]
fn a_wrong_anthropic_base_url_names_the_url_and_the_variable() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: never}\n");
    let test = test
        .file(
            "t.yaml",
            "global: {model_name: anthropic/claude-haiku-4-5}\nagent_configs:\n  - name: a\n",
        )
        .env("ANTHROPIC_BASE_URL", &format!("{}/api", server.url))
        .env("ANTHROPIC_API_KEY", "sk-ant-k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(1);
    let expected = format!(
        "HTTP 404 from {}/api/v1/messages (base URL from ANTHROPIC_BASE_URL)",
        server.url
    );
    assert!(output.stderr.contains(&expected), "{}", output.stderr);
    assert_eq!(server.requests()[0]["auth"], fingerprint("sk-ant-k"));
}

/// A tactic whose one step's prompt has a `format` (issue 27), on model
/// `claude/MODEL` at `base_url`, with `agent_tools` (a YAML list) and
/// `provider` settings appended to the provider's entry.
fn format_tactic(base_url: &str, model: &str, agent_tools: &str, provider: &str) -> String {
    format!(
        r#"global: {{model_name: claude/{model}}}
agent_configs:
  - name: judge
    system_prompt: "You judge."
    tools: {agent_tools}
providers:
  claude: {{api: anthropic, base_url: "{base_url}", api_key_env: TEST_KEY, retry_base_ms: 10{provider}}}
tools:
  - name: word_count
    description: Count words
    parameters: {{type: object, properties: {{text: {{type: string}}}}}}
    command: [python3, -c, "import json,sys; print(len(json.load(sys.stdin)['text'].split()))"]
flow:
  - step: score
    agent: judge
    prompt: score
"#
    )
}

const SCORE_PROMPT: &str = "---\nformat: {type: object, properties: {score: {type: integer, minimum: 1, maximum: 5}}, required: [score]}\n---\nScore this: {{ task }}";

#[test]
fn a_format_goes_as_output_config_to_a_model_that_takes_it() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: '{\"score\": 4}'}\n");
    let test = test
        .file(
            "t.yaml",
            &format_tactic(&server.url, "claude-haiku-4-5", "[]", ""),
        )
        .file("prompts/score.md", SCORE_PROMPT)
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "fine work", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "{\"score\": 4}\n");
    let body = &server.requests()[0]["body"];
    // As anthropic-sdk-python's `messages.parse` sends it: the schema closed
    // and what the API does not enforce moved into the description (the
    // mock refuses anything else, as the API does).
    assert_eq!(
        body["output_config"],
        serde_json::json!({"format": {"type": "json_schema", "schema": {
            "type": "object",
            "properties": {"score": {"type": "integer", "description": "{minimum: 1, maximum: 5}"}},
            "additionalProperties": false,
            "required": ["score"]}}})
    );
    assert_eq!(body["system"], "You judge.");
    assert!(body.get("tools").is_none());
}

#[test]
fn a_model_without_it_answers_through_a_forced_tool_and_is_repaired_and_replayed() {
    let test = Test::new();
    // The mock answers a forced tool as the API does: a `tool_use` block.
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: '{\"score\": 9}'\n  - text: '{\"score\": 3}'\n",
    );
    let test = test
        .file(
            "t.yaml",
            &format_tactic(&server.url, "claude-3-5-haiku", "[]", ""),
        )
        .file("prompts/score.md", SCORE_PROMPT)
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "fine work", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "{\"score\":3}\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0]["body"];
    assert_eq!(first["tools"][0]["name"], "answer");
    assert_eq!(
        first["tools"][0]["input_schema"]["properties"]["score"]["maximum"],
        5
    );
    assert_eq!(
        first["tool_choice"],
        serde_json::json!({"type": "tool", "name": "answer"})
    );
    assert!(first.get("output_config").is_none());
    // The first answer broke the schema: validated as on OpenAI, repaired.
    let repair = requests[1]["body"]["messages"].as_array().unwrap().clone();
    assert_eq!(
        repair[1],
        serde_json::json!({"role": "assistant", "content": [{"type": "text", "text": "{\"score\":9}"}]})
    );
    let asked = repair[2]["content"][0]["text"].as_str().unwrap();
    assert!(
        asked.contains("/score") && asked.contains("maximum"),
        "{asked}"
    );
    let record = test.read_json("r.json");
    assert_eq!(record["state"], "success");
    assert_eq!(
        record["agent_calls"][0]["exception_retries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The record holds the answer as the reply, and replays offline.
    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(0);
    assert_eq!(
        rerun.stdout,
        "identical: 2 model calls replayed, same delivery\n"
    );
}

#[test]
fn a_server_that_ignores_the_forced_tool_is_named_once_and_its_prose_json_is_read() {
    let test = Test::new();
    // As llama-server's `/v1/messages` answered SmolLM2 (issue 27): the
    // forced tool dropped, JSON in a fenced block inside prose.
    let server = MockServer::start_with(
        test.dir.path(),
        "default: {text: \"Here is the JSON:\\n\\n```json\\n{\\\"score\\\": 4}\\n```\\n\\nIt scores 4.\"}\n",
        &["--ignore-tool-choice"],
    );
    let test = test
        .file("t.yaml", &format_tactic(&server.url, "smollm2", "[]", ""))
        .file("prompts/score.md", SCORE_PROMPT)
        .env("TEST_KEY", "k");
    let first = test.run(&["run", "t.yaml", "--task", "fine work", "--record", "r.json"]);
    first.expect_code(0);
    // The answer is the JSON; the prose around it stays in the record.
    assert_eq!(first.stdout, "{\"score\": 4}\n");
    let record = test.read_json("r.json");
    let reply = record["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|dialog| dialog["messages"].as_array().unwrap())
        .find(|message| message["role"] == "assistant")
        .unwrap();
    assert_eq!(reply["content"], "{\"score\": 4}");
    assert!(
        reply["metadata"]["text_around_json"]
            .as_str()
            .unwrap()
            .starts_with("Here is the JSON:"),
        "{reply}"
    );
    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(0);
    assert_eq!(
        rerun.stdout,
        "identical: 1 model call replayed, same delivery\n"
    );
    assert_eq!(server.requests()[0]["body"]["tool_choice"]["type"], "tool");
    let warned = |stderr: &str| {
        stderr
            .lines()
            .filter(|line| {
                line.contains("warning: the server at `providers.claude.base_url` answered `smollm2` without the `answer` tool")
                    && line.contains("does not enforce `format:`")
            })
            .count()
    };
    assert_eq!(warned(&first.stderr), 1, "{}", first.stderr);
    // Said once per session store, and never under -q.
    let second = test.run(&["run", "t.yaml", "--task", "more work"]);
    second.expect_code(0);
    assert_eq!(warned(&second.stderr), 0, "{}", second.stderr);
}

#[test]
fn beside_the_agents_tools_the_answer_tool_is_any_tool_and_streams() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls: [{id: toolu_1, name: word_count, arguments: {text: "fine work"}}]
  - tool_calls: [{id: toolu_2, name: answer, arguments: {score: 2}}]
"#,
    );
    let test = test
        .file(
            "t.yaml",
            &format_tactic(
                &server.url,
                "claude-3-5-haiku",
                "[word_count]",
                ", structured_output: tool",
            ),
        )
        .file("prompts/score.md", SCORE_PROMPT)
        .env("TEST_KEY", "k");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "fine work",
        "--stream",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "{\"score\":2}\n");
    let requests = server.requests();
    let first = &requests[0]["body"];
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["word_count", "answer"]);
    assert_eq!(first["tool_choice"], serde_json::json!({"type": "any"}));
    // The word count's result went back as usual.
    let last = requests[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"][0]["type"], "tool_result");
}

#[test]
fn structured_output_is_checked_where_it_is_written() {
    let test = Test::new()
        .file(
            "t.yaml",
            &format_tactic(
                "http://127.0.0.1:9",
                "claude-3-5-haiku",
                "[]",
                ", structured_output: tools",
            ),
        )
        .file("prompts/score.md", SCORE_PROMPT)
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "x", "--no-record"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("unknown `structured_output: tools`")
            && output.stderr.contains("did you mean `tool`?"),
        "{}",
        output.stderr
    );
    let openai = Test::new().file(
        "t.yaml",
        "global: {model_name: local/m}\nagent_configs:\n  - name: a\nproviders:\n  local: {base_url: \"http://127.0.0.1:9/v1\", structured_output: tool}\n",
    );
    let output = openai.run(&["run", "t.yaml", "--task", "x", "--no-record"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`structured_output` is for `api: anthropic` providers"),
        "{}",
        output.stderr
    );
}
