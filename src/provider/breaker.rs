//! `lllm batch`'s circuit breaker (issue 27): a batch during an outage kept
//! starting tasks, each spending its retries against a server that was down
//! (35 failed in 20 s). One breaker per provider name, shared by every task
//! of the batch:
//!
//! - **closed**: calls go out. [`Settings::failures`] network failures in a
//!   row (`ProviderError::network`: refused, reset, timed out, a name that
//!   does not resolve; never a reply, whatever its status), counted across
//!   tasks, open it.
//! - **open**: no task that uses the provider starts (the scheduler waits in
//!   [`Breakers::gate`]) and no call to it goes out ([`Breaker::admit`]
//!   waits), but one: the **probe**, a real call of a task, sent after
//!   [`Settings::first_probe`], then after twice as long each time it fails
//!   (up to [`Settings::max_probe_wait`]). A probe that fails is not counted
//!   against its task's `max_llm_recall`, so the outage fails no task that
//!   waits it out. Any reply closes the breaker, and everything waiting goes.
//! - **given up**: open for [`Settings::give_up_after`] (`--max-outage`),
//!   the breaker stops for good: waiting calls fail with an error saying
//!   so, and the batch starts no more tasks (they are left `skipped`, for
//!   `--resume`).
//!
//! Every change is told once as an [`Event`] (the batch prints it as a
//! progress line), and [`Breakers::paused`] says what is paused for the
//! progress display. `lllm run` has no breaker: a single run fails fast.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::ProviderError;

/// When a breaker opens, probes and gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Network failures in a row, across tasks, that open a breaker.
    pub failures: u32,
    /// The wait before the first probe; it doubles after each failed one.
    pub first_probe: Duration,
    /// The longest wait between two probes.
    pub max_probe_wait: Duration,
    /// How long a provider may stay down before the batch gives up on it.
    pub give_up_after: Duration,
}

/// `--max-outage` when not given: ten minutes, the default request timeout
/// too (a local server restarted, a network blip, a provider's short
/// outage pass; a longer one leaves the rest for `--resume`).
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(600);

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            failures: 5,
            first_probe: Duration::from_secs(1),
            max_probe_wait: Duration::from_secs(30),
            give_up_after: DEFAULT_GIVE_UP_AFTER,
        }
    }
}

/// A change of a breaker's state, told once.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The breaker opened.
    Down {
        provider: String,
        failures: u64,
        next_probe: Duration,
    },
    /// A probe failed.
    StillDown {
        provider: String,
        failures: u64,
        down_for: Duration,
        next_probe: Duration,
    },
    /// A probe (or any call) was answered: the breaker closed.
    Up {
        provider: String,
        down_for: Duration,
    },
    /// Down for `Settings::give_up_after`: the batch gave up on it.
    GaveUp {
        provider: String,
        failures: u64,
        down_for: Duration,
    },
}

fn seconds(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 10.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{} s", duration.as_secs())
    }
}

fn failures(count: u64) -> String {
    crate::words::count(count, "connection failure", "connection failures")
}

impl Event {
    /// One line for the person watching the batch.
    pub fn text(&self) -> String {
        match self {
            Event::Down {
                provider,
                failures: count,
                next_probe,
            } => format!(
                "`{provider}` is down ({} in a row); pausing its new tasks, next probe in {}",
                failures(*count),
                seconds(*next_probe)
            ),
            Event::StillDown {
                provider,
                failures: count,
                down_for,
                next_probe,
            } => format!(
                "`{provider}` is still down after {} ({}); next probe in {}",
                seconds(*down_for),
                failures(*count),
                seconds(*next_probe)
            ),
            Event::Up { provider, down_for } => format!(
                "`{provider}` answers again after {} down; resuming its tasks",
                seconds(*down_for)
            ),
            Event::GaveUp {
                provider,
                failures: count,
                down_for,
            } => format!(
                "`{provider}` has been down for {} ({}); giving up on it: its waiting calls \
                 fail and no more tasks start (`--max-outage`)",
                seconds(*down_for),
                failures(*count)
            ),
        }
    }
}

/// Told every [`Event`].
pub type Events = Arc<dyn Fn(&Event) + Send + Sync>;

/// Who holds a breaker's one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Nobody: the next call due may probe.
    Idle,
    /// A task the scheduler started to probe, not yet at its call.
    Reserved,
    /// A call is out.
    Probing,
}

