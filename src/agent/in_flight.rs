//! An agent call under way, as a guard: the call's session lives here while
//! the loop fills it in. A call whose future is dropped before it ends (the
//! run was interrupted: Ctrl-C, SIGTERM, a batch cancelling its tasks) still
//! leaves its session, as a failure with error `interrupted` holding every
//! invoke that came back (what was paid for), so the record, its cost and a
//! batch's summary count them. Where such sessions go is the agent's call;
//! the run's record takes them from there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::session::{AgentCallSession, InvokeTrace};
use crate::provider::ProviderError;
use crate::provider::retry::FailedAttempt;

/// The error of an agent call stopped before it ended.
pub(crate) const INTERRUPTED: &str = "interrupted";

pub(super) struct InFlight<'a> {
    session: AgentCallSession,
    started: Instant,
    ended: bool,
    /// Where the session goes if the guard is dropped before `end`.
    dropped: &'a mut Vec<AgentCallSession>,
}

impl<'a> InFlight<'a> {
    /// `session` starts now.
    pub fn new(session: AgentCallSession, dropped: &'a mut Vec<AgentCallSession>) -> InFlight<'a> {
        InFlight {
            session,
            started: Instant::now(),
            ended: false,
            dropped,
        }
    }

    /// The session, for the call to fill in.
    pub fn session(&mut self) -> &mut AgentCallSession {
        &mut self.session
    }

    /// The call ended: its session, with when and how long.
    pub fn end(mut self) -> AgentCallSession {
        self.ended = true;
        let mut session = std::mem::take(&mut self.session);
        stamp_end(&mut session, self.started);
        session
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let mut session = std::mem::take(&mut self.session);
            session.failure(INTERRUPTED.to_string());
            stamp_end(&mut session, self.started);
            self.dropped.push(session);
        }
    }
}

fn stamp_end(session: &mut AgentCallSession, started: Instant) {
    session.ended_at = Some(crate::time::timestamp());
    session.latency_ms = started.elapsed().as_millis() as u64;
}

/// One request of an agent call on its way to the provider, through the
/// retry loop: each failed attempt is recorded as it fails, and a request
/// still unanswered when the call's future is dropped (the run was
/// interrupted) is recorded as an invoke that failed `interrupted`, if it had
/// been sent. An interrupted run whose request had gone out said `0 calls`,
/// and retries that failed before a Ctrl-C were not in the record at all
/// (issue 27). What such a request cost is not known: the call's cost is
/// marked so.
pub(super) struct Pending<'s> {
    session: &'s mut AgentCallSession,
    /// The request's first invoke, as recorded (its attempt is set per attempt).
    trace: InvokeTrace,
    /// Set by the HTTP layer when the current attempt's request goes out.
    sent: Arc<AtomicBool>,
    /// When the current attempt started.
    started: Instant,
    /// Disarmed once the retry loop returned.
    answered: bool,
}

impl<'s> Pending<'s> {
    /// `trace` is what every invoke of this request records (step, repair,
    /// the request's digest); its attempt is set here.
    pub fn new(session: &'s mut AgentCallSession, trace: InvokeTrace) -> Pending<'s> {
        Pending {
            session,
            trace: InvokeTrace {
                attempt: 1,
                ..trace
            },
            sent: Arc::new(AtomicBool::new(false)),
            started: Instant::now(),
            answered: false,
        }
    }

    /// The flag the HTTP layer sets when a request goes out
    /// (`provider::http::watching_sends`).
    pub fn sent(&self) -> Arc<AtomicBool> {
        self.sent.clone()
    }

    /// Records a failed attempt; the next one starts after its wait.
    pub fn failed(&mut self, failed: &FailedAttempt) {
        self.session.record(InvokeTrace {
            attempt: failed.attempt,
            error: Some(failed.error.clone()),
            latency_ms: failed.latency.as_millis() as u64,
            waited_ms: failed.waited.as_millis() as u64,
            ..self.trace.clone()
        });
        self.trace.attempt = failed.attempt.saturating_add(1);
        self.sent.store(false, Ordering::Relaxed);
        self.started = Instant::now() + failed.waited;
    }

    /// The retry loop returned: nothing is left in flight.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.answered || !self.sent.load(Ordering::Relaxed) {
            return;
        }
        let mut error = ProviderError::transient(
            "interrupted: the request was sent and no reply had come; what it cost is not known",
        );
        error.code = Some(INTERRUPTED.into());
        self.session.record(InvokeTrace {
            error: Some(error),
            latency_ms: self.started.elapsed().as_millis() as u64,
            ..self.trace.clone()
        });
        self.session.cost.cost_known = false;
    }
}
