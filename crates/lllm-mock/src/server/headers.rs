//! The response headers a script's reply adds: `headers:` exactly as written
//! (hostile values included), and `rate_limit:` windows in the spelling of the
//! API the request came in on, as the real services send them:
//!
//! - OpenAI (chat completions, Responses): `x-ratelimit-limit-requests`,
//!   `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` (and
//!   `-tokens`), the reset a Go duration such as `6m0s`, `1.5s` or `250ms`;
//!   OpenAI has no input/output token windows, so those are not sent.
//! - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
//!   the reset an RFC 3339 time in whole seconds (`2025-08-21T12:40:59Z`),
//!   rounded up so that the window is never reported as replenished early.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::wire::Api;
use lllm::mock::script::{RateLimitWindow, ReplyHeaders, WindowKind};

/// Adds `extra` to `headers`; `now` is the moment of the reply.
pub(super) fn add(
    headers: &mut HeaderMap,
    api: Api,
    extra: &ReplyHeaders,
    now: chrono::DateTime<chrono::Utc>,
) {
    for window in &extra.rate_limits {
        for (name, value) in window_headers(api, window, now) {
            insert(headers, &name, &value);
        }
    }
    // Written last, so a script can also override a window's own header.
    for (name, value) in &extra.raw {
        insert(headers, name, value);
    }
}

/// The script checked names and values when it was read.
fn insert(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(name, value);
    }
}

fn window_headers(
    api: Api,
    window: &RateLimitWindow,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<(String, String)> {
    let counts = |name: &str, reset: String| {
        vec![
            (name.replace("{}", "limit"), window.limit.to_string()),
            (
                name.replace("{}", "remaining"),
                window.remaining.to_string(),
            ),
            (name.replace("{}", "reset"), reset),
        ]
    };
    match api {
        Api::Chat | Api::Responses => {
            let family = match window.kind {
                WindowKind::Requests => "requests",
                WindowKind::Tokens => "tokens",
                WindowKind::InputTokens | WindowKind::OutputTokens => return Vec::new(),
            };
            counts(
                &format!("x-ratelimit-{{}}-{family}"),
                go_duration(window.reset),
            )
        }
        Api::Anthropic => {
            let family = match window.kind {
                WindowKind::Requests => "requests",
                WindowKind::Tokens => "tokens",
                WindowKind::InputTokens => "input-tokens",
                WindowKind::OutputTokens => "output-tokens",
            };
            let reset = chrono::TimeDelta::from_std(window.reset)
                .ok()
                .and_then(|reset| now.checked_add_signed(reset))
                .unwrap_or(now);
            // Whole seconds, rounded up: never earlier than the real reset.
            let reset = match reset.timestamp_subsec_nanos() {
                0 => reset,
                nanos => reset + chrono::TimeDelta::nanoseconds(1_000_000_000 - i64::from(nanos)),
            };
            counts(
                &format!("anthropic-ratelimit-{family}-{{}}"),
                reset.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            )
        }
    }
}

/// A duration as Go prints one (OpenAI's reset headers): `250ms`, `1.5s`,
/// `6m0s`, `1h2m3s`.
fn go_duration(duration: Duration) -> String {
    let trimmed = |value: f64| {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if duration < Duration::from_secs(1) {
        return format!("{}ms", trimmed(duration.as_secs_f64() * 1000.0));
    }
    let whole = duration.as_secs();
    let (hours, minutes) = (whole / 3600, whole % 3600 / 60);
    let seconds = trimmed((whole % 60) as f64 + f64::from(duration.subsec_nanos()) / 1e9);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m{seconds}s"),
        _ => format!("{hours}h{minutes}m{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(kind: WindowKind, reset: Duration) -> RateLimitWindow {
        RateLimitWindow {
            kind,
            limit: 50,
            remaining: 1,
            reset,
        }
    }

    #[test]
    fn resets_are_spelled_as_go_prints_durations() {
        for (duration, text) in [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(360), "6m0s"),
            (Duration::from_secs(3723), "1h2m3s"),
        ] {
            assert_eq!(go_duration(duration), text, "{duration:?}");
        }
    }

    #[test]
    fn each_api_gets_its_own_headers() {
        let now = chrono::DateTime::parse_from_rfc3339("2025-08-21T12:40:58.2Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let extra = ReplyHeaders {
            raw: vec![("retry-after".into(), "inf".into())],
            rate_limits: vec![
                window(WindowKind::Requests, Duration::from_millis(1500)),
                window(WindowKind::InputTokens, Duration::from_secs(2)),
            ],
        };
        let mut openai = HeaderMap::new();
        add(&mut openai, Api::Chat, &extra, now);
        assert_eq!(openai["x-ratelimit-limit-requests"], "50");
        assert_eq!(openai["x-ratelimit-remaining-requests"], "1");
        assert_eq!(openai["x-ratelimit-reset-requests"], "1.5s");
        assert_eq!(openai["retry-after"], "inf");
        assert_eq!(openai.len(), 4, "no input-token window on OpenAI");

        let mut anthropic = HeaderMap::new();
        add(&mut anthropic, Api::Anthropic, &extra, now);
        assert_eq!(
            anthropic["anthropic-ratelimit-requests-reset"], "2025-08-21T12:41:00Z",
            "12:40:59.7 rounded up to whole seconds"
        );
        assert_eq!(anthropic["anthropic-ratelimit-input-tokens-limit"], "50");
        assert_eq!(
            anthropic["anthropic-ratelimit-input-tokens-reset"],
            "2025-08-21T12:41:01Z"
        );
        assert_eq!(anthropic.len(), 7);
    }
}
