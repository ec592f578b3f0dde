//! One request/reply exchange of a wire API, the same for every HTTP provider:
//! a limiter permit, the POST (whole JSON or server-sent events), the reply
//! parsed or the error classified, and the outcome reported to the limiter.
//! Provider modules supply only the translation functions.

use serde_json::Value;

use super::http::{self, HttpReply};
use super::limit::Limiter;
use super::{ErrorKind, ProviderError, TextSink};
use crate::dialog::Message;

/// A reply body as JSON; a body that is not JSON is a transient error.
pub fn parse_json(body: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(body)
        .map_err(|error| ProviderError::transient(format!("malformed reply: not JSON ({error})")))
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
    pub timeout: std::time::Duration,
    pub limiter: &'a Limiter,
}

/// Sends `body` and returns the reply as a message. With a `sink` the reply is
/// streamed through `A`; `estimate` is the token estimate for the `tpm` budget.
pub async fn exchange<A: Assembler>(
    target: Target<'_>,
    body: Vec<u8>,
    estimate: u64,
    sink: Option<TextSink<'_>>,
    wire: &Wire,
) -> Result<Message, ProviderError> {
    let _permit = target.limiter.acquire(estimate).await;
    let failed = |error: ProviderError| {
        if error.kind == ErrorKind::RateLimit {
            target.limiter.on_rate_limited();
        }
        error
    };
    let (message, reply_headers) = if sink.is_some() {
        let mut assembler = A::default();
        let feed = |data: &str| assembler.feed(data, sink);
        // A streamed reply's headers count too: its rate-limit windows.
        match http::post_sse(target.client, target.endpoint, body, target.timeout, feed).await? {
            http::Streamed::Refused(reply) => return Err(failed((wire.parse_error)(&reply))),
            http::Streamed::Read(headers) => (assembler.finish()?, headers),
        }
    } else {
        let reply = http::post_json(target.client, target.endpoint, body, target.timeout).await?;
        if !(200..300).contains(&reply.status) {
            return Err(failed((wire.parse_error)(&reply)));
        }
        ((wire.parse_body)(&reply.body)?, reply.headers)
    };
    target
        .limiter
        .on_success(&reply_headers, message.total_tokens(), estimate);
    Ok(message)
}
