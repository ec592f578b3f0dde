//! Wire-format fixtures for OpenAI chat completions, both directions.

use std::sync::Arc;

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::*;
use crate::dialog::{Dialog, ImageSource, MAX_CALL_TOKENS};
use crate::provider::ToolSpec;
use crate::provider::exchange::Assembler;

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[test]
fn builds_a_request_with_tools_tool_results_images_and_a_schema() {
    let mut dialog = Dialog::new("writer", "s");
    dialog.append(Message::system("Be brief."));
    dialog.append(Message::user("Count words"));
    let mut call = Message::assistant("writer", "");
    call.function_calls = vec![FunctionCall::from_model(
        "call_1",
        "word_count",
        r#"{"text": "a b"}"#,
    )];
    dialog.append(call);
    dialog.append(Message::tool("word_count", "call_1", "2"));
    dialog
        .put(Role::User)
        .caption("a chart")
        .image(ImageSource::Bytes(b"\x89PNG\r\n\x1a\n"))
        .unwrap();
    let tools = [ToolSpec {
        name: "word_count".into(),
        description: "Count words".into(),
        parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
    }];
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let model_args = args(json!({"temperature": 0.2, "logprobs": true, "model": "ignored"}));
    let request = ChatRequest {
        model: "gpt-4o-mini",
        messages: dialog.messages(),
        tools: &tools,
        format: Some(&schema),
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    let body = build_request(
        &request,
        &WireOptions {
            developer_role: true,
            send_name: true,
        },
    );
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Count words", "name": "user"},
                {"role": "assistant", "content": null, "name": "writer", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "word_count", "arguments": "{\"text\":\"a b\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "2"},
                {"role": "user", "name": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "text", "text": "a chart"}
                ]}
            ],
            "tools": [{"type": "function", "function": {
                "name": "word_count", "description": "Count words",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": true}},
            "temperature": 0.2,
            "logprobs": true
        })
    );
    let plain = build_request(
        &ChatRequest {
            tools: &[],
            format: None,
            ..request
        },
        &WireOptions::default(),
    );
    assert_eq!(plain["messages"][0]["role"], "system");
    // Without `send_name` (every server but api.openai.com by default), no
    // message carries a `name`: Mistral and xAI refuse the request over it.
    for message in plain["messages"].as_array().unwrap() {
        assert!(message.get("name").is_none(), "{message}");
    }
    assert!(plain.get("tools").is_none() && plain.get("response_format").is_none());
}

#[test]
fn the_body_is_written_in_a_fixed_order_and_model_arguments_take_their_fields_place() {
    let messages = [Message::system("S"), Message::user("U")].map(Arc::new);
    let schema = json!({"type": "object"});
    let sink = |_: &str| {};
    let keys = |body: &[u8]| -> Vec<String> {
        let value: Value = serde_json::from_slice(body).unwrap();
        value.as_object().unwrap().keys().cloned().collect()
    };
    let write = |request: &ChatRequest<'_>| {
        let bytes = http::json_body(&ChatBody {
            request,
            options: &WireOptions::default(),
        })
        .unwrap();
        // The bytes sent and the tree `--dry-run` shows are one body.
        let tree = build_request(request, &WireOptions::default());
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), tree);
        assert_eq!(serde_json::to_vec(&tree).unwrap(), bytes);
        bytes
    };
    // A schema and streaming: a `stream` argument and a `response_format`
    // argument replace the built-in values in their places.
    let model_args = args(
        json!({"temperature": 0, "response_format": {"type": "json_object"},
                                 "stream": false, "messages": "ignored"}),
    );
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: Some(&schema),
        model_args: &model_args,
        api_type: Default::default(),
        stream: Some(&sink),
    };
    let body = write(&request);
    assert_eq!(
        keys(&body),
        [
            "model",
            "messages",
            "stream",
            "stream_options",
            "response_format",
            "temperature"
        ]
    );
    let value: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["stream"], false);
    assert_eq!(value["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        value["messages"][1],
        json!({"role": "user", "content": "U"})
    );
    // Without them, the arguments follow in their own order.
    let plain = write(&ChatRequest {
        format: None,
        stream: None,
        ..request
    });
    assert_eq!(
        keys(&plain),
        [
            "model",
            "messages",
            "temperature",
            "response_format",
            "stream"
        ]
    );
}

