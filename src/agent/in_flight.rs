//! An agent call under way, as a guard: the call's session lives here while
//! the loop fills it in. A call whose future is dropped before it ends (the
//! run was interrupted: Ctrl-C, SIGTERM, a batch cancelling its tasks) still
//! leaves its session, as a failure with error `interrupted` holding every
//! invoke that came back (what was paid for), so the record, its cost and a
//! batch's summary count them. Where such sessions go is the agent's call;
//! the run's record takes them from there.

use std::time::Instant;

use super::session::AgentCallSession;

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
