//! `Message` and the small types it carries: `Role`, `Modality`, `ApiType`,
//! `FunctionCall`, `TokenLogprob`.
//!
//! A message records what was said in one turn and nothing more; per-invoke
//! diagnostics (attempts, latency, errors) live on `AgentCallSession`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::cost::InvokeCost;

/// Who speaks. `ToolCall` is kept from the seeds for records that use it; the
/// loop itself writes tool requests as `Assistant` messages with `function_calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The instructions that open a dialog.
    System,
    /// A user's (or the tactic's) turn.
    User,
    /// A model's reply, possibly with tool calls.
    Assistant,
    /// A tool's result, answering one tool call.
    Tool,
    /// A tool request as its own message (older records; see above).
    ToolCall,
}

impl Role {
    /// The role as providers and records write it: `system`, `user`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::ToolCall => "tool_call",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// What a message's `content` holds.
pub enum Modality {
    #[default]
    /// Text.
    Text,
    /// Base64 image bytes (`put_image`); the media type is in `metadata.mime_type`.
    Image,
}

impl Modality {
    pub(super) fn is_text(&self) -> bool {
        *self == Modality::Text
    }
}

/// Which OpenAI API family produced or should receive a message (seed `APITypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiType {
    #[default]
    /// Chat completions (and every other provider).
    Completion,
    /// OpenAI's Responses API.
    Response,
}

impl ApiType {
    pub(super) fn is_completion(&self) -> bool {
        *self == ApiType::Completion
    }
}

/// One alternative token and its log probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token.
    pub token: String,
    /// Its log probability.
    pub logprob: f64,
}

/// Log probability of one generated token, with the alternatives when asked for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenLogprob {
    /// The token.
    pub token: Option<String>,
    /// Its log probability.
    pub logprob: Option<f64>,
    /// Its UTF-8 bytes, when the provider gives them.
    pub bytes: Option<Vec<u8>>,
    /// The most likely alternatives at this position.
    pub top_logprobs: Vec<TopLogprob>,
}

/// One invocation of a tool requested by the model. The copy the agent loop
/// ran carries its result (`result`, `result_str` or `error_message`: in a
/// tool round, [`ToolRound::calls`](crate::agent::session::ToolRound::calls)); the copy
/// in the assistant's message stays as the model asked.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FunctionCall {
    /// The provider's id for the call; its result answers this id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, when the model wrote a JSON object.
    pub arguments: Map<String, Value>,
    /// The model's argument text when it was not a JSON object (D8); `arguments`
    /// is then empty and the call is answered with a tool-result error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
    /// The tool's result as a value, once executed (in a tool round's copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The result text the model is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_str: Option<String>,
    /// Why the call failed, when it did (the model is shown this instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

impl FunctionCall {
    /// Parses the model's argument text; anything but a JSON object is kept raw.
    pub fn from_model(id: impl Into<String>, name: impl Into<String>, arguments: &str) -> Self {
        let trimmed = arguments.trim();
        let parsed = if trimmed.is_empty() {
            Ok(Map::new())
        } else {
            match serde_json::from_str::<Value>(trimmed) {
                Ok(Value::Object(map)) => Ok(map),
                _ => Err(arguments.to_string()),
            }
        };
        let (arguments, raw_arguments) = match parsed {
            Ok(map) => (map, None),
            Err(raw) => (Map::new(), Some(raw)),
        };
        FunctionCall {
            id: id.into(),
            name: name.into(),
            arguments,
            raw_arguments,
            ..FunctionCall::default()
        }
    }

    /// The argument text to send back to a provider: the model's own text when it
    /// was malformed, compact JSON otherwise.
    pub fn arguments_text(&self) -> String {
        match &self.raw_arguments {
            Some(raw) => raw.clone(),
            None => Value::Object(self.arguments.clone()).to_string(),
        }
    }

    /// Whether the call ran and produced a result.
    pub fn success(&self) -> bool {
        self.error_message.is_none() && self.result_str.is_some()
    }

    /// Same tool, same arguments (the seeds' `equals`).
    pub fn equals(&self, other: &FunctionCall) -> bool {
        self.name == other.name
            && self.raw_arguments == other.raw_arguments
            && self.arguments == other.arguments
    }

    /// Whether `calls` holds the same tool with the same arguments.
    pub fn is_repeated(&self, calls: &[FunctionCall]) -> bool {
        calls.iter().any(|call| self.equals(call))
    }
}

