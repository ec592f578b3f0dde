//! The replay provider: serves a session record's model replies in order and
//! stops at the first request that differs from the recorded one, saying
//! where (agent, dialog, round) and how (`lllm replay --rerun`). A request
//! that matches a later recorded one gets that one's reply: calls that ran at
//! once are recorded in the order they finished, not the order they asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::digest::request_sha256;
use super::{ChatRequest, Provider, ProviderError};
use crate::dialog::Message;

/// One recorded model call, with where it happened: what the replay
/// provider serves. `crate::replay` reads them out of a session record.
pub struct Recorded {
    /// The agent that made the call.
    pub agent: String,
    /// The dialog alias it called on.
    pub dialog: String,
    /// The tool round (0-based) within the agent call.
    pub round: u32,
    /// `request_sha256` of the recorded request.
    pub sha256: String,
    /// The recorded request's messages, to say how a re-run differs.
    pub messages: Vec<Arc<Message>>,
    /// The recorded reply or error.
    pub outcome: Result<Message, ProviderError>,
}

/// Where and how a re-run left the recorded path.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// 1-based number of the model call.
    pub call: usize,
    /// The agent whose recorded call it was.
    pub agent: String,
    /// Its dialog alias.
    pub dialog: String,
    /// The tool round within that agent call.
    pub round: u32,
    /// How the request differs from the recorded one.
    pub difference: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "diverged at model call {}: agent `{}`, dialog `{}`, round {}\n{}",
            self.call, self.agent, self.dialog, self.round, self.difference
        )
    }
}

/// A provider that answers from recorded calls, in order, and refuses (and
/// remembers) the first request that differs from its recorded one.
pub struct ReplayProvider {
    queue: Mutex<VecDeque<Recorded>>,
    served: Mutex<usize>,
    divergence: Mutex<Option<Divergence>>,
}

impl ReplayProvider {
    /// Serves `calls` in order.
    pub fn new(calls: impl IntoIterator<Item = Recorded>) -> ReplayProvider {
        ReplayProvider {
            queue: Mutex::new(calls.into_iter().collect()),
            served: Mutex::new(0),
            divergence: Mutex::new(None),
        }
    }

    /// The first divergence, if the re-run left the recorded path.
    pub fn divergence(&self) -> Option<Divergence> {
        self.divergence
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Recorded calls the re-run has not asked for.
    pub fn remaining(&self) -> usize {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// How many model calls the re-run has made.
    pub fn served(&self) -> usize {
        *self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn answer(&self, request: &ChatRequest<'_>) -> Result<Message, ProviderError> {
        let call = {
            let mut served = self
                .served
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *served += 1;
            *served
        };
        // The first recorded call of the same request, else the next one
        // (to say how the request differs). Calls that ran at once (a
        // `parallel` block, `tokio::join!` in a programmed tactic) may reach
        // the provider in another order than they were recorded, which
        // finished first; each still gets its own reply.
        let sha256 = request_sha256(request);
        let next = {
            let mut queue = self
                .queue
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match queue.iter().position(|recorded| recorded.sha256 == sha256) {
                Some(index) => queue.remove(index),
                None => queue.pop_front(),
            }
        };
        let diverge = |divergence: Divergence| {
            let text = divergence.to_string();
            let mut slot = self
                .divergence
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            slot.get_or_insert(divergence);
            Err(ProviderError::permanent(text))
        };
        let Some(recorded) = next else {
            return diverge(Divergence {
                call,
                agent: "?".into(),
                dialog: "?".into(),
                round: 0,
                difference: "the re-run makes more model calls than the record has".into(),
            });
        };
        if sha256 != recorded.sha256 {
            return diverge(Divergence {
                call,
                difference: difference(&recorded.messages, request),
                agent: recorded.agent,
                dialog: recorded.dialog,
                round: recorded.round,
            });
        }
        recorded.outcome
    }
}

/// Both texts from a little before their first difference, on one line each.
fn around_first_difference(before: &str, after: &str) -> (String, String) {
    let before: Vec<char> = before.chars().collect();
    let after: Vec<char> = after.chars().collect();
    let first = before
        .iter()
        .zip(&after)
        .take_while(|(a, b)| a == b)
        .count();
    let start = first.saturating_sub(40);
    let show = |text: &[char]| {
        let end = (first + 120).min(text.len());
        let piece: String = text[start.min(end)..end].iter().collect();
        let piece = piece.split_whitespace().collect::<Vec<_>>().join(" ");
        format!(
            "{}{piece}{}",
            if start > 0 { "…" } else { "" },
            if end < text.len() { "…" } else { "" }
        )
    };
    (show(&before), show(&after))
}

/// The first difference between the recorded request and this one.
fn difference(recorded: &[Arc<Message>], request: &ChatRequest<'_>) -> String {
    let now = request.messages;
    for (index, (before, after)) in recorded.iter().zip(now).enumerate() {
        let same = before.role == after.role
            && before.content == after.content
            && before.name == after.name
            && before.function_calls.len() == after.function_calls.len()
            && before
                .function_calls
                .iter()
                .zip(&after.function_calls)
                .all(|(a, b)| a.equals(b) && a.id == b.id);
        if !same {
            let (recorded, now) = around_first_difference(&before.content, &after.content);
            return format!(
                "  message {index} ({} `{}`):\n  - recorded: {recorded}\n  + now:      {now}",
                after.role, after.name
            );
        }
    }
    if recorded.len() != now.len() {
        return format!(
            "  the request has {} messages; the recorded one had {}",
            now.len(),
            recorded.len()
        );
    }
    "  the messages are the same; the model, tools, format or model arguments differ".into()
}

impl Provider for ReplayProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        let answer = self.answer(&request);
        Box::pin(async move { answer })
    }
}
