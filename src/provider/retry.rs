//! The one retry loop (docs/formats.md §6, D6): transient and rate-limit errors are
//! retried with exponential backoff and jitter, honouring what the server asks
//! (`retry-after-ms` / `Retry-After`) up to the policy's cap; permanent errors
//! return at once. Every failed attempt is reported so the session records it.
//!
//! A 429 pauses the whole provider only while its request is retried: with
//! no retry left (`max_llm_recall: 0`) the request fails and nobody waits.

use std::time::{Duration, Instant};

use super::{ChatRequest, ErrorKind, Provider, ProviderError};
use crate::dialog::Message;

#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Backoff before the first retry; doubles each time.
    pub base: Duration,
    /// The longest wait before a retry, a server's `Retry-After` included (as
    /// Anthropic's and OpenAI's SDKs, which honour it up to 60 s).
    pub cap: Duration,
    /// ± fraction applied to each backoff.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// How long to wait after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32, error: &ProviderError) -> Duration {
        if let Some(asked) = error.retry_after {
            return asked.min(self.cap);
        }
        let exponent = attempt.saturating_sub(1).min(30);
        let backoff = self.base.saturating_mul(1u32 << exponent).min(self.cap);
        let spread = if self.jitter.is_finite() && self.jitter > 0.0 {
            (fastrand::f64() * 2.0 - 1.0) * self.jitter.min(1.0)
        } else {
            0.0
        };
        // Never a panic, whatever a library caller puts in the policy.
        Duration::try_from_secs_f64(backoff.as_secs_f64() * (1.0 + spread)).unwrap_or(backoff)
    }
}

#[derive(Debug, Clone)]
pub struct FailedAttempt {
    /// 1-based.
    pub attempt: u32,
    pub error: ProviderError,
    pub latency: Duration,
    /// Time waited before the next attempt (zero when there is none).
    pub waited: Duration,
}

pub struct Attempted {
    pub message: Message,
    /// The number of the attempt that succeeded (1-based).
    pub attempts: u32,
    pub latency: Duration,
}

pub struct Failed {
    pub error: ProviderError,
    pub attempts: u32,
}

/// Calls `provider` until it answers, a permanent error comes, or `max_recall`
/// retries are spent (so at most `max_recall + 1` attempts).
pub async fn invoke_with_retry<F>(
    provider: &dyn Provider,
    request: ChatRequest<'_>,
    policy: &RetryPolicy,
    max_recall: u32,
    mut on_failed_attempt: F,
) -> Result<Attempted, Failed>
where
    F: FnMut(&FailedAttempt),
{
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        // Every event of this attempt (the request, the reply) names it.
        let span = tracing::info_span!("attempt", number = attempt);
        let invoked = tracing::Instrument::instrument(provider.invoke(request), span).await;
        let error = match invoked {
            Ok(message) => {
                return Ok(Attempted {
                    message,
                    attempts: attempt,
                    latency: started.elapsed(),
                });
            }
            Err(error) => error,
        };
        let latency = started.elapsed();
        let retry = error.kind != ErrorKind::Permanent && attempt <= max_recall;
        let waited = if retry {
            policy.delay(attempt, &error)
        } else {
            Duration::ZERO
        };
        trace_failure(&error, attempt, max_recall, retry.then_some(waited));
        on_failed_attempt(&FailedAttempt {
            attempt,
            error: error.clone(),
            latency,
            waited,
        });
        if !retry {
            return Err(Failed {
                error,
                attempts: attempt,
            });
        }
        let limiter = provider.limiter();
        if let Some(limiter) =
            limiter.filter(|_| error.kind == ErrorKind::RateLimit && error.retry_after.is_some())
        {
            // Everyone waits with this request, so that the others do not
            // run into the same 429 meanwhile.
            limiter.pause(waited);
        }
        let _retrying = limiter.map(|limiter| limiter.retrying());
        tokio::time::sleep(waited).await;
        attempt += 1;
    }
}

