//! What a served tactic answers, read: a run's answer (`RemoteAnswer`,
//! every id and number checked) and an error answer in the server's own words
//! (ours, FastAPI's `detail`, or plain text), as one `RemoteError`. Sending
//! is `client`'s.

use serde_json::Value;

use super::sse;

/// The most characters of a server's error message an error shows.
const MESSAGE_CHARS: usize = 500;

/// Why a call to a served tactic did not give its answer. Every variant
/// names the URL it was about (never a token: the URL holds none).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The URL is not one of a served tactic (see [`RemoteTactic::new`](super::RemoteTactic::new)).
    #[error("`{url}`: {reason}")]
    Url {
        /// The URL as given (cut, control characters escaped).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing answered: no connection, a reset, or no answer in time.
    #[error("cannot reach `{url}`: {message}")]
    Unreachable {
        /// The route called.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The server answered with an error status.
    #[error("`{url}` answered HTTP {status}{}: {message}", kind.as_deref().map(|kind| format!(" ({kind})")).unwrap_or_default())]
    Status {
        /// The route called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error's `type` (`SchemaError`, `TacticNotFound`, …) when the
        /// body said.
        kind: Option<String>,
        /// The error's message, or the start of the body.
        message: String,
        /// The request's id, when the body said.
        request_id: Option<String>,
    },
    /// The answer is not what a served tactic sends.
    #[error("`{url}` sent an answer lllm cannot read: {message}")]
    Invalid {
        /// The route called.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The run failed: the server's error event or `error` answer (D18).
    #[error("the tactic at `{url}` failed: {message}")]
    Failed {
        /// The route called.
        url: String,
        /// The server's message.
        message: String,
    },
    /// A stream of `lllm serve` (which always ends with a `result` or an
    /// `error` event) ended without one.
    #[error("`{url}`: the connection dropped before the run's closing event")]
    Dropped {
        /// The route called.
        url: String,
    },
}

/// What a served tactic's `/run` answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RemoteAnswer {
    /// The output: the parsed JSON of a tactic with an `output_schema`, else
    /// the delivery's text (upstream: whatever the tactic returned).
    pub output: Value,
    /// The request's id: the one sent, unless the server named another.
    pub request_id: String,
    /// The tactic that answered, when the server said.
    pub tactic: Option<String>,
    /// The server's session id of the run (`lllm serve` sends it; `lllm
    /// logs` on the server finds the run by it).
    pub session_id: Option<String>,
    /// What the run cost in USD, when the server said and knew.
    pub cost: Option<f64>,
    /// How long the server took, in milliseconds, when it said.
    pub latency_ms: Option<u64>,
    /// The answer as it came (what a record keeps).
    pub body: Value,
}

impl RemoteAnswer {
    /// The output as a delivery: a string as it is, anything else as its
    /// JSON text.
    pub fn delivery(&self) -> String {
        sse::output_text(&self.output)
    }
}

/// Whether `text` is an id a server may send back: a token of at most 200
/// characters without whitespace, control characters or path separators.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 200
        && !text.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '/' | '\\' | ':' | ';' | '%')
        })
}

/// `/run`'s answer read: `{"output", "request_id", "tactic"}`, plus what
/// `lllm serve` adds (`session_id`, `cost`, `latency_ms`, `state`); a body
/// without `output` is the output itself (as upstream's client takes it).
pub(crate) fn read_answer(
    url: &str,
    body: Value,
    sent_id: &str,
) -> Result<RemoteAnswer, RemoteError> {
    let invalid = |message: String| RemoteError::Invalid {
        url: url.to_string(),
        message,
    };
    let Some(object) = body
        .as_object()
        .filter(|object| object.contains_key("output"))
    else {
        return Ok(RemoteAnswer {
            output: body.clone(),
            request_id: sent_id.to_string(),
            tactic: None,
            session_id: None,
            cost: None,
            latency_ms: None,
            body,
        });
    };
    if let Some(state) = object.get("state").and_then(Value::as_str)
        && state != "success"
    {
        let message = object
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no delivery");
        return Err(RemoteError::Failed {
            url: url.to_string(),
            message: crate::redact::cut(message, MESSAGE_CHARS).into_owned(),
        });
    }
    let token = |key: &str| -> Result<Option<String>, RemoteError> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if is_token(text) => Ok(Some(text.clone())),
            Some(other) => Err(invalid(format!(
                "its `{key}` is not an id: {}",
                crate::redact::echo(&other.to_string())
            ))),
        }
    };
    let request_id = token("request_id")?.unwrap_or_else(|| sent_id.to_string());
    let tactic = token("tactic")?;
    let session_id = token("session_id")?;
    let cost = match object.get("cost") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(cost) if cost.is_finite() && cost >= 0.0 => Some(cost),
            _ => {
                return Err(invalid(format!(
                    "its `cost` is not a price in USD: {value}"
                )));
            }
        },
    };
    let latency_ms = match object.get("latency_ms") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(latency) => Some(latency),
            None => {
                return Err(invalid(format!(
                    "its `latency_ms` is not a count of milliseconds: {value}"
                )));
            }
        },
    };
    Ok(RemoteAnswer {
        output: object.get("output").cloned().unwrap_or(Value::Null),
        request_id,
        tactic,
        session_id,
        cost,
        latency_ms,
        body,
    })
}

/// An error answer as one error: its `{"error": {type, message,
/// request_id}}` (at the top, or under FastAPI's `detail`), else the start
/// of its text.
pub(super) fn status_error(url: &str, status: u16, body: &[u8]) -> RemoteError {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let detail = value
        .as_ref()
        .map(|value| value.get("detail").unwrap_or(value));
    let error = detail
        .and_then(|detail| detail.get("error"))
        .or_else(|| value.as_ref().and_then(|value| value.get("error")));
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
    let message = match (error, detail) {
        (Some(error), _) if error.is_object() => text(error.get("message")),
        (Some(Value::String(message)), _) => Some(message.clone()),
        (_, Some(Value::String(message))) => Some(message.clone()),
        (_, Some(detail)) if !detail.is_null() => Some(detail.to_string()),
        _ => None,
    }
    .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let message = crate::redact::terminal_line(&crate::redact::cut(message.trim(), MESSAGE_CHARS))
        .into_owned();
    RemoteError::Status {
        url: url.to_string(),
        status,
        kind: text(error.and_then(|error| error.get("type"))).filter(|kind| is_token(kind)),
        message: if message.is_empty() {
            "(no message)".into()
        } else {
            message
        },
        request_id: text(error.and_then(|error| error.get("request_id"))).filter(|id| is_token(id)),
    }
}
