//! The one retry loop (docs/formats.md §6, D6): transient and rate-limit errors are
//! retried with exponential backoff and jitter, honouring what the server asks
//! (`retry-after-ms` / `Retry-After`) up to the policy's cap; permanent errors
//! return at once. Every failed attempt is reported so the session records it.
//!
//! A 429 pauses the whole provider only while its request is retried: with
//! no retry left (`max_llm_recall: 0`) the request fails and nobody waits.
//!
//! What the loop waits on is told to the run's `watch::Watch` (`lllm run`
//! prints it; issue 27: 7.9 s of retries, or a hung server for up to the
//! 600 s timeout, printed nothing without `-v`), and in a batch each
//! attempt passes the provider's circuit breaker (`breaker`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::watch::{self, Notice, Target, Watch};
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
    /// Whether another attempt follows.
    pub retried: bool,
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
///
/// The run's [`Watch`](super::watch::Watch), if it has one, is told what the
/// loop waits on (a retry's back-off, a reply slow to come: `target` names
/// the call) and, in a batch, asked before each attempt: while the
/// provider's circuit breaker is open the attempt waits, and a failed probe
/// (`provider::breaker`) is not counted against `max_recall`, so an outage
/// the batch waits out fails no call. A batch that gives up on the provider
/// fails the call with its reason.
pub async fn invoke_with_retry<F>(
    provider: &dyn Provider,
    target: Target<'_>,
    request: ChatRequest<'_>,
    policy: &RetryPolicy,
    max_recall: u32,
    mut on_failed_attempt: F,
) -> Result<Attempted, Failed>
where
    F: FnMut(&FailedAttempt),
{
    let watch = watch::current();
    let breaker = watch
        .as_ref()
        .and_then(|watch| watch.breaker(target.provider));
    let mut attempt = 1;
    // Failed probes of a provider that is down: not counted as retries.
    let mut forgiven = 0;
    loop {
        let probe = match &breaker {
            None => None,
            Some(breaker) => {
                let held = watch
                    .as_ref()
                    .and_then(|watch| watch.take_claim(target.provider));
                match breaker.admit(held).await {
                    Ok(probe) => probe,
                    Err(error) => {
                        return Err(Failed {
                            error,
                            attempts: attempt - 1,
                        });
                    }
                }
            }
        };
        let probing = probe.is_some();
        let started = Instant::now();
        // Every event of this attempt (the request, the reply) names it.
        let span = tracing::info_span!("attempt", number = attempt);
        let sent = invoke_watched(provider, request, &target, watch.as_deref());
        let invoked = tracing::Instrument::instrument(sent, span).await;
        if let Some(breaker) = &breaker {
            // A call the budget refused was never sent: it says nothing of
            // the server (the probe it held is given back).
            let refused = invoked
                .as_ref()
                .is_err_and(|error| error.code.as_deref() == Some(super::budget::REFUSED_CODE));
            if !refused {
                let network = invoked.as_ref().is_err_and(|error| error.network);
                breaker.record(probe, network);
            }
        }
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
        if probing && error.network {
            // The provider is still down: the breaker says when the next
            // probe goes, and this call waits for it like every other.
            forgiven += 1;
            trace_probe_failed(&error);
            on_failed_attempt(&FailedAttempt {
                attempt,
                error,
                latency,
                waited: Duration::ZERO,
                retried: true,
            });
            attempt += 1;
            continue;
        }
        let retry = error.kind != ErrorKind::Permanent && attempt - forgiven <= max_recall;
        let waited = if retry {
            policy.delay(attempt - forgiven, &error)
        } else {
            Duration::ZERO
        };
        let traced = trace_failure(
            &error,
            attempt - forgiven,
            max_recall,
            retry.then_some(waited),
        );
        if retry && let Some(watch) = &watch {
            watch.notice(&Notice::Retry {
                target,
                error: &error,
                next_attempt: attempt - forgiven + 1,
                attempts: max_recall.saturating_add(1),
                wait: waited,
                traced,
            });
        }
        on_failed_attempt(&FailedAttempt {
            attempt,
            error: error.clone(),
            latency,
            waited,
            retried: retry,
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

/// One attempt. With a watch that wants slow replies noticed (`lllm run`'s),
/// a reply slow to come is mentioned after [`SLOW_FIRST`](watch::SLOW_FIRST), then every
/// [`SLOW_EVERY`](watch::SLOW_EVERY), until text of it streams in (a
/// streamed reply that is arriving is not waited on).
async fn invoke_watched(
    provider: &dyn Provider,
    request: ChatRequest<'_>,
    target: &Target<'_>,
    watch: Option<&Watch>,
) -> Result<Message, ProviderError> {
    let Some(watch) = watch.filter(|watch| watch.wants_slow_replies()) else {
        return provider.invoke(request).await;
    };
    let streaming = AtomicBool::new(false);
    let forward = request.stream.map(|sink| {
        let streaming = &streaming;
        move |text: &str| {
            if !text.is_empty() {
                streaming.store(true, Ordering::Relaxed);
            }
            sink(text);
        }
    });
    let mut request: ChatRequest<'_> = request;
    if let Some(forward) = &forward {
        request.stream = Some(forward);
    }
    let started = tokio::time::Instant::now();
    let mut invoked = std::pin::pin!(provider.invoke(request));
    let mut next = watch::SLOW_FIRST;
    loop {
        tokio::select! {
            result = &mut invoked => return result,
            _ = tokio::time::sleep_until(started + next) => {
                if !streaming.load(Ordering::Relaxed) {
                    watch.notice(&Notice::Slow { target: *target, elapsed: next });
                }
                next += watch::SLOW_EVERY;
            }
        }
    }
}

/// A failed probe, as one `info` event.
fn trace_probe_failed(error: &ProviderError) {
    tracing::info!("probe failed, the provider is still down: {error}");
}

/// What the retry loop does about a failed attempt, as one `info` event:
/// `HTTP 429, waiting 2.0 s (retry 1 of 3)`, or why it stops (the error
/// says what it was). Whether the event is shown (`-v`).
fn trace_failure(
    error: &ProviderError,
    attempt: u32,
    max_recall: u32,
    wait: Option<Duration>,
) -> bool {
    if !tracing::enabled!(tracing::Level::INFO) {
        return false;
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
    true
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

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

    const TARGET: Target<'static> = Target {
        provider: "local",
        model: "m",
        timeout: Some(Duration::from_secs(600)),
    };

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
        let result = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |attempt| {
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
        let failed = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |_| {})
            .await
            .err()
            .unwrap();
        assert_eq!(failed.attempts, 1);

        let provider = Sequence(Mutex::new(
            (0..5).map(|_| error(ErrorKind::Transient, None)).collect(),
        ));
        let started = tokio::time::Instant::now();
        let failed = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 2, |_| {})
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
        let failed = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 0, |_| {})
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
        let retried = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 1, |attempt| {
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

    /// Notices a watch is told, as text.
    fn noticing() -> (Arc<Watch>, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let watch = Watch::with_notices(Arc::new(move |notice: &Notice<'_>| {
            kept.lock().unwrap().push(notice.text());
        }));
        (Arc::new(watch), seen)
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_is_told_each_retry_with_its_reason_attempt_and_wait() {
        let provider = Sequence(Mutex::new(VecDeque::from([
            Err(ProviderError::transient(
                "cannot connect to `http://127.0.0.1:9/v1`",
            )),
            error(ErrorKind::RateLimit, Some(2)),
            Ok(Message::assistant("m", "ok")),
        ])));
        let args = Map::new();
        let (watch, seen) = noticing();
        let attempts = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |_| {});
        let result = watch::scope(watch, attempts).await;
        assert!(result.is_ok());
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            [
                "waiting 1.0 s to retry local/m: cannot connect to `http://127.0.0.1:9/v1` (attempt 2 of 4)",
                "waiting 2.0 s to retry local/m: x (attempt 3 of 4)",
            ]
        );
        // Without a watch, nobody is told (and nothing breaks).
        let provider = Sequence(Mutex::new(VecDeque::from([
            error(ErrorKind::Transient, None),
            Ok(Message::assistant("m", "ok")),
        ])));
        assert!(
            invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |_| {})
                .await
                .is_ok()
        );
    }

    /// Answers after `delay`, streaming a piece of text first when asked to.
    struct Slow {
        delay: Duration,
    }

    impl Provider for Slow {
        fn invoke<'a>(
            &'a self,
            request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            Box::pin(async move {
                if let Some(sink) = request.stream {
                    sink("");
                    sink("Once upon");
                }
                tokio::time::sleep(self.delay).await;
                Ok(Message::assistant("m", "ok"))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reply_is_mentioned_after_10_s_then_every_30_s_unless_it_streams() {
        let provider = Slow {
            delay: Duration::from_secs(75),
        };
        let args = Map::new();
        let (watch, seen) = noticing();
        let attempts = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |_| {});
        assert!(watch::scope(watch, attempts).await.is_ok());
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            [
                "still waiting for local/m after 10 s (timeout 600 s)",
                "still waiting for local/m after 40 s (timeout 600 s)",
                "still waiting for local/m after 70 s (timeout 600 s)",
            ]
        );
        // Text arriving: the server is answering, nothing to say.
        let (watch, seen) = noticing();
        let streamed = Mutex::new(String::new());
        let sink = |text: &str| streamed.lock().unwrap().push_str(text);
        let mut streaming = request(&args);
        streaming.stream = Some(&sink);
        let attempts = invoke_with_retry(&provider, TARGET, streaming, &POLICY, 3, |_| {});
        assert!(watch::scope(watch, attempts).await.is_ok());
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(
            *streamed.lock().unwrap(),
            "Once upon",
            "the text still goes through"
        );
    }

    fn unreachable() -> Result<Message, ProviderError> {
        Err(ProviderError {
            network: true,
            ..ProviderError::transient("cannot connect to `http://127.0.0.1:9/v1`")
        })
    }

    fn breaking(settings: crate::provider::breaker::Settings) -> Arc<Watch> {
        let breakers = crate::provider::breaker::Breakers::new(settings, Arc::new(|_: &_| {}));
        Arc::new(Watch::default().with_breakers(Arc::new(breakers), Vec::new()))
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probes_of_a_provider_that_is_down_spend_no_retry() {
        let settings = crate::provider::breaker::Settings {
            failures: 2,
            ..Default::default()
        };
        // Two failures open the breaker; the four probes after them fail
        // too, and the seventh attempt is answered: with 3 retries, a call
        // that waits the outage out.
        let provider = Sequence(Mutex::new(
            (0..6)
                .map(|_| unreachable())
                .chain([Ok(Message::assistant("m", "ok"))])
                .collect(),
        ));
        let args = Map::new();
        let mut failed = Vec::new();
        let attempts =
            invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |attempt| {
                failed.push(attempt.attempt)
            });
        let attempted = watch::scope(breaking(settings), attempts)
            .await
            .ok()
            .unwrap();
        assert_eq!(attempted.attempts, 7);
        assert_eq!(failed, [1, 2, 3, 4, 5, 6], "each recorded");
        // Given up on: the call fails with the breaker's reason.
        let settings = crate::provider::breaker::Settings {
            give_up_after: Duration::from_secs(20),
            ..settings
        };
        let provider = Sequence(Mutex::new((0..100).map(|_| unreachable()).collect()));
        let attempts = invoke_with_retry(&provider, TARGET, request(&args), &POLICY, 3, |_| {});
        let failed = watch::scope(breaking(settings), attempts)
            .await
            .err()
            .unwrap();
        assert!(
            failed
                .error
                .message
                .contains("the batch gave up on it (`--max-outage`)"),
            "{}",
            failed.error.message
        );
        assert_eq!(failed.error.kind, ErrorKind::Permanent);
    }
}