#[test]
fn malformed_tool_arguments_go_back_verbatim() {
    let mut call = Message::assistant("a", "");
    call.function_calls = vec![FunctionCall::from_model("c", "f", "{\"x\": ")];
    let messages = [call].map(Arc::new);
    let model_args = Map::new();
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: None,
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    let body = build_request(&request, &WireOptions::default());
    assert_eq!(
        body["messages"][0]["tool_calls"][0]["function"]["arguments"],
        "{\"x\": "
    );
}

#[test]
fn parses_text_tool_calls_logprobs_and_usage() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"owls\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": "}}
            ]},
            "logprobs": {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                                      "top_logprobs": [{"token": "Hello", "logprob": -1.5}]}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                  "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 8}}
    });
    let message = parse_response(&body).unwrap();
    assert_eq!(message.role, Role::Assistant);
    assert_eq!(message.content, "");
    assert_eq!(message.model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
    assert_eq!(message.function_calls.len(), 2);
    assert_eq!(message.function_calls[0].arguments["q"], "owls");
    assert_eq!(
        message.function_calls[1].raw_arguments.as_deref(),
        Some("{\"q\": "),
        "D8: kept raw"
    );
    assert_eq!(message.logprobs[0].token.as_deref(), Some("Hi"));
    assert_eq!(message.logprobs[0].bytes.as_deref(), Some(&b"Hi"[..]));
    assert_eq!(message.logprobs[0].top_logprobs[0].logprob, -1.5);
    let cost = message.cost();
    assert_eq!(
        (
            cost.prompt_tokens,
            cost.cached_prompt_tokens,
            cost.reasoning_tokens
        ),
        (100, 64, 8)
    );
    assert_eq!(message.metadata["finish_reason"], "tool_calls");

    assert_eq!(
        parse_response(&json!({"error": "x"})).unwrap_err().kind,
        ErrorKind::Transient
    );
}

fn reply(status: u16, body: Value, headers: &[(&str, &str)]) -> HttpReply {
    HttpReply {
        status,
        headers: crate::provider::http::headers(headers.iter().copied())
            .unwrap_or_else(|_| HeaderMap::new()),
        body: body.to_string(),
    }
}

#[test]
fn errors_are_classified_from_status_and_body() {
    let cases = [
        (
            reply(
                429,
                json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
                &[("retry-after", "2")],
            ),
            ErrorKind::RateLimit,
        ),
        (
            reply(
                429,
                json!({"error": {"message": "pay", "code": "insufficient_quota"}}),
                &[],
            ),
            ErrorKind::Permanent,
        ),
        (
            reply(500, json!({"error": {"message": "boom"}}), &[]),
            ErrorKind::Transient,
        ),
        (
            reply(529, json!({"error": {"message": "overloaded"}}), &[]),
            ErrorKind::Transient,
        ),
        (
            reply(
                400,
                json!({"error": {"message": "too long", "code": "context_length_exceeded"}}),
                &[],
            ),
            ErrorKind::Permanent,
        ),
        (
            reply(401, json!({"error": {"message": "bad key"}}), &[]),
            ErrorKind::Permanent,
        ),
        (
            reply(404, json!({"error": {"message": "no model"}}), &[]),
            ErrorKind::Permanent,
        ),
    ];
    for (reply, kind) in cases {
        let error = parse_error(&reply);
        assert_eq!(error.kind, kind, "{error}");
        assert_eq!(error.status, Some(reply.status));
    }
    let limited = parse_error(&reply(
        429,
        json!({"error": {"message": "slow down"}}),
        &[("retry-after", "2")],
    ));
    assert_eq!(limited.retry_after, Some(std::time::Duration::from_secs(2)));
    assert_eq!(limited.to_string(), "HTTP 429: slow down");
    // llama-server's slot overflow, as it answers it, says what to do.
    let overflow = parse_error(&reply(
        400,
        json!({"error": {"code": 400, "message": "request (1072 tokens) exceeds the available context size (1024 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 1072, "n_ctx": 1024}}),
        &[],
    ));
    assert_eq!(overflow.kind, ErrorKind::Permanent);
    let text = overflow.to_string();
    assert!(
        text.starts_with("HTTP 400: request (1072 tokens) exceeds the available context size (1024 tokens), try increasing it (exceed_context_size_error): llama-server gives each slot")
            && text.contains("`-O max_tokens=N`"),
        "{text}"
    );
    let html = parse_error(&HttpReply {
        status: 502,
        headers: HeaderMap::new(),
        body: "<html>bad gateway</html>".into(),
    });
    assert_eq!(html.message, "<html>bad gateway</html>");
}

#[test]
fn streamed_chunks_assemble_to_the_same_message() {
    let chunks = [
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"check."},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\": "}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"owls\"}"}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"id":"c","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#,
        "[DONE]",
    ];
    let seen = std::sync::Mutex::new(String::new());
    let sink = |text: &str| seen.lock().unwrap().push_str(text);
    let mut assembler = StreamAssembler::default();
    for chunk in chunks {
        assembler.feed(chunk, Some(&sink)).unwrap();
    }
    let streamed = assembler.finish().unwrap();
    let whole = parse_response(&json!({
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me check.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"owls\"}"}}]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    }))
    .unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(*seen.lock().unwrap(), "Let me check.");

    let mut cut = StreamAssembler::default();
    cut.feed(chunks[1], None).unwrap();
    assert_eq!(
        cut.finish().unwrap_err().kind,
        ErrorKind::Transient,
        "a stream without its end is cut off"
    );
}

