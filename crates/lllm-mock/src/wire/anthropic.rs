//! The Anthropic Messages API (`POST /v1/messages`): `system` and content
//! blocks in, a `message` with `text` / `tool_use` blocks out, or its
//! `message_start` … `message_stop` SSE events. Errors use Anthropic's
//! `{"type": "error", "error": {...}}` body.

use serde_json::{Map, Value, json};

use super::{
    Event, Incoming, Reference, Usage, arguments_value, finish_reason, halves, pieces, text_of,
};
use lllm::mock::script::ScriptMessage;

pub fn read(request: &Value) -> Incoming {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let system = request
        .get("system")
        .map_or(0, |system| text_of(system).len());
    let (last_role, last_text) = messages
        .last()
        .map(message_text)
        .unwrap_or(("user", String::new()));
    Incoming {
        last_text,
        last_role: last_role.to_string(),
        message_count: messages.len(),
        prompt_chars: system
            + messages
                .iter()
                .map(|message| message_text(message).1.len())
                .sum::<usize>(),
        ..Incoming::default()
    }
}

/// The role and text of a message; a user message carrying tool results is
/// `tool`, with the results' text, as in the other APIs.
fn message_text(message: &Value) -> (&str, String) {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user");
    let content = message.get("content").unwrap_or(&Value::Null);
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    let results: Vec<String> = blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| block.get("content").map(text_of).unwrap_or_default())
        .collect();
    if results.is_empty() {
        (role, text_of(content))
    } else {
        ("tool", results.join("\n"))
    }
}

/// OpenAI's finish reasons in Anthropic's words; others pass through.
fn stop_reason(message: &ScriptMessage) -> &str {
    match finish_reason(message) {
        "stop" => "end_turn",
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        other => other,
    }
}

fn usage_value(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

fn has_text_block(message: &ScriptMessage) -> bool {
    message.text.is_some() || message.tool_calls.is_empty()
}

fn message_value(
    reference: Reference<'_>,
    content: Vec<Value>,
    stop: Option<&str>,
    usage: Value,
) -> Value {
    json!({
        "id": format!("msg_mock_{}", reference.index),
        "type": "message",
        "role": "assistant",
        "model": reference.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage,
    })
}

pub fn body(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Value {
    let mut content = Vec::new();
    if has_text_block(message) {
        content.push(json!({"type": "text", "text": message.text.as_deref().unwrap_or_default()}));
    }
    for call in &message.tool_calls {
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": arguments_value(&call.arguments)}));
    }
    message_value(
        reference,
        content,
        Some(stop_reason(message)),
        usage_value(usage.input, usage.output),
    )
}

pub fn events(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |name: &'static str, data: Value| {
        let mut fields = Map::new();
        fields.insert("type".into(), json!(name));
        if let Value::Object(rest) = data {
            fields.extend(rest);
        }
        events.push(Event {
            name: Some(name),
            data: Value::Object(fields),
        });
    };
    push(
        "message_start",
        json!({"message": message_value(reference, Vec::new(), None, usage_value(usage.input, 1))}),
    );
    push("ping", json!({}));
    let mut index = 0;
    if has_text_block(message) {
        push(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "text", "text": ""}}),
        );
        for piece in pieces(message.text.as_deref().unwrap_or_default(), 4) {
            push(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "text_delta", "text": piece}}),
            );
        }
        push("content_block_stop", json!({"index": index}));
        index += 1;
    }
    for call in &message.tool_calls {
        push(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        );
        for part in halves(&call.arguments) {
            push(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
        }
        push("content_block_stop", json!({"index": index}));
        index += 1;
    }
    push(
        "message_delta",
        json!({"delta": {"stop_reason": stop_reason(message), "stop_sequence": null},
               "usage": {"output_tokens": usage.output}}),
    );
    push("message_stop", json!({}));
    events
}

/// `code` from the script overrides the error type the status implies.
pub fn error_body(status: u16, code: Option<&str>, message: &str) -> Value {
    let kind = code.unwrap_or(match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    });
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use lllm::mock::script::ScriptToolCall;

    #[track_caller]
    fn read_case(request: Value, text: &str, role: &str) {
        let incoming = read(&request);
        assert_eq!(
            (incoming.last_text.as_str(), incoming.last_role.as_str()),
            (text, role)
        );
    }

    #[test]
    fn reads_the_last_message() {
        read_case(
            json!({"system": "s", "messages": [{"role": "user", "content": "hi"}]}),
            "hi",
            "user",
        );
        read_case(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
            "a\nb",
            "user",
        );
        read_case(
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "42"}]}]}]}),
            "42",
            "tool",
        );
    }

    #[test]
    fn malformed_arguments_still_reach_the_client() {
        let reference = Reference {
            index: 0,
            model: "m",
            created: 0,
        };
        let message = ScriptMessage {
            text: None,
            tool_calls: vec![ScriptToolCall {
                id: "t1".into(),
                name: "f".into(),
                arguments: "{\"a\": ".into(),
            }],
            usage: None,
            finish_reason: None,
        };
        let usage = Usage {
            input: 1,
            output: 1,
        };
        let whole = body(reference, &message, usage);
        assert_eq!(
            whole["content"],
            json!([{"type": "tool_use", "id": "t1", "name": "f", "input": "{\"a\": "}])
        );
        assert_eq!(whole["stop_reason"], "tool_use");
        let partial: String = events(reference, &message, usage)
            .iter()
            .filter_map(|event| event.data["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(partial, "{\"a\": ");
    }

    #[test]
    fn errors_have_anthropic_types() {
        assert_eq!(
            error_body(529, None, "busy")["error"]["type"],
            "overloaded_error"
        );
        assert_eq!(
            error_body(400, Some("x"), "m")["error"],
            json!({"type": "x", "message": "m"})
        );
    }
}
