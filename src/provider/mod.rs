//! Providers: the trait every model backend implements, the request it is given
//! and the classified error it returns.
//!
//! Provider modules only translate (request → wire JSON, wire JSON → `Message`);
//! `http` is the one place that talks HTTP and `retry` the one retry loop
//! (docs/formats.md §6). Prices and model limits live in `models` and `pricing`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dialog::{ApiType, Message};

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// Called with each piece of text as a streamed reply arrives. An empty
/// piece says a new attempt starts streaming: the text handed over before it
/// belongs to an attempt that is not this reply (a retry after a failure, a
/// repair, a tool round), so a display can mark it as discarded.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// One request to a model: everything a provider needs to build its wire request.
#[derive(Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The provider's own model id (`gpt-4o-mini`, not `openai/gpt-4o-mini`).
    pub model: &'a str,
    /// The dialog as sent, system message first.
    pub messages: &'a [Arc<Message>],
    /// The tools offered for this turn.
    pub tools: &'a [ToolSpec],
    /// JSON schema the reply must follow (structured output, D9).
    pub format: Option<&'a Value>,
    /// `temperature`, `max_tokens`, `logprobs`, … passed through to the wire request.
    pub model_args: &'a Map<String, Value>,
    /// Which OpenAI API the request goes to (chat completions or Responses).
    pub api_type: ApiType,
    /// Stream the reply and hand its text to this sink as it arrives.
    pub stream: Option<TextSink<'a>>,
}

/// How the retry loop treats an error (docs/formats.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 429: retried after `retry_after` or with backoff.
    RateLimit,
    /// 5xx, 529, timeouts, connection errors, malformed replies: retried with backoff.
    Transient,
    /// 400, 401, 403, 404, `insufficient_quota`, context length: never retried.
    Permanent,
}

/// A failed attempt, classified. Its text never contains a key or an auth header.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{}", self.describe())]
pub struct ProviderError {
    /// How the retry loop treats it.
    pub kind: ErrorKind,
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// The provider's error code (`rate_limit_exceeded`, `overloaded_error`, …).
    pub code: Option<String>,
    /// What went wrong, scrubbed of every secret lllm knows.
    pub message: String,
    /// What the server asked us to wait (`retry-after-ms` / `Retry-After`).
    #[serde(with = "optional_millis", default)]
    pub retry_after: Option<Duration>,
    /// Where the request went and where that address came from, for errors
    /// that mean a wrong address (404, 405): `http://…/v1/chat/completions
    /// (base URL from OLLAMA_HOST)`. Shown through `http::Endpoint`, so
    /// without credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The request failed in the network, not in a reply: no connection
    /// (refused, a name that does not resolve), a connection reset, or no
    /// reply within the timeout. A server that answered, whatever it said,
    /// is not one. What `lllm batch`'s circuit breaker counts
    /// (`provider::breaker`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

impl ProviderError {
    /// An error of `kind` with `message` and nothing else known.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind,
            status: None,
            code: None,
            message: message.into(),
            retry_after: None,
            endpoint: None,
            network: false,
        }
    }

    /// An error that is never retried.
    pub fn permanent(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorKind::Permanent, message)
    }

    /// An error retried with back-off.
    pub fn transient(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorKind::Transient, message)
    }

    /// Whether the retry loop tries again (rate limits and transient errors).
    pub fn is_retryable(&self) -> bool {
        self.kind != ErrorKind::Permanent
    }

    fn describe(&self) -> String {
        let mut text = String::new();
        match (self.status, &self.endpoint) {
            (Some(status), Some(endpoint)) => {
                text.push_str(&format!("HTTP {status} from {endpoint}: "))
            }
            (Some(status), None) => text.push_str(&format!("HTTP {status}: ")),
            (None, _) => {}
        }
        text.push_str(&self.message);
        if let Some(code) = &self.code {
            text.push_str(&format!(" ({code})"));
            if code == "exceed_context_size_error" {
                text.push_str(CONTEXT_SIZE_HINT);
            }
        }
        // The message and code come from the provider: one line, whatever they hold.
        crate::redact::terminal_line(&text).into_owned()
    }
}

