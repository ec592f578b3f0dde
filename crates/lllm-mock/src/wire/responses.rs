//! The OpenAI Responses API (`POST /v1/responses`): `input` items in, a
//! `response` object with `message` / `function_call` output items out, or
//! its `response.*` SSE events.

use serde_json::{Map, Value, json};

use super::{Event, Incoming, Reference, Usage, finish_reason, halves, pieces, text_of};
use lllm::mock::script::ScriptMessage;

/// Refuses an `input` that llama-server's Responses endpoint refuses (it
/// translates items to chat messages and must recognise each one): an item
/// is a user, system or developer message (`content` text or `input_*`
/// parts; `type` may be left out), an assistant message with `"type":
/// "message"` and `output_text` parts, a `function_call`, a
/// `function_call_output` or a `reasoning` item. OpenAI itself is more
/// lenient; a client that passes here passes there too.
pub fn check(request: &Value) -> Result<(), String> {
    let items = match request.get("input") {
        Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(items)) => items,
        _ => return Err("'input' must be a string or array of objects".into()),
    };
    let text = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).map(str::to_string);
    for item in items {
        let kind = text(item, "type");
        let role = text(item, "role");
        let content = match item.get("content") {
            Some(Value::String(_)) => Some(vec![json!({"type": "input_text"})]),
            Some(Value::Array(parts)) => Some(parts.clone()),
            _ => None,
        };
        let part_types = |parts: &[Value]| -> Vec<String> {
            parts
                .iter()
                .map(|part| text(part, "type").unwrap_or_default())
                .collect()
        };
        match (kind.as_deref(), role.as_deref(), content) {
            (_, Some("user" | "system" | "developer"), Some(parts)) => {
                if let Some(bad) = part_types(&parts).into_iter().find(|kind| {
                    !matches!(kind.as_str(), "input_text" | "input_image" | "input_file")
                }) {
                    return Err(format!(
                        "'type' must be one of 'input_text', 'input_image', or 'input_file', not '{bad}'"
                    ));
                }
            }
            (Some("message"), Some("assistant"), Some(parts)) => {
                for part in &parts {
                    if text(part, "type").as_deref() != Some("output_text") {
                        return Err("'type' must be 'output_text'".into());
                    }
                    if text(part, "text").is_none() {
                        return Err("'Output text' requires 'text'".into());
                    }
                }
            }
            (Some("function_call"), _, _)
                if ["arguments", "call_id", "name"]
                    .iter()
                    .all(|key| text(item, key).is_some()) => {}
            (Some("function_call_output"), _, _)
                if text(item, "call_id").is_some()
                    && matches!(item.get("output"), Some(Value::String(_) | Value::Array(_))) => {}
            (Some("reasoning"), _, _) if item.get("summary").is_some_and(Value::is_array) => {}
            _ => return Err("Cannot determine type of 'item'".into()),
        }
    }
    Ok(())
}

