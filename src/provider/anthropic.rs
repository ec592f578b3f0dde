//! The Anthropic Messages API, native: the system prompt as the top-level
//! `system`, `tool_use` / `tool_result` blocks, images, a default `max_tokens`,
//! usage with cache tokens, 529 "overloaded" as a transient error, streaming.
//! The base URL is a host, as in Anthropic's SDKs (`ANTHROPIC_BASE_URL`,
//! default `https://api.anthropic.com`); requests go to `{base}/v1/messages`.
//! Messages carry no `name`: the Messages API has no such field.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::exchange::{Target, Wire, error_object, exchange};
use super::http::{self, HttpReply};
use super::limit::Limiter;
use super::{ChatRequest, ErrorKind, Provider, ProviderError};
use crate::dialog::{FunctionCall, ImageRef, Message, Modality, Role};

pub mod structured;

use structured::Plan;
pub use structured::StructuredOutput;

/// Anthropic requires `max_tokens`; used when `model_args` does not set it.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;
pub const API_VERSION: &str = "2023-06-01";

/// Wire choices of one Anthropic provider (`providers:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireOptions {
    /// How a prompt's `format` is sent (`structured_output:`).
    pub structured_output: StructuredOutput,
}

/// [`build_request_with`] the default options.
pub fn build_request(request: &ChatRequest<'_>) -> Value {
    build_request_with(request, &WireOptions::default())
}

