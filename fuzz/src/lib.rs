//! What the fuzz targets share: the checks that hold for every error a parser
//! returns, and the path every provider reply takes after it is parsed.
//!
//! The targets themselves are in `fuzz_targets/`, one per parser family; see
//! `run.sh` for how they are built and run.

use lllm::dialog::{InvokeCost, Message};
use lllm::provider::ProviderError;
use lllm::provider::exchange::Assembler;
use lllm::provider::http::HttpReply;
use lllm::provider::limit::{Limiter, Limits};
use lllm::provider::models::ModelTable;
use lllm::provider::sse::SseDecoder;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// An error a user sees as one line: not empty, no line break.
#[track_caller]
pub fn assert_one_line(text: &str) {
    assert!(!text.trim().is_empty(), "an empty error message");
    assert!(
        !text.contains(['\n', '\r']),
        "an error message of several lines: {text:?}"
    );
}

/// What the binary does with a reply message: count its tokens and price it.
pub fn use_message(provider: &str, message: &Message) {
    let mut usage = message.usage.clone();
    let model = message.model.as_deref().unwrap_or("gpt-4o-mini");
    // The provider's own service, so that the bundled prices apply.
    lllm::provider::pricing::apply(
        ModelTable::bundled(),
        provider,
        Some(provider),
        model,
        &mut usage,
    );
    let cost = InvokeCost::from_usage(&usage);
    let _ = (message.total_tokens(), cost.total_tokens);
}

/// Feeds `stream` to `A` the way `http::post_sse` and `exchange` do, in
/// chunks whose sizes cycle through `sizes`; returns the message and the text
/// handed to the terminal as it streamed.
pub fn assemble<A: Assembler>(
    stream: &[u8],
    sizes: &[u8],
) -> (Result<Message, ProviderError>, String) {
    let streamed = std::sync::Mutex::new(String::new());
    let sink = |text: &str| {
        if let Ok(mut streamed) = streamed.lock() {
            streamed.push_str(text);
        }
    };
    let mut assembler = A::default();
    let mut decoder = SseDecoder::default();
    let mut feed = |data: &str| assembler.feed(data, Some(&sink));
    let mut outcome = Ok(());
    let mut rest = stream;
    let mut sizes = sizes.iter().cycle();
    let mut stopped = false;
    while !rest.is_empty() {
        let size = sizes
            .next()
            .map_or(rest.len(), |size| usize::from(*size).max(1));
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        match decoder.push(chunk, &mut feed) {
            Ok(true) => {}
            Ok(false) => {
                stopped = true;
                break;
            }
            Err(error) => {
                outcome = Err(error);
                break;
            }
        }
    }
    if outcome.is_ok() && !stopped {
        outcome = decoder.finish(&mut feed);
    }
    let message = outcome.and_then(|()| assembler.finish());
    let streamed = streamed.into_inner().unwrap_or_default();
    (message, streamed)
}

/// The checks every parsed reply body passes: an error (ours: the body is
/// not what the API sends) is one line; a message can be counted and priced.
pub fn check_body(provider: &str, reply: &Result<Message, ProviderError>) {
    match reply {
        Ok(message) => use_message(provider, message),
        Err(error) => assert_one_line(&error.to_string()),
    }
}

/// An error reply: the classification never panics, whatever the status,
/// headers and body; a permanent error is never retried after a pause.
pub fn check_error_reply(parse_error: fn(&HttpReply) -> ProviderError, data: &[u8]) {
    let (status, headers, body) = error_reply(data);
    let reply = HttpReply {
        status,
        headers,
        body,
    };
    let error = parse_error(&reply);
    assert_eq!(error.status, Some(status));
    if error.kind == lllm::provider::ErrorKind::Permanent {
        assert_eq!(error.retry_after, None);
    }
    let _ = error.to_string();
}

/// An error reply from bytes: two for the status, then the reply.
fn error_reply(data: &[u8]) -> (u16, HeaderMap, String) {
    let (status, rest) = match data {
        [high, low, rest @ ..] => (u16::from_be_bytes([*high, *low]) % 600, rest),
        _ => (500, data),
    };
    let (headers, body) = reply(rest);
    (status, headers, body)
}

/// A whole reply: header lines (`name: value`) up to the first blank line,
/// then the body (all body when there is no blank line), read as `http` reads
/// a body: bytes that are not UTF-8 become U+FFFD.
pub fn reply(data: &[u8]) -> (HeaderMap, String) {
    let text = String::from_utf8_lossy(data);
    let (head, body) = text.split_once("\n\n").unwrap_or(("", &text));
    let mut headers = HeaderMap::new();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) {
            headers.append(name, value);
        }
    }
    (headers, body.to_string())
}

/// A 2xx body: parsed by `parse_body`, then what `exchange` does with it:
/// the provider's limiter reads the rate-limit headers and settles the tokens.
pub fn check_success(
    provider: &str,
    parse_body: impl Fn(&str) -> Result<Message, ProviderError>,
    data: &[u8],
) -> Result<Message, ProviderError> {
    let (headers, body) = reply(data);
    let parsed = parse_body(&body);
    check_body(provider, &parsed);
    if let Ok(message) = &parsed {
        let limiter = Limiter::new(Limits {
            max_concurrency: Some(4),
            rpm: Some(60),
            tpm: Some(10_000),
            ..Limits::default()
        });
        let estimate = lllm::provider::limit::Estimate::from(256);
        // The limiter's clock is tokio's: a small runtime of its own.
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            runtime.block_on(async {
                let permit = limiter.acquire(estimate).await;
                permit.observe(&headers);
            });
        }
        limiter.on_success(message.total_tokens(), estimate);
        let _ = limiter.waiting();
    }
    parsed
}