/// What the retry loop does about a failed attempt, as one `info` event:
/// `HTTP 429, waiting 2.0 s (retry 1 of 3)`, or why it stops (the error
/// says what it was).
fn trace_failure(error: &ProviderError, attempt: u32, max_recall: u32, wait: Option<Duration>) {
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let what = match error.status {
        Some(status) => format!("HTTP {status}"),
        None => match error.kind {
            ErrorKind::RateLimit => "rate limited".to_string(),
            ErrorKind::Transient => "transient error".to_string(),
            ErrorKind::Permanent => "permanent error".to_string(),
        },
    };
    match wait {
        Some(wait) => tracing::info!(
            "{what}, waiting {:.1} s (retry {attempt} of {max_recall})",
            wait.as_secs_f64()
        ),
        None if error.kind == ErrorKind::Permanent => {
            tracing::info!("not retried (permanent): {error}")
        }
        None => tracing::info!(
            "not retried ({} spent): {error}",
            crate::words::count(max_recall, "retry", "retries")
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use futures_util::future::BoxFuture;
    use serde_json::Map;

    use super::*;

    struct Sequence(Mutex<VecDeque<Result<Message, ProviderError>>>);

    impl Provider for Sequence {
        fn invoke<'a>(
            &'a self,
            _request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            let next = self
                .0
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(ProviderError::permanent("empty")));
            Box::pin(async move { next })
        }
    }

    fn request<'a>(args: &'a Map<String, serde_json::Value>) -> ChatRequest<'a> {
        ChatRequest {
            model: "m",
            messages: &[],
            tools: &[],
            format: None,
            model_args: args,
            api_type: Default::default(),
            stream: None,
        }
    }

    fn error(kind: ErrorKind, retry_after: Option<u64>) -> Result<Message, ProviderError> {
        let mut error = ProviderError::new(kind, "x");
        error.retry_after = retry_after.map(Duration::from_secs);
        Err(error)
    }

    const POLICY: RetryPolicy = RetryPolicy {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(60),
        jitter: 0.0,
    };

    #[tokio::test(start_paused = true)]
    async fn retries_transient_then_rate_limited_then_succeeds() {
        let provider = Sequence(Mutex::new(VecDeque::from([
            error(ErrorKind::Transient, None),
            error(ErrorKind::RateLimit, Some(2)),
            Ok(Message::assistant("m", "ok")),
        ])));
        let args = Map::new();
        let started = tokio::time::Instant::now();
        let mut failed = Vec::new();
        let result = invoke_with_retry(&provider, request(&args), &POLICY, 3, |attempt| {
            failed.push(attempt.clone())
        })
        .await;
        let attempted = result.ok().unwrap();
        assert_eq!(attempted.attempts, 3);
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0].waited, Duration::from_secs(1), "base backoff");
        assert_eq!(
            failed[1].waited,
            Duration::from_secs(2),
            "Retry-After honoured"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_stop_and_the_budget_is_kept() {
        let provider = Sequence(Mutex::new(VecDeque::from([
            error(ErrorKind::Permanent, None),
            Ok(Message::user("x")),
        ])));
        let args = Map::new();
        let failed = invoke_with_retry(&provider, request(&args), &POLICY, 3, |_| {})
            .await
            .err()
            .unwrap();
        assert_eq!(failed.attempts, 1);

        let provider = Sequence(Mutex::new(
            (0..5).map(|_| error(ErrorKind::Transient, None)).collect(),
        ));
        let started = tokio::time::Instant::now();
        let failed = invoke_with_retry(&provider, request(&args), &POLICY, 2, |_| {})
            .await
            .err()
            .unwrap();
        assert_eq!(
            failed.attempts, 3,
            "max_recall retries after the first attempt"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1 + 2),
            "1 s then 2 s"
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_bounded_jitter() {
        let transient = ProviderError::transient("x");
        assert_eq!(POLICY.delay(1, &transient), Duration::from_secs(1));
        assert_eq!(POLICY.delay(4, &transient), Duration::from_secs(8));
        assert_eq!(POLICY.delay(20, &transient), Duration::from_secs(60));
        let jittered = RetryPolicy {
            jitter: 0.2,
            ..POLICY
        };
        for _ in 0..100 {
            let delay = jittered.delay(3, &transient).as_secs_f64();
            assert!((3.2..=4.8).contains(&delay), "{delay}");
        }
    }

    /// A sequence behind a limiter, as HTTP providers are.
    struct Limited {
        replies: Sequence,
        limiter: crate::provider::limit::Limiter,
    }

    impl Provider for Limited {
        fn invoke<'a>(
            &'a self,
            request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            self.replies.invoke(request)
        }

        fn limiter(&self) -> Option<&crate::provider::limit::Limiter> {
            Some(&self.limiter)
        }
    }

    fn limited(replies: Vec<Result<Message, ProviderError>>) -> Limited {
        Limited {
            replies: Sequence(Mutex::new(replies.into())),
            limiter: crate::provider::limit::Limiter::new(crate::provider::limit::Limits {
                max_pause: POLICY.cap,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_server_s_retry_after_is_honoured_up_to_the_cap() {
        let asking_days = ProviderError {
            retry_after: Some(Duration::from_secs(999_999)),
            ..ProviderError::new(ErrorKind::RateLimit, "x")
        };
        assert_eq!(POLICY.delay(1, &asking_days), POLICY.cap);
        let jittery = RetryPolicy {
            jitter: f64::INFINITY,
            cap: Duration::MAX,
            base: Duration::MAX,
        };
        // Nonsense from a library caller bends nothing into a panic.
        assert_eq!(
            jittery.delay(40, &ProviderError::transient("x")),
            Duration::MAX
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_pauses_the_provider_only_while_its_request_is_retried() {
        use crate::provider::limit::Waiting;
        let args = Map::new();
        let provider = limited(vec![error(ErrorKind::RateLimit, Some(999_999))]);
        let failed = invoke_with_retry(&provider, request(&args), &POLICY, 0, |_| {})
            .await
            .err()
            .unwrap();
        assert_eq!(failed.attempts, 1);
        assert_eq!(
            provider.limiter.waiting(),
            None,
            "no retry (max_llm_recall: 0): nobody waits"
        );

        let provider = limited(vec![
            error(ErrorKind::RateLimit, Some(999_999)),
            Ok(Message::assistant("m", "ok")),
        ]);
        let started = tokio::time::Instant::now();
        let retried = invoke_with_retry(&provider, request(&args), &POLICY, 1, |attempt| {
            assert_eq!(attempt.waited, POLICY.cap);
        });
        let (result, waiting) = tokio::join!(retried, async {
            tokio::task::yield_now().await;
            provider.limiter.waiting()
        });
        assert!(result.is_ok());
        assert_eq!(waiting, Some(Waiting::BackOff), "everyone waits with it");
        assert_eq!(started.elapsed(), POLICY.cap);
    }
}
