//! Wire-format fixtures for the Anthropic Messages API, both directions.

use std::sync::Arc;

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::*;
use crate::provider::ToolSpec;
use crate::provider::exchange::Assembler;

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[test]
fn builds_system_tools_tool_results_and_alternating_turns() {
    let mut call = Message::assistant("a", "Checking.");
    call.function_calls = vec![
        FunctionCall::from_model("toolu_1", "lookup", r#"{"q": "owls"}"#),
        FunctionCall::from_model("toolu_2", "lookup", r#"{"q": "#),
    ];
    let messages = [
        Message::system("Be brief."),
        Message::user("Tell me about owls"),
        call,
        Message::tool("lookup", "toolu_1", "Owls are birds."),
        Message::tool("lookup", "toolu_2", "Error: bad arguments"),
    ]
    .map(Arc::new);
    let tools = [ToolSpec {
        name: "lookup".into(),
        description: "Look up".into(),
        parameters: json!({"type": "object"}),
    }];
    let model_args = args(json!({"temperature": 0.3, "max_completion_tokens": 100}));
    let request = ChatRequest {
        model: "claude-haiku-4-5",
        messages: &messages,
        tools: &tools,
        format: None,
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    assert_eq!(
        build_request(&request),
        json!({
            "model": "claude-haiku-4-5",
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Tell me about owls"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "owls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"_raw_arguments": "{\"q\": "}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Owls are birds."},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Error: bad arguments"}
                ]}
            ],
            "max_tokens": 100,
            "tools": [{"name": "lookup", "description": "Look up", "input_schema": {"type": "object"}}],
            "temperature": 0.3
        })
    );
}

#[test]
fn parses_text_tool_use_and_cache_usage() {
    let message = parse_response(&json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "owls"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}
    }))
    .unwrap();
    assert_eq!(message.content, "Let me look.");
    assert_eq!(message.function_calls[0].id, "toolu_9");
    assert_eq!(message.function_calls[0].arguments["q"], "owls");
    let cost = message.cost();
    assert_eq!(
        (
            cost.prompt_tokens,
            cost.cached_prompt_tokens,
            cost.completion_tokens
        ),
        (130, 100, 5)
    );
    assert!(parse_response(&json!({"type": "error"})).is_err());
}

#[test]
fn errors_are_classified() {
    for (status, kind, error_type) in [
        (429, ErrorKind::RateLimit, "rate_limit_error"),
        (529, ErrorKind::Transient, "overloaded_error"),
        (500, ErrorKind::Transient, "api_error"),
        (400, ErrorKind::Permanent, "invalid_request_error"),
        (401, ErrorKind::Permanent, "authentication_error"),
    ] {
        let reply = HttpReply {
            status,
            headers: HeaderMap::new(),
            body: json!({"type": "error", "error": {"type": error_type, "message": "m"}})
                .to_string(),
        };
        let error = parse_error(&reply);
        assert_eq!(error.kind, kind, "{status}");
        assert_eq!(error.code.as_deref(), Some(error_type));
    }
}

#[test]
fn stream_events_assemble_to_the_same_message() {
    let events = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_9","name":"lookup","input":{}}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\": "}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"owls\"}"}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let seen = std::sync::Mutex::new(String::new());
    let sink = |text: &str| seen.lock().unwrap().push_str(text);
    let mut assembler = StreamAssembler::default();
    for event in events {
        assembler.feed(event, Some(&sink)).unwrap();
    }
    let streamed = assembler.finish().unwrap();
    let whole = parse_response(&json!({
        "model": "claude-haiku-4-5", "stop_reason": "tool_use",
        "content": [{"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "owls"}}],
        "usage": {"input_tokens": 12, "output_tokens": 7}
    }))
    .unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(*seen.lock().unwrap(), "Let me look.");
    let mut cut = StreamAssembler::default();
    cut.feed(events[0], None).unwrap();
    assert_eq!(cut.finish().unwrap_err().kind, ErrorKind::Transient);
}

#[test]
fn images_and_schemas_are_translated() {
    let mut dialog = crate::dialog::Dialog::new("a", "s");
    dialog
        .put(Role::User)
        .caption("a photo")
        .image(crate::dialog::ImageSource::Bytes(b"\xff\xd8\xff\xe0"))
        .unwrap();
    let schema = json!({"type": "object"});
    let model_args = Map::new();
    let request = ChatRequest {
        model: "claude-sonnet-4-5",
        messages: dialog.messages(),
        tools: &[],
        format: Some(&schema),
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    let body = build_request(&request);
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A=="}},
               {"type": "text", "text": "a photo"}])
    );
    // Sonnet 4.5 takes the API's structured output (issue 27), with the
    // schema closed as the SDK closes it; the system prompt is left alone.
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema",
                          "schema": {"type": "object", "properties": {}, "additionalProperties": false}}})
    );
    assert!(body.get("system").is_none());
}