pub fn read(request: &Value) -> Incoming {
    let instructions = request
        .get("instructions")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let items: Vec<Value> = match request.get("input") {
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    let (last_role, last_text) = items
        .last()
        .map(item_text)
        .unwrap_or(("user", String::new()));
    Incoming {
        last_text,
        last_role: last_role.to_string(),
        message_count: items.len(),
        prompt_chars: instructions
            + items
                .iter()
                .map(|item| item_text(item).1.len())
                .sum::<usize>(),
        ..Incoming::default()
    }
}

/// The role and text of one input item; a function call's output is `tool`.
fn item_text(item: &Value) -> (&str, String) {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call_output") => {
            ("tool", item.get("output").map(text_of).unwrap_or_default())
        }
        Some("function_call") => (
            "assistant",
            item.get("arguments").map(text_of).unwrap_or_default(),
        ),
        _ => (
            item.get("role").and_then(Value::as_str).unwrap_or("user"),
            item.get("content").map(text_of).unwrap_or_default(),
        ),
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn message_item(reference: Reference<'_>, status: &str, content: Vec<Value>) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_mock_{}", reference.index),
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

fn call_item(
    reference: Reference<'_>,
    position: usize,
    message: &ScriptMessage,
    status: &str,
    arguments: &str,
) -> Value {
    let call = &message.tool_calls[position];
    json!({
        "type": "function_call",
        "id": format!("fc_mock_{}_{position}", reference.index),
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    })
}

/// The message item when there is text (or nothing at all), then one item per call.
fn has_message(message: &ScriptMessage) -> bool {
    message.text.is_some() || message.tool_calls.is_empty()
}

fn response(
    reference: Reference<'_>,
    message: &ScriptMessage,
    usage: Option<Usage>,
    output: Vec<Value>,
) -> Value {
    let incomplete = usage.is_some() && finish_reason(message) == "length";
    let status = match (usage, incomplete) {
        (None, _) => "in_progress",
        (Some(_), true) => "incomplete",
        (Some(_), false) => "completed",
    };
    json!({
        "id": format!("resp_mock_{}", reference.index),
        "object": "response",
        "created_at": reference.created,
        "status": status,
        "error": null,
        "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "model": reference.model,
        "output": output,
        "usage": usage.map(|usage| json!({
            "input_tokens": usage.input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input.saturating_add(usage.output),
        })),
    })
}

fn output(reference: Reference<'_>, message: &ScriptMessage) -> Vec<Value> {
    let text = message.text.as_deref().unwrap_or_default();
    let mut output = Vec::new();
    if has_message(message) {
        output.push(message_item(
            reference,
            "completed",
            vec![output_text(text)],
        ));
    }
    for (position, call) in message.tool_calls.iter().enumerate() {
        output.push(call_item(
            reference,
            position,
            message,
            "completed",
            &call.arguments,
        ));
    }
    output
}

pub fn body(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Value {
    response(reference, message, Some(usage), output(reference, message))
}

pub fn events(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |name: &'static str, data: Value| {
        let mut fields = Map::new();
        fields.insert("type".into(), json!(name));
        fields.insert("sequence_number".into(), json!(events.len()));
        if let Value::Object(rest) = data {
            fields.extend(rest);
        }
        events.push(Event {
            name: Some(name),
            data: Value::Object(fields),
        });
    };
    let started = response(reference, message, None, Vec::new());
    push("response.created", json!({"response": started}));
    push("response.in_progress", json!({"response": started}));
    let finished = output(reference, message);
    let mut output_index = 0;
    if has_message(message) {
        let item_id = format!("msg_mock_{}", reference.index);
        let text = message.text.as_deref().unwrap_or_default();
        let at = json!({"item_id": item_id, "output_index": output_index, "content_index": 0});
        let with = |mut base: Value, key: &str, value: Value| {
            base[key] = value;
            base
        };
        push(
            "response.output_item.added",
            json!({"output_index": output_index, "item": message_item(reference, "in_progress", Vec::new())}),
        );
        push(
            "response.content_part.added",
            with(at.clone(), "part", output_text("")),
        );
        for piece in pieces(text, 4) {
            push(
                "response.output_text.delta",
                with(at.clone(), "delta", json!(piece)),
            );
        }
        push(
            "response.output_text.done",
            with(at.clone(), "text", json!(text)),
        );
        push(
            "response.content_part.done",
            with(at, "part", output_text(text)),
        );
        push(
            "response.output_item.done",
            json!({"output_index": output_index, "item": finished[output_index]}),
        );
        output_index += 1;
    }
    for (position, call) in message.tool_calls.iter().enumerate() {
        let item_id = format!("fc_mock_{}_{position}", reference.index);
        push(
            "response.output_item.added",
            json!({"output_index": output_index, "item": call_item(reference, position, message, "in_progress", "")}),
        );
        for part in halves(&call.arguments) {
            push(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": output_index, "delta": part}),
            );
        }
        push(
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": output_index, "arguments": call.arguments}),
        );
        push(
            "response.output_item.done",
            json!({"output_index": output_index, "item": finished[output_index]}),
        );
        output_index += 1;
    }
    let done = response(reference, message, Some(usage), finished);
    let name = if done["status"] == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    push(name, json!({"response": done}));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use lllm::mock::script::ScriptToolCall;

    #[track_caller]
    fn read_case(request: Value, text: &str, role: &str, count: usize) {
        let incoming = read(&request);
        assert_eq!(
            (
                incoming.last_text.as_str(),
                incoming.last_role.as_str(),
                incoming.message_count
            ),
            (text, role, count)
        );
    }

    #[test]
    fn items_are_checked_as_llama_server_does() {
        let ok = json!({"input": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "user", "content": "typed"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "42"}
        ]});
        assert_eq!(check(&ok), Ok(()));
        assert_eq!(check(&json!({"input": "hello"})), Ok(()));
        for (bad, error) in [
            (
                json!({"role": "assistant", "content": [{"type": "output_text", "text": "a"}]}),
                "Cannot determine type of 'item'",
            ),
            (
                json!({"type": "message", "role": "assistant", "content": "a"}),
                "'type' must be 'output_text'",
            ),
            (
                json!({"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "a"}]}),
                "'type' must be 'output_text'",
            ),
            (
                json!({"call_id": "c", "output": "42"}),
                "Cannot determine type of 'item'",
            ),
            (
                json!({"role": "user", "content": [{"type": "output_text", "text": "a"}]}),
                "'type' must be one of 'input_text', 'input_image', or 'input_file', not 'output_text'",
            ),
        ] {
            assert_eq!(check(&json!({"input": [bad]})), Err(error.to_string()));
        }
        assert!(check(&json!({"input": 3})).is_err());
    }

    #[test]
    fn reads_the_last_input_item() {
        read_case(json!({"input": "hello"}), "hello", "user", 1);
        read_case(
            json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
            "hi",
            "user",
            1,
        );
        read_case(
            json!({"input": [
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "42"}
            ]}),
            "42",
            "tool",
            2,
        );
    }

    #[test]
    fn streamed_events_end_with_the_body() {
        let reference = Reference {
            index: 1,
            model: "m",
            created: 5,
        };
        let message = ScriptMessage {
            text: Some("a b c".into()),
            tool_calls: vec![ScriptToolCall {
                id: "c1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            usage: None,
            finish_reason: None,
        };
        let usage = Usage {
            input: 1,
            output: 2,
        };
        let whole = body(reference, &message, usage);
        assert_eq!(whole["output"][1]["call_id"], "c1");
        let events = events(reference, &message, usage);
        let text: String = events
            .iter()
            .filter(|event| event.name == Some("response.output_text.delta"))
            .filter_map(|event| event.data["delta"].as_str())
            .collect();
        assert_eq!(text, "a b c");
        let last = events
            .last()
            .map(|event| (event.name, &event.data["response"]));
        assert_eq!(last, Some((Some("response.completed"), &whole)));
    }
}
