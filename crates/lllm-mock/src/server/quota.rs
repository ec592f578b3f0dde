//! Provider quotas (`--rpm`, `--tpm`, `--input-tpm`, `--output-tpm`), per API
//! key as the real services keep them (per organization, which one key
//! stands for here). Each limit is a token bucket, as OpenAI and Anthropic
//! describe theirs: it holds the whole per-minute limit, starts full at the
//! key's first request and refills continuously at a sixtieth of the limit
//! per second.
//!
//! A request is counted at admission, before the model runs, as the
//! providers do: one request, its prompt tokens (estimated at four
//! characters a token) and its reply budget (`max_tokens`,
//! `max_completion_tokens`, `max_output_tokens`; none given counts as none)
//! against `--tpm`; the prompt alone against `--input-tpm`, the budget alone
//! against `--output-tpm` (Anthropic's ITPM and OTPM). A request that does not
//! fit is refused with a 429 in the provider's error shape, with
//! `retry-after` (whole seconds, rounded up) and, on the OpenAI wire,
//! `retry-after-ms`, and is not counted. Every reply of a configured server,
//! 200 or 429, carries the windows' headers (`headers`): what is left after
//! this request and when the bucket is full again. Requests inside a Batch
//! API batch do not count, as the real Batch APIs have limits of their own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::ServerError;
use crate::wire::{Api, Incoming};
use lllm::mock::script::{RateLimitWindow, ReplyHeaders, WindowKind, estimate_tokens};

/// The quota of each API key; `None` is no limit.
///
/// ```
/// let quota = lllm_mock::server::QuotaOptions {
///     rpm: Some(600),
///     tpm: Some(90_000),
///     ..Default::default()
/// };
/// assert!(quota.is_set());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaOptions {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens per minute: prompt and reply budget.
    pub tpm: Option<u64>,
    /// Prompt tokens per minute (Anthropic's ITPM; its headers only on the
    /// Anthropic wire).
    pub input_tpm: Option<u64>,
    /// Reply-budget tokens per minute (Anthropic's OTPM).
    pub output_tpm: Option<u64>,
}

impl QuotaOptions {
    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.limits().next().is_some()
    }

    fn limits(&self) -> impl Iterator<Item = (WindowKind, u64)> {
        [
            (WindowKind::Requests, self.rpm),
            (WindowKind::Tokens, self.tpm),
            (WindowKind::InputTokens, self.input_tpm),
            (WindowKind::OutputTokens, self.output_tpm),
        ]
        .into_iter()
        .filter_map(|(kind, limit)| Some((kind, limit?)))
    }

    pub(super) fn check(&self) -> Result<(), ServerError> {
        for (flag, limit) in [
            ("--rpm", self.rpm),
            ("--tpm", self.tpm),
            ("--input-tpm", self.input_tpm),
            ("--output-tpm", self.output_tpm),
        ] {
            if limit == Some(0) {
                return Err(ServerError::Quota(flag));
            }
        }
        Ok(())
    }
}

/// What one request costs in each window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub input: u64,
    pub output: u64,
}

impl Cost {
    /// The prompt estimated as the server's usage does (four characters a
    /// token), the reply budget as the request asks for it.
    pub fn of(incoming: &Incoming, body: &Value) -> Cost {
        let output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|key| body.get(*key).and_then(Value::as_u64))
            .unwrap_or(0);
        Cost {
            input: estimate_tokens(incoming.prompt_chars),
            output,
        }
    }

    fn in_window(&self, kind: WindowKind) -> f64 {
        match kind {
            WindowKind::Requests => 1.0,
            WindowKind::Tokens => self.input.saturating_add(self.output) as f64,
            WindowKind::InputTokens => self.input as f64,
            WindowKind::OutputTokens => self.output as f64,
        }
    }
}

/// A request the quota refused: how long until it would fit, which window
/// refused it, and the windows' headers.
pub struct Exceeded {
    pub wait: Option<Duration>,
    pub message: String,
    pub headers: ReplyHeaders,
}

struct Bucket {
    kind: WindowKind,
    limit: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    fn per_second(&self) -> f64 {
        self.limit / 60.0
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second()).min(self.limit);
        self.updated = now;
    }

    /// Until the bucket holds `amount`.
    fn wait_for(&self, amount: f64) -> Duration {
        Duration::from_secs_f64(((amount - self.level).max(0.0) / self.per_second()).min(3600.0))
    }

    fn window(&self) -> RateLimitWindow {
        RateLimitWindow {
            kind: self.kind,
            limit: self.limit as u64,
            remaining: self.level.max(0.0).floor() as u64,
            reset: self.wait_for(self.limit),
        }
    }
}

/// The buckets of every key seen.
pub struct Quotas {
    options: QuotaOptions,
    keys: Mutex<HashMap<String, Vec<Bucket>>>,
}