/// One part of a multipart message: a text or an image (seed: a message's
/// content is text or a list of parts). Written as OpenAI's chat-completions
/// parts, the form the Python framework's messages hold, so its records read
/// as they are; each provider sends them in its own form (OpenAI chat,
/// Responses, Anthropic).
///
/// ```
/// use lllm::dialog::{ContentPart, Message, Role};
///
/// let png = b"\x89PNG\r\n\x1a\n...";
/// let message = Message::with_parts(Role::User, "user", vec![
///     ContentPart::text("What is in this picture?"),
///     ContentPart::image_bytes(png)?,
///     ContentPart::image_url("https://example.com/owl.jpg"),
/// ]);
/// assert_eq!(message.content, "What is in this picture?");
/// let json = serde_json::to_value(&message.parts[1])?;
/// assert_eq!(json["type"], "image_url");
/// assert!(json["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    #[serde(alias = "input_text")]
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL: `https://…`, or a `data:` URL holding its bytes.
    ImageUrl {
        /// Where the image is.
        image_url: ImageUrl,
    },
}

/// Where an image part's image is, as OpenAI's `image_url` object holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// `https://…`, or `data:MEDIA_TYPE;base64,DATA`.
    pub url: String,
    /// OpenAI's `detail` (`low`, `high`, `auto`), sent to the OpenAI APIs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> ContentPart {
        ContentPart::Text { text: text.into() }
    }

    /// An image part by URL (`https://…` or a `data:` URL).
    pub fn image_url(url: impl Into<String>) -> ContentPart {
        ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: url.into(),
                detail: None,
            },
        }
    }

    /// An image part holding `bytes` as a `data:` URL; the media type comes
    /// from the magic bytes (PNG, JPEG, GIF, WebP; D10), and anything else is
    /// an error.
    pub fn image_bytes(bytes: &[u8]) -> Result<ContentPart, super::Error> {
        use base64::Engine;
        let mime = super::image_mime_type(bytes).ok_or_else(|| super::Error::ImageFormat {
            origin: "bytes".into(),
            header: bytes.iter().take(8).copied().collect(),
        })?;
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        Ok(ContentPart::image_url(format!("data:{mime};base64,{data}")))
    }

    /// An image part from a file, base64 text or bytes, as
    /// [`Dialog::put_image`](super::Dialog::put_image) reads them (a regular
    /// file of at most 20 MiB; PNG, JPEG, GIF or WebP by its magic bytes).
    pub fn image(source: super::ImageSource<'_>) -> Result<ContentPart, super::Error> {
        if let super::ImageSource::Url(url) = source
            && (url.starts_with("https://") || url.starts_with("http://"))
        {
            return Ok(ContentPart::image_url(url));
        }
        let (origin, bytes) = super::read_image(source)?;
        ContentPart::image_bytes(&bytes).map_err(|error| match error {
            super::Error::ImageFormat { header, .. } => {
                super::Error::ImageFormat { origin, header }
            }
            other => other,
        })
    }

    /// The text of a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentPart::Text { text } => Some(text),
            ContentPart::ImageUrl { .. } => None,
        }
    }

    /// The image of an image part: its media type and base64 data when it
    /// is a `data:` URL, else `None` for both and the URL as it is.
    pub fn image_ref(&self) -> Option<ImageRef<'_>> {
        let ContentPart::ImageUrl { image_url } = self else {
            return None;
        };
        let inline = image_url
            .url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"));
        Some(match inline {
            Some((mime, data)) => ImageRef::Inline { mime, data },
            None => ImageRef::Url(&image_url.url),
        })
    }
}

/// An image part's image, as a provider sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageRef<'a> {
    /// Bytes carried in the message: media type and base64 data.
    Inline {
        /// `image/png`, …
        mime: &'a str,
        /// The image's bytes in base64.
        data: &'a str,
    },
    /// An image the provider fetches.
    Url(&'a str),
}

impl std::fmt::Display for ContentPart {
    /// The text, or `<image MEDIA_TYPE>` / `<image URL>`: how overviews and
    /// `lllm replay` show a part.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.image_ref()) {
            (ContentPart::Text { text }, _) => f.write_str(text),
            (_, Some(ImageRef::Inline { mime, .. })) => write!(f, "<image {mime}>"),
            (_, Some(ImageRef::Url(url))) => write!(f, "<image {url}>"),
            (_, None) => Ok(()),
        }
    }
}