/// What to do about llama-server's `exceed_context_size_error` (issue 27:
/// half of a batch of summaries on a 4-slot server failed with it, each
/// repair turn carrying a 1,024-token reply into a 1,024-token slot).
const CONTEXT_SIZE_HINT: &str = ": llama-server gives each slot its `-c` divided by `--parallel`, \
     and a repair turn carries the reply it repairs; lower `max_tokens` (`-O max_tokens=N`) or \
     start the server with more context";

/// A model backend. One call is one attempt: retries belong to `retry`.
pub trait Provider: Send + Sync {
    /// Sends `request` once and returns the reply as an assistant message
    /// (text, tool calls, usage in its metadata), or the classified error.
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>>;

    /// Where `invoke` would send `request` and the exact body, without
    /// sending it (`lllm run --dry-run`). Never includes headers or keys.
    /// Offline providers show the chat-completions shape.
    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        WireRequest {
            url: "(offline, nothing is sent)".into(),
            body: openai::build_request(request, &openai::WireOptions::default()),
        }
    }

    /// The limiter this provider takes permits from, if it has one (for
    /// progress displays: why a request is waiting).
    fn limiter(&self) -> Option<&limit::Limiter> {
        None
    }

    /// Hex SHA-256 of what `invoke` puts on the wire for `request`, as the
    /// response cache keys it: the URL, every header but the credentials,
    /// and the exact bytes of the body, built by the same code that builds
    /// the body sent (issue 26: a key made of chosen fields missed
    /// `system_role` and `send_name`). The body is the one sent when the
    /// reply is not streamed: streaming changes how the reply arrives, not
    /// what it says. `None` for a provider that sends nothing (offline,
    /// replays, dry runs): its calls are never cached.
    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        let _ = request;
        None
    }

    /// Puts a reply that `invoke` did not fetch (the response cache's)
    /// through what `invoke` puts a fresh one through once its wire parser
    /// has read it: the checks every reply passes ([`exchange::accept`]:
    /// its size, text or a tool call) and this provider's own (the secrets
    /// its layers scrub). An error is what a fresh reply like it would have
    /// been answered with.
    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        exchange::accept(reply)
    }
}

/// A request as it would go on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireRequest {
    /// Where it would go (credentials never shown).
    pub url: String,
    /// The JSON body, exactly as it would be sent.
    pub body: Value,
}

mod optional_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_some(&(duration.as_millis() as u64)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

// The wire formats, the HTTP layer, limits, retries and prices are the
// engine's own: reachable for the `lllm` binary, the fuzz targets and tests,
// not a stable API (hidden from the docs).
#[doc(hidden)]
pub mod anthropic;
pub mod batch_api;
#[doc(hidden)]
pub mod breaker;
#[doc(hidden)]
pub mod budget;
pub mod cache;
#[doc(hidden)]
pub mod capacity;
#[doc(hidden)]
pub mod digest;
#[doc(hidden)]
pub mod dry_run;
#[doc(hidden)]
pub mod endpoints;
#[doc(hidden)]
pub mod exchange;
#[doc(hidden)]
pub mod http;
#[doc(hidden)]
pub mod limit;
#[doc(hidden)]
pub mod mock;
pub mod models;
#[cfg(test)]
mod multipart_tests;
#[doc(hidden)]
pub mod openai;
#[doc(hidden)]
pub mod pricing;
#[doc(hidden)]
pub mod rate_headers;
#[doc(hidden)]
pub mod registry;
#[doc(hidden)]
pub mod replay;
#[doc(hidden)]
pub mod responses;
#[doc(hidden)]
pub mod retry;
#[doc(hidden)]
pub mod scrub;
#[doc(hidden)]
pub mod sse;
#[doc(hidden)]
pub mod trace;
pub mod watch;

#[cfg(test)]
mod wire_digest_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_from_the_wire_is_one_line() {
        // Found by fuzzing `anthropic_reply`: an error type with `\r` in it.
        let mut error = ProviderError::new(ErrorKind::Transient, "scripted\nfault");
        error.status = Some(500);
        error.code = Some("api_\rerror".into());
        assert_eq!(
            error.to_string(),
            "HTTP 500: scripted\\nfault (api_\\rerror)"
        );
    }
}
