//! The OpenAI Responses API (`api_type: response`): input items,
//! `function_call` / `function_call_output`, structured output as
//! `text.format`, usage in input/output tokens, streamed events. Pure
//! translation; `openai` sends it.
//!
//! Every input item carries its `type` as OpenAI documents it (`message`,
//! `function_call`, `function_call_output`): servers that translate the API
//! (llama-server) cannot place an assistant item without it. No item has a
//! `name`; the Responses API has no such field.

use serde_json::{Map, Value, json};

use super::exchange::error_object;
use super::{ChatRequest, ErrorKind, ProviderError};
use crate::dialog::{
    ApiType, ContentPart, FunctionCall, Message, Modality, Role, token_count, total_count,
};

/// A part of a multipart user message as a Responses input part.
fn input_part(part: &ContentPart) -> Value {
    match part {
        ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
        ContentPart::ImageUrl { image_url } => {
            let mut input = json!({"type": "input_image", "image_url": image_url.url});
            if let Some(detail) = &image_url.detail {
                input["detail"] = json!(detail);
            }
            input
        }
    }
}

pub fn build_request(request: &ChatRequest<'_>, developer_role: bool) -> Value {
    let mut input = Vec::new();
    for message in request.messages {
        match message.role {
            Role::System => {
                let role = if developer_role {
                    "developer"
                } else {
                    "system"
                };
                input.push(json!({"type": "message", "role": role, "content": message.content}));
            }
            Role::User => {
                let content = match message.modality {
                    Modality::Text if message.is_multipart() => {
                        Value::Array(message.parts.iter().map(input_part).collect())
                    }
                    Modality::Text => json!([{"type": "input_text", "text": message.content}]),
                    Modality::Image => {
                        let mime = message.mime_type().unwrap_or("image/png");
                        let mut parts = Vec::new();
                        if let Some(caption) =
                            message.metadata.get("caption").and_then(Value::as_str)
                        {
                            parts.push(json!({"type": "input_text", "text": caption}));
                        }
                        parts.push(json!({"type": "input_image", "image_url": format!("data:{mime};base64,{}", message.content)}));
                        Value::Array(parts)
                    }
                };
                input.push(json!({"type": "message", "role": "user", "content": content}));
            }
            Role::Assistant | Role::ToolCall => {
                if !message.content.is_empty() {
                    // An output message as the API returned it (`annotations`
                    // is required in an `output_text` part).
                    input.push(json!({"type": "message", "role": "assistant",
                                      "content": [{"type": "output_text", "text": message.content,
                                                   "annotations": []}]}));
                }
                for call in &message.function_calls {
                    input.push(
                        json!({"type": "function_call", "call_id": call.id, "name": call.name,
                                      "arguments": call.arguments_text()}),
                    );
                }
            }
            Role::Tool => input.push(json!({"type": "function_call_output",
                                            "call_id": message.tool_call_id().unwrap_or_default(),
                                            "output": message.content})),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "name": tool.name, "description": tool.description,
                               "parameters": tool.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(schema) = request.format {
        body.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": "response", "schema": schema, "strict": true}}),
        );
    }
    if request.stream.is_some() {
        body.insert("stream".into(), json!(true));
    }
    for (key, value) in request.model_args {
        match key.as_str() {
            "model" | "input" => {}
            // Chat-completions names for the same budget.
            "max_tokens" | "max_completion_tokens" => {
                body.insert("max_output_tokens".into(), value.clone());
            }
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(body)
}

/// An assistant message from a `response` object. A `failed` or
/// `cancelled` response is an error (classified by its `error.code`); an
/// `incomplete` one keeps what it produced, with the reason as its finish
/// reason (`length` or `content_filter`, as chat completions say it), and is
/// an error only when it produced nothing (`exchange::require_output`).
pub fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    if let Some(error) = body.get("error").filter(|error| !error.is_null())
        && body.get("output").is_none()
    {
        // An error body in place of a response (some servers answer 200).
        return Err(error_object(error));
    }
    let status = body.get("status").and_then(Value::as_str);
    if let Some(status @ ("failed" | "cancelled")) = status {
        let mut error = match body.get("error").filter(|error| error.is_object()) {
            Some(error) => error_object(error),
            None => ProviderError::transient("the response failed without saying why"),
        };
        error.message = format!("the response {status}: {}", error.message);
        if status == "cancelled" {
            error.kind = ErrorKind::Permanent;
        }
        return Err(error);
    }
    let output = body
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::transient("malformed reply: no `output`"))?;
    let mut text = String::new();
    let mut refusal = String::new();
    let mut calls = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => match part.get("text") {
                            Some(Value::String(piece)) => text.push_str(piece),
                            _ => {
                                return Err(ProviderError::transient(
                                    "malformed reply: an `output_text` part without text",
                                ));
                            }
                        },
                        Some("refusal") => {
                            if let Some(piece) = part.get("refusal").and_then(Value::as_str) {
                                refusal.push_str(piece);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => calls.push(FunctionCall::from_model(
                item.get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                item.get("name").and_then(Value::as_str).unwrap_or_default(),
                item.get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )),
            _ => {}
        }
    }
    let mut message = Message::new(Role::Assistant, "assistant", text);
    message.function_calls = calls;
    message.api_type = ApiType::Response;
    message.model = body
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    if !refusal.is_empty() {
        message.metadata.insert("refusal".into(), json!(refusal));
    }
    if status == Some("incomplete") {
        let reason = match body
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
        {
            Some("max_output_tokens") | None => "length",
            Some(other) => other,
        };
        message
            .metadata
            .insert("finish_reason".into(), json!(reason));
    }
    if let Some(Value::Object(usage)) = body.get("usage") {
        // Each count at most `MAX_CALL_TOKENS` (docs/limits.md, "Numbers and their ranges").
        let count = |key: &str| usage.get(key).map_or(0, |value| token_count(key, value));
        let detail = |section: &str, key: &str| {
            usage
                .get(section)
                .and_then(|d| d.get(key))
                .map_or(0, |value| token_count(key, value))
        };
        let (input, output) = (count("input_tokens"), count("output_tokens"));
        let total = total_count(usage.get("total_tokens"), input, output);
        message.usage = json!({
            "prompt_tokens": input,
            "completion_tokens": output,
            "total_tokens": total,
            "prompt_tokens_details": {"cached_tokens": detail("input_tokens_details", "cached_tokens")},
            "completion_tokens_details": {"reasoning_tokens": detail("output_tokens_details", "reasoning_tokens")},
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
    }
    Ok(message)
}

/// Streamed events: text deltas go to the sink; `response.completed` (or
/// `response.incomplete`) carries the whole response, which becomes the
/// message; `response.failed` and `error` events are errors.
#[derive(Default)]
pub struct StreamAssembler {
    completed: Option<Value>,
}

impl super::exchange::Assembler for StreamAssembler {
    fn feed(
        &mut self,
        data: &str,
        sink: Option<super::TextSink<'_>>,
    ) -> Result<bool, ProviderError> {
        let event: Value = super::exchange::value(data).map_err(|error| {
            ProviderError::transient(format!("malformed stream event: {error}"))
        })?;
        match event.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                if let (Some(sink), Some(delta)) =
                    (sink, event.get("delta").and_then(Value::as_str))
                    && !delta.is_empty()
                {
                    sink(delta);
                }
            }
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                // The whole response, whose status says how it ended.
                let Some(response) = event.get("response").filter(|value| value.is_object()) else {
                    return Err(ProviderError::transient(
                        "malformed stream event: no `response` in its final event",
                    ));
                };
                self.completed = Some(response.clone());
                return Ok(false);
            }
            Some("error") => {
                // `{"type": "error", "code", "message", "param"}`.
                let mut error = error_object(event.get("error").unwrap_or(&event));
                error.message = format!("the stream failed: {}", error.message);
                return Err(error);
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(self) -> Result<Message, ProviderError> {
        match self.completed {
            Some(response) => parse_response(&response),
            None => Err(ProviderError::transient("stream cut off before its end")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::provider::ToolSpec;
    use crate::provider::exchange::Assembler;

    #[test]
    fn builds_input_items_and_parses_output_items() {
        let mut call = Message::assistant("a", "Let me look.");
        call.function_calls = vec![FunctionCall::from_model(
            "call_1",
            "lookup",
            r#"{"q": "owls"}"#,
        )];
        let messages = [
            Message::system("Be brief."),
            Message::user("Owls?"),
            call,
            Message::tool("lookup", "call_1", "birds"),
        ]
        .map(Arc::new);
        let tools = [ToolSpec {
            name: "lookup".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        let schema = json!({"type": "object"});
        let model_args = json!({"max_tokens": 50}).as_object().cloned().unwrap();
        let request = ChatRequest {
            model: "gpt-4.1",
            messages: &messages,
            tools: &tools,
            format: Some(&schema),
            model_args: &model_args,
            api_type: ApiType::Response,
            stream: None,
        };
        assert_eq!(
            build_request(&request, false),
            json!({
                "model": "gpt-4.1",
                "input": [
                    {"type": "message", "role": "system", "content": "Be brief."},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Owls?"}]},
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
                    {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":\"owls\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "birds"}
                ],
                "tools": [{"type": "function", "name": "lookup", "description": "d", "parameters": {"type": "object"}}],
                "text": {"format": {"type": "json_schema", "name": "response", "schema": {"type": "object"}, "strict": true}},
                "max_output_tokens": 50
            })
        );
        let reply = json!({
            "id": "resp_1", "object": "response", "model": "gpt-4.1", "status": "completed",
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Owls are birds."}]},
                {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": "{\"q\": \"more\"}"}
            ],
            "usage": {"input_tokens": 30, "output_tokens": 6, "total_tokens": 36,
                      "input_tokens_details": {"cached_tokens": 10}, "output_tokens_details": {"reasoning_tokens": 2}}
        });
        let message = parse_response(&reply).unwrap();
        assert_eq!(message.content, "Owls are birds.");
        assert_eq!(message.function_calls[0].id, "call_2");
        assert_eq!(message.api_type, ApiType::Response);
        let cost = message.cost();
        assert_eq!(
            (
                cost.prompt_tokens,
                cost.cached_prompt_tokens,
                cost.reasoning_tokens
            ),
            (30, 10, 2)
        );

        let seen = std::sync::Mutex::new(String::new());
        let sink = |text: &str| seen.lock().unwrap().push_str(text);
        let mut assembler = StreamAssembler::default();
        assembler
            .feed(
                r#"{"type":"response.output_text.delta","delta":"Owls are "}"#,
                Some(&sink),
            )
            .unwrap();
        assembler
            .feed(
                r#"{"type":"response.output_text.delta","delta":"birds."}"#,
                Some(&sink),
            )
            .unwrap();
        assembler
            .feed(
                &json!({"type": "response.completed", "response": reply}).to_string(),
                Some(&sink),
            )
            .unwrap();
        assert_eq!(assembler.finish().unwrap(), message);
        assert_eq!(*seen.lock().unwrap(), "Owls are birds.");
        assert!(StreamAssembler::default().finish().is_err());
    }

    #[test]
    fn images_become_input_images() {
        let mut dialog = crate::dialog::Dialog::new("a", "s");
        dialog
            .put(Role::User)
            .caption("see")
            .image(crate::dialog::ImageSource::Bytes(b"GIF89a"))
            .unwrap();
        let model_args = Map::new();
        let request = ChatRequest {
            model: "gpt-4.1",
            messages: dialog.messages(),
            tools: &[],
            format: None,
            model_args: &model_args,
            api_type: ApiType::Response,
            stream: None,
        };
        assert_eq!(
            build_request(&request, true)["input"][0]["content"],
            json!([{"type": "input_image", "image_url": "data:image/gif;base64,R0lGODlh"},
                   {"type": "input_text", "text": "see"}])
        );
    }
}