impl Quotas {
    pub fn new(options: QuotaOptions) -> Option<Quotas> {
        options.is_set().then(|| Quotas {
            options,
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// Counts the request against `key`'s quota, or refuses it. Either way
    /// the windows' headers as they stand after it, in `api`'s spelling.
    pub fn admit(&self, key: &str, api: Api, cost: Cost) -> Result<ReplyHeaders, Exceeded> {
        let now = Instant::now();
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let buckets = keys.entry(key.to_string()).or_insert_with(|| {
            self.options
                .limits()
                .map(|(kind, limit)| Bucket {
                    kind,
                    limit: limit as f64,
                    level: limit as f64,
                    updated: now,
                })
                .collect()
        });
        let applies = |kind: WindowKind| {
            api == Api::Anthropic
                || !matches!(kind, WindowKind::InputTokens | WindowKind::OutputTokens)
        };
        let mut refused: Option<(&Bucket, f64)> = None;
        for bucket in buckets.iter_mut() {
            bucket.refill(now);
        }
        for bucket in buckets.iter().filter(|bucket| applies(bucket.kind)) {
            let amount = cost.in_window(bucket.kind);
            if bucket.level < amount
                && refused
                    .is_none_or(|(worst, need)| worst.wait_for(need) < bucket.wait_for(amount))
            {
                refused = Some((bucket, amount));
            }
        }
        if let Some((bucket, amount)) = refused {
            // More than the whole limit never fits: no wait helps.
            let wait = (amount <= bucket.limit).then(|| bucket.wait_for(amount));
            return Err(Exceeded {
                wait,
                message: message(api, bucket, amount),
                headers: headers(buckets, applies),
            });
        }
        for bucket in buckets.iter_mut().filter(|bucket| applies(bucket.kind)) {
            bucket.level -= cost.in_window(bucket.kind);
        }
        Ok(headers(buckets, applies))
    }
}

fn headers(buckets: &[Bucket], applies: impl Fn(WindowKind) -> bool) -> ReplyHeaders {
    ReplyHeaders {
        raw: Vec::new(),
        rate_limits: buckets
            .iter()
            .filter(|bucket| applies(bucket.kind))
            .map(Bucket::window)
            .collect(),
    }
}

/// The error message each provider sends, with this server's numbers.
fn message(api: Api, bucket: &Bucket, amount: f64) -> String {
    let limit = bucket.limit as u64;
    match api {
        Api::Chat | Api::Responses => {
            let (what, short) = match bucket.kind {
                WindowKind::Requests => ("requests per min", "RPM"),
                _ => ("tokens per min", "TPM"),
            };
            let used = (bucket.limit - bucket.level).max(0.0).ceil() as u64;
            let wait = bucket.wait_for(amount).as_secs_f64();
            format!(
                "Rate limit reached for lllm-mock on {what} ({short}): Limit {limit}, Used {used}, Requested {}. Please try again in {wait:.3}s.",
                amount as u64
            )
        }
        Api::Anthropic => {
            let what = match bucket.kind {
                WindowKind::Requests => "requests",
                WindowKind::Tokens => "tokens",
                WindowKind::InputTokens => "input tokens",
                WindowKind::OutputTokens => "output tokens",
            };
            format!(
                "This request would exceed the rate limit for your organization of {limit} {what} per minute. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(options: QuotaOptions) -> Quotas {
        Quotas::new(options).unwrap()
    }

    fn remaining(headers: &ReplyHeaders, kind: WindowKind) -> u64 {
        headers
            .rate_limits
            .iter()
            .find(|window| window.kind == kind)
            .map(|window| window.remaining)
            .unwrap()
    }

    const SMALL: Cost = Cost {
        input: 10,
        output: 90,
    };

    #[tokio::test(start_paused = true)]
    async fn each_key_has_its_bucket_that_refills_continuously() {
        let quotas = quotas(QuotaOptions {
            rpm: Some(60),
            tpm: Some(1000),
            ..Default::default()
        });
        for left in (0..10).rev() {
            let headers = quotas.admit("a", Api::Chat, SMALL).ok().unwrap();
            assert_eq!(remaining(&headers, WindowKind::Tokens), left * 100);
            assert_eq!(remaining(&headers, WindowKind::Requests), 50 + left);
        }
        let refused = quotas.admit("a", Api::Chat, SMALL).err().unwrap();
        // 100 tokens at 1000 a minute: six seconds.
        assert_eq!(refused.wait, Some(Duration::from_secs(6)));
        assert!(
            refused
                .message
                .contains("tokens per min (TPM): Limit 1000, Used 1000, Requested 100")
        );
        assert!(quotas.admit("b", Api::Chat, SMALL).is_ok(), "another key");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(quotas.admit("a", Api::Chat, SMALL).is_ok(), "refilled");
        assert!(quotas.admit("a", Api::Chat, SMALL).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn input_and_output_windows_count_on_the_anthropic_wire_only() {
        let quotas = quotas(QuotaOptions {
            output_tpm: Some(100),
            ..Default::default()
        });
        assert!(quotas.admit("a", Api::Anthropic, SMALL).is_ok());
        let refused = quotas.admit("a", Api::Anthropic, SMALL).err().unwrap();
        assert!(refused.message.contains("100 output tokens per minute"));
        let openai = quotas.admit("a", Api::Chat, SMALL).ok().unwrap();
        assert!(openai.rate_limits.is_empty(), "no such window on OpenAI");
        let too_large = Cost {
            input: 0,
            output: 101,
        };
        let refused = quotas.admit("b", Api::Anthropic, too_large).err().unwrap();
        assert_eq!(refused.wait, None, "more than the limit never fits");
    }

    #[test]
    fn zero_limits_are_refused() {
        let options = QuotaOptions {
            tpm: Some(0),
            ..Default::default()
        };
        assert!(matches!(options.check(), Err(ServerError::Quota("--tpm"))));
        assert!(Quotas::new(QuotaOptions::default()).is_none());
    }
}
