//! The concurrency cap of a provider and what decides it: `max_concurrency`
//! when the user sets it (the user wins), else what a local server says
//! when asked once (`capacity`: llama.cpp's `/props` slots), else, for a
//! local server that does not say, the adaptive limit (`adaptive`). The
//! rest of the limiter (permits, the quota's buckets, pauses) is `limit`'s;
//! this part only sets its `allowed` and `ceiling`, and says what holds a
//! provider back ([`Limiter::limit`]) for the batch's progress line.

use super::adaptive::{Adaptive, Sample};
use super::{Limiter, Probe, UNBOUNDED};

/// What caps a provider's requests at once (see [`Limiter::limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `max_concurrency` as configured.
    Configured,
    /// The slots the server says it has (llama.cpp's `/props`).
    Slots,
    /// The adaptive limit of a local server that does not say.
    Adaptive,
    /// Halved after a 429 or a 503, recovering.
    BackOff,
}

/// How many requests a provider sends at once now, and why no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub requests: usize,
    pub bound: Bound,
}

impl Limit {
    /// What holds `provider` back, for a progress line: ``local` has 4
    /// slots`.
    pub fn describe(&self, provider: &str) -> String {
        let requests = self.requests;
        match self.bound {
            Bound::Configured => format!("`{provider}` has max_concurrency {requests}"),
            Bound::Slots => format!(
                "`{provider}` has {}",
                crate::words::count(requests as u64, "slot", "slots")
            ),
            Bound::Adaptive => format!("`{provider}` queues beyond {requests} (adaptive limit)"),
            Bound::BackOff => format!("`{provider}` backs off to {requests} after 429/503"),
        }
    }
}

impl Limiter {
    /// Asks the server `probe` names for its capacity before the first
    /// request (a local server's; see `capacity`). Set once; later calls
    /// change nothing.
    pub fn set_probe(&self, probe: Probe) {
        let _ = self.probe.set(probe);
    }

    /// Learns the server's capacity, once: what every request waits for
    /// first (a few seconds at most, and only the first time), and what a
    /// batch calls before it starts tasks. Without a probe, nothing.
    pub async fn learn(&self) {
        let Some(probe) = self.probe.get() else {
            return;
        };
        self.probed
            .get_or_init(|| async {
                let slots = probe.slots().await;
                self.learned(slots, probe);
            })
            .await;
    }

    /// What the server said: its slots cap the requests unless the user set
    /// `max_concurrency` (warned once if that is more); a local server that
    /// did not say gets the adaptive limit, unless the user set one.
    pub(super) fn learned(&self, slots: Option<usize>, probe: &Probe) {
        let provider = &probe.provider;
        let place = probe.place();
        let slot_count = |slots: usize| crate::words::count(slots as u64, "slot", "slots");
        match slots {
            Some(slots) if self.configured => {
                if self.max_concurrency > slots {
                    crate::report::warn(&format!(
                        "provider `{provider}`: `max_concurrency: {}` is more than the {} the \
                         server has (`{place}`); the requests beyond {slots} wait in the \
                         server's queue, where their time counts against `timeout_s`; hint: \
                         leave `max_concurrency` out and lllm follows the server",
                        self.max_concurrency,
                        slot_count(slots),
                    ));
                } else {
                    tracing::info!(
                        "provider `{provider}`: the server has {} (`{place}`); \
                         `max_concurrency: {}` holds",
                        slot_count(slots),
                        self.max_concurrency
                    );
                }
            }
            Some(slots) => {
                tracing::info!(
                    "provider `{provider}`: the server has {} (`{place}`): at most {slots} \
                     at once",
                    slot_count(slots)
                );
                let mut state = self.lock();
                state.ceiling = slots;
                state.bound = Bound::Slots;
                state.allowed = state.allowed.min(slots as f64);
            }
            None if self.configured => {}
            None => {
                let adaptive = Adaptive::default();
                tracing::info!(
                    "provider `{provider}`: the server does not say how many requests it serves \
                     at once (no `{place}`); lllm starts at {} and sends more only while they \
                     do not wait in its queue (set `max_concurrency` to choose)",
                    adaptive.limit()
                );
                let mut state = self.lock();
                state.allowed = adaptive.limit() as f64;
                state.bound = Bound::Adaptive;
                state.adaptive = Some(adaptive);
            }
        }
        self.freed.notify_waiters();
    }

    /// A reply's timing, for the adaptive limit.
    pub(super) fn sampled(&self, sample: Sample) {
        let mut state = self.lock();
        let Some(adaptive) = state.adaptive.as_mut() else {
            return;
        };
        if let Some(limit) = adaptive.sample(sample) {
            tracing::debug!("adaptive concurrency: {limit} requests at once");
            state.allowed = limit as f64;
            drop(state);
            self.freed.notify_waiters();
        }
    }

    /// How many requests this provider sends at once now and what holds it
    /// there; `None` while nothing does.
    pub fn limit(&self) -> Option<Limit> {
        let state = self.lock();
        let requests = state.allowed.floor().max(1.0) as usize;
        if requests >= UNBOUNDED {
            return None;
        }
        let bound = if state.adaptive.is_some() {
            Bound::Adaptive
        } else if requests < state.ceiling {
            Bound::BackOff
        } else {
            state.bound
        };
        Some(Limit { requests, bound })
    }
}