/// The Messages API body for `request`. Consecutive messages of one role are
/// joined (the API wants user and assistant turns to alternate), tool results
/// become `tool_result` blocks of a user turn, a format goes as `options`
/// say (`structured`).
pub fn build_request_with(request: &ChatRequest<'_>, options: &WireOptions) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages {
        let (role, blocks) = match message.role {
            Role::System if turns.is_empty() => {
                system.push(message.content.clone());
                continue;
            }
            Role::System | Role::User => ("user", user_blocks(message)),
            Role::Tool => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": message.tool_call_id().unwrap_or_default(),
                            "content": message.content}),
                ],
            ),
            Role::Assistant | Role::ToolCall => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": message.content}));
                }
                for call in &message.function_calls {
                    // Malformed arguments (D8) cannot be an `input` object; send them as a string field.
                    let input = match &call.raw_arguments {
                        Some(raw) => json!({"_raw_arguments": raw}),
                        None => Value::Object(call.arguments.clone()),
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                ("assistant", blocks)
            }
        };
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let plan = structured::plan(request, options.structured_output);
    match &plan {
        Some(Plan::Prompt(sentence)) => system.push(sentence.clone()),
        // Extended thinking refuses a forced tool choice: the prompt asks.
        Some(Plan::Tool {
            name,
            forced: false,
            ..
        }) => system.push(format!(
            "When you have the final answer, give it by calling the `{name}` tool."
        )),
        _ => {}
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), json!(DEFAULT_MAX_TOKENS));
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters}))
        .collect();
    if let Some(Plan::Tool { tool, .. }) = &plan {
        tools.push(tool.clone());
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    match &plan {
        Some(Plan::Tool { name, forced, .. }) => {
            // With the agent's tools on the turn, any tool: the answer
            // tool when the model is done with the others.
            let choice = match (forced, request.tools.is_empty()) {
                (false, _) => json!({"type": "auto"}),
                (true, true) => json!({"type": "tool", "name": name}),
                (true, false) => json!({"type": "any"}),
            };
            body.insert("tool_choice".into(), choice);
        }
        Some(Plan::OutputConfig(schema)) => {
            body.insert(
                "output_config".into(),
                json!({"format": {"type": "json_schema", "schema": schema}}),
            );
        }
        Some(Plan::Prompt(_)) | None => {}
    }
    if request.stream.is_some() {
        body.insert("stream".into(), json!(true));
    }
    for (key, value) in request.model_args {
        match key.as_str() {
            "model" | "messages" | "system" => {}
            // Other output settings (`effort`) go with the format, as the
            // SDK's `parse` merges them.
            "output_config" => match (body.get_mut("output_config"), value) {
                (Some(Value::Object(ours)), Value::Object(given)) => {
                    let format = ours.remove("format");
                    let mut merged = given.clone();
                    merged.extend(format.map(|format| ("format".to_string(), format)));
                    *ours = merged;
                }
                _ => {
                    body.insert(key.clone(), value.clone());
                }
            },
            // OpenAI's name for the same budget.
            "max_completion_tokens" => {
                body.insert("max_tokens".into(), value.clone());
            }
            // OpenAI's `stop` (a string or a list), as a batch line's
            // `stop_sequences` is read too.
            "stop" => {
                let sequences = match value {
                    Value::String(_) => Value::Array(vec![value.clone()]),
                    other => other.clone(),
                };
                body.insert("stop_sequences".into(), sequences);
            }
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(body)
}

fn user_blocks(message: &Message) -> Vec<Value> {
    match message.modality {
        Modality::Text if message.is_multipart() => message
            .parts
            .iter()
            .map(|part| match part.image_ref() {
                None => json!({"type": "text", "text": part.as_text().unwrap_or_default()}),
                Some(ImageRef::Inline { mime, data }) => json!({"type": "image", "source": {
                    "type": "base64", "media_type": mime, "data": data}}),
                Some(ImageRef::Url(url)) => {
                    json!({"type": "image", "source": {"type": "url", "url": url}})
                }
            })
            .collect(),
        Modality::Text => vec![json!({"type": "text", "text": message.content})],
        Modality::Image => {
            let mut blocks = vec![json!({"type": "image", "source": {
                "type": "base64", "media_type": message.mime_type().unwrap_or("image/png"), "data": message.content}})];
            if let Some(caption) = message.metadata.get("caption").and_then(Value::as_str) {
                blocks.push(json!({"type": "text", "text": caption}));
            }
            blocks
        }
    }
}

/// An assistant message from a Messages API reply.
pub fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_object(body.get("error").unwrap_or(body)));
    }
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::transient("malformed reply: no `content`"))?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text") {
                Some(Value::String(piece)) => text.push_str(piece),
                _ => {
                    return Err(ProviderError::transient(
                        "malformed reply: a `text` block without text",
                    ));
                }
            },
            Some("tool_use") => {
                let input = block.get("input").cloned().unwrap_or(json!({}));
                calls.push(FunctionCall::from_model(
                    block.get("id").and_then(Value::as_str).unwrap_or_default(),
                    block
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    &input.to_string(),
                ));
            }
            _ => {}
        }
    }
    let mut message = Message::new(Role::Assistant, "assistant", text);
    message.function_calls = calls;
    message.model = body
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(reason) = body.get("stop_reason").and_then(Value::as_str) {
        message
            .metadata
            .insert("finish_reason".into(), json!(reason));
    }
    if let Some(Value::Object(usage)) = body.get("usage") {
        message.usage = normalize_usage(usage);
    }
    Ok(message)
}

/// Anthropic's `input_tokens` excludes cache reads and writes; the normalized
/// `prompt_tokens` counts every input token, with cache reads as cached tokens.
fn normalize_usage(usage: &Map<String, Value>) -> Map<String, Value> {
    // Each count at most `MAX_CALL_TOKENS` (docs/limits.md, "Numbers and their ranges").
    let count = |key: &str| {
        usage
            .get(key)
            .map_or(0, |value| crate::dialog::token_count(key, value))
    };
    let cached = count("cache_read_input_tokens");
    // Counts come from the server: saturate rather than overflow.
    let prompt = count("input_tokens")
        .saturating_add(cached)
        .saturating_add(count("cache_creation_input_tokens"));
    let prompt = crate::dialog::clamp_tokens("prompt_tokens", prompt);
    let completion = count("output_tokens");
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": crate::dialog::total_count(None, prompt, completion),
        "prompt_tokens_details": {"cached_tokens": cached},
        "cache_creation_input_tokens": count("cache_creation_input_tokens"),
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

/// A classified error: 429 rate limit, 529 overloaded and 5xx transient, other 4xx permanent.
pub fn parse_error(reply: &HttpReply) -> ProviderError {
    let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
    let error = body.get("error").unwrap_or(&Value::Null);
    let code = error
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(|text| text.chars().take(500).collect())
        .unwrap_or_else(|| reply.body.chars().take(200).collect());
    let kind = http::classify_status(reply.status);
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
        endpoint: None,
        network: false,
    }
}