#[derive(Debug)]
struct State {
    open: bool,
    gave_up: bool,
    /// Counts outages, so that a claim of an earlier one changes nothing.
    outage: u64,
    since: Instant,
    failures: u64,
    wait: Duration,
    next_probe: Instant,
    probe: Probe,
    /// Calls waiting in [`Breaker::admit`]: while one does, the scheduler
    /// starts no task to probe (the waiting call will).
    waiters: u32,
}

/// One provider's breaker.
pub struct Breaker {
    name: String,
    settings: Settings,
    /// Read without the lock on every call: `false` is the whole cost of a
    /// closed breaker.
    open: AtomicBool,
    /// Network failures in a row while closed.
    in_a_row: AtomicU32,
    state: Mutex<State>,
    changed: Notify,
    events: Events,
}

/// A call counted in `State::waiters` while it waits (however its wait ends).
struct Waiting<'a>(&'a Breaker);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waiters = state.waiters.saturating_sub(1);
    }
}

/// The right to probe an open breaker, held by one task at a time; dropped
/// unused (the task ended another way), it lets the next one probe.
pub struct Claim {
    breaker: Arc<Breaker>,
    outage: u64,
}

impl Claim {
    /// The provider whose probe this is.
    pub fn provider(&self) -> &str {
        &self.breaker.name
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut state = self.breaker.lock();
        if state.outage == self.outage && state.probe != Probe::Idle {
            state.probe = Probe::Idle;
            drop(state);
            self.breaker.changed.notify_waiters();
        }
    }
}

