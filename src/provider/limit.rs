//! Per-provider limits shared by every agent and task of a run: a concurrency
//! cap that halves when 429s arrive and recovers gradually, and the
//! provider's quota kept as the provider keeps it: token buckets for
//! requests, tokens, input and output tokens that hold a minute's limit and
//! refill continuously (OpenAI's and Anthropic's documented model). A bucket
//! comes from the configuration (`rpm`, `tpm`) or is learned from the
//! rate-limit headers of the replies (`x-ratelimit-*`,
//! `anthropic-ratelimit-*`, read by `rate_headers`): its limit, and a level
//! never above what the server says remains, so requests slow down before
//! they reach the wall rather than after. A 429's `Retry-After` pauses
//! everyone while its request is retried. No pause is longer than
//! `Limits::max_pause` (the provider's retry cap), whatever a server asks:
//! neither a `Retry-After` nor the wait for a window learned from the
//! headers (a request waits for those windows at most `max_pause` in all,
//! then goes, and a 429 says the rest). The configured windows are the
//! user's own pace and are kept in full. No reply's usage, however large,
//! puts a bucket more than one window's worth in debt, so none adds more
//! than about a minute of waiting.
//! Providers take a `Permit` before each HTTP attempt and report how it went.
//!
//! The concurrency cap is `max_concurrency` when the user sets it (the user
//! wins). Otherwise a local server is asked once, before the first request,
//! how many requests it serves at once (`capacity`: llama.cpp's `/props`),
//! and that is the cap; a local server that does not say gets the adaptive
//! limit (`adaptive`), which stops adding requests where they would only
//! wait in the server's queue (`cap` decides which). Either way a 429 or a
//! 503 halves the current limit, which then recovers.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::capacity::Probe;
use super::rate_headers::{self, Family};
use adaptive::{Adaptive, Sample};
pub use cap::{Bound, Limit};

mod adaptive;
mod cap;

/// No cap: more requests than any run sends.
const UNBOUNDED: usize = usize::MAX / 2;

/// Limits as configured (`providers: {name: {max_concurrency, rpm, tpm,
/// retry_cap_ms}}`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_concurrency: Option<usize>,
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    /// The longest pause a server can impose on everyone (a 429's
    /// `Retry-After`, a window's reset): the provider's retry cap.
    pub max_pause: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_concurrency: None,
            rpm: None,
            tpm: None,
            max_pause: super::retry::RetryPolicy::default().cap,
        }
    }
}

/// What a request will cost in tokens, counted as the providers count it at
/// admission: its prompt (estimated) and the reply budget it asks for
/// (`max_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    pub input: u64,
    pub output: u64,
}

impl Estimate {
    /// Prompt and reply budget together.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// What it takes of a window counting `family`.
    fn of(&self, family: Family) -> f64 {
        match family {
            Family::Requests => 1.0,
            Family::Tokens => self.total() as f64,
            Family::InputTokens => self.input as f64,
            Family::OutputTokens => self.output as f64,
        }
    }
}

impl From<u64> for Estimate {
    /// `tokens` of prompt, no reply budget.
    fn from(tokens: u64) -> Estimate {
        Estimate {
            input: tokens,
            output: 0,
        }
    }
}

/// A prompt's tokens as the providers estimate them for their quotas before
/// the model reads it: four bytes of its messages' text a token (bytes, so
/// never fewer than a server counting characters), at least one.
pub fn prompt_tokens(messages: &[std::sync::Arc<crate::dialog::Message>]) -> u64 {
    let text: usize = messages.iter().map(|message| message.content.len()).sum();
    text.div_ceil(4).max(1) as u64
}

/// The longest a bucket makes a request wait, whatever it holds (a bucket
/// refilling at a sane configured rate never needs this long).
const LONGEST_BUCKET_WAIT: Duration = Duration::from_secs(3600);

/// A refilling budget holding at most `capacity` (a minute's limit), as the
/// providers' own buckets do, and owing at most as much: its level stays
/// within `-capacity ..= capacity`.
#[derive(Debug)]
struct Bucket {
    family: Family,
    /// Learned from the headers (the server's window, whose waits are capped
    /// at `max_pause`) rather than configured (`rpm`, `tpm`: the user's pace).
    learned: bool,
    per_second: f64,
    capacity: f64,
    level: f64,
    updated: Instant,
    /// A configured bucket refills only from the end of the first request:
    /// the server's starts at its arrival, which a client cannot see, and
    /// a bucket of ours refilling earlier than the server's would send what
    /// the server refuses.
    refilling: bool,
}

