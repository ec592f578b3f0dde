//! OpenAI chat completions (`POST /v1/chat/completions`): `messages` in, a
//! `chat.completion` object or `chat.completion.chunk` events out.

use serde_json::{Value, json};

use super::{Event, Incoming, Reference, Usage, finish_reason, halves, pieces, text_of};
use lllm::mock::script::ScriptMessage;

pub fn read(request: &Value) -> Incoming {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last = messages.last();
    Incoming {
        include_usage: request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        last_text: last
            .and_then(|message| message.get("content"))
            .map(text_of)
            .unwrap_or_default(),
        last_role: last
            .and_then(|message| message.get("role"))
            .and_then(Value::as_str)
            .unwrap_or("user")
            .to_string(),
        message_count: messages.len(),
        prompt_chars: messages
            .iter()
            .filter_map(|message| message.get("content"))
            .map(|content| text_of(content).len())
            .sum(),
        ..Incoming::default()
    }
}

fn id(reference: Reference<'_>) -> String {
    format!("chatcmpl-mock-{}", reference.index)
}

fn usage_value(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input.saturating_add(usage.output),
    })
}

pub fn body(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Value {
    let mut wire = json!({"role": "assistant", "content": message.text, "refusal": null});
    if !message.tool_calls.is_empty() {
        wire["tool_calls"] = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
    }
    json!({
        "id": id(reference),
        "object": "chat.completion",
        "created": reference.created,
        "model": reference.model,
        "choices": [{
            "index": 0,
            "message": wire,
            "logprobs": null,
            "finish_reason": finish_reason(message),
        }],
        "usage": usage_value(usage),
    })
}

pub fn events(
    reference: Reference<'_>,
    message: &ScriptMessage,
    usage: Usage,
    include_usage: bool,
) -> Vec<Event> {
    let id = id(reference);
    let chunk = |delta: Value, finish: Option<&str>| Event {
        name: None,
        data: json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": reference.created,
            "model": reference.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        }),
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for piece in pieces(message.text.as_deref().unwrap_or_default(), 4) {
        events.push(chunk(json!({"content": piece}), None));
    }
    for (index, call) in message.tool_calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
            None,
        ));
        for part in halves(&call.arguments) {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                None,
            ));
        }
    }
    events.push(chunk(json!({}), Some(finish_reason(message))));
    if include_usage {
        let mut last = chunk(json!({}), None);
        last.data["choices"] = json!([]);
        last.data["usage"] = usage_value(usage);
        events.push(last);
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use lllm::mock::script::ScriptToolCall;

    const REFERENCE: Reference<'static> = Reference {
        index: 3,
        model: "m",
        created: 7,
    };

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
    fn reads_the_last_message() {
        read_case(json!({}), "", "user", 0);
        read_case(
            json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
            "hi",
            "user",
            2,
        );
        read_case(
            json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": "3"}]}),
            "3",
            "tool",
            1,
        );
    }

    #[test]
    fn streamed_chunks_assemble_to_the_body() {
        let message = ScriptMessage {
            text: Some("one two three".into()),
            tool_calls: vec![ScriptToolCall {
                id: "c1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into(),
            }],
            usage: None,
            finish_reason: None,
        };
        let usage = Usage {
            input: 2,
            output: 3,
        };
        let whole = body(REFERENCE, &message, usage);
        assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
        let events = events(REFERENCE, &message, usage, true);
        let mut text = String::new();
        let mut arguments = String::new();
        for event in &events {
            let delta = &event.data["choices"][0]["delta"];
            text.push_str(delta["content"].as_str().unwrap_or_default());
            let call = &delta["tool_calls"][0]["function"]["arguments"];
            arguments.push_str(call.as_str().unwrap_or_default());
        }
        assert_eq!(
            Some(text.as_str()),
            whole["choices"][0]["message"]["content"].as_str()
        );
        assert_eq!(
            Some(arguments.as_str()),
            whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str()
        );
        assert_eq!(
            events.last().map(|event| &event.data["usage"]),
            Some(&whole["usage"])
        );
    }
}
