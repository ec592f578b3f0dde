//! The OpenAI Responses API (`api_type: response`): input items,
//! `function_call` / `function_call_output`, structured output as
//! `text.format`, usage in input/output tokens, streamed events. Pure
//! translation; `openai` sends it.

use serde_json::{Map, Value, json};

use super::{ChatRequest, ProviderError};
use crate::dialog::{ApiType, FunctionCall, Message, Modality, Role};

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
                input.push(json!({"role": role, "content": message.content}));
            }
            Role::User => {
                let content = match message.modality {
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
                input.push(json!({"role": "user", "content": content}));
            }
            Role::Assistant | Role::ToolCall => {
                if !message.content.is_empty() {
                    input.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": message.content}]}));
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

/// An assistant message from a `response` object.
pub fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    let output = body
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::transient("malformed reply: no `output`"))?;
    let mut text = String::new();
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
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
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
    if let Some(Value::Object(usage)) = body.get("usage") {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let detail = |section: &str, key: &str| {
            usage
                .get(section)
                .and_then(|d| d.get(key))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let (input, output) = (count("input_tokens"), count("output_tokens"));
        message.usage = json!({
            "prompt_tokens": input,
            "completion_tokens": output,
            "total_tokens": usage.get("total_tokens").and_then(Value::as_u64).unwrap_or(input.saturating_add(output)),
            "prompt_tokens_details": {"cached_tokens": detail("input_tokens_details", "cached_tokens")},
            "completion_tokens_details": {"reasoning_tokens": detail("output_tokens_details", "reasoning_tokens")},
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
    }
    Ok(message)
}

/// Streamed events: text deltas go to the sink; `response.completed` carries
/// the whole response, which becomes the message.
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
        let event: Value = serde_json::from_str(data).map_err(|error| {
            ProviderError::transient(format!("malformed stream event: {error}"))
        })?;
        match event.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                if let (Some(sink), Some(delta)) =
                    (sink, event.get("delta").and_then(Value::as_str))
                {
                    sink(delta);
                }
            }
            Some("response.completed") => {
                self.completed = event.get("response").cloned();
                return Ok(false);
            }
            Some("response.failed") | Some("error") => {
                let message = event
                    .pointer("/response/error/message")
                    .or_else(|| event.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the response failed");
                return Err(ProviderError::transient(message.to_string()));
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
        let mut call = Message::assistant("a", "");
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
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "input_text", "text": "Owls?"}]},
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
            .put_image(
                crate::dialog::ImageSource::Bytes(b"GIF89a"),
                Some("see"),
                Role::User,
                "user",
                Map::new(),
            )
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
            json!([{"type": "input_text", "text": "see"},
                   {"type": "input_image", "image_url": "data:image/gif;base64,R0lGODlh"}])
        );
    }
}