impl Bucket {
    fn per_minute(family: Family, per_minute: f64, now: Instant) -> Bucket {
        // The config allows no rate under 1 per minute; a library caller's 0
        // must not divide by zero below.
        let capacity = per_minute.max(1.0);
        Bucket {
            family,
            learned: false,
            per_second: capacity / 60.0,
            capacity,
            level: capacity,
            updated: now,
            refilling: false,
        }
    }

    fn refill(&mut self, now: Instant) {
        if !self.refilling {
            self.updated = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
    }

    /// Takes `amount` out: a reply that used far more than the window holds
    /// (an inflated `usage`) leaves it one window in debt, not more, so the
    /// next request waits about one refill period at most, never for good.
    fn charge(&mut self, amount: f64) {
        self.level = (self.level - amount).max(-self.capacity);
    }

    /// Time until `amount` is available (zero if it is).
    fn wait_for(&mut self, amount: f64, now: Instant) -> Duration {
        self.refill(now);
        let amount = amount.min(self.capacity);
        if self.level >= amount {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64((amount - self.level) / self.per_second)
                .map_or(LONGEST_BUCKET_WAIT, |wait| wait.min(LONGEST_BUCKET_WAIT))
        }
    }

    /// What a reply's headers say of this window, `latency` after the
    /// request was sent. The level never rises above what the server says
    /// remains, allowing for what refilled since the server counted and for
    /// its rounding down; a smaller limit replaces ours.
    fn observe(&mut self, window: &rate_headers::Window, latency: Duration, now: Instant) {
        self.refill(now);
        if window.limit < self.capacity {
            self.capacity = window.limit;
            self.per_second = window.per_second;
        }
        let ceiling = window.remaining + 1.0 + self.per_second * latency.as_secs_f64();
        // A smaller capacity also bounds the debt.
        self.level = self
            .level
            .min(ceiling)
            .min(self.capacity)
            .max(-self.capacity);
    }
}

/// What a request waits for in the quota: the window that holds it longest.
#[derive(Debug, Clone, Copy)]
struct QuotaWait {
    /// How long it waits now.
    wait: Duration,
    family: Family,
    learned: bool,
    /// What the window alone would ask (longer than `wait` when the
    /// server's window asks more than the request may still wait for it).
    asked: Duration,
}

/// Why a request may not go yet, and for how long at most (`wait: None`:
/// until a slot frees).
#[derive(Debug, Clone, Copy)]
struct Blocked {
    why: Waiting,
    wait: Option<Duration>,
    quota: Option<QuotaWait>,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// What the requests in flight were estimated to cost.
    in_flight_cost: Estimate,
    /// The current concurrency: halves on a 429 or a 503, grows back by one
    /// per `allowed` successes up to `ceiling` (or as `adaptive` decides).
    allowed: f64,
    /// The most requests at once: `max_concurrency`, else the server's
    /// slots, else none.
    ceiling: usize,
    /// What `ceiling` is.
    bound: Bound,
    /// A local server that does not say its capacity: the limit follows
    /// its latencies.
    adaptive: Option<Adaptive>,
    /// The quota's windows, configured or learned from the headers.
    buckets: Vec<Bucket>,
    /// Everyone waits until then, and why (`BackOff` or `RateLimit`).
    paused_until: Option<(Instant, Waiting)>,
    /// Requests sleeping in the retry loop before their next attempt.
    retrying: usize,
}

#[derive(Debug)]
pub struct Limiter {
    max_concurrency: usize,
    /// `max_concurrency` was configured: it wins over what a server says.
    configured: bool,
    max_pause: Duration,
    state: Mutex<State>,
    freed: Notify,
    /// How to ask a local server its capacity (set by the registry).
    probe: OnceLock<Probe>,
    /// Asked, once per limiter (one per provider and run).
    probed: tokio::sync::OnceCell<()>,
}

/// A held slot; dropping it frees the slot.
pub struct Permit<'a> {
    limiter: &'a Limiter,
    estimate: Estimate,
    sent: Instant,
    /// Requests in flight when it was granted, itself included.
    in_flight: usize,
    /// The adaptive limit's generation then (`adaptive`).
    generation: u64,
}

