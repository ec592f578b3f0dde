//! What a provider's reply headers ask of us, read defensively: how long to
//! wait before retrying (`retry-after-ms`, `Retry-After` in seconds or as an
//! HTTP date) and the rate-limit windows it states (OpenAI's
//! `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`): limit, remaining
//! and refill rate, from which the limiter keeps its own copy of the quota.
//!
//! Headers come from servers and proxies we do not control (issue 12:
//! `Retry-After: inf` and `1e20` crashed the run). A value that is not a
//! finite, non-negative number, duration or date is ignored, as if absent; a
//! huge one is clamped to [`LONGEST`]. How long anyone actually waits is
//! capped again by the retry loop and the limiter (the provider's
//! `retry_cap_ms`); this module only guarantees that every value is sane.

use std::time::{Duration, SystemTime};

use reqwest::header::{AsHeaderName, HeaderMap, HeaderName};

/// The longest wait any header can ask for; larger values are clamped to it.
pub const LONGEST: Duration = Duration::from_secs(24 * 60 * 60);

/// The wait a reply asks for: `retry-after-ms` (OpenAI's and Anthropic's
/// SDKs read it first), else `Retry-After` as seconds (fractions allowed, as
/// those SDKs allow them) or as an HTTP date, in any of the three forms RFC
/// 9110 makes recipients accept. A date in the past asks for no wait. `None`
/// when no header gives a usable value.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let millis = text(headers, "retry-after-ms").and_then(|value| seconds(value, 1e-3));
    millis.or_else(|| {
        let value = text(headers, "retry-after")?;
        seconds(value, 1.0).or_else(|| http_date(value, now))
    })
}

/// What a rate-limit window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Requests,
    /// Prompt and reply together (OpenAI's TPM; Anthropic's most
    /// restrictive token window).
    Tokens,
    /// Anthropic's input tokens per minute.
    InputTokens,
    /// Anthropic's output tokens per minute.
    OutputTokens,
}

/// One rate-limit window as a reply states it: its limit, what remains and
/// how fast it refills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub family: Family,
    pub limit: f64,
    pub remaining: f64,
    /// A sixtieth of the limit: both providers' limits are per minute. The
    /// reset is not read: it says when the bucket is full again, not when
    /// the next request fits, and a hostile one must not slow anyone down.
    pub per_second: f64,
}

/// The rate-limit windows a reply states: OpenAI's `x-ratelimit-{limit,
/// remaining,reset}-{requests,tokens}` (the reset a duration such as `6m0s`,
/// `1.5s`, `250ms`) and Anthropic's `anthropic-ratelimit-{requests,tokens,
/// input-tokens,output-tokens}-{limit,remaining,reset}` (the reset an RFC
/// 3339 time, in whole seconds). A window whose limit or remaining count is
/// not a count is left out; `remaining` is at most `limit`.
pub fn windows(headers: &HeaderMap) -> Vec<Window> {
    // Names spelled out: read on every reply, they cost no formatting.
    const NAMES: [(Family, HeaderName, HeaderName); 6] = [
        (
            Family::Requests,
            HeaderName::from_static("x-ratelimit-limit-requests"),
            HeaderName::from_static("x-ratelimit-remaining-requests"),
        ),
        (
            Family::Tokens,
            HeaderName::from_static("x-ratelimit-limit-tokens"),
            HeaderName::from_static("x-ratelimit-remaining-tokens"),
        ),
        (
            Family::Requests,
            HeaderName::from_static("anthropic-ratelimit-requests-limit"),
            HeaderName::from_static("anthropic-ratelimit-requests-remaining"),
        ),
        (
            Family::Tokens,
            HeaderName::from_static("anthropic-ratelimit-tokens-limit"),
            HeaderName::from_static("anthropic-ratelimit-tokens-remaining"),
        ),
        (
            Family::InputTokens,
            HeaderName::from_static("anthropic-ratelimit-input-tokens-limit"),
            HeaderName::from_static("anthropic-ratelimit-input-tokens-remaining"),
        ),
        (
            Family::OutputTokens,
            HeaderName::from_static("anthropic-ratelimit-output-tokens-limit"),
            HeaderName::from_static("anthropic-ratelimit-output-tokens-remaining"),
        ),
    ];
    if headers.is_empty() {
        return Vec::new();
    }
    NAMES
        .iter()
        .filter_map(|(family, limit, remaining)| window(headers, *family, limit, remaining))
        .collect()
}

/// One window, if its counts are counts.
fn window(
    headers: &HeaderMap,
    family: Family,
    limit: &HeaderName,
    remaining: &HeaderName,
) -> Option<Window> {
    let limit = text(headers, limit)
        .and_then(number)
        .filter(|limit| *limit >= 1.0)?;
    let remaining = text(headers, remaining).and_then(number)?.min(limit);
    Some(Window {
        family,
        limit,
        remaining,
        per_second: limit / 60.0,
    })
}

fn text(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// A finite, non-negative number (`inf`, `NaN` and negatives are not counts).
fn number(text: &str) -> Option<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|number| number.is_finite() && *number >= 0.0)
}

/// `text` as a number of `unit` seconds, clamped to [`LONGEST`].
fn seconds(text: &str, unit: f64) -> Option<Duration> {
    number(text).map(|value| clamped(value * unit))
}

