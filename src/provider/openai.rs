//! OpenAI chat completions: request building and reply parsing (pure, tested
//! against fixtures), and the provider that sends them through `http`.
//! Any OpenAI-compatible server (vLLM, llama.cpp, Ollama, LiteLLM, …) speaks this.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use super::exchange::{self, Target, Wire, exchange};
use super::http::{self, HttpReply};
use super::limit::{Estimate, Limiter};
use super::{ChatRequest, ErrorKind, Provider, ProviderError};
use crate::dialog::{
    ApiType, FunctionCall, Message, Modality, Role, TokenLogprob, TopLogprob, clamp_details,
    clamp_tokens, token_count, total_count,
};

/// Wire choices that vary between servers.
#[derive(Debug, Clone, Default)]
pub struct WireOptions {
    /// Send the system prompt as `developer` (newer OpenAI models) instead of `system` (D10).
    pub developer_role: bool,
    /// Send each user and assistant message's `name` (the agent's name). OpenAI
    /// accepts it; Mistral, vLLM in Mistral mode and xAI refuse the whole
    /// request over it, so it is sent only where a provider says so
    /// (`send_name` under `providers:`, on by default for api.openai.com).
    pub send_name: bool,
}

/// The chat-completions body for `request`, as a JSON tree (`--dry-run`,
/// tests). The provider writes the same body straight to bytes (`ChatBody`).
pub fn build_request(request: &ChatRequest<'_>, options: &WireOptions) -> Value {
    serde_json::to_value(ChatBody { request, options }).unwrap_or_default()
}

/// The chat-completions body for `request`, serialized from the dialog's
/// messages as they are: no JSON tree is built for a request on its way out.
///
/// Fields in order: `model`, `messages`, then `tools`, `stream` and
/// `stream_options`, `response_format` when the request has them, then the
/// model arguments. A model argument named like one of those fields takes its
/// place (a `response_format` argument is sent as given when no schema is
/// set); `model` and `messages` arguments are ignored.
pub struct ChatBody<'r, 'a> {
    pub request: &'r ChatRequest<'a>,
    pub options: &'r WireOptions,
}

impl Serialize for ChatBody<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.request;
        let arguments = request.model_args;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", request.model)?;
        let messages = request.messages.iter().map(|message| WireMessage {
            message,
            options: self.options,
        });
        map.serialize_entry("messages", &Seq(messages))?;
        // Fields written so far that a model argument may have taken over.
        let mut written: Vec<&'static str> = Vec::new();
        if !request.tools.is_empty() {
            let tools = request.tools.iter().map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            });
            field(&mut map, arguments, &mut written, "tools", &Seq(tools))?;
        }
        if request.stream.is_some() {
            field(&mut map, arguments, &mut written, "stream", &true)?;
            let options = StreamOptions {
                include_usage: true,
            };
            field(
                &mut map,
                arguments,
                &mut written,
                "stream_options",
                &options,
            )?;
        }
        if let Some(schema) = request.format {
            let format = ResponseFormat {
                kind: "json_schema",
                json_schema: JsonSchema {
                    name: "response",
                    schema,
                    strict: true,
                },
            };
            field(
                &mut map,
                arguments,
                &mut written,
                "response_format",
                &format,
            )?;
        }
        for (key, value) in arguments {
            if key != "model" && key != "messages" && !written.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}
/// Writes field `key`: the model argument of that name if there is one,
/// else `value`.
fn field<M: SerializeMap, V: Serialize>(
    map: &mut M,
    arguments: &Map<String, Value>,
    written: &mut Vec<&'static str>,
    key: &'static str,
    value: &V,
) -> Result<(), M::Error> {
    written.push(key);
    match arguments.get(key) {
        Some(given) => map.serialize_entry(key, given),
        None => map.serialize_entry(key, value),
    }
}

/// Serializes the items of an iterator as a JSON array (the iterator is
/// cloned, so it is walked only when written).
struct Seq<I>(I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchema<'a>,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a Value,
    strict: bool,
}

