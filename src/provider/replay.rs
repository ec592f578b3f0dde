//! The replay provider: serves a session record's model replies in order and
//! stops at the first request that differs from the recorded one, saying
//! where (agent, dialog, round) and how (`lllm replay --rerun`). A request
//! that matches a later recorded one gets that one's reply: calls that ran at
//! once are recorded in the order they finished, not the order they asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::{ChatRequest, Provider, ProviderError};
use crate::agent::session::request_sha256;
use crate::dialog::Message;
use crate::tactic::record::SessionRecord;

/// One recorded model call, with where it happened.
struct Recorded {
    agent: String,
    dialog: String,
    round: u32,
    sha256: String,
    messages: Vec<Arc<Message>>,
    outcome: Result<Message, ProviderError>,
}

/// Where and how a re-run left the recorded path.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// 1-based number of the model call.
    pub call: usize,
    pub agent: String,
    pub dialog: String,
    pub round: u32,
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

pub struct ReplayProvider {
    queue: Mutex<VecDeque<Recorded>>,
    served: Mutex<usize>,
    divergence: Mutex<Option<Divergence>>,
}

impl ReplayProvider {
    pub fn from_record(record: &SessionRecord) -> ReplayProvider {
        let mut queue = VecDeque::new();
        enqueue(record, &mut queue);
        ReplayProvider {
            queue: Mutex::new(queue),
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

/// The record's model calls in the order the run made them: its own calls,
/// with each sub-tactic's calls (recursively) where its step ran.
fn enqueue(record: &SessionRecord, queue: &mut VecDeque<Recorded>) {
    let mut next = 0;
    for step in &record.steps {
        let Some(sub) = step
            .sub_tactic
            .and_then(|index| record.sub_tactic_sessions.get(index))
        else {
            continue;
        };
        while next < step.agent_call.min(record.agent_calls.len()) {
            enqueue_call(record, &record.agent_calls[next], queue);
            next += 1;
        }
        enqueue(sub, queue);
    }
    for call in record.agent_calls.iter().skip(next) {
        enqueue_call(record, call, queue);
    }
}

fn enqueue_call(
    record: &SessionRecord,
    call: &crate::agent::AgentCallSession,
    queue: &mut VecDeque<Recorded>,
) {
    for invoke in &call.invokes {
        let messages = record
            .dialogs
            .iter()
            .find(|dialog| dialog.tree_node.dialog_id == invoke.request.dialog_id)
            .map(|dialog| {
                dialog
                    .messages
                    .iter()
                    .take(invoke.request.messages)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let outcome = match (&invoke.response, &invoke.error) {
            (Some(reply), _) => Ok(Message::clone(reply)),
            (None, Some(error)) => Err(ProviderError {
                retry_after: None,
                ..error.clone()
            }),
            (None, None) => Err(ProviderError::permanent(
                "the record has an invoke with no outcome",
            )),
        };
        queue.push_back(Recorded {
            agent: call.agent.clone(),
            dialog: call.dialog_alias.clone(),
            round: invoke.step,
            sha256: invoke.request.sha256.clone(),
            messages,
            outcome,
        });
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