impl Permit<'_> {
    /// The server answered (any status): learn its rate-limit windows.
    pub fn observe(&self, headers: &HeaderMap) {
        self.limiter.observe(headers, self.estimate, self.sent);
    }

    /// The request succeeded with `reply`: grow back towards the cap (or
    /// tell the adaptive limit how long it took), and charge the quota what
    /// the reply used beyond the estimate.
    pub fn succeeded(&self, reply: &crate::dialog::Message) {
        let output_tokens = reply.usage.get("completion_tokens").map_or(0, |value| {
            crate::dialog::token_count("completion_tokens", value)
        });
        self.limiter.sampled(Sample {
            latency: self.sent.elapsed(),
            output_tokens,
            in_flight: self.in_flight,
            generation: self.generation,
        });
        self.limiter.on_success(reply.total_tokens(), self.estimate);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        {
            let mut state = self.limiter.lock();
            state.in_flight -= 1;
            let now = Instant::now();
            for bucket in state.buckets.iter_mut().filter(|bucket| !bucket.refilling) {
                bucket.updated = now;
                bucket.refilling = true;
            }
            let cost = &mut state.in_flight_cost;
            cost.input = cost.input.saturating_sub(self.estimate.input);
            cost.output = cost.output.saturating_sub(self.estimate.output);
        }
        self.limiter.freed.notify_waiters();
    }
}

/// A request waiting out its back-off before a retry; dropping it ends the wait.
pub struct Retrying<'a> {
    limiter: &'a Limiter,
}

impl Drop for Retrying<'_> {
    fn drop(&mut self) {
        self.limiter.lock().retrying -= 1;
    }
}

/// Told how long a request of the run waited for a permit and why, when
/// it had to wait: the agent loop makes events of it (`crate::event`).
pub(crate) type WaitObserver = std::sync::Arc<dyn Fn(Waiting, Duration) + Send + Sync>;

tokio::task_local! {
    static WAITS: WaitObserver;
}

/// Runs `future` (a model call) with `observer` told of each wait of its
/// requests for the provider's limits.
// Not an `async fn`, which would hold `future` twice (`watch::scope`).
pub(crate) fn observing_waits<F: std::future::Future>(
    observer: WaitObserver,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    WAITS.scope(observer, future)
}

fn observe_wait(why: Waiting, waited: Duration) {
    let _ = WAITS.try_with(|observer| observer(why, waited));
}

/// Why a request is waiting (for progress displays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    Concurrency,
    /// The quota: configured (`rpm`, `tpm`) or learned from the headers.
    RateLimit,
    /// Everyone paused while a 429's request waits out its `Retry-After`.
    BackOff,
    /// Most requests are sleeping out their back-off before a retry (5xx,
    /// timeouts, 429s): at least as many as are in flight.
    Retry,
}

impl Waiting {
    /// `concurrency`, `rate_limit`, `back_off` or `retry`, as events name it.
    pub fn name(self) -> &'static str {
        match self {
            Waiting::Concurrency => "concurrency",
            Waiting::RateLimit => "rate_limit",
            Waiting::BackOff => "back_off",
            Waiting::Retry => "retry",
        }
    }
}