/// One message as chat completions takes it.
struct WireMessage<'a> {
    message: &'a Message,
    options: &'a WireOptions,
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let message = self.message;
        let mut map = serializer.serialize_map(None)?;
        match message.role {
            Role::System => {
                let role = if self.options.developer_role {
                    "developer"
                } else {
                    "system"
                };
                map.serialize_entry("role", role)?;
                map.serialize_entry("content", &message.content)?;
            }
            Role::Tool => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", message.tool_call_id().unwrap_or_default())?;
                map.serialize_entry("content", &message.content)?;
            }
            Role::Assistant | Role::ToolCall => {
                map.serialize_entry("role", "assistant")?;
                if message.content.is_empty() && message.is_function_call() {
                    map.serialize_entry("content", &())?;
                } else {
                    map.serialize_entry("content", &message.content)?;
                }
                if message.is_function_call() {
                    let calls = message.function_calls.iter().map(|call| WireCall {
                        id: &call.id,
                        kind: "function",
                        function: WireArguments {
                            name: &call.name,
                            arguments: call.arguments_text(),
                        },
                    });
                    map.serialize_entry("tool_calls", &Seq(calls))?;
                }
                if self.options.send_name {
                    map.serialize_entry("name", &message.sanitized_name())?;
                }
            }
            Role::User => {
                map.serialize_entry("role", "user")?;
                match message.modality {
                    // Our parts are written in this API's own form.
                    Modality::Text if message.is_multipart() => {
                        map.serialize_entry("content", &message.parts)?
                    }
                    Modality::Text => map.serialize_entry("content", &message.content)?,
                    Modality::Image => {
                        let mime = message.mime_type().unwrap_or("image/png");
                        let url = format!("data:{mime};base64,{}", message.content);
                        let caption = message.metadata.get("caption").and_then(Value::as_str);
                        let parts = caption
                            .map(|text| ImagePart::Text { text })
                            .into_iter()
                            .chain([ImagePart::ImageUrl {
                                image_url: ImageUrl { url: &url },
                            }]);
                        map.serialize_entry("content", &Seq(parts))?;
                    }
                }
                if self.options.send_name {
                    map.serialize_entry("name", &message.sanitized_name())?;
                }
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireArguments<'a>,
}

#[derive(Serialize)]
struct WireArguments<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImagePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Clone, Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
}

/// A chat-completions reply in its usual shape, read without building a JSON
/// tree (strings are borrowed from the body where they have no escapes).
#[derive(serde::Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    /// Some proxies answer 200 with an error object (OpenRouter, LiteLLM).
    #[serde(default)]
    error: Option<Value>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<ReplyUsage>,
}

/// The counters of a reply's `usage`; another shape of them (a float, a
/// string) fails the typed read, and the reply is read as a tree instead
/// (`parse_response`), which reads it as `token_count` does.
#[derive(serde::Deserialize)]
struct ReplyUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Map<String, Value>>,
    #[serde(default)]
    completion_tokens_details: Option<Map<String, Value>>,
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

/// `content` as a string (or null); a list of parts fails this read and
/// goes to the lenient one, which joins their text.
#[derive(serde::Deserialize)]
struct ReplyMessage<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
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
    if let Some(error) = reply.error.as_ref().filter(|error| !error.is_null()) {
        return Err(exchange::error_object(error));
    }
    let Some(choice) = reply.choices.into_iter().next() else {
        return Err(ProviderError::transient("malformed reply: no `choices`"));
    };
    let content = choice.message.content.unwrap_or_default();
    let mut message = Message::new(Role::Assistant, "assistant", content);
    if let Some(refusal) = choice.message.refusal {
        message
            .metadata
            .insert("refusal".into(), Value::String(refusal.into_owned()));
    }
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
    if let Some(usage) = reply.usage {
        message.usage = usage_map(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            [usage.prompt_tokens_details, usage.completion_tokens_details],
        );
    }
    Ok(message)
}

/// An assistant message from a chat-completions reply body.
pub fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    let malformed = |what: &str| ProviderError::transient(format!("malformed reply: {what}"));
    if let Some(error) = body.get("error").filter(|error| !error.is_null()) {
        return Err(exchange::error_object(error));
    }
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| malformed("no `choices`"))?;
    let wire = choice
        .get("message")
        .ok_or_else(|| malformed("no `choices[0].message`"))?;
    let content = match wire.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(content) => content_text(content)
            .ok_or_else(|| malformed("`content` is neither text nor a list of parts"))?,
    };
    let mut message = Message::new(Role::Assistant, "assistant", content);
    if let Some(refusal) = wire.get("refusal").and_then(Value::as_str) {
        message.metadata.insert("refusal".into(), json!(refusal));
    }
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

