//! What the HTTP layer tells a `tracing` subscriber (`lllm -v`, `RUST_LOG`):
//! one `info` event per request sent and per reply or failure received, the
//! bodies at `debug`, each stream payload at `trace`. Events carry the URL as
//! `redact::place` shows it (no credentials, no query) and never a header.
//!
//! Every text that goes into an event passes [`shown`]: the endpoint's own
//! secrets and every secret a run's providers know (registered with
//! [`remember`] when they are built) become `***`, control characters are
//! escaped, and a body is cut at [`BODY_BYTES`]. The subscriber (the CLI's
//! `verbose.rs`) decides where the lines go; it never sees a secret to hide.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::redact::{self, Secrets};

/// The most of one body an event shows: a chat request with a long dialog is
/// hundreds of kilobytes, which would bury every other line.
pub const BODY_BYTES: usize = 2048;

/// The secrets of every provider set built in this process: a reply from one
/// provider may echo another's key, and a trace line must not show it either.
static KNOWN: RwLock<Option<Arc<Secrets>>> = RwLock::new(None);

/// Adds `secrets` to what every event is scrubbed of (kept for the process).
pub fn remember(secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    let mut known = KNOWN
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut merged = known.as_deref().cloned().unwrap_or_default();
    merged.extend(secrets);
    *known = Some(Arc::new(merged));
}

/// `text` as an event may show it: without `secrets` and the remembered
/// ones, control characters escaped, at most `limit` bytes (cut on a
/// character boundary, with how much was left out).
pub fn shown(text: &str, secrets: &Secrets, limit: usize) -> String {
    let own = secrets.scrub(text);
    let known = KNOWN
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let scrubbed = match &known {
        Some(known) => known.scrub(&own).into_owned(),
        None => own.into_owned(),
    };
    let mut cut = scrubbed.len().min(limit);
    while !scrubbed.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut line = redact::terminal_line(&scrubbed[..cut]).into_owned();
    if cut < scrubbed.len() {
        line.push_str(&format!(" … ({} more bytes)", scrubbed.len() - cut));
    }
    line
}

/// A body as an event shows it (see [`shown`]); bytes that are not UTF-8
/// are shown as U+FFFD.
pub fn body(bytes: &[u8], secrets: &Secrets) -> String {
    shown(&String::from_utf8_lossy(bytes), secrets, BODY_BYTES)
}

/// A request is about to leave: `method url · N bytes`, and its body at `debug`.
/// `place` is the URL as `redact::place` shows it.
pub fn sent(method: &str, place: &str, body: &[u8], secrets: &Secrets) {
    tracing::info!("{method} {place} · {} bytes", body.len());
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!("request body: {}", self::body(body, secrets));
    }
}

/// A whole reply arrived: `status from url · N bytes · T ms`, and its body
/// at `debug` (already scrubbed by the HTTP layer; scrubbed again here of
/// the remembered secrets).
pub fn received(place: &str, status: u16, body: &str, started: Instant, secrets: &Secrets) {
    tracing::info!(
        "{status} from {place} · {} bytes · {} ms",
        body.len(),
        started.elapsed().as_millis()
    );
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!("reply body: {}", shown(body, secrets, BODY_BYTES));
    }
}

/// A streamed reply was read to its end (or stopped by its end marker).
pub fn streamed(place: &str, status: u16, bytes: usize, started: Instant) {
    tracing::info!(
        "{status} from {place} · {bytes} bytes streamed · {} ms",
        started.elapsed().as_millis()
    );
}

/// One `data:` payload of a stream, at `trace` (a reply is hundreds of them).
pub fn stream_data(data: &str, secrets: &Secrets) {
    if tracing::enabled!(tracing::Level::TRACE) {
        tracing::trace!("stream data: {}", shown(data, secrets, BODY_BYTES));
    }
}

/// No reply: the transport failed (no connection, a timeout, a reset, a
/// body too large). `error` names the place as `redact::place` shows it.
/// Returns `error`, for `map_err`.
pub fn failed(error: super::ProviderError, started: Instant) -> super::ProviderError {
    tracing::info!(
        "no reply after {} ms: {}",
        started.elapsed().as_millis(),
        shown(&error.to_string(), &Secrets::new(), usize::MAX)
    );
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_show_no_secret_no_control_and_no_more_than_the_limit() {
        let mut own = Secrets::new();
        own.add("sk-own-0123456789");
        let mut other = Secrets::new();
        other.add("sk-other-0123456789");
        remember(&other);
        let text = "{\"a\":\"sk-own-0123456789 and sk-other-0123456789\"}\n\u{1b}[2J";
        let line = shown(text, &own, 1000);
        assert_eq!(line, "{\"a\":\"*** and ***\"}\\n\\x1b[2J");
        assert_eq!(shown("ééé", &own, 3), "é … (4 more bytes)");
        assert_eq!(body(b"ok", &own), "ok");
    }
}