impl Breaker {
    fn new(name: &str, settings: Settings, events: Events) -> Breaker {
        let now = Instant::now();
        Breaker {
            name: name.to_string(),
            settings,
            open: AtomicBool::new(false),
            in_a_row: AtomicU32::new(0),
            state: Mutex::new(State {
                open: false,
                gave_up: false,
                outage: 0,
                since: now,
                failures: 0,
                wait: settings.first_probe,
                next_probe: now,
                probe: Probe::Idle,
                waiters: 0,
            }),
            changed: Notify::new(),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether calls wait (or fail, given up).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Before a call: at once when closed; when open, waits until it closes
    /// or this call may probe (`held`, a claim the scheduler gave its task,
    /// probes as soon as it comes). `Some(claim)`: this call is the probe,
    /// and [`Breaker::record`] takes the claim back. An error when the
    /// batch gave up on the provider.
    pub async fn admit(
        self: &Arc<Self>,
        mut held: Option<Claim>,
    ) -> Result<Option<Claim>, ProviderError> {
        loop {
            if !self.is_open() {
                return Ok(None);
            }
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            // A claim of an earlier outage, dropped once the lock is free.
            let mut stale = None;
            let wake = {
                let mut state = self.lock();
                if !state.open {
                    return Ok(None);
                }
                if let Some(text) = self.given_up(&mut state) {
                    return Err(ProviderError::permanent(format!(
                        "{text}; hint: `lllm batch --retry-errors` runs this task again"
                    )));
                }
                if let Some(claim) = held.take() {
                    if claim.outage == state.outage {
                        state.probe = Probe::Probing;
                        return Ok(Some(claim));
                    }
                    stale = Some(claim);
                }
                if state.probe == Probe::Idle && Instant::now() >= state.next_probe {
                    state.probe = Probe::Probing;
                    return Ok(Some(Claim {
                        breaker: self.clone(),
                        outage: state.outage,
                    }));
                }
                state.waiters += 1;
                self.wake_at(&state)
            };
            drop(stale);
            let _waiting = Waiting(self);
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Before a task that uses the provider starts: at once when closed;
    /// when open, waits until it closes, or until a probe is due that
    /// nobody holds and no waiting call will take: the task is then started
    /// to probe, with the claim. An error (the event's text) when the batch
    /// gave up on the provider.
    pub async fn gate(self: &Arc<Self>) -> Result<Option<Claim>, String> {
        loop {
            if !self.is_open() {
                return Ok(None);
            }
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let wake = {
                let mut state = self.lock();
                if !state.open {
                    return Ok(None);
                }
                if let Some(text) = self.given_up(&mut state) {
                    return Err(text);
                }
                if state.probe == Probe::Idle
                    && state.waiters == 0
                    && Instant::now() >= state.next_probe
                {
                    state.probe = Probe::Reserved;
                    return Ok(Some(Claim {
                        breaker: self.clone(),
                        outage: state.outage,
                    }));
                }
                self.wake_at(&state)
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// When a waiter looks again by itself: at the next probe (if nobody
    /// holds it) or when the batch gives up.
    fn wake_at(&self, state: &State) -> Instant {
        let give_up = state.since + self.settings.give_up_after;
        if state.probe == Probe::Idle {
            state.next_probe.min(give_up)
        } else {
            give_up
        }
    }

    /// What calls and tasks are told once the batch gave up on the provider
    /// (giving up now if its time has come); `None` while it has not.
    fn given_up(&self, state: &mut State) -> Option<String> {
        let down_for = Instant::now().saturating_duration_since(state.since);
        if !state.gave_up && down_for < self.settings.give_up_after {
            return None;
        }
        if !state.gave_up {
            state.gave_up = true;
            (self.events)(&Event::GaveUp {
                provider: self.name.clone(),
                failures: state.failures,
                down_for,
            });
            self.changed.notify_waiters();
        }
        Some(format!(
            "`{}` has been unreachable for {} ({}); the batch gave up on it (`--max-outage`)",
            self.name,
            seconds(self.settings.give_up_after.max(down_for)),
            failures(state.failures)
        ))
    }

    /// How a call went: `network_failure` when it failed in the network
    /// (`ProviderError::network`), otherwise it reached the server. `claim`
    /// is the one [`Breaker::admit`] gave, when the call was the probe.
    pub fn record(&self, claim: Option<Claim>, network_failure: bool) {
        if !network_failure {
            if self.in_a_row.load(Ordering::Relaxed) != 0 {
                self.in_a_row.store(0, Ordering::Relaxed);
            }
            if self.is_open() {
                self.close();
            }
            drop(claim);
            return;
        }
        let in_a_row = self
            .in_a_row
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let mut state = self.lock();
        let now = Instant::now();
        if !state.open {
            if in_a_row < self.settings.failures {
                return;
            }
            state.open = true;
            state.outage += 1;
            state.since = now;
            state.failures = u64::from(in_a_row);
            state.wait = self.settings.first_probe;
            state.next_probe = now + state.wait;
            state.probe = Probe::Idle;
            self.open.store(true, Ordering::Release);
            (self.events)(&Event::Down {
                provider: self.name.clone(),
                failures: state.failures,
                next_probe: state.wait,
            });
            return;
        }
        state.failures += 1;
        let probed = claim
            .as_ref()
            .is_some_and(|claim| claim.outage == state.outage);
        if probed && !state.gave_up {
            state.wait = state
                .wait
                .saturating_mul(2)
                .min(self.settings.max_probe_wait)
                .max(self.settings.first_probe);
            state.next_probe = now + state.wait;
            state.probe = Probe::Idle;
            (self.events)(&Event::StillDown {
                provider: self.name.clone(),
                failures: state.failures,
                down_for: now.saturating_duration_since(state.since),
                next_probe: state.wait,
            });
        }
        drop(state);
        // Idle already: the claim's drop changes nothing, and waiters look
        // at the next probe's time.
        drop(claim);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        let mut state = self.lock();
        if !state.open || state.gave_up {
            return;
        }
        state.open = false;
        state.probe = Probe::Idle;
        self.open.store(false, Ordering::Release);
        (self.events)(&Event::Up {
            provider: self.name.clone(),
            down_for: Instant::now().saturating_duration_since(state.since),
        });
        drop(state);
        self.changed.notify_waiters();
    }

    /// `` `local` is down (7 connection failures), next probe in 3 s ``, while open.
    fn paused(&self) -> Option<String> {
        if !self.is_open() {
            return None;
        }
        let state = self.lock();
        if state.gave_up {
            return Some(format!("`{}` given up", self.name));
        }
        let probe = match state.probe {
            Probe::Idle => match state.next_probe.checked_duration_since(Instant::now()) {
                Some(wait) if wait >= Duration::from_millis(100) => {
                    format!("next probe in {}", seconds(wait))
                }
                _ => "probe due".to_string(),
            },
            Probe::Reserved | Probe::Probing => "probing".to_string(),
        };
        Some(format!(
            "`{}` is down ({}), {probe}",
            self.name,
            failures(state.failures)
        ))
    }
}

/// The breakers of a batch, one per provider name, made when first asked for.
pub struct Breakers {
    settings: Settings,
    events: Events,
    by_name: Mutex<HashMap<String, Arc<Breaker>>>,
}

impl Breakers {
    /// Breakers with these settings, telling `events` every change.
    pub fn new(settings: Settings, events: Events) -> Breakers {
        Breakers {
            settings,
            events,
            by_name: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Breaker>>> {
        self.by_name
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Provider `name`'s breaker.
    pub fn get(&self, name: &str) -> Arc<Breaker> {
        let mut by_name = self.lock();
        if let Some(breaker) = by_name.get(name) {
            return breaker.clone();
        }
        let breaker = Arc::new(Breaker::new(name, self.settings, self.events.clone()));
        by_name.insert(name.to_string(), breaker.clone());
        breaker
    }

    /// Before a task that uses the providers `names` starts: waits while
    /// one is down ([`Breaker::gate`]); the claims the task is started to
    /// probe with, or the text of the first given up.
    pub async fn gate(&self, names: &[String]) -> Result<Vec<Claim>, String> {
        let mut claims = Vec::new();
        for name in names {
            let breaker = self.get(name);
            if let Some(claim) = breaker.gate().await? {
                claims.push(claim);
            }
        }
        Ok(claims)
    }

    /// What is paused, for the progress display: the first open breaker's
    /// [`Breaker::paused`] text (by name, so the choice is stable).
    pub fn paused(&self) -> Option<String> {
        let mut open: Vec<Arc<Breaker>> = self
            .lock()
            .values()
            .filter(|breaker| breaker.is_open())
            .cloned()
            .collect();
        open.sort_by(|a, b| a.name.cmp(&b.name));
        open.iter().find_map(|breaker| breaker.paused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: Settings = Settings {
        failures: 3,
        first_probe: Duration::from_secs(1),
        max_probe_wait: Duration::from_secs(4),
        give_up_after: Duration::from_secs(60),
    };

    fn breakers() -> (Arc<Breakers>, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let told = events.clone();
        let breakers = Breakers::new(
            SETTINGS,
            Arc::new(move |event: &Event| told.lock().unwrap().push(event.clone())),
        );
        (Arc::new(breakers), events)
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_open_it_and_any_reply_in_between_resets_the_count() {
        let (breakers, events) = breakers();
        let local = breakers.get("local");
        local.record(None, true);
        local.record(None, true);
        local.record(None, false);
        local.record(None, true);
        local.record(None, true);
        assert!(!local.is_open(), "a reply broke the row");
        assert!(local.admit(None).await.unwrap().is_none());
        local.record(None, true);
        assert!(local.is_open());
        assert_eq!(
            events.lock().unwrap().as_slice(),
            [Event::Down {
                provider: "local".into(),
                failures: 3,
                next_probe: Duration::from_secs(1),
            }]
        );
        assert_eq!(
            breakers.paused().as_deref(),
            Some("`local` is down (3 connection failures), next probe in 1.0 s")
        );
        assert!(!breakers.get("other").is_open(), "one breaker per provider");
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_at_a_time_its_wait_doubles_and_a_reply_lets_everyone_go() {
        let (breakers, events) = breakers();
        let local = breakers.get("local");
        for _ in 0..3 {
            local.record(None, true);
        }
        let started = Instant::now();
        let probe = local.admit(None).await.unwrap();
        assert!(probe.is_some(), "the probe");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        // Another call waits while the probe is out.
        let waiter = |breaker: &Arc<Breaker>| {
            let breaker = breaker.clone();
            tokio::spawn(async move { breaker.admit(None).await.map(|claim| claim.is_some()) })
        };
        let waiting = waiter(&local);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!waiting.is_finished(), "one probe at a time");
        waiting.abort();
        // It fails: the next probe comes 2 s later, then 4 s (the cap), 4 s.
        local.record(probe, true);
        let probed = Instant::now();
        let probe = local.admit(None).await.unwrap();
        assert!(probe.is_some());
        assert_eq!(probed.elapsed(), Duration::from_secs(2));
        local.record(probe, true);
        let probe = local.admit(None).await.unwrap();
        assert_eq!(probed.elapsed(), Duration::from_secs(6));
        local.record(probe, true);
        let probe = local.admit(None).await.unwrap();
        assert_eq!(probed.elapsed(), Duration::from_secs(10));
        // Answered: closed, and the call waiting goes as a plain one.
        let waiting = waiter(&local);
        tokio::task::yield_now().await;
        local.record(probe, false);
        assert!(!local.is_open());
        assert_eq!(waiting.await.unwrap(), Ok(false));
        let told: Vec<String> = events.lock().unwrap().iter().map(Event::text).collect();
        assert_eq!(
            told,
            [
                "`local` is down (3 connection failures in a row); pausing its new tasks, next probe in 1.0 s",
                "`local` is still down after 31 s (4 connection failures); next probe in 2.0 s",
                "`local` is still down after 33 s (5 connection failures); next probe in 4.0 s",
                "`local` is still down after 37 s (6 connection failures); next probe in 4.0 s",
                "`local` answers again after 41 s down; resuming its tasks",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_scheduler_starts_one_task_to_probe_and_an_unused_claim_is_given_back() {
        let (breakers, _) = breakers();
        let local = breakers.get("local");
        for _ in 0..3 {
            local.record(None, true);
        }
        let names = vec!["local".to_string(), "healthy".to_string()];
        let started = Instant::now();
        let claims = breakers.gate(&names).await.unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "when a probe is due"
        );
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].provider(), "local");
        // A second task waits: the probe is reserved.
        let gated = {
            let breakers = breakers.clone();
            let names = names.clone();
            tokio::spawn(async move { breakers.gate(&names).await.map(|claims| claims.len()) })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!gated.is_finished());
        // The task ends without calling `local`: the next one may probe.
        drop(claims);
        assert_eq!(gated.await.unwrap(), Ok(1));
        // A call waiting for the next probe will take it: no task is
        // started for it meanwhile.
        let probe = local.admit(None).await.unwrap();
        local.record(probe, true);
        let waiting = {
            let local = local.clone();
            tokio::spawn(async move { local.admit(None).await })
        };
        tokio::task::yield_now().await;
        let gated = {
            let breakers = breakers.clone();
            tokio::spawn(async move { breakers.gate(&names).await.map(|claims| claims.len()) })
        };
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!gated.is_finished(), "no task started to probe");
        let probe = waiting.await.unwrap().unwrap();
        assert!(probe.is_some(), "the waiting call probed");
        gated.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_claim_probes_at_once_and_an_old_outage_s_claim_does_nothing() {
        let (breakers, _) = breakers();
        let local = breakers.get("local");
        for _ in 0..3 {
            local.record(None, true);
        }
        let mut claims = breakers.gate(&["local".to_string()]).await.unwrap();
        let claim = claims.pop();
        let probe = local.admit(claim).await.unwrap();
        assert!(probe.is_some());
        local.record(probe, false);
        assert!(!local.is_open());
        // A claim of that outage, kept past it, opens no second probe later.
        for _ in 0..3 {
            local.record(None, true);
        }
        let old = Claim {
            breaker: local.clone(),
            outage: 0,
        };
        let started = Instant::now();
        let probe = local.admit(Some(old)).await.unwrap();
        assert!(probe.is_some());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "waited for the probe like any call"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn down_past_the_bound_it_gives_up_and_every_waiter_fails() {
        let (breakers, events) = breakers();
        let local = breakers.get("local");
        for _ in 0..3 {
            local.record(None, true);
        }
        let started = Instant::now();
        let mut probes = 0;
        let error = loop {
            match local.admit(None).await {
                Ok(probe) => {
                    probes += 1;
                    local.record(probe, true);
                }
                Err(error) => break error,
            }
        };
        assert_eq!(started.elapsed(), SETTINGS.give_up_after);
        // After 1 s, 2 s, then every 4 s: at 1, 3, 7, 11, … 59.
        assert_eq!(probes, 16);
        assert!(
            error
                .message
                .starts_with("`local` has been unreachable for 60 s (19 connection failures)"),
            "{}",
            error.message
        );
        assert_eq!(error.kind, crate::provider::ErrorKind::Permanent);
        assert!(breakers.gate(&["local".into()]).await.is_err());
        assert!(matches!(
            events.lock().unwrap().last(),
            Some(Event::GaveUp { failures: 19, .. })
        ));
    }
}
