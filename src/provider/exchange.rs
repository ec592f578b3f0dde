//! One request/reply exchange of a wire API, the same for every HTTP provider:
//! a limiter permit, the POST (whole JSON or server-sent events), the reply
//! parsed or the error classified, and the outcome reported to the limiter.
//! Provider modules supply only the translation functions.
//!
//! Also the rules every wire API shares about what a reply must hold: an
//! error object inside a 200 reply or a stream is an error, classified the
//! same way everywhere, and a reply with neither text nor a tool call is an
//! error, never an empty answer ([`accept`], which a reply from the
//! response cache passes too).

use serde_json::Value;

use super::http::{self, HttpReply};
use super::limit::{Estimate, Limiter};
use super::{ErrorKind, ProviderError, TextSink};
use crate::dialog::Message;

/// A reply body as JSON; a body that is not JSON is a transient error.
pub fn parse_json(body: &str) -> Result<Value, ProviderError> {
    value(body).map_err(|error| {
        // A server that streams whatever was asked (`stream` is false here).
        let start = body.trim_start();
        if start.starts_with("data:") || start.starts_with("event:") {
            return ProviderError::transient(
                "malformed reply: an event stream (`data:` lines) where a JSON body was asked for",
            );
        }
        ProviderError::transient(format!("malformed reply: not JSON ({error})"))
    })
}

/// A reply body or stream payload as a JSON value. JSON's grammar allows an
/// escaped UTF-16 surrogate without its pair (`"\ud800"`), which Python and
/// JavaScript read, but a Rust string cannot hold one and serde_json refuses
/// the whole text; such a reply is read with U+FFFD in its place, as invalid
/// UTF-8 bytes are, instead of being thrown away with its paid usage.
pub fn value(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str(text).or_else(|error| match lone_surrogates_replaced(text) {
        Some(repaired) => serde_json::from_str(&repaired),
        None => Err(error),
    })
}

/// `text` with each `\u` escape of an unpaired surrogate replaced by
/// `\ufffd`, or `None` when it has none. Only on a failed parse: backslashes
/// occur in JSON only inside strings, so a scan of escapes finds them all.
fn lone_surrogates_replaced(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let unit_at = |at: usize| -> Option<u16> {
        if bytes.get(at..at + 2)? != b"\\u" {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(bytes.get(at + 2..at + 6)?).ok()?, 16).ok()
    };
    let mut repaired: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            at += 1;
            continue;
        }
        match unit_at(at) {
            // Any other escape: skip the escaped character.
            None => at += 2,
            Some(0xD800..=0xDBFF) if matches!(unit_at(at + 6), Some(0xDC00..=0xDFFF)) => at += 12,
            Some(0xD800..=0xDFFF) => {
                let out = repaired.get_or_insert_with(|| String::with_capacity(text.len()));
                out.push_str(&text[copied..at]);
                out.push_str("\\ufffd");
                at += 6;
                copied = at;
            }
            Some(_) => at += 6,
        }
    }
    let mut repaired = repaired?;
    repaired.push_str(&text[copied..]);
    Some(repaired)
}

/// Rebuilds a streamed reply from its `data:` payloads.
pub trait Assembler: Default {
    /// Takes one payload; `false` once the stream says it is complete.
    fn feed(&mut self, data: &str, sink: Option<TextSink<'_>>) -> Result<bool, ProviderError>;
    /// The message, or a transient error if the stream was cut off.
    fn finish(self) -> Result<Message, ProviderError>;
}

/// How one wire API reads replies.
pub struct Wire {
    /// A whole (non-streamed) reply body to a message.
    pub parse_body: fn(&str) -> Result<Message, ProviderError>,
    pub parse_error: fn(&HttpReply) -> ProviderError,
}

/// Where and how to send.
pub struct Target<'a> {
    pub client: &'a reqwest::Client,
    pub endpoint: &'a http::Endpoint,
    /// Where the endpoint's base URL came from (`OLLAMA_HOST`,
    /// `` `providers.local.base_url` ``, …), named by errors that mean a wrong
    /// address.
    pub source: &'a str,
    pub timeout: std::time::Duration,
    pub limiter: &'a Limiter,
}