/// The text of a message's `content`: a string, or the `text` of its parts
/// (`[{"type": "text", "text": …}]`, as several OpenAI-compatible servers
/// send it) joined as they come; parts that carry no text (images, audio)
/// add nothing. `None` for any other shape.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match part {
                    Value::String(piece) => text.push_str(piece),
                    Value::Object(fields) => {
                        let kind = fields.get("type").and_then(Value::as_str);
                        if matches!(kind, None | Some("text" | "output_text")) {
                            match fields.get("text") {
                                Some(Value::String(piece)) => text.push_str(piece),
                                None | Some(Value::Null) => {}
                                Some(_) => return None,
                            }
                        }
                    }
                    _ => return None,
                }
            }
            Some(text)
        }
        _ => None,
    }
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
    // One pass over the entries (a usage is small: matching names costs less
    // than hashing them for lookups).
    let (mut prompt, mut completion, mut total) = (0, 0, None);
    let mut details: [Option<&Map<String, Value>>; 2] = [None, None];
    for (key, value) in usage {
        match (key.as_str(), value) {
            ("prompt_tokens", value) => prompt = token_count(key, value),
            ("completion_tokens", value) => completion = token_count(key, value),
            ("total_tokens", value) => total = Some(value),
            ("prompt_tokens_details", Value::Object(section)) => details[0] = Some(section),
            ("completion_tokens_details", Value::Object(section)) => details[1] = Some(section),
            _ => {}
        }
    }
    usage_map(
        prompt,
        completion,
        Some(total_count(total, prompt, completion)),
        details.map(|section| section.cloned()),
    )
}

/// A message's usage in OpenAI's shape: the counts, then the detail sections
/// there are. Every count is clamped to `MAX_CALL_TOKENS` (docs/limits.md,
/// "Numbers and their ranges"): a server's count is not trusted to be sane.
fn usage_map(
    prompt: u64,
    completion: u64,
    total: Option<u64>,
    details: [Option<Map<String, Value>>; 2],
) -> Map<String, Value> {
    let prompt = clamp_tokens("prompt_tokens", prompt);
    let completion = clamp_tokens("completion_tokens", completion);
    let total = match total {
        Some(total) => clamp_tokens("total_tokens", total),
        None => total_count(None, prompt, completion),
    };
    // Room for the counts and the six fields `pricing::apply` adds.
    let mut usage = Map::with_capacity(9);
    usage.insert("prompt_tokens".into(), json!(prompt));
    usage.insert("completion_tokens".into(), json!(completion));
    usage.insert("total_tokens".into(), json!(total));
    let names = ["prompt_tokens_details", "completion_tokens_details"];
    for (name, section) in names.into_iter().zip(details) {
        if let Some(section) = section {
            usage.insert(name.into(), Value::Object(clamp_details(&section)));
        }
    }
    usage
}

/// Builds the reply of a streamed chat completion from its chunks: text
/// deltas (also handed to the sink), tool-call deltas joined by index, the
/// usage chunk. The result equals the non-streamed reply.
#[derive(Default)]
pub struct StreamAssembler {
    chunks: Map<String, Value>,
    content: String,
    /// Tool calls by the `index` their deltas carry: (id, name, arguments).
    /// A map, not a vector indexed by it: the index is the server's number.
    calls: std::collections::BTreeMap<u64, (String, String, String)>,
    finish_reason: Option<String>,
    refusal: String,
    done: bool,
}

