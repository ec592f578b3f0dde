//! The wire formats `lllm-mock` speaks: OpenAI chat completions (`chat`), the
//! OpenAI Responses API (`responses`) and the Anthropic Messages API
//! (`anthropic`). Each reads a request body into the few fields a script
//! looks at and writes a script's message as a whole body or as SSE events.
//! Pure functions over JSON; the server does the HTTP.

pub mod anthropic;
pub mod chat;
pub mod images;
pub mod responses;

use serde_json::{Value, json};

use lllm::mock::script::ScriptMessage;

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Responses,
    Anthropic,
}

/// What the server needs from a request body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Incoming {
    pub model: String,
    pub stream: bool,
    /// Chat completions only send a usage chunk when asked; the others always do.
    pub include_usage: bool,
    pub last_text: String,
    /// `tool` for a tool result, in every API.
    pub last_role: String,
    pub message_count: usize,
    /// Characters of every message's text, for estimating prompt tokens.
    pub prompt_chars: usize,
    /// The tool the request makes the model call (Anthropic's `tool_choice`
    /// naming one, or `any` of a single tool): a scripted text reply is
    /// answered as that tool's call, as the API answers (`anthropic::forced`).
    pub forced_tool: Option<String>,
}

/// Token counts of one reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

/// One server-sent event; chat completions use no event names.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: Option<&'static str>,
    pub data: Value,
}

/// What a reply is called in the response: request numbers make every id unique.
#[derive(Debug, Clone, Copy)]
pub struct Reference<'a> {
    pub index: usize,
    pub model: &'a str,
    pub created: i64,
}

impl Api {
    /// The path the API is served on.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
            Api::Anthropic => "/v1/messages",
        }
    }

    /// What the real API refuses in a request body before it answers:
    /// Responses input items llama-server cannot place, image parts the
    /// API does not take (`images`).
    pub fn check(self, request: &Value) -> Result<(), String> {
        match self {
            Api::Chat => images::check_chat(request),
            Api::Responses => responses::check(request),
            Api::Anthropic => anthropic::check(request),
        }
    }

    /// The script's `message` as this API would answer `incoming` with it:
    /// on the Messages API, a text reply to a request that forces a tool is
    /// that tool's call (`anthropic::forced`); otherwise as scripted.
    pub fn shape<'m>(
        self,
        message: &'m ScriptMessage,
        incoming: &Incoming,
        index: usize,
    ) -> std::borrow::Cow<'m, ScriptMessage> {
        match (self, &incoming.forced_tool) {
            (Api::Anthropic, Some(tool)) => anthropic::forced(message, tool, index),
            _ => std::borrow::Cow::Borrowed(message),
        }
    }

    pub fn read(self, request: &Value) -> Incoming {
        let mut incoming = match self {
            Api::Chat => chat::read(request),
            Api::Responses => responses::read(request),
            Api::Anthropic => anthropic::read(request),
        };
        incoming.model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        incoming.stream = request
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        incoming
    }

    /// The whole (non-streamed) response body.
    pub fn body(self, reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Value {
        match self {
            Api::Chat => chat::body(reference, message, usage),
            Api::Responses => responses::body(reference, message, usage),
            Api::Anthropic => anthropic::body(reference, message, usage),
        }
    }

    /// The response as SSE events, without chat's `[DONE]` (see [`Api::done`]).
    pub fn events(
        self,
        reference: Reference<'_>,
        message: &ScriptMessage,
        usage: Usage,
        include_usage: bool,
    ) -> Vec<Event> {
        match self {
            Api::Chat => chat::events(reference, message, usage, include_usage),
            Api::Responses => responses::events(reference, message, usage),
            Api::Anthropic => anthropic::events(reference, message, usage),
        }
    }

    /// The line that ends a complete stream, if the API has one.
    pub fn done(self) -> Option<&'static str> {
        match self {
            Api::Chat => Some("data: [DONE]\n\n"),
            Api::Responses | Api::Anthropic => None,
        }
    }

    /// An error body in the API's shape.
    pub fn error_body(self, status: u16, code: Option<&str>, message: &str) -> Value {
        match self {
            Api::Chat | Api::Responses => {
                let kind = match (status, code) {
                    (_, Some("insufficient_quota")) => "insufficient_quota",
                    (401, _) => "authentication_error",
                    (403, _) => "permission_error",
                    (404, _) => "not_found_error",
                    (429, _) => "rate_limit_error",
                    (500..=599, _) => "server_error",
                    _ => "invalid_request_error",
                };
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            }
            Api::Anthropic => anthropic::error_body(status, code, message),
        }
    }
}

impl Event {
    pub fn render(&self) -> String {
        match self.name {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// The text of a message's content: a string, or the `text` of its parts.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                part => part.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `text` cut at word boundaries into at most `count` pieces that join back
/// to it, so a streamed reply arrives in a few deltas.
pub fn pieces(text: &str, count: usize) -> Vec<&str> {
    let words: Vec<usize> = text
        .char_indices()
        .filter(|(_, character)| *character == ' ')
        .map(|(at, _)| at + 1)
        .filter(|at| *at < text.len())
        .collect();
    if text.is_empty() {
        return Vec::new();
    }
    let per_piece = (words.len() + 1).div_ceil(count.max(1));
    let mut cuts: Vec<usize> = words
        .into_iter()
        .skip(per_piece - 1)
        .step_by(per_piece)
        .collect();
    cuts.push(text.len());
    let mut start = 0;
    cuts.into_iter()
        .map(|end| {
            let piece = &text[start..end];
            start = end;
            piece
        })
        .collect()
}

/// `text` cut in two at a character boundary (for argument fragments).
pub fn halves(text: &str) -> [&str; 2] {
    let middle = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map_or(text.len(), |(at, _)| at);
    [&text[..middle], &text[middle..]]
}

/// The script's finish reason, else `tool_calls` or `stop` (OpenAI's words).
pub fn finish_reason(message: &ScriptMessage) -> &str {
    match &message.finish_reason {
        Some(reason) => reason,
        None if message.tool_calls.is_empty() => "stop",
        None => "tool_calls",
    }
}

/// The tool call's arguments as a JSON value; text that does not parse is
/// sent as a JSON string, so a malformed-arguments script still reaches the
/// client of an API whose wire format wants an object.
pub fn arguments_value(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn pieces_case(text: &str, count: usize, expected: &[&str]) {
        assert_eq!(pieces(text, count), expected);
    }

    #[test]
    fn pieces_join_back_to_the_text() {
        pieces_case("", 4, &[]);
        pieces_case("one", 4, &["one"]);
        pieces_case("a b", 4, &["a ", "b"]);
        pieces_case("a b c d e f g h", 4, &["a b ", "c d ", "e f ", "g h"]);
        pieces_case("a b c d e", 4, &["a b ", "c d ", "e"]);
        pieces_case("ends with space ", 4, &["ends ", "with ", "space "]);
        pieces_case("naïve café au lait", 2, &["naïve café ", "au lait"]);
    }

    #[test]
    fn halves_respect_characters() {
        assert_eq!(halves("{\"a\":1}"), ["{\"a", "\":1}"]);
        assert_eq!(halves("éé"), ["é", "é"]);
        assert_eq!(halves(""), ["", ""]);
    }

    #[test]
    fn text_comes_from_strings_and_parts() {
        assert_eq!(text_of(&json!("hi")), "hi");
        assert_eq!(
            text_of(
                &json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "input_text", "text": "b"}])
            ),
            "a\nb"
        );
        assert_eq!(text_of(&Value::Null), "");
    }
}