/// Seconds as a `Duration`, at most [`LONGEST`]. `value` is finite and
/// non-negative (a product of two such can still overflow to infinity, which
/// `min` brings back).
fn clamped(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.min(LONGEST.as_secs_f64())).unwrap_or(LONGEST)
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850 or asctime form)
/// as the wait from `now`: zero when it has passed.
fn http_date(text: &str, now: SystemTime) -> Option<Duration> {
    let at = httpdate::parse_http_date(text).ok()?;
    Some(until(at, now))
}

fn until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now)
        .unwrap_or(Duration::ZERO)
        .min(LONGEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        super::super::http::headers(pairs.iter().copied()).unwrap()
    }

    /// 2026-01-01T00:00:00Z.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
    }

    #[track_caller]
    fn asks(pairs: &[(&str, &str)], expected: Option<Duration>) {
        assert_eq!(retry_after(&map(pairs), now()), expected, "{pairs:?}");
    }

    #[test]
    fn retry_after_reads_every_form_and_refuses_nonsense() {
        let ms = Duration::from_millis;
        asks(&[("retry-after-ms", "250")], Some(ms(250)));
        asks(&[("retry-after", "1.5")], Some(ms(1500)));
        asks(&[("retry-after", " 2 ")], Some(ms(2000)));
        asks(
            &[("retry-after-ms", "20"), ("retry-after", "9")],
            Some(ms(20)),
        );
        // A bad `retry-after-ms` falls back to `Retry-After`, as the SDKs do.
        asks(
            &[("retry-after-ms", "nan"), ("retry-after", "3")],
            Some(ms(3000)),
        );
        for nonsense in ["inf", "-inf", "NaN", "-5", "soon", "", "0x10", "1,5"] {
            asks(&[("retry-after", nonsense)], None);
            asks(&[("retry-after-ms", nonsense)], None);
        }
        for huge in ["1e20", "999999", "1e308", "18446744073709551616"] {
            asks(&[("retry-after", huge)], Some(LONGEST));
        }
        asks(&[("retry-after-ms", "1e30")], Some(LONGEST));
        asks(&[], None);
    }

    #[test]
    fn retry_after_dates_in_all_three_http_forms() {
        for date in [
            "Thu, 01 Jan 2026 00:00:30 GMT",
            "Thursday, 01-Jan-26 00:00:30 GMT",
            "Thu Jan  1 00:00:30 2026",
        ] {
            asks(&[("retry-after", date)], Some(Duration::from_secs(30)));
        }
        asks(
            &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")],
            Some(Duration::ZERO),
        );
        asks(
            &[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")],
            Some(LONGEST),
        );
        asks(&[("retry-after", "Thu, 32 Jan 2026 00:00:30 GMT")], None);
    }

    #[track_caller]
    fn read(pairs: &[(&str, &str)]) -> Vec<(Family, f64, f64, f64)> {
        windows(&map(pairs))
            .into_iter()
            .map(|window| {
                (
                    window.family,
                    window.limit,
                    window.remaining,
                    window.per_second,
                )
            })
            .collect()
    }

    #[test]
    fn openai_windows_are_read_with_their_refill_rate() {
        assert_eq!(
            read(&[
                ("x-ratelimit-limit-requests", "6000"),
                ("x-ratelimit-remaining-requests", "5999"),
                ("x-ratelimit-reset-requests", "10ms"),
                ("x-ratelimit-limit-tokens", "600000"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "1m0s"),
            ]),
            vec![
                (Family::Requests, 6000.0, 5999.0, 100.0),
                (Family::Tokens, 600_000.0, 0.0, 10_000.0),
            ]
        );
        // Counts that are not counts are no window at all; a remaining
        // above the limit is the limit; no reset, however hostile, changes
        // the rate.
        for (limit, remaining) in [("inf", "0"), ("0", "0"), ("NaN", "0"), ("100", "-1")] {
            assert_eq!(
                read(&[
                    ("x-ratelimit-limit-requests", limit),
                    ("x-ratelimit-remaining-requests", remaining),
                ]),
                vec![],
                "{limit} {remaining}"
            );
        }
        for reset in ["soon", "inf", "-1s", "1e20s"] {
            assert_eq!(
                read(&[
                    ("x-ratelimit-limit-tokens", "60"),
                    ("x-ratelimit-remaining-tokens", "1e9"),
                    ("x-ratelimit-reset-tokens", reset),
                ]),
                vec![(Family::Tokens, 60.0, 60.0, 1.0)],
                "{reset}"
            );
        }
    }

    #[test]
    fn anthropic_windows_are_read_with_their_refill_rate() {
        for (family, name) in [
            (Family::Requests, "requests"),
            (Family::Tokens, "tokens"),
            (Family::InputTokens, "input-tokens"),
            (Family::OutputTokens, "output-tokens"),
        ] {
            let header = |part: &str| format!("anthropic-ratelimit-{name}-{part}");
            let (limit, remaining, reset) = (header("limit"), header("remaining"), header("reset"));
            let at = |left: &str, at: &str| {
                read(&[
                    (limit.as_str(), "600"),
                    (remaining.as_str(), left),
                    (reset.as_str(), at),
                ])
            };
            // 10 a second, whatever the reset says.
            assert_eq!(
                at("550", "2026-01-01T00:00:06Z"),
                vec![(family, 600.0, 550.0, 10.0)],
                "{name}"
            );
            assert_eq!(
                at("0", "9999-12-31T23:59:59Z"),
                vec![(family, 600.0, 0.0, 10.0)]
            );
            assert_eq!(at("0", "tomorrow"), vec![(family, 600.0, 0.0, 10.0)]);
        }
    }
}
