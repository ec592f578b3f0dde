//! Per-provider limits shared by every agent and task of a run: a concurrency
//! cap that halves when 429s arrive and recovers gradually, `rpm` / `tpm`
//! token buckets, and a pause when `x-ratelimit-remaining-*` headers run low.
//! Providers take a `Permit` before each HTTP attempt and report how it went.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Limits as configured (`providers: {name: {max_concurrency, rpm, tpm}}`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub max_concurrency: Option<usize>,
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
}

/// When the remaining requests or tokens fall under this share of the window,
/// wait for the window to reset instead of running into 429s.
const LOW_REMAINING: f64 = 0.05;

/// A refilling budget; holds at most one second's worth (so an `rpm` limit is
/// never exceeded by a burst).
#[derive(Debug)]
struct Bucket {
    per_second: f64,
    capacity: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    fn per_minute(per_minute: f64, now: Instant) -> Bucket {
        let per_second = per_minute / 60.0;
        let capacity = per_second.max(1.0);
        Bucket {
            per_second,
            capacity,
            level: capacity,
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
    }

    /// Time until `amount` is available (zero if it is).
    fn wait_for(&mut self, amount: f64, now: Instant) -> Duration {
        self.refill(now);
        let amount = amount.min(self.capacity);
        if self.level >= amount {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((amount - self.level) / self.per_second)
        }
    }
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// Adaptive concurrency: halves on a 429, grows by one per `allowed` successes.
    allowed: f64,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    paused_until: Option<Instant>,
    /// Requests sleeping in the retry loop before their next attempt.
    retrying: usize,
}

#[derive(Debug)]
pub struct Limiter {
    max_concurrency: usize,
    state: Mutex<State>,
    freed: Notify,
}

/// A held slot; dropping it frees the slot.
pub struct Permit<'a> {
    limiter: &'a Limiter,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limiter.lock().in_flight -= 1;
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

/// Why a request is waiting (for progress displays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    Concurrency,
    RateLimit,
    /// Everyone paused by a 429 (its `Retry-After`) or a nearly spent window.
    BackOff,
    /// Most requests are sleeping out their back-off before a retry (5xx,
    /// timeouts, 429s): at least as many as are in flight.
    Retry,
}

impl Limiter {
    pub fn new(limits: Limits) -> Limiter {
        let now = Instant::now();
        let max_concurrency = limits.max_concurrency.unwrap_or(usize::MAX / 2).max(1);
        Limiter {
            max_concurrency,
            state: Mutex::new(State {
                in_flight: 0,
                retrying: 0,
                allowed: max_concurrency as f64,
                requests: limits.rpm.map(|rpm| Bucket::per_minute(rpm as f64, now)),
                tokens: limits.tpm.map(|tpm| Bucket::per_minute(tpm as f64, now)),
                paused_until: None,
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until a request of about `tokens` tokens may be sent.
    pub async fn acquire(&self, tokens: u64) -> Permit<'_> {
        loop {
            let freed = self.freed.notified();
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                match self.blocked(&mut state, tokens, now) {
                    None => {
                        state.in_flight += 1;
                        if let Some(bucket) = &mut state.requests {
                            bucket.level -= 1.0;
                        }
                        if let Some(bucket) = &mut state.tokens {
                            bucket.level -= (tokens as f64).min(bucket.capacity);
                        }
                        return Permit { limiter: self };
                    }
                    Some((_, wait)) => wait,
                }
            };
            match wait {
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = freed => {}
                    }
                }
                None => freed.await,
            }
        }
    }

    /// `None` when a request may go now; else why not, and for how long at most
    /// (`None` duration: until a slot frees).
    fn blocked(
        &self,
        state: &mut State,
        tokens: u64,
        now: Instant,
    ) -> Option<(Waiting, Option<Duration>)> {
        if let Some(until) = state.paused_until {
            if until > now {
                return Some((Waiting::BackOff, Some(until - now)));
            }
            state.paused_until = None;
        }
        if state.in_flight as f64 >= state.allowed.floor().max(1.0) {
            return Some((Waiting::Concurrency, None));
        }
        let request_wait = state
            .requests
            .as_mut()
            .map_or(Duration::ZERO, |bucket| bucket.wait_for(1.0, now));
        let token_wait = state
            .tokens
            .as_mut()
            .map_or(Duration::ZERO, |bucket| bucket.wait_for(tokens as f64, now));
        let wait = request_wait.max(token_wait);
        (!wait.is_zero()).then_some((Waiting::RateLimit, Some(wait)))
    }

    /// Why the next request would wait right now, if it would.
    pub fn waiting(&self) -> Option<Waiting> {
        let mut state = self.lock();
        let retrying = state.retrying > 0 && state.retrying >= state.in_flight;
        self.blocked(&mut state, 0, Instant::now())
            .map(|(why, _)| why)
            .or(retrying.then_some(Waiting::Retry))
    }