/// Sends `body` and returns the reply as a message. With a `sink` the reply is
/// streamed through `A`; `estimate` is what the quota's token windows are
/// charged (the prompt and the reply budget, as the providers count them).
pub async fn exchange<A: Assembler>(
    target: Target<'_>,
    body: Vec<u8>,
    estimate: Estimate,
    sink: Option<TextSink<'_>>,
    wire: &Wire,
) -> Result<Message, ProviderError> {
    let permit = target.limiter.acquire(estimate).await;
    let failed = |mut error: ProviderError| {
        // A 503 is a server that turns requests away (Ollama's full queue,
        // vLLM or a proxy over capacity): fewer at once, as after a 429.
        if error.kind == ErrorKind::RateLimit || error.status == Some(503) {
            target.limiter.on_rate_limited();
        }
        // A path the server does not have: say where the request went and
        // which setting chose that address, so the user knows what to fix.
        if matches!(error.status, Some(404 | 405)) {
            error.endpoint = Some(format!(
                "{} (base URL from {})",
                target.endpoint.place(),
                target.source
            ));
        }
        error
    };
    // A transport failure (no connection, a timeout, a reset: no status)
    // names the URL already; it gains the setting the address came from.
    let unreachable = |mut error: ProviderError| {
        if error.status.is_none() {
            error.message = format!("{} (base URL from {})", error.message, target.source);
        }
        failed(error)
    };
    let message = if let Some(sink) = sink {
        // A new attempt starts: a display drops what earlier attempts streamed.
        sink("");
        let mut assembler = A::default();
        let mut stream_failed = false;
        let feed = |data: &str| {
            let fed = assembler.feed(data, Some(sink));
            stream_failed = fed.is_err();
            fed
        };
        let posted =
            http::post_sse(target.client, target.endpoint, body, target.timeout, feed).await;
        // A streamed reply's headers count too: its rate-limit windows.
        match posted {
            Ok(http::Streamed::Refused(reply)) => {
                permit.observe(&reply.headers);
                return Err(failed((wire.parse_error)(&reply)));
            }
            Ok(http::Streamed::Read(headers)) => permit.observe(&headers),
            // Asked to stream, the server answered whole: the same reply.
            Ok(http::Streamed::Whole(reply)) => {
                permit.observe(&reply.headers);
                let message = (wire.parse_body)(&reply.body).map_err(failed)?;
                sink(&message.content);
                permit.succeeded(&message);
                return accept(message);
            }
            Err(error) if stream_failed => return Err(failed(error)),
            Err(error) => return Err(unreachable(error)),
        }
        assembler.finish().map_err(failed)?
    } else {
        let reply = http::post_json(target.client, target.endpoint, body, target.timeout)
            .await
            .map_err(unreachable)?;
        // Every reply states the quota's windows, a 429's included.
        permit.observe(&reply.headers);
        if !(200..300).contains(&reply.status) {
            return Err(failed((wire.parse_error)(&reply)));
        }
        (wire.parse_body)(&reply.body).map_err(failed)?
    };
    permit.succeeded(&message);
    accept(message)
}

/// What every reply must be once its wire parser has read it, whether it
/// came over the wire or from the response cache: no larger than a reply
/// body may be ([`http::MAX_REPLY_BYTES`]; a fresh one is, since its body
/// was), and holding text or a tool call ([`require_output`]).
pub fn accept(message: Message) -> Result<Message, ProviderError> {
    let size = message.content.len()
        + message
            .function_calls
            .iter()
            .map(|call| {
                call.id.len()
                    + call.name.len()
                    + call.raw_arguments.as_ref().map_or(0, String::len)
                    + call.arguments.len()
            })
            .sum::<usize>();
    if size > http::MAX_REPLY_BYTES {
        return Err(ProviderError::transient(format!(
            "the reply is larger than a reply may be ({} MiB)",
            http::MAX_REPLY_BYTES >> 20
        )));
    }
    require_output(message)
}

/// A reply must carry text or a tool call: one with neither would pass as an
/// empty answer. When the reply says why it is empty (a length limit, a
/// refusal, a content filter) the same request would end the same way, so
/// the error is permanent; otherwise the reply is faulty and worth a retry.
pub fn require_output(message: Message) -> Result<Message, ProviderError> {
    if !message.content.is_empty() || !message.function_calls.is_empty() {
        return Ok(message);
    }
    let text = |key: &str| message.metadata.get(key).and_then(Value::as_str);
    if let Some(refusal) = text("refusal").filter(|refusal| !refusal.is_empty()) {
        let mut error = ProviderError::permanent(format!("the model refused: {refusal}"));
        error.code = Some("refusal".into());
        return Err(error);
    }
    let reason = text("finish_reason").unwrap_or_default();
    let (kind, hint) = match reason {
        "length" | "max_tokens" | "max_output_tokens" | "model_context_window_exceeded" => (
            ErrorKind::Permanent,
            "; hint: raise `max_tokens` (reasoning models spend it before they answer)",
        ),
        "content_filter" | "refusal" | "safety" => (ErrorKind::Permanent, ""),
        _ => (ErrorKind::Transient, ""),
    };
    let because = if reason.is_empty() {
        String::new()
    } else {
        format!(" (finish reason `{reason}`)")
    };
    let mut error = ProviderError::new(
        kind,
        format!("the reply has no text and no tool call{because}{hint}"),
    );
    error.code = Some("empty_reply".into());
    Err(error)
}