#[test]
fn stream_events_of_odd_shapes_are_kept_as_sent() {
    // Blocks and usage that are not objects were written into (a panic), and
    // each text piece copied the block's whole text (quadratic).
    let mut events = vec![
        r#"{"type":"message_start","message":{"model":"m","content":[],"usage":7}}"#.to_string(),
        r#"{"type":"content_block_start","index":0,"content_block":5}"#.into(),
        r#"{"type":"content_block_delta","index":0,"delta":{"text":"lost","partial_json":"{}"}}"#
            .into(),
        r#"{"type":"content_block_stop","index":0}"#.into(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"A"}}"#
            .into(),
    ];
    let piece =
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"b"}}"#;
    events.extend(std::iter::repeat_n(piece.to_string(), 100_000));
    events.extend([
        r#"{"type":"content_block_stop","index":1}"#.into(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":18446744073709551615,"output_tokens":3}}"#.into(),
        r#"{"type":"message_stop"}"#.into(),
    ]);
    let mut assembler = StreamAssembler::default();
    for event in &events {
        assembler.feed(event, None).unwrap();
    }
    let message = assembler.finish().unwrap();
    assert_eq!(message.content, format!("A{}", "b".repeat(100_000)));
    assert_eq!(message.usage["completion_tokens"], 3);
    assert_eq!(
        message.usage["prompt_tokens"],
        crate::dialog::MAX_CALL_TOKENS
    );
    assert_eq!(message.total_tokens(), crate::dialog::MAX_CALL_TOKENS);
}

#[test]
fn usage_counts_are_clamped_each_and_in_their_sum() {
    let body = json!({"content": [{"type": "text", "text": "x"}], "usage": {
        "input_tokens": 18446744073709551615u64, "output_tokens": -2,
        "cache_read_input_tokens": 99999999, "cache_creation_input_tokens": 7.5}});
    let usage = parse_response(&body).unwrap().usage;
    assert_eq!(
        Value::Object(usage),
        json!({"prompt_tokens": crate::dialog::MAX_CALL_TOKENS, "completion_tokens": 0,
            "total_tokens": crate::dialog::MAX_CALL_TOKENS,
            "prompt_tokens_details": {"cached_tokens": 99999999},
            "cache_creation_input_tokens": 7})
    );
}

#[test]
fn a_format_goes_as_the_setting_says() {
    // Issue 27: the schema as the API enforces it, not a sentence.
    let messages = [Message::user("Score it")].map(Arc::new);
    let schema = json!({"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]});
    let search = [ToolSpec {
        name: "search".into(),
        description: "Search".into(),
        parameters: json!({"type": "object"}),
    }];
    let body = |model: &str, tools: &[ToolSpec], model_args: Value, setting| {
        let model_args = args(model_args);
        let request = ChatRequest {
            model,
            messages: &messages,
            tools,
            format: Some(&schema),
            model_args: &model_args,
            api_type: Default::default(),
            stream: None,
        };
        build_request_with(
            &request,
            &WireOptions {
                structured_output: setting,
            },
        )
    };
    let fitted = json!({"type": "object", "properties": {"score": {"type": "integer"}},
                        "additionalProperties": false, "required": ["score"]});
    let native = body("claude-haiku-4-5", &[], json!({}), StructuredOutput::Auto);
    assert_eq!(
        native["output_config"],
        json!({"format": {"type": "json_schema", "schema": fitted}})
    );
    assert!(native.get("tools").is_none() && native.get("tool_choice").is_none());
    // Other output settings given as a model argument keep the format.
    let effort = body(
        "claude-haiku-4-5",
        &[],
        json!({"output_config": {"effort": "low", "format": null}}),
        StructuredOutput::Auto,
    );
    assert_eq!(
        effort["output_config"],
        json!({"effort": "low", "format": {"type": "json_schema", "schema": fitted}})
    );

    // A model without it: the answer tool, forced.
    let forced = body("claude-3-5-haiku", &[], json!({}), StructuredOutput::Auto);
    assert_eq!(
        forced["tools"],
        json!([{"name": "answer",
                "description": "Give your final answer: call this tool once, with the answer as its input.",
                "input_schema": schema}])
    );
    assert_eq!(
        forced["tool_choice"],
        json!({"type": "tool", "name": "answer"})
    );
    assert!(forced.get("output_config").is_none() && forced.get("system").is_none());
    // Beside the agent's tools: any tool, the answer tool last.
    let beside = body(
        "claude-3-5-haiku",
        &search,
        json!({}),
        StructuredOutput::Auto,
    );
    assert_eq!(beside["tools"][0]["name"], "search");
    assert_eq!(beside["tools"][1]["name"], "answer");
    assert_eq!(beside["tool_choice"], json!({"type": "any"}));
    // Extended thinking refuses a forced choice: `auto`, and the prompt asks.
    let thinking = body(
        "claude-3-7-sonnet",
        &[],
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}),
        StructuredOutput::Tool,
    );
    assert_eq!(thinking["tool_choice"], json!({"type": "auto"}));
    assert!(
        thinking["system"]
            .as_str()
            .unwrap()
            .contains("`answer` tool")
    );
    // The sentence, on request.
    let prompt = body("claude-haiku-4-5", &[], json!({}), StructuredOutput::Prompt);
    assert!(
        prompt["system"]
            .as_str()
            .unwrap()
            .starts_with("Reply with only a JSON value that follows this JSON schema:")
    );
    assert!(prompt.get("output_config").is_none() && prompt.get("tools").is_none());
}
