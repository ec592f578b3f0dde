//! OpenAI chat completions: request building and reply parsing (pure, tested
//! against fixtures), and the provider that sends them through `http`.
//! Any OpenAI-compatible server (vLLM, llama.cpp, Ollama, LiteLLM, …) speaks this.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::exchange::{self, Target, Wire, exchange};
use super::http::{self, HttpReply};
use super::limit::Limiter;
use super::{ChatRequest, ErrorKind, Provider, ProviderError};
use crate::dialog::{ApiType, FunctionCall, Message, Modality, Role, TokenLogprob, TopLogprob};

/// Wire choices that vary between servers.
#[derive(Debug, Clone, Default)]
pub struct WireOptions {
    /// Send the system prompt as `developer` (newer OpenAI models) instead of `system` (D10).
    pub developer_role: bool,
}

/// The chat-completions body for `request`.
pub fn build_request(request: &ChatRequest<'_>, options: &WireOptions) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| wire_message(message, options))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name, "description": tool.description, "parameters": tool.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if request.stream.is_some() {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(schema) = request.format {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": true}}),
        );
    }
    for (key, value) in request.model_args {
        if key != "model" && key != "messages" {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

fn wire_message(message: &Message, options: &WireOptions) -> Value {
    match message.role {
        Role::System => {
            let role = if options.developer_role {
                "developer"
            } else {
                "system"
            };
            json!({"role": role, "content": message.content})
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id().unwrap_or_default(),
            "content": message.content,
        }),
        Role::Assistant | Role::ToolCall => {
            let mut wire = Map::new();
            wire.insert("role".into(), json!("assistant"));
            let content = if message.content.is_empty() && message.is_function_call() {
                Value::Null
            } else {
                json!(message.content)
            };
            wire.insert("content".into(), content);
            if message.is_function_call() {
                let calls: Vec<Value> = message
                    .function_calls
                    .iter()
                    .map(|call| {
                        json!({"id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments_text()}})
                    })
                    .collect();
                wire.insert("tool_calls".into(), Value::Array(calls));
            }
            wire.insert("name".into(), json!(message.sanitized_name()));
            Value::Object(wire)
        }
        Role::User => {
            let content = match message.modality {
                Modality::Text => json!(message.content),
                Modality::Image => {
                    let mime = message.mime_type().unwrap_or("image/png");
                    let mut parts = Vec::new();
                    if let Some(caption) = message.metadata.get("caption").and_then(Value::as_str) {
                        parts.push(json!({"type": "text", "text": caption}));
                    }
                    parts.push(json!({"type": "image_url",
                                      "image_url": {"url": format!("data:{mime};base64,{}", message.content)}}));
                    Value::Array(parts)
                }
            };
            json!({"role": "user", "content": content, "name": message.sanitized_name()})
        }
    }
}

/// A chat-completions reply in its usual shape, read without building a JSON
/// tree (strings are borrowed from the body where they have no escapes).
#[derive(serde::Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Map<String, Value>>,
}

#[derive(serde::Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    message: ReplyMessage<'a>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    logprobs: Option<Value>,
}

#[derive(serde::Deserialize)]
struct ReplyMessage<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ReplyCall<'a>>>,
}

#[derive(serde::Deserialize)]
struct ReplyCall<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    function: ReplyFunction<'a>,
}

#[derive(serde::Deserialize)]
struct ReplyFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// An assistant message from a chat-completions reply body as received. The
/// usual shape is read directly; anything else (a missing field, a value of
/// an unexpected type) goes through `parse_response`, which is lenient.
pub fn parse_body(body: &str) -> Result<Message, ProviderError> {
    let Ok(reply) = serde_json::from_str::<Reply<'_>>(body) else {
        return parse_response(&exchange::parse_json(body)?);
    };
    let Some(choice) = reply.choices.into_iter().next() else {
        return Err(ProviderError::transient("malformed reply: no `choices`"));
    };
    let content = choice.message.content.unwrap_or_default();
    let mut message = Message::new(Role::Assistant, "assistant", content);
    for call in choice.message.tool_calls.into_iter().flatten() {
        message.function_calls.push(FunctionCall::from_model(
            call.id.unwrap_or_default(),
            call.function.name.unwrap_or_default(),
            call.function.arguments.as_deref().unwrap_or_default(),
        ));
    }
    if let Some(tokens) = choice
        .logprobs
        .as_ref()
        .and_then(|logprobs| logprobs.get("content"))
        .and_then(Value::as_array)
    {
        message.logprobs = tokens.iter().map(token_logprob).collect();
    }
    message.model = reply.model.map(Cow::into_owned);
    if let Some(finish) = choice.finish_reason {
        message
            .metadata
            .insert("finish_reason".into(), Value::String(finish.into_owned()));
    }
    if let Some(usage) = &reply.usage {
        message.usage = normalize_usage(usage);
    }
    Ok(message)
}