/// The error object a provider put in a 200 reply or a stream event (`{"error":
/// {"message", "type", "code"}}`, Anthropic's `{"type": "error", "error":
/// {…}}`, a Responses `response.error`), classified for the retry loop: a
/// numeric code is an HTTP status; otherwise the code or type names it. An
/// error we cannot place is transient, so the retry budget bounds it.
pub fn error_object(error: &Value) -> ProviderError {
    let text = |key: &str| error.get(key).and_then(Value::as_str);
    let mut message: String = text("message")
        .filter(|message| !message.trim().is_empty())
        .unwrap_or("the provider reported an error while answering")
        .chars()
        .take(500)
        .collect();
    if let Some(plain) = error.as_str() {
        // Some servers send the error as a bare string.
        message = plain.chars().take(500).collect();
    }
    let status = ["code", "status"].into_iter().find_map(|key| {
        error
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|number| u16::try_from(number).ok())
            .filter(|number| (400..=599).contains(number))
    });
    let code = text("code").or_else(|| text("type")).map(str::to_string);
    let kind = match (status, code.as_deref()) {
        (_, Some(code)) if code.contains("quota") || code.contains("context_length") => {
            ErrorKind::Permanent
        }
        (Some(status), _) => http::classify_status(status),
        (None, Some(code)) => classify_code(code),
        (None, None) => ErrorKind::Transient,
    };
    ProviderError {
        kind,
        status,
        code,
        message,
        retry_after: None,
        endpoint: None,
        network: false,
    }
}