impl Limiter {
    pub fn new(limits: Limits) -> Limiter {
        let now = Instant::now();
        let max_concurrency = limits.max_concurrency.unwrap_or(UNBOUNDED).max(1);
        let requests = limits
            .rpm
            .map(|rpm| Bucket::per_minute(Family::Requests, rpm as f64, now));
        let tokens = limits
            .tpm
            .map(|tpm| Bucket::per_minute(Family::Tokens, tpm as f64, now));
        Limiter {
            max_concurrency,
            configured: limits.max_concurrency.is_some(),
            max_pause: limits.max_pause,
            state: Mutex::new(State {
                in_flight: 0,
                in_flight_cost: Estimate::default(),
                retrying: 0,
                allowed: max_concurrency as f64,
                ceiling: max_concurrency,
                bound: Bound::Configured,
                adaptive: None,
                buckets: requests.into_iter().chain(tokens).collect(),
                paused_until: None,
            }),
            freed: Notify::new(),
            probe: OnceLock::new(),
            probed: tokio::sync::OnceCell::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until a request estimated at `estimate` may be sent. The
    /// windows learned from the headers hold it `max_pause` at most in all
    /// (the server's 429 and its `Retry-After` say the rest); the configured
    /// windows and the concurrency cap as long as they need.
    pub async fn acquire(&self, estimate: impl Into<Estimate>) -> Permit<'_> {
        self.learn().await;
        let estimate = estimate.into();
        // How long this request has waited for the server's windows.
        let mut waited_for_server = Duration::ZERO;
        let mut traced = false;
        // Why it first had to wait, and since when (`observing_waits`).
        let mut held: Option<(Waiting, Instant)> = None;
        loop {
            let freed = self.freed.notified();
            let blocked = {
                let mut state = self.lock();
                let now = Instant::now();
                let allowance = self.max_pause.saturating_sub(waited_for_server);
                match self.blocked(&mut state, estimate, now, allowance) {
                    None => {
                        state.in_flight += 1;
                        state.in_flight_cost.input =
                            state.in_flight_cost.input.saturating_add(estimate.input);
                        state.in_flight_cost.output =
                            state.in_flight_cost.output.saturating_add(estimate.output);
                        for bucket in &mut state.buckets {
                            bucket.charge(estimate.of(bucket.family).min(bucket.capacity));
                        }
                        if let Some((why, since)) = held {
                            observe_wait(why, now - since);
                        }
                        return Permit {
                            limiter: self,
                            estimate,
                            sent: now,
                            in_flight: state.in_flight,
                            generation: state.adaptive.as_ref().map_or(0, Adaptive::generation),
                        };
                    }
                    Some(blocked) => blocked,
                }
            };
            held.get_or_insert((blocked.why, Instant::now()));
            if let Some(quota) = blocked.quota
                && !traced
            {
                traced = true;
                trace_quota_wait(&quota, self.max_pause);
            }
            let slept = Instant::now();
            match blocked.wait {
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = freed => {}
                    }
                }
                None => freed.await,
            }
            if blocked.quota.is_some_and(|quota| quota.learned) {
                waited_for_server += slept.elapsed();
            }
        }
    }

    /// `None` when a request may go now; else why not. The server's windows
    /// may hold it `allowance` longer at most.
    fn blocked(
        &self,
        state: &mut State,
        estimate: Estimate,
        now: Instant,
        allowance: Duration,
    ) -> Option<Blocked> {
        if let Some((until, why)) = state.paused_until {
            if until > now {
                return Some(Blocked {
                    why,
                    wait: Some(until - now),
                    quota: None,
                });
            }
            state.paused_until = None;
        }
        if state.in_flight as f64 >= state.allowed.floor().max(1.0) {
            return Some(Blocked {
                why: Waiting::Concurrency,
                wait: None,
                quota: None,
            });
        }
        let quota = state
            .buckets
            .iter_mut()
            .map(|bucket| {
                let asked = bucket.wait_for(estimate.of(bucket.family), now);
                QuotaWait {
                    wait: if bucket.learned {
                        asked.min(allowance)
                    } else {
                        asked
                    },
                    family: bucket.family,
                    learned: bucket.learned,
                    asked,
                }
            })
            .max_by_key(|quota| quota.wait)
            .filter(|quota| !quota.wait.is_zero())?;
        Some(Blocked {
            why: Waiting::RateLimit,
            wait: Some(quota.wait),
            quota: Some(quota),
        })
    }

    /// Why the next request would wait right now, if it would.
    pub fn waiting(&self) -> Option<Waiting> {
        let mut state = self.lock();
        let retrying = state.retrying > 0 && state.retrying >= state.in_flight;
        self.blocked(
            &mut state,
            Estimate::default(),
            Instant::now(),
            self.max_pause,
        )
        .map(|blocked| blocked.why)
        .or(retrying.then_some(Waiting::Retry))
    }

    /// Marks a request as sleeping before its retry until the guard is dropped.
    pub fn retrying(&self) -> Retrying<'_> {
        self.lock().retrying += 1;
        Retrying { limiter: self }
    }

    /// A 429 arrived, or a 503 (a server whose queue is full): halve the
    /// concurrency. Whether everyone also pauses is the retry loop's call
    /// (`pause`): only while the request is retried.
    pub fn on_rate_limited(&self) {
        let mut state = self.lock();
        state.allowed = (state
            .allowed
            .min(state.ceiling as f64)
            .min(state.in_flight.max(1) as f64)
            / 2.0)
            .max(1.0);
        let allowed = state.allowed as usize;
        if let Some(adaptive) = state.adaptive.as_mut() {
            adaptive.set_limit(allowed);
        }
    }

    /// Everyone waits `wait` (at most `max_pause`) before their next request:
    /// a 429's request is retried after its `Retry-After`.
    pub fn pause(&self, wait: Duration) {
        self.pause_for(wait, Waiting::BackOff);
    }

    fn pause_for(&self, wait: Duration, why: Waiting) {
        let wait = wait.min(self.max_pause);
        if wait.is_zero() {
            return;
        }
        let until = Instant::now() + wait;
        let mut state = self.lock();
        if state
            .paused_until
            .is_none_or(|(current, _)| current < until)
        {
            state.paused_until = Some((until, why));
        }
    }

    /// A reply's rate-limit windows, for a request estimated at `estimate`
    /// and sent at `sent`. A window seen for the first time becomes a
    /// bucket holding what the server says remains, less what is in flight
    /// besides this request (the server may not have counted it yet).
    fn observe(&self, headers: &HeaderMap, estimate: Estimate, sent: Instant) {
        let windows = rate_headers::windows(headers);
        if windows.is_empty() {
            return;
        }
        let now = Instant::now();
        let latency = now.saturating_duration_since(sent);
        let mut state = self.lock();
        let others = Estimate {
            input: state.in_flight_cost.input.saturating_sub(estimate.input),
            output: state.in_flight_cost.output.saturating_sub(estimate.output),
        };
        let other_requests = state.in_flight.saturating_sub(1) as f64;
        for window in &windows {
            // The configured windows stay the user's pace: the server's
            // are kept apart, so that only their waits are capped.
            match state
                .buckets
                .iter_mut()
                .find(|bucket| bucket.learned && bucket.family == window.family)
            {
                Some(bucket) => bucket.observe(window, latency, now),
                None => {
                    let in_flight = match window.family {
                        Family::Requests => other_requests,
                        family => others.of(family),
                    };
                    state.buckets.push(Bucket {
                        family: window.family,
                        learned: true,
                        per_second: window.per_second,
                        capacity: window.limit,
                        level: (window.remaining - in_flight).max(-window.limit),
                        updated: now,
                        refilling: true,
                    });
                }
            }
        }
    }

    /// A request succeeded: grow back towards the cap (the adaptive limit
    /// grows by itself), and charge the token windows what the reply used
    /// beyond the estimate (never refunding less: the providers count the
    /// estimate at admission), one window's worth at most whatever the reply
    /// claims.
    pub fn on_success(&self, used_tokens: u64, estimate: Estimate) {
        let mut state = self.lock();
        let ceiling = state.ceiling as f64;
        if state.adaptive.is_none() && state.allowed < ceiling {
            state.allowed = (state.allowed + 1.0 / state.allowed).min(ceiling);
        }
        let beyond = used_tokens.saturating_sub(estimate.total()) as f64;
        for bucket in &mut state.buckets {
            if bucket.family == Family::Tokens {
                bucket.charge(beyond);
            }
        }
    }

    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// The current adaptive concurrency.
    pub fn allowed(&self) -> usize {
        self.lock().allowed.floor() as usize
    }
}