/// Rebuilds a reply from Messages API stream events. Each block's text and
/// input arrive in pieces; they are kept beside the blocks and joined once, at
/// the end (joining into the block at every piece took time quadratic in its
/// length). A block or usage that is not an object is kept as sent, never
/// written into.
#[derive(Default)]
pub struct StreamAssembler {
    body: Map<String, Value>,
    blocks: Vec<Value>,
    texts: Vec<String>,
    partial_inputs: Vec<String>,
    done: bool,
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
            Some("message_start") => {
                if let Some(Value::Object(message)) = event.get("message") {
                    self.body = message.clone();
                }
            }
            Some("content_block_start") => {
                let block = event.get("content_block").cloned().unwrap_or(json!({}));
                self.blocks.push(block);
                self.texts.push(String::new());
                self.partial_inputs.push(String::new());
            }
            Some("content_block_delta") => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                let delta = event.get("delta").unwrap_or(&Value::Null);
                if let (Some(joined), Some(partial)) = (
                    self.texts.get_mut(index),
                    self.partial_inputs.get_mut(index),
                ) {
                    if let Some(text) = delta.get("text").and_then(Value::as_str) {
                        joined.push_str(text);
                        // An empty piece would tell the display a new attempt
                        // started (`TextSink`).
                        if let (Some(sink), false) = (sink, text.is_empty()) {
                            sink(text);
                        }
                    }
                    if let Some(json_part) = delta.get("partial_json").and_then(Value::as_str) {
                        partial.push_str(json_part);
                    }
                }
            }
            Some("content_block_stop") => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let (Some(Value::Object(block)), Some(partial)) = (
                    self.blocks.get_mut(index),
                    self.partial_inputs.get_mut(index),
                ) && !partial.is_empty()
                {
                    // Read once: a repeated stop does not parse it again.
                    let partial = std::mem::take(partial);
                    let input = serde_json::from_str(&partial)
                        .unwrap_or_else(|_| json!({"_raw_arguments": partial}));
                    block.insert("input".into(), input);
                }
            }
            Some("message_delta") => {
                if let Some(reason) = event.pointer("/delta/stop_reason") {
                    self.body.insert("stop_reason".into(), reason.clone());
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    match self.body.get_mut("usage") {
                        Some(Value::Object(merged)) => merged.extend(usage.clone()),
                        _ => {
                            self.body
                                .insert("usage".into(), Value::Object(usage.clone()));
                        }
                    }
                }
            }
            Some("message_stop") => {
                self.done = true;
                return Ok(false);
            }
            Some("error") => {
                // `{"type": "error", "error": {"type": "overloaded_error", …}}`,
                // classified by its type like an HTTP error of that type.
                let mut error = error_object(event.get("error").unwrap_or(&event));
                error.message = format!("the stream failed: {}", error.message);
                return Err(error);
            }
            _ => {}
        }
        Ok(true)
    }

    fn finish(mut self) -> Result<Message, ProviderError> {
        if !self.done {
            return Err(ProviderError::transient("stream cut off before its end"));
        }
        for (block, text) in self.blocks.iter_mut().zip(self.texts) {
            if let (Value::Object(block), false) = (block, text.is_empty()) {
                let start = block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let whole = Value::String(format!("{start}{text}"));
                block.insert("text".into(), whole);
            }
        }
        self.body
            .insert("content".into(), Value::Array(self.blocks));
        parse_response(&Value::Object(self.body))
    }
}

/// Where the Messages API of `base` is: `{base}/v1/messages`, as Anthropic's
/// SDKs build it from a host (`https://api.anthropic.com`). A base that ends
/// in `/v1` already (the form lllm once documented) means the same. Added to
/// the URL's path: a query of the base stays a query.
pub fn messages_url(base: &str) -> String {
    http::edit_path(base, |path| {
        let path = path.strip_suffix("/v1").unwrap_or(path);
        format!("{path}/v1/messages")
    })
}