/// What was said in one turn (seed `Message`). Every field round-trips through JSON.
///
/// `content` is the text; a multipart message (text and images) also has
/// `parts`, which providers send instead of `content`, and `content` is then
/// the text of its text parts. A message written by the Python framework
/// with a list as its `content` reads as such a message.
///
/// ```
/// use lllm::dialog::{FunctionCall, Message, Role};
///
/// let mut reply = Message::assistant("coder", "");
/// reply.function_calls.push(FunctionCall::from_model("call_1", "grep", r#"{"q": "owl"}"#));
/// assert!(reply.is_function_call());
/// let result = Message::tool("grep", "call_1", "3 matches");
/// assert_eq!((result.role, result.tool_call_id()), (Role::Tool, Some("call_1")));
///
/// // Every field round-trips; empty ones are left out of the JSON.
/// let json = serde_json::to_string(&reply)?;
/// assert_eq!(serde_json::from_str::<Message>(&json)?, reply);
/// assert_eq!(Message::user("hi").cost().total_tokens, 0);
/// assert_eq!(Message::new(Role::User, "ann lee", "hi").sanitized_name(), "ann_lee");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "super::message_json::MessageFields")]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// Text, or base64 image bytes when `modality` is `Image`.
    pub content: String,
    /// The speaker's name: `user`, an agent's name, a tool's name.
    pub name: String,
    /// Text, or an image in `content`.
    pub modality: Modality,
    /// The tools the model asked to call, as it asked. A message in a dialog
    /// is never changed once appended, so their results are not here: each
    /// is the tool message that follows, and the call's session keeps every
    /// call with its result ([`AgentCallSession::interrupts`](crate::agent::AgentCallSession::interrupts)).
    pub function_calls: Vec<FunctionCall>,
    /// The prompt parser's output for this reply (always with `raw`).
    pub parsed: Map<String, Value>,
    /// The provider's token usage, as it reported it; typed and printable:
    /// [`cost`](Message::cost).
    pub usage: Map<String, Value>,
    /// The model that wrote the reply.
    pub model: Option<String>,
    /// Log probabilities, when asked for (`model_args: {logprobs: true}`).
    pub logprobs: Vec<TokenLogprob>,
    /// Anything else: `dialog_id`, `tool_call_id`, `mime_type`, `finish_reason`, …
    pub metadata: Map<String, Value>,
    /// Which OpenAI API family produced it.
    pub api_type: ApiType,
    /// Embedding vectors (kept and written; nothing computes them yet).
    pub vectors: Vec<f64>,
    /// The parts of a multipart message (empty for a plain one); sent in
    /// place of `content` to user turns.
    pub parts: Vec<ContentPart>,
}

/// What the message says, as a person reads it: its text (a multipart
/// message's text parts, a line apart), an image as `<image TYPE>`, and the
/// tools it calls as `[calls: a, b]`. The typed view of its `usage` is
/// [`cost`](Message::cost), which has its own `Display`.
///
/// ```
/// use lllm::dialog::{FunctionCall, Message};
///
/// let reply = Message::assistant("writer", "Owls hunt at night.");
/// assert_eq!(reply.to_string(), "Owls hunt at night.");
/// let mut call = Message::assistant("coder", "");
/// call.function_calls.push(FunctionCall::from_model("call_1", "grep", r#"{"q": "owl"}"#));
/// assert_eq!(call.to_string(), "[calls: grep]");
/// println!("{reply} ({})", reply.cost()); // Owls hunt at night. (0 tokens (0 in, 0 out), $0.000000)
/// ```
impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.modality {
            Modality::Image => write!(f, "<image {}>", self.mime_type().unwrap_or("?"))?,
            Modality::Text => f.write_str(&self.content)?,
        }
        if !self.function_calls.is_empty() {
            let names: Vec<&str> = self
                .function_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            let gap = if self.content.is_empty() { "" } else { " " };
            write!(f, "{gap}[calls: {}]", names.join(", "))?;
        }
        Ok(())
    }
}

/// The text parts, one after another, a line apart.
pub(super) fn parts_text(parts: &[ContentPart]) -> String {
    let texts: Vec<&str> = parts.iter().filter_map(ContentPart::as_text).collect();
    texts.join("\n")
}