/// One `info` line (`-v`, as the retry loop's line for a retry's wait) when
/// a request starts waiting for the quota: how long, for which window, and
/// what the server's window asked when `max_pause` cut it.
fn trace_quota_wait(quota: &QuotaWait, max_pause: Duration) {
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let window = match quota.family {
        Family::Requests => "requests",
        Family::Tokens => "tokens",
        Family::InputTokens => "input tokens",
        Family::OutputTokens => "output tokens",
    };
    let wait = quota.wait.as_secs_f64();
    if !quota.learned {
        let key = match quota.family {
            Family::Requests => "rpm",
            _ => "tpm",
        };
        tracing::info!(
            "rate limit: waiting {wait:.1} s for the configured `{key}` ({window} per minute)"
        );
    } else if quota.asked > quota.wait {
        tracing::info!(
            "rate limit: waiting {wait:.1} s for the server's {window} window (it asks {:.1} s; \
             `retry_cap_ms` caps a request's wait for it at {:.1} s, then it goes)",
            quota.asked.as_secs_f64(),
            max_pause.as_secs_f64()
        );
    } else {
        tracing::info!(
            "rate limit: waiting {wait:.1} s for the server's {window} window (its rate-limit headers)"
        );
    }
}

#[cfg(test)]
mod tests;