pub struct AnthropicProvider {
    pub client: reqwest::Client,
    /// `{base_url}/v1/messages` with the version, the credentials and extra headers.
    messages: http::Endpoint,
    /// Where the base URL came from, for errors that mean a wrong address.
    source: String,
    pub timeout: Duration,
    pub limiter: Arc<Limiter>,
    /// How formats go on the wire (`structured_output:`).
    options: WireOptions,
}

impl AnthropicProvider {
    /// A provider at `base_url` (a host; see [`messages_url`]). As in
    /// Anthropic's SDKs, the key goes in `x-api-key` and an auth token
    /// (`ANTHROPIC_AUTH_TOKEN`) as `Authorization: Bearer`; both are sent when
    /// both are set. An unusable URL or header is an error naming it (never
    /// a value).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: reqwest::Client,
        base_url: super::registry::BaseUrl,
        api_key: Option<&super::registry::Secret>,
        auth_token: Option<&super::registry::Secret>,
        extra_headers: &[(String, String)],
        options: WireOptions,
        timeout: Duration,
        limiter: Arc<Limiter>,
    ) -> Result<AnthropicProvider, String> {
        let bearer = auth_token.map(|token| format!("Bearer {}", token.expose()));
        let pairs = extra_headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .chain([("anthropic-version", API_VERSION)])
            .chain(api_key.map(|key| ("x-api-key", key.expose())))
            .chain(bearer.as_deref().map(|bearer| ("authorization", bearer)));
        Ok(AnthropicProvider {
            client,
            messages: http::Endpoint::new(&messages_url(&base_url.url), pairs)?,
            source: base_url.source,
            timeout,
            limiter,
            options,
        })
    }

    /// `{base_url}/v1/messages` with its headers (the Batch API's requests
    /// carry the same).
    pub fn messages_endpoint(&self) -> &http::Endpoint {
        &self.messages
    }

    async fn send(&self, request: ChatRequest<'_>) -> Result<Message, ProviderError> {
        let body = build_request_with(&request, &self.options);
        let target = Target {
            client: &self.client,
            endpoint: &self.messages,
            source: &self.source,
            timeout: self.timeout,
            limiter: &self.limiter,
        };
        // What Anthropic counts at admission: the prompt against the input
        // window, `max_tokens` against the output window.
        let estimate = super::limit::Estimate {
            input: super::limit::prompt_tokens(request.messages),
            output: body
                .get("max_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_MAX_TOKENS),
        };
        let wire = Wire {
            parse_body: |body| parse_response(&super::exchange::parse_json(body)?),
            parse_error,
        };
        let forced_answer = body
            .get("tool_choice")
            .and_then(|choice| choice.get("type"))
            == Some(&json!("tool"));
        let body = http::json_body(&body)?;
        let reply =
            exchange::<StreamAssembler>(target, body, estimate, request.stream, &wire).await?;
        let lifted = structured::lift_answer(reply, &request);
        if forced_answer && !lifted.metadata.contains_key("answer_tool") {
            structured::warn_answer_tool_ignored(request.model, &self.source);
        }
        // The answer came as a tool's input, which streams as no text.
        if let (Some(sink), Some(_)) = (request.stream, lifted.metadata.get("answer_tool")) {
            sink(&lifted.content);
        }
        Ok(lifted)
    }
}

impl Provider for AnthropicProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(self.send(request))
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> super::WireRequest {
        super::WireRequest {
            url: self.messages.place().to_string(),
            body: build_request_with(request, &self.options),
        }
    }

    fn limiter(&self) -> Option<&Limiter> {
        Some(&self.limiter)
    }

    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        let whole = ChatRequest {
            stream: None,
            ..*request
        };
        let body = http::json_body(&build_request_with(&whole, &self.options)).ok()?;
        Some(self.messages.request_digest(&body))
    }

    /// The checks of every reply, and the scrubbing of what this endpoint
    /// sends that `http` gives a fresh reply's body.
    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        let mut reply = super::exchange::accept(reply)?;
        super::scrub::scrub_message(&self.messages.secrets, &mut reply);
        Ok(reply)
    }
}

#[cfg(test)]
mod tests;