impl Message {
    /// A text message.
    pub fn new(role: Role, name: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            name: name.into(),
            modality: Modality::Text,
            function_calls: Vec::new(),
            parsed: Map::new(),
            usage: Map::new(),
            model: None,
            logprobs: Vec::new(),
            metadata: Map::new(),
            api_type: ApiType::Completion,
            vectors: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// A multipart message (text and images); its `content` is the text of
    /// the text parts, a line apart.
    pub fn with_parts(role: Role, name: impl Into<String>, parts: Vec<ContentPart>) -> Message {
        let mut message = Message::new(role, name, parts_text(&parts));
        message.parts = parts;
        message
    }

    /// Whether the message has parts (text and images) to send instead of `content`.
    pub fn is_multipart(&self) -> bool {
        !self.parts.is_empty()
    }

    /// A system message named `system`.
    pub fn system(content: impl Into<String>) -> Message {
        Message::new(Role::System, "system", content)
    }

    /// A user message named `user`.
    pub fn user(content: impl Into<String>) -> Message {
        Message::new(Role::User, "user", content)
    }

    /// A reply from the agent `name`.
    pub fn assistant(name: impl Into<String>, content: impl Into<String>) -> Message {
        Message::new(Role::Assistant, name, content)
    }

    /// A tool result answering the call `tool_call_id`.
    pub fn tool(
        name: impl Into<String>,
        tool_call_id: &str,
        content: impl Into<String>,
    ) -> Message {
        let mut message = Message::new(Role::Tool, name, content);
        message
            .metadata
            .insert("tool_call_id".into(), Value::String(tool_call_id.into()));
        message
    }

    /// What the reply cost, from its `usage` (prices are applied by the agent loop).
    pub fn cost(&self) -> InvokeCost {
        InvokeCost::from_usage(&self.usage)
    }

    /// Whether `other` is a copy of this message: `==` with maps read in
    /// order. For a clone it answers like `==` at a fraction of the cost
    /// (`==` looks each key up); maps with the same entries in another order
    /// count as different, so `true` always implies `==`.
    pub fn is_copy_of(&self, other: &Message) -> bool {
        let Message {
            role,
            content,
            name,
            modality,
            function_calls,
            parsed,
            usage,
            model,
            logprobs,
            metadata,
            api_type,
            vectors,
            parts,
        } = self;
        let in_order = |ours: &Map<String, Value>, theirs: &Map<String, Value>| {
            ours.len() == theirs.len() && ours.iter().eq(theirs.iter())
        };
        *role == other.role
            && *content == other.content
            && *name == other.name
            && *modality == other.modality
            && *api_type == other.api_type
            && *model == other.model
            && in_order(metadata, &other.metadata)
            && in_order(usage, &other.usage)
            && in_order(parsed, &other.parsed)
            && *function_calls == other.function_calls
            && *logprobs == other.logprobs
            && *vectors == other.vectors
            && *parts == other.parts
    }

    /// Tokens this reply used, as `cost().total_tokens` counts them.
    pub fn total_tokens(&self) -> u64 {
        let count = |key: &str| {
            self.usage
                .get(key)
                .map_or(0, |value| super::token_count(key, value))
        };
        super::total_count(
            self.usage.get("total_tokens"),
            count("prompt_tokens"),
            count("completion_tokens"),
        )
    }

    /// Whether the model asked for tool calls.
    pub fn is_function_call(&self) -> bool {
        !self.function_calls.is_empty()
    }

    /// The name with every character outside `[A-Za-z0-9_-]` replaced by `_`,
    /// cut to 64 characters: what providers accept in a `name` field.
    pub fn sanitized_name(&self) -> String {
        sanitize_name(&self.name)
    }

    /// The id of the tool call a tool result answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.metadata.get("tool_call_id").and_then(Value::as_str)
    }

    /// The image's media type (set by `Dialog::put_image` from its magic bytes).
    pub fn mime_type(&self) -> Option<&str> {
        self.metadata.get("mime_type").and_then(Value::as_str)
    }
}