#[test]
fn the_direct_reader_agrees_with_the_lenient_one() {
    let bodies = [
        json!({"model": "m-1", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hi \"there\"\n"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
        json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
            {"type": "function", "function": {"name": "g", "arguments": "not json"}}]},
            "logprobs": {"content": [{"token": "x", "logprob": -0.1}]}}], "usage": null}),
        json!({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 9,
            "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 8},
            "completion_tokens_details": {"reasoning_tokens": 1}, "extra": true}}),
        // Shapes the direct reader leaves to the lenient one.
        json!({"choices": [{"message": {"content": ["parts"]}}], "model": 7, "usage": 3}),
        json!({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 2.0,
            "completion_tokens": null, "total_tokens": "5", "prompt_tokens_details": 1}}),
        json!({"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]}),
        json!({"choices": []}),
        json!({"choices": [{}]}),
        json!({"error": "x"}),
    ];
    for body in bodies {
        let text = body.to_string();
        let direct = parse_body(&text).map_err(|error| error.message);
        let lenient = parse_response(&body).map_err(|error| error.message);
        assert_eq!(direct, lenient, "{text}");
    }
    let error = parse_body("<html>").unwrap_err();
    assert_eq!(error.kind, ErrorKind::Transient);
    assert!(error.message.starts_with("malformed reply: not JSON"));
}

#[test]
fn a_reply_with_a_lone_surrogate_is_kept() {
    // Valid JSON that serde_json refuses as a Rust string: the reply and its
    // usage are kept, with U+FFFD where the surrogate was.
    let body = r#"{"choices": [{"message": {"role": "assistant", "content": "abc\ud800def"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}"#;
    let message = parse_body(body).unwrap();
    assert_eq!(message.content, "abc\u{FFFD}def");
    assert_eq!(message.total_tokens(), 15);
}

#[test]
fn tool_call_indexes_and_token_counts_from_the_wire_are_not_trusted() {
    // A tool call's `index` sized a vector (`u64::MAX` overflowed, 10^12 asked
    // for terabytes) and counts near `u64::MAX` overflowed when summed.
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":18446744073709551615,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1000000000000,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":2}}"#,
        "[DONE]",
    ];
    let mut assembler = StreamAssembler::default();
    for chunk in chunks {
        assembler.feed(chunk, None).unwrap();
    }
    let message = assembler.finish().unwrap();
    let names: Vec<&str> = message
        .function_calls
        .iter()
        .map(|call| call.name.as_str())
        .collect();
    assert_eq!(names, ["f", "g"], "in the order of their indexes, no gaps");
    // Each count is clamped to `MAX_CALL_TOKENS`.
    assert_eq!(message.usage["prompt_tokens"], MAX_CALL_TOKENS);
    assert_eq!(
        message.total_tokens(),
        MAX_CALL_TOKENS,
        "and so is their sum"
    );
    let body = r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#;
    assert_eq!(parse_body(body).unwrap().total_tokens(), MAX_CALL_TOKENS);
}