/// An assistant message from a chat-completions reply body.
pub fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    let malformed = |what: &str| ProviderError::transient(format!("malformed reply: {what}"));
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| malformed("no `choices`"))?;
    let wire = choice
        .get("message")
        .ok_or_else(|| malformed("no `choices[0].message`"))?;
    let content = wire
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut message = Message::new(Role::Assistant, "assistant", content);
    if let Some(calls) = wire.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            let function = call
                .get("function")
                .ok_or_else(|| malformed("a tool call without `function`"))?;
            message.function_calls.push(FunctionCall::from_model(
                call.get("id").and_then(Value::as_str).unwrap_or_default(),
                function
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                function
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ));
        }
    }
    if let Some(tokens) = choice
        .pointer("/logprobs/content")
        .and_then(Value::as_array)
    {
        message.logprobs = tokens.iter().map(token_logprob).collect();
    }
    message.model = body
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
        message
            .metadata
            .insert("finish_reason".into(), json!(finish));
    }
    if let Some(Value::Object(usage)) = body.get("usage") {
        message.usage = normalize_usage(usage);
    }
    Ok(message)
}

fn token_logprob(entry: &Value) -> TokenLogprob {
    TokenLogprob {
        token: entry
            .get("token")
            .and_then(Value::as_str)
            .map(str::to_string),
        logprob: entry.get("logprob").and_then(Value::as_f64),
        bytes: entry.get("bytes").and_then(Value::as_array).map(|bytes| {
            bytes
                .iter()
                .filter_map(Value::as_u64)
                .map(|byte| byte as u8)
                .collect()
        }),
        top_logprobs: entry
            .get("top_logprobs")
            .and_then(Value::as_array)
            .map(|alternatives| {
                alternatives
                    .iter()
                    .map(|alternative| TopLogprob {
                        token: alternative
                            .get("token")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        logprob: alternative
                            .get("logprob")
                            .and_then(Value::as_f64)
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Keeps the counters `InvokeCost` reads, in OpenAI's shape.
fn normalize_usage(usage: &Map<String, Value>) -> Map<String, Value> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let prompt = count("prompt_tokens");
    let completion = count("completion_tokens");
    let mut normalized = Map::new();
    normalized.insert("prompt_tokens".into(), json!(prompt));
    normalized.insert("completion_tokens".into(), json!(completion));
    normalized.insert(
        "total_tokens".into(),
        json!(
            usage
                .get("total_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(prompt + completion)
        ),
    );
    for section in ["prompt_tokens_details", "completion_tokens_details"] {
        if let Some(Value::Object(details)) = usage.get(section) {
            normalized.insert(section.into(), Value::Object(details.clone()));
        }
    }
    normalized
}

/// Builds the reply of a streamed chat completion from its chunks: text
/// deltas (also handed to the sink), tool-call deltas joined by index, the
/// usage chunk. The result equals the non-streamed reply.
#[derive(Default)]
pub struct StreamAssembler {
    chunks: Map<String, Value>,
    content: String,
    calls: Vec<(String, String, String)>,
    finish_reason: Option<String>,
    done: bool,
}

impl super::exchange::Assembler for StreamAssembler {
    /// Feeds one `data:` payload; returns `false` after `[DONE]`.
    fn feed(
        &mut self,
        data: &str,
        sink: Option<super::TextSink<'_>>,
    ) -> Result<bool, ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|error| {
            ProviderError::transient(format!("malformed stream chunk: {error}"))
        })?;
        if let Some(model) = chunk.get("model") {
            self.chunks.insert("model".into(), model.clone());
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.chunks.insert("usage".into(), usage.clone());
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
        else {
            return Ok(true);
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
            if let (Some(sink), false) = (sink, text.is_empty()) {
                sink(text);
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if self.calls.len() <= index {
                self.calls.resize(index + 1, Default::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.0 = id.to_string();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.1.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.2.push_str(arguments);
            }
        }
        Ok(true)
    }

    /// The assembled message; a stream that ended without `[DONE]` or a finish
    /// reason was cut off (transient).
    fn finish(self) -> Result<Message, ProviderError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ProviderError::transient("stream cut off before its end"));
        }
        let tool_calls: Vec<Value> = self
            .calls
            .into_iter()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
        let mut message = json!({"role": "assistant", "content": self.content});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let mut body = self.chunks;
        body.insert(
            "choices".into(),
            json!([{"index": 0, "message": message, "finish_reason": self.finish_reason}]),
        );
        parse_response(&Value::Object(body))
    }
}

/// Tokens a request will use, roughly: its text at four bytes a token, plus
/// the reply budget it asks for. Only the `tpm` limiter uses it, and settles it
/// against the real usage afterwards.
fn estimate_tokens(request: &ChatRequest<'_>) -> u64 {
    let text: usize = request
        .messages
        .iter()
        .map(|message| message.content.len())
        .sum();
    let reply = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|key| request.model_args.get(*key).and_then(Value::as_u64))
        .unwrap_or(256);
    text.div_ceil(4) as u64 + reply
}

/// A classified error from a non-2xx reply.
pub fn parse_error(reply: &HttpReply) -> ProviderError {
    let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
    let error = body.get("error").unwrap_or(&body);
    let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_string);
    let code = text("code").or_else(|| text("type"));
    let mut message = text("message").unwrap_or_else(|| {
        let snippet: String = reply.body.chars().take(200).collect();
        if snippet.trim().is_empty() {
            "no error message".into()
        } else {
            snippet
        }
    });
    if message.chars().count() > 500 {
        message = message.chars().take(500).collect::<String>() + "…";
    }
    let mut kind = http::classify_status(reply.status);
    let quota = code.as_deref() == Some("insufficient_quota");
    let context = code.as_deref() == Some("context_length_exceeded")
        || message.contains("maximum context length");
    if quota || context {
        kind = ErrorKind::Permanent;
    }
    ProviderError {
        kind,
        status: Some(reply.status),
        code,
        message,
        retry_after: if kind == ErrorKind::Permanent {
            None
        } else {
            http::retry_after(&reply.headers)
        },
    }
}

/// An OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    pub client: reqwest::Client,
    /// `{base_url}/chat/completions` with the key and extra headers.
    chat: http::Endpoint,
    /// `{base_url}/responses`, the same headers.
    responses: http::Endpoint,
    pub options: WireOptions,
    pub timeout: Duration,
    /// Concurrency, rpm and tpm limits shared by every user of this provider.
    pub limiter: Arc<Limiter>,
}

impl OpenAiProvider {
    /// A provider at `base_url` (`…/v1`); the key goes in as a bearer token.
    /// An unusable URL or header is an error naming it (never a value).
    pub fn new(
        client: reqwest::Client,
        base_url: String,
        api_key: Option<&super::registry::Secret>,
        extra_headers: &[(String, String)],
        options: WireOptions,
        timeout: Duration,
        limiter: Arc<Limiter>,
    ) -> Result<OpenAiProvider, String> {
        let bearer = api_key.map(|key| format!("Bearer {}", key.expose()));
        let pairs = || {
            extra_headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .chain(bearer.as_deref().map(|bearer| ("authorization", bearer)))
        };
        let base = base_url.trim_end_matches('/');
        Ok(OpenAiProvider {
            client,
            chat: http::Endpoint::new(&format!("{base}/chat/completions"), pairs())?,
            responses: http::Endpoint::new(&format!("{base}/responses"), pairs())?,
            options,
            timeout,
            limiter,
        })
    }

    /// Where `request` goes and its body.
    fn wire(&self, request: &ChatRequest<'_>) -> (&http::Endpoint, Value) {
        if request.api_type == ApiType::Response {
            let body = super::responses::build_request(request, self.options.developer_role);
            (&self.responses, body)
        } else {
            (&self.chat, build_request(request, &self.options))
        }
    }

    async fn send(&self, request: ChatRequest<'_>) -> Result<Message, ProviderError> {
        let responses = request.api_type == ApiType::Response;
        let (endpoint, body) = self.wire(&request);
        let target = Target {
            client: &self.client,
            endpoint,
            timeout: self.timeout,
            limiter: &self.limiter,
        };
        let estimate = estimate_tokens(&request);
        if responses {
            let wire = Wire {
                parse_body: |body| super::responses::parse_response(&exchange::parse_json(body)?),
                parse_error,
            };
            exchange::<super::responses::StreamAssembler>(
                target,
                &body,
                estimate,
                request.stream,
                &wire,
            )
            .await
        } else {
            let wire = Wire {
                parse_body,
                parse_error,
            };
            exchange::<StreamAssembler>(target, &body, estimate, request.stream, &wire).await
        }
    }
}

impl Provider for OpenAiProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(self.send(request))
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> super::WireRequest {
        let (endpoint, body) = self.wire(request);
        super::WireRequest {
            url: endpoint.url.to_string(),
            body,
        }
    }

    fn limiter(&self) -> Option<&Limiter> {
        Some(&self.limiter)
    }
}

#[cfg(test)]
mod tests;