impl StreamAssembler {
    /// One chunk's part of the reply; `false` never (only `[DONE]` ends).
    fn take(
        &mut self,
        chunk: ChunkView<'_>,
        sink: Option<super::TextSink<'_>>,
    ) -> Result<bool, ProviderError> {
        // A server that fails mid-stream says so in a chunk of its own
        // (vLLM, llama.cpp, OpenRouter), sometimes followed by `[DONE]`.
        if let Some(error) = chunk.error.filter(|error| !error.is_null()) {
            return Err(exchange::error_object(error));
        }
        // Every chunk names the model, nearly always the same one.
        if let Some(model) = chunk.model
            && self.chunks.get("model") != Some(model)
        {
            self.chunks.insert("model".into(), model.clone());
        }
        if let Some(usage) = chunk.usage.filter(|usage| usage.is_object()) {
            self.chunks.insert("usage".into(), usage.clone());
        }
        if !chunk.choice {
            return Ok(true);
        }
        if let Some(reason) = chunk.finish_reason {
            self.finish_reason = Some(reason.to_string());
        }
        let text = match chunk.content {
            None | Some(Value::Null) => None,
            Some(content) => Some(content_text(content).ok_or_else(|| {
                ProviderError::transient(
                    "malformed stream chunk: `content` is neither text nor a list of parts",
                )
            })?),
        };
        if let Some(text) = text.filter(|text| !text.is_empty()) {
            self.content.push_str(&text);
            if let Some(sink) = sink {
                sink(&text);
            }
        }
        if let Some(refusal) = chunk.refusal {
            self.refusal.push_str(refusal);
        }
        for call in chunk.tool_calls {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let slot = self.calls.entry(index).or_default();
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
}

/// What assembling reads of a chunk, whichever way it was read.
struct ChunkView<'a> {
    error: Option<&'a Value>,
    model: Option<&'a Value>,
    usage: Option<&'a Value>,
    /// Whether the chunk has a first choice (the rest is of it).
    choice: bool,
    finish_reason: Option<&'a str>,
    content: Option<&'a Value>,
    refusal: Option<&'a str>,
    tool_calls: &'a [Value],
}

impl<'a> ChunkView<'a> {
    /// The view of a chunk read as a JSON value: a field of another type
    /// than expected is as good as absent.
    fn of(chunk: &'a Value) -> ChunkView<'a> {
        let choice = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first());
        let delta = choice.and_then(|choice| choice.get("delta"));
        ChunkView {
            error: chunk.get("error"),
            model: chunk.get("model"),
            usage: chunk.get("usage"),
            choice: choice.is_some(),
            finish_reason: choice
                .and_then(|choice| choice.get("finish_reason"))
                .and_then(Value::as_str),
            content: delta.and_then(|delta| delta.get("content")),
            refusal: delta
                .and_then(|delta| delta.get("refusal"))
                .and_then(Value::as_str),
            tool_calls: delta
                .and_then(|delta| delta.get("tool_calls"))
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice),
        }
    }
}

/// A chunk read as the fields assembling needs. Read as a JSON value, each
/// chunk's objects were maps made and hashed key by key: most of what a
/// streamed reply cost `lllm serve` (callgrind: 89,000 instructions for
/// the seven chunks of a short reply; docs/benchmarks.md, "Serving").
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
}

#[derive(serde::Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
}

#[derive(serde::Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Vec<Value>,
}

impl Chunk<'_> {
    fn view(&self) -> ChunkView<'_> {
        let choice = self.choices.first();
        let delta = choice.and_then(|choice| choice.delta.as_ref());
        ChunkView {
            error: self.error.as_ref(),
            model: self.model.as_ref(),
            usage: self.usage.as_ref(),
            choice: choice.is_some(),
            finish_reason: choice.and_then(|choice| choice.finish_reason.as_deref()),
            content: delta.and_then(|delta| delta.content.as_ref()),
            refusal: delta.and_then(|delta| delta.refusal.as_deref()),
            tool_calls: delta.map_or(&[], |delta| delta.tool_calls.as_slice()),
        }
    }
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
        // Read as the few fields assembling needs; a chunk that does not
        // read so (a field of another type, a lone surrogate) is read as a
        // JSON value, as it always was, and judged the same way.
        if let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) {
            return self.take(chunk.view(), sink);
        }
        let chunk: Value = super::exchange::value(data).map_err(|error| {
            ProviderError::transient(format!("malformed stream chunk: {error}"))
        })?;
        self.take(ChunkView::of(&chunk), sink)
    }

    /// The assembled message; a stream that ended without `[DONE]` or a finish
    /// reason was cut off (transient).
    fn finish(self) -> Result<Message, ProviderError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ProviderError::transient("stream cut off before its end"));
        }
        let tool_calls: Vec<Value> = self
            .calls
            .into_values()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.refusal.is_empty() {
            message["refusal"] = Value::String(self.refusal);
        }
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