#[test]
fn usage_counts_of_every_shape_are_clamped_whole_numbers() {
    // Either reader (typed, then the tree for floats and negative numbers):
    // every count and detail count as `token_count` reads it.
    let bodies = [
        (
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551615,"total_tokens":18446744073709551615,"prompt_tokens_details":{"cached_tokens":18446744073709551615},"completion_tokens_details":{"reasoning_tokens":1e30}}}"#,
            MAX_CALL_TOKENS,
        ),
        // A negative total is no total: prompt and completion added (and clamped).
        (
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":1e30,"completion_tokens":5e20,"total_tokens":-1,"prompt_tokens_details":{"cached_tokens":1e19},"completion_tokens_details":{"reasoning_tokens":100000001}}}"#,
            MAX_CALL_TOKENS,
        ),
    ];
    for (body, total) in bodies {
        let usage = parse_body(body).unwrap().usage;
        let expected = json!({
            "prompt_tokens": MAX_CALL_TOKENS, "completion_tokens": MAX_CALL_TOKENS,
            "total_tokens": total,
            "prompt_tokens_details": {"cached_tokens": MAX_CALL_TOKENS},
            "completion_tokens_details": {"reasoning_tokens": MAX_CALL_TOKENS},
        });
        assert_eq!(Value::Object(usage), expected, "{body}");
    }
    let body = r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-3,"completion_tokens":2.9,"total_tokens":"5"}}"#;
    let usage = parse_body(body).unwrap().usage;
    assert_eq!(
        (
            &usage["prompt_tokens"],
            &usage["completion_tokens"],
            &usage["total_tokens"]
        ),
        (&json!(0), &json!(2), &json!(2))
    );
}

#[test]
fn a_chunk_read_as_its_fields_assembles_as_one_read_as_json() {
    // Each stream assembled twice: fed (its chunks read as the fields
    // assembling needs where they read so) and from each chunk read as a
    // JSON value. The two replies, their texts and their errors agree.
    let streams: [&[&str]; 7] = [
        &[
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"A \"hash\" "},"finish_reason":null}]}"#,
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"map."}],"refusal":"no"},"finish_reason":null}]}"#,
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            "[DONE]",
        ],
        // Shapes only the JSON reading takes: fields of other types.
        &[
            r#"{"model":null,"usage":null,"error":null,"choices":null}"#,
            r#"{"model":"m","choices":[{"delta":null,"finish_reason":7}]}"#,
            r#"{"choices":[{"delta":{"content":"x","refusal":3,"tool_calls":null}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":{"index":0}}}],"usage":3}"#,
            r#"{"choices":[{"delta":{"content":"y","content":"z"},"finish_reason":"length"}]}"#,
            "[DONE]",
        ],
        &[
            r#"{"choices":[{"delta":{"content":"ab\ud800c"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"t","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        ],
        &[
            r#"{"model":null,"error":null,"usage":null,"choices":[{"delta":{"content":"q","refusal":null,"tool_calls":[]},"finish_reason":"stop"}]}"#,
        ],
        &[r#"{"error":{"message":"overloaded","type":"server_error"}}"#],
        &[r#"{"choices":[{"delta":{"content":7}}]}"#],
        &[r#"{"choices":"#],
    ];
    for stream in streams {
        let fed_text = std::sync::Mutex::new(String::new());
        let fed_sink = |text: &str| fed_text.lock().unwrap().push_str(text);
        let mut fed = StreamAssembler::default();
        let fed_error = stream
            .iter()
            .map(|chunk| fed.feed(chunk, Some(&fed_sink)))
            .find_map(Result::err);
        let read_text = std::sync::Mutex::new(String::new());
        let read_sink = |text: &str| read_text.lock().unwrap().push_str(text);
        let mut read = StreamAssembler::default();
        let read_error = stream
            .iter()
            .map(|chunk| match *chunk {
                "[DONE]" => read.feed(chunk, None),
                _ => super::super::exchange::value(chunk)
                    .map_err(|error| {
                        ProviderError::transient(format!("malformed stream chunk: {error}"))
                    })
                    .and_then(|value| read.take(ChunkView::of(&value), Some(&read_sink))),
            })
            .find_map(Result::err);
        let message = |error: Option<ProviderError>| error.map(|error| error.message);
        assert_eq!(message(fed_error), message(read_error), "{stream:?}");
        assert_eq!(*fed_text.lock().unwrap(), *read_text.lock().unwrap());
        let finished =
            |assembler: StreamAssembler| assembler.finish().map_err(|error| error.message);
        assert_eq!(finished(fed), finished(read), "{stream:?}");
    }
}