/// The retry class of an error code or type without a status: OpenAI's
/// (`server_error`, `rate_limit_exceeded`, `invalid_prompt`, `invalid_image`,
/// …) and Anthropic's (`overloaded_error`, `api_error`, `invalid_request_error`,
/// …).
fn classify_code(code: &str) -> ErrorKind {
    const PERMANENT: &[&str] = &[
        "invalid",
        "authentication",
        "permission",
        "not_found",
        "billing",
        "content_policy",
        "too_large",
        "too_small",
        "unsupported",
        "parse_error",
        "empty_image",
        "failed_to_download",
    ];
    if code.contains("rate_limit") {
        ErrorKind::RateLimit
    } else if PERMANENT.iter().any(|part| code.contains(part)) {
        ErrorKind::Permanent
    } else {
        // `server_error`, `api_error`, `overloaded_error`, timeouts, and
        // names we do not know: the server failed, not the request.
        ErrorKind::Transient
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_event_stream_where_json_was_asked_for_says_so() {
        let body = "data: {\"choices\": []}\n\ndata: [DONE]\n\n";
        let error = super::parse_json(body).unwrap_err();
        assert!(
            error.message.contains("an event stream"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_lone_surrogate_reads_as_the_replacement_character() {
        let read = |text: &str| super::value(text).map(|value| value["t"].clone());
        assert_eq!(read(r#"{"t": "abc\ud800def"}"#).unwrap(), "abc\u{FFFD}def");
        assert_eq!(read(r#"{"t": "\udc00"}"#).unwrap(), "\u{FFFD}");
        // A high surrogate at the end, or followed by something else.
        assert_eq!(read(r#"{"t": "x\ud83d"}"#).unwrap(), "x\u{FFFD}");
        assert_eq!(read(r#"{"t": "\ud83d\u0041"}"#).unwrap(), "\u{FFFD}A");
        // A proper pair and escaped backslashes are left as they are.
        assert_eq!(
            read(r#"{"t": "\ud83d\ude80 \\ud800"}"#).unwrap(),
            "🚀 \\ud800"
        );
        // Not JSON for another reason: the original error.
        let error = super::value(r#"{"t": "\ud800"#).unwrap_err();
        assert!(error.is_eof(), "{error}");
    }

    use serde_json::json;

    use super::*;
    use crate::dialog::Role;

    #[track_caller]
    fn classified(error: Value, kind: ErrorKind, status: Option<u16>) {
        let found = error_object(&error);
        assert_eq!((found.kind, found.status), (kind, status), "{error}");
    }

    #[test]
    fn error_objects_are_classified_by_status_then_code() {
        classified(
            json!({"code": 500, "message": "boom", "type": "server_error"}),
            ErrorKind::Transient,
            Some(500),
        );
        classified(
            json!({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}),
            ErrorKind::Permanent,
            Some(400),
        );
        classified(json!({"code": 429}), ErrorKind::RateLimit, Some(429));
        classified(
            json!({"code": "rate_limit_exceeded", "message": "slow"}),
            ErrorKind::RateLimit,
            None,
        );
        classified(
            json!({"code": "server_error", "message": "x"}),
            ErrorKind::Transient,
            None,
        );
        classified(
            json!({"code": "invalid_prompt", "message": "x"}),
            ErrorKind::Permanent,
            None,
        );
        classified(
            json!({"type": "overloaded_error", "message": "Overloaded"}),
            ErrorKind::Transient,
            None,
        );
        classified(
            json!({"type": "invalid_request_error", "message": "x"}),
            ErrorKind::Permanent,
            None,
        );
        classified(
            json!({"code": "insufficient_quota", "message": "x"}),
            ErrorKind::Permanent,
            None,
        );
        classified(json!({"message": "?"}), ErrorKind::Transient, None);
        assert_eq!(error_object(&json!("plain text")).message, "plain text");
        assert_eq!(
            error_object(&json!({})).message,
            "the provider reported an error while answering"
        );
    }

    #[track_caller]
    fn empty(finish_reason: Option<&str>, refusal: Option<&str>) -> ProviderError {
        let mut message = Message::new(Role::Assistant, "assistant", "");
        if let Some(reason) = finish_reason {
            message
                .metadata
                .insert("finish_reason".into(), json!(reason));
        }
        if let Some(refusal) = refusal {
            message.metadata.insert("refusal".into(), json!(refusal));
        }
        require_output(message).unwrap_err()
    }

    #[test]
    fn a_reply_without_text_or_tool_call_is_an_error_classified_by_its_reason() {
        let plain = empty(None, None);
        assert_eq!(plain.kind, ErrorKind::Transient);
        assert_eq!(plain.message, "the reply has no text and no tool call");
        let cut = empty(Some("length"), None);
        assert_eq!(cut.kind, ErrorKind::Permanent);
        assert!(
            cut.message.contains("raise `max_tokens`"),
            "{}",
            cut.message
        );
        assert_eq!(
            empty(Some("content_filter"), None).kind,
            ErrorKind::Permanent
        );
        assert_eq!(empty(Some("stop"), None).kind, ErrorKind::Transient);
        let refused = empty(Some("stop"), Some("I can't help with that."));
        assert_eq!(refused.kind, ErrorKind::Permanent);
        assert_eq!(
            refused.message,
            "the model refused: I can't help with that."
        );
        let text = Message::new(Role::Assistant, "assistant", "hi");
        assert!(require_output(text).is_ok());
        let mut call = Message::new(Role::Assistant, "assistant", "");
        call.function_calls
            .push(crate::dialog::FunctionCall::from_model("c", "f", "{}"));
        assert!(require_output(call).is_ok());
    }

    /// `accept` is what a reply from the response cache passes too: no
    /// larger than a reply body may be, and with text or a tool call.
    #[test]
    fn an_accepted_reply_is_no_larger_than_a_reply_body_may_be() {
        let cap = http::MAX_REPLY_BYTES;
        let sized = |size: usize| Message::new(Role::Assistant, "a", "x".repeat(size));
        assert!(accept(sized(cap)).is_ok());
        let error = accept(sized(cap + 1)).unwrap_err();
        assert_eq!(
            error.message,
            "the reply is larger than a reply may be (64 MiB)"
        );
        let mut call = Message::new(Role::Assistant, "a", "");
        call.function_calls
            .push(crate::dialog::FunctionCall::from_model(
                "c",
                "f",
                &"y".repeat(cap + 1),
            ));
        assert!(accept(call).is_err());
        assert_eq!(
            accept(sized(0)).unwrap_err().code.as_deref(),
            Some("empty_reply")
        );
    }
}