    /// Marks a request as sleeping before its retry until the guard is dropped.
    pub fn retrying(&self) -> Retrying<'_> {
        self.lock().retrying += 1;
        Retrying { limiter: self }
    }

    /// A 429 arrived: halve the concurrency and pause everyone for `retry_after`.
    pub fn on_rate_limited(&self, retry_after: Option<Duration>) {
        let mut state = self.lock();
        state.allowed = (state
            .allowed
            .min(self.max_concurrency as f64)
            .min(state.in_flight.max(1) as f64)
            / 2.0)
            .max(1.0);
        if let Some(wait) = retry_after {
            let until = Instant::now() + wait;
            state.paused_until = Some(
                state
                    .paused_until
                    .map_or(until, |current| current.max(until)),
            );
        }
    }

    /// A request succeeded: grow back towards the configured concurrency, and
    /// pause if the server says its window is nearly spent.
    pub fn on_success(&self, headers: &HeaderMap, used_tokens: u64, estimated_tokens: u64) {
        let mut state = self.lock();
        if state.allowed < self.max_concurrency as f64 {
            state.allowed = (state.allowed + 1.0 / state.allowed).min(self.max_concurrency as f64);
        }
        if let Some(bucket) = &mut state.tokens {
            // Settle the estimate against what was really used.
            bucket.level -= used_tokens as f64 - (estimated_tokens as f64).min(bucket.capacity);
        }
        if let Some(wait) = nearly_spent(headers) {
            let until = Instant::now() + wait;
            state.paused_until = Some(
                state
                    .paused_until
                    .map_or(until, |current| current.max(until)),
            );
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

/// From OpenAI-style headers: the wait until reset when the remaining requests
/// or tokens are under `LOW_REMAINING` of the limit.
fn nearly_spent(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::to_string);
    let mut wait = None;
    for [limit, remaining, reset] in [
        [
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ],
        [
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
        ],
    ] {
        let (Some(limit), Some(remaining)) = (number(limit), number(remaining)) else {
            continue;
        };
        if limit > 0.0 && remaining / limit < LOW_REMAINING {
            let reset = text(reset).and_then(|reset| parse_reset(&reset));
            let reset = reset
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(60));
            wait = Some(wait.map_or(reset, |current: Duration| current.max(reset)));
        }
    }
    wait
}

/// `1s`, `6m0s`, `250ms`, `1.5s`, or plain seconds.
fn parse_reset(text: &str) -> Option<Duration> {
    // `try_from`: `inf` or `1e400` is no duration (it panicked).
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds.max(0.0)).ok();
    }
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let value: f64 = number.parse().ok()?;
        number.clear();
        total += match c {
            'h' => value * 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                value / 1000.0
            }
            'm' => value * 60.0,
            's' => value,
            _ => return None,
        };
    }
    if !number.is_empty() {
        return None;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        super::super::http::headers(pairs.iter().copied()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn rpm_is_never_exceeded() {
        let limiter = Limiter::new(Limits {
            rpm: Some(120),
            ..Limits::default()
        });
        let started = Instant::now();
        let mut times = Vec::new();
        for _ in 0..6 {
            let _permit = limiter.acquire(0).await;
            times.push(started.elapsed());
        }
        // Two per second: a burst of two, then one every half second.
        assert_eq!(times[1], Duration::ZERO);
        assert_eq!(times[2], Duration::from_millis(500));
        assert_eq!(times[5], Duration::from_millis(2000));
    }

    #[tokio::test(start_paused = true)]
    async fn tpm_budgets_tokens() {
        let limiter = Limiter::new(Limits {
            tpm: Some(60_000),
            ..Limits::default()
        });
        let started = Instant::now();
        drop(limiter.acquire(1000).await);
        drop(limiter.acquire(1000).await);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "1,000 tokens per second"
        );
    }

    #[tokio::test]
    async fn retries_sleeping_out_their_back_off_are_a_reason_once_they_are_most() {
        let limiter = Limiter::new(Limits::default());
        assert_eq!(limiter.waiting(), None);
        let first = limiter.retrying();
        assert_eq!(limiter.waiting(), Some(Waiting::Retry));
        let (one, two) = (limiter.acquire(0).await, limiter.acquire(0).await);
        assert_eq!(
            limiter.waiting(),
            None,
            "more requests in flight than retrying"
        );
        let second = limiter.retrying();
        assert_eq!(limiter.waiting(), Some(Waiting::Retry));
        drop((one, two, first, second));
        assert_eq!(limiter.waiting(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_is_capped_and_halves_on_429() {
        let limiter = Limiter::new(Limits {
            max_concurrency: Some(4),
            ..Limits::default()
        });
        let permits: Vec<_> =
            futures_util::future::join_all((0..4).map(|_| limiter.acquire(0))).await;
        assert_eq!(limiter.waiting(), Some(Waiting::Concurrency));
        limiter.on_rate_limited(Some(Duration::from_secs(2)));
        drop(permits);
        assert_eq!(limiter.allowed(), 2);
        assert_eq!(limiter.waiting(), Some(Waiting::BackOff));
        let started = Instant::now();
        drop(limiter.acquire(0).await);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(2),
            "Retry-After pauses everyone"
        );
        for _ in 0..10 {
            limiter.on_success(&HeaderMap::new(), 0, 0);
        }
        assert_eq!(
            limiter.allowed(),
            4,
            "recovers gradually to the configured cap"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn low_remaining_headers_pause_until_reset() {
        let limiter = Limiter::new(Limits::default());
        limiter.on_success(
            &headers(&[
                ("x-ratelimit-limit-requests", "1000"),
                ("x-ratelimit-remaining-requests", "10"),
                ("x-ratelimit-reset-requests", "1.5s"),
            ]),
            0,
            0,
        );
        let started = Instant::now();
        drop(limiter.acquire(0).await);
        assert_eq!(started.elapsed(), Duration::from_millis(1500));
        assert_eq!(parse_reset("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_reset("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_reset("soon"), None);
        // The class fuzzing found in `Retry-After`: these panicked.
        for reset in [
            "inf",
            "1e400",
            "99999999999999999999999999999999999999999999999h",
        ] {
            assert_eq!(parse_reset(reset), None, "{reset}");
        }
        limiter.on_success(
            &headers(&[
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "inf"),
            ]),
            0,
            0,
        );
    }
}