/// Tokens a request counts against the quota's token windows, as the
/// providers count them at admission: its text at four bytes a token (at
/// least what a server estimating from characters counts), plus the reply
/// budget it asks for (256 when it asks none).
fn estimate_tokens(request: &ChatRequest<'_>) -> Estimate {
    let reply = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|key| request.model_args.get(*key).and_then(Value::as_u64))
        .unwrap_or(256);
    Estimate {
        input: super::limit::prompt_tokens(request.messages),
        output: reply,
    }
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
        endpoint: None,
        network: false,
    }
}

/// An OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    pub client: reqwest::Client,
    /// `{base_url}/chat/completions` with the key and extra headers.
    chat: http::Endpoint,
    /// `{base_url}/responses`, the same headers.
    responses: http::Endpoint,
    /// Where the base URL came from, for errors that mean a wrong address.
    source: String,
    pub options: WireOptions,
    pub timeout: Duration,
    /// Concurrency, rpm and tpm limits shared by every user of this provider.
    pub limiter: Arc<Limiter>,
}

impl OpenAiProvider {
    /// A provider at `base_url` (`…/v1`, used as given, as openai-python
    /// does); the key goes in as a bearer token. An unusable URL or header is
    /// an error naming it (never a value).
    pub fn new(
        client: reqwest::Client,
        base_url: super::registry::BaseUrl,
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
        // Added to the base URL's path: a query (Azure's `?api-version=`) stays.
        let below = |suffix: &str| http::edit_path(&base_url.url, |path| format!("{path}{suffix}"));
        Ok(OpenAiProvider {
            client,
            chat: http::Endpoint::new(&below("/chat/completions"), pairs())?,
            responses: http::Endpoint::new(&below("/responses"), pairs())?,
            source: base_url.source,
            options,
            timeout,
            limiter,
        })
    }

    /// `{base_url}/chat/completions` with its headers (the Batch API's
    /// requests carry the same).
    pub fn chat_endpoint(&self) -> &http::Endpoint {
        &self.chat
    }

    /// Where `request` goes and its body as a JSON tree (`--dry-run`).
    fn wire(&self, request: &ChatRequest<'_>) -> (&http::Endpoint, Value) {
        if request.api_type == ApiType::Response {
            let body = super::responses::build_request(request, self.options.developer_role);
            (&self.responses, body)
        } else {
            (&self.chat, build_request(request, &self.options))
        }
    }

    /// Where `request` goes and its body, byte for byte as sent: what
    /// `send` posts and what `wire_digest` hashes.
    fn body(&self, request: &ChatRequest<'_>) -> Result<(&http::Endpoint, Vec<u8>), ProviderError> {
        if request.api_type == ApiType::Response {
            let body = super::responses::build_request(request, self.options.developer_role);
            Ok((&self.responses, http::json_body(&body)?))
        } else {
            let body = ChatBody {
                request,
                options: &self.options,
            };
            Ok((&self.chat, http::json_body(&body)?))
        }
    }

    async fn send(&self, request: ChatRequest<'_>) -> Result<Message, ProviderError> {
        let responses = request.api_type == ApiType::Response;
        let (endpoint, body) = self.body(&request)?;
        let target = Target {
            client: &self.client,
            endpoint,
            source: &self.source,
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
                body,
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
            exchange::<StreamAssembler>(target, body, estimate, request.stream, &wire).await
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
            url: endpoint.place().to_string(),
            body,
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
        let (endpoint, body) = self.body(&whole).ok()?;
        Some(endpoint.request_digest(&body))
    }

    /// The checks of every reply, and the scrubbing of what this endpoint
    /// sends that `http` gives a fresh reply's body.
    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        let mut reply = exchange::accept(reply)?;
        super::scrub::scrub_message(&self.chat.secrets, &mut reply);
        Ok(reply)
    }
}

#[cfg(test)]
mod tests;