/// `name` as providers accept it: `[A-Za-z0-9_-]`, at most 64 characters.
pub fn sanitize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_is_recognized_and_a_difference_is_not() {
        let mut message = Message::assistant("coder", "done");
        message.usage.insert("prompt_tokens".into(), json!(3));
        message.usage.insert("completion_tokens".into(), json!(1));
        message
            .metadata
            .insert("finish_reason".into(), json!("stop"));
        assert!(message.clone().is_copy_of(&message));
        let mut other = message.clone();
        other.usage.insert("completion_tokens".into(), json!(2));
        assert!(!other.is_copy_of(&message));
        let mut other = message.clone();
        other.content.push('!');
        assert!(!other.is_copy_of(&message));
        // The same entries in another order: equal, but not a copy.
        let mut reordered = message.clone();
        reordered.usage = Map::new();
        reordered.usage.insert("completion_tokens".into(), json!(1));
        reordered.usage.insert("prompt_tokens".into(), json!(3));
        assert_eq!(reordered, message);
        assert!(!reordered.is_copy_of(&message));
    }

    #[test]
    fn every_field_round_trips() {
        let mut message = Message::assistant("coder", "done");
        message.modality = Modality::Text;
        message.function_calls = vec![FunctionCall::from_model("c1", "grep", r#"{"q": "x"}"#)];
        message.parsed.insert("raw".into(), json!("done"));
        message.usage.insert("prompt_tokens".into(), json!(3));
        message.model = Some("gpt-4o".into());
        message.logprobs = vec![TokenLogprob {
            token: Some("done".into()),
            logprob: Some(-0.1),
            bytes: Some(vec![100]),
            top_logprobs: vec![TopLogprob {
                token: "ok".into(),
                logprob: -2.0,
            }],
        }];
        message.metadata.insert("dialog_id".into(), json!("abc"));
        message.api_type = ApiType::Response;
        message.vectors = vec![0.5, 1.5];
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn multipart_messages_round_trip_and_python_list_content_reads_as_parts() {
        let message = Message::with_parts(
            Role::User,
            "user",
            vec![
                ContentPart::text("Look:"),
                ContentPart::image_bytes(b"GIF89a").unwrap(),
                ContentPart::text("which bird?"),
            ],
        );
        assert_eq!(message.content, "Look:\nwhich bird?");
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, message);
        assert!(back.is_copy_of(&message));

        // As the Python framework writes it: `content` is the list.
        let python = json!({
            "role": "user", "name": "user", "modality": "text",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/", "detail": "low"}},
            ],
        });
        let read: Message = serde_json::from_value(python).unwrap();
        assert_eq!(read.content, "What is this?");
        assert_eq!(read.parts.len(), 2);
        assert_eq!(
            read.parts[1].image_ref(),
            Some(ImageRef::Inline {
                mime: "image/jpeg",
                data: "/9j/"
            })
        );
        assert_eq!(read.parts[1].to_string(), "<image image/jpeg>");
        let again: Message = serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
        assert_eq!(again, read);
        // A tool-call message with `content: None` in Python.
        let empty: Message =
            serde_json::from_value(json!({"role": "assistant", "name": "a", "content": null}))
                .unwrap();
        assert_eq!((empty.content.as_str(), empty.parts.len()), ("", 0));
        // Not a part: named in the error.
        let error = serde_json::from_value::<Message>(
            json!({"role": "user", "name": "u", "content": [{"type": "audio"}]}),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("unknown variant `audio`"),
            "{error}"
        );
        assert!(ContentPart::image_bytes(b"not an image").is_err());
    }

    #[track_caller]
    fn parsed_case(text: &str, arguments: Value, raw: Option<&str>) {
        let call = FunctionCall::from_model("id", "f", text);
        assert_eq!(Value::Object(call.arguments.clone()), arguments);
        assert_eq!(call.raw_arguments.as_deref(), raw);
    }

    #[test]
    fn malformed_arguments_are_kept_raw() {
        parsed_case(r#"{"a": 1}"#, json!({"a": 1}), None);
        parsed_case("", json!({}), None);
        parsed_case(r#"{"a": "#, json!({}), Some(r#"{"a": "#));
        parsed_case("[1, 2]", json!({}), Some("[1, 2]"));
    }

    #[test]
    fn repeat_detection_compares_name_and_arguments() {
        let a = FunctionCall::from_model("1", "f", r#"{"x": 1, "y": 2}"#);
        let b = FunctionCall::from_model("2", "f", r#"{"y": 2, "x": 1}"#);
        let c = FunctionCall::from_model("3", "f", r#"{"x": 2, "y": 2}"#);
        let d = FunctionCall::from_model("4", "g", r#"{"x": 1, "y": 2}"#);
        assert!(a.equals(&b));
        assert!(!a.equals(&c));
        assert!(!a.equals(&d));
        assert!(a.is_repeated(&[c.clone(), b]));
        assert!(!a.is_repeated(&[c, d]));
    }

    #[test]
    fn sanitized_names_are_provider_safe() {
        assert_eq!(sanitize_name("word count!"), "word_count_");
        assert_eq!(sanitize_name(&"x".repeat(80)).len(), 64);
    }
}
