//! How much a session record read from a file may hold once expanded, and
//! what expanding it would make, reckoned before anything is copied. A
//! written record leaves out what repeats something else in it (see
//! `compact`); putting a text back is a copy per fork or invoke that names
//! it, so a small crafted record could name one history from thousands of
//! forks and expand to gigabytes (a chain of N forks, each inheriting all of
//! the previous one's messages, lists N messages and expands to N²/2).
//! Readers of files expand within [`ExpansionLimit::READ`]; a run's own
//! record is expanded without a limit.

use super::record::SessionRecord;
use crate::agent::session::InvokeTrace;
use crate::dialog::Message;

/// The most a record read from a file may hold once expanded
/// ([`SessionRecord::expand_within`](super::record::SessionRecord::expand_within)):
/// the messages of its dialogs with the history each fork shares with its
/// parent put back, and the replies and deliveries put back into its calls,
/// sub-tactic sessions included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpansionLimit {
    /// Messages, in all.
    pub messages: u64,
    /// Their size as compact JSON, in bytes.
    pub bytes: u64,
}

impl ExpansionLimit {
    /// What lllm's readers (`replay`, `logs`, `report`) accept: 4,000,000
    /// messages and 1 GiB, the largest record file they read. A tool loop of
    /// a thousand rounds expands to about a million messages; a record of
    /// N forks each inheriting all of the previous one's messages lists N
    /// and expands to N²/2.
    pub const READ: ExpansionLimit = ExpansionLimit {
        messages: 4_000_000,
        bytes: 1 << 30,
    };
}

/// Why [`SessionRecord::expand_within`](super::record::SessionRecord::expand_within)
/// refused a record: what it would hold once expanded (counted up to the
/// part that went past the limit), and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Oversized {
    /// Too many messages.
    #[error(
        "it would hold at least {count} messages once expanded (the history forks share \
         with their parents and the calls' replies put back), more than the {limit} lllm \
         reads in one record"
    )]
    Messages {
        /// Messages counted.
        count: u64,
        /// The most allowed.
        limit: u64,
    },
    /// Messages too large in all.
    #[error(
        "it would hold at least {} MiB of messages once expanded (the history forks share \
         with their parents and the calls' replies put back), more than the {} MiB lllm \
         reads in one record",
        count.div_ceil(1 << 20),
        limit >> 20
    )]
    Bytes {
        /// Bytes counted.
        count: u64,
        /// The most allowed.
        limit: u64,
    },
}

/// What the expansion of a record and of the sub-tactic sessions before it
/// has taken so far.
pub(super) struct Budget {
    limit: ExpansionLimit,
    messages: u64,
    bytes: u64,
}

impl Budget {
    pub(super) fn new(limit: ExpansionLimit) -> Budget {
        Budget {
            limit,
            messages: 0,
            bytes: 0,
        }
    }
}

/// Adds what expanding `record`'s own dialogs and calls will copy to
/// `budget`, before anything is copied: an error once past its limit. The
/// count follows `expand_shared_prefixes`, `restore_responses` and
/// `restore_delivery`; a reply or a delivery counts the size of the message
/// it is copied from.
pub(super) fn charge(record: &SessionRecord, budget: &mut Budget) -> Result<(), Oversized> {
    let plan = crate::dialog::PrefixPlan::of(&record.dialogs);
    let calls = &record.agent_calls;
    let invokes = || calls.iter().flat_map(|call| &call.invokes);
    let replies = invokes().filter(|invoke| invoke.response_in_dialog).count() as u64;
    let deliveries = calls
        .iter()
        .filter(|call| call.is_success() && call.delivery.is_none())
        .count() as u64;
    budget.messages = budget
        .messages
        .saturating_add(plan.messages())
        .saturating_add(replies)
        .saturating_add(deliveries);
    if budget.messages > budget.limit.messages {
        return Err(Oversized::Messages {
            count: budget.messages,
            limit: budget.limit.messages,
        });
    }
    // Within the message limit, the sums (a number per message) are small.
    let mut buffer = Vec::new();
    let mut size = |message: &Message| {
        buffer.clear();
        serde_json::to_writer(&mut buffer, message).map_or(0, |()| buffer.len() as u64)
    };
    let sums = plan.sizes(&record.dialogs, &mut size);
    let mut bytes = sums
        .iter()
        .filter_map(|sum| sum.last())
        .fold(0u64, |total, &sum| total.saturating_add(sum));
    let index = super::compact::dialog_index(&record.dialogs);
    let held = |invoke: &InvokeTrace| -> Option<u64> {
        let sum = &sums[*index.get(invoke.request.dialog_id.as_str())?];
        let at = invoke.request.messages;
        Some(sum.get(at.checked_add(1)?)? - sum[at])
    };
    for call in calls {
        // The size of the call's last reply once put back: its delivery's.
        let mut last = None;
        for invoke in &call.invokes {
            match (
                invoke.response_in_dialog.then(|| held(invoke)).flatten(),
                &invoke.response,
            ) {
                (Some(reply), _) => {
                    bytes = bytes.saturating_add(reply);
                    last = Some(Ok(reply));
                }
                (None, Some(response)) => last = Some(Err(response)),
                (None, None) => {}
            }
        }
        if call.is_success() && call.delivery.is_none() {
            let delivery = match last {
                Some(Ok(reply)) => reply,
                Some(Err(response)) => size(response),
                None => 0,
            };
            bytes = bytes.saturating_add(delivery);
        }
    }
    budget.bytes = budget.bytes.saturating_add(bytes);
    if budget.bytes > budget.limit.bytes {
        return Err(Oversized::Bytes {
            count: budget.bytes,
            limit: budget.limit.bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The written record of one `mock/echo` call on `task`: a dialog, and
    /// the working fork that inherits all of its messages.
    fn written(task: &str) -> SessionRecord {
        let yaml = "agent_configs: [{name: echo, model_name: mock/echo, system_prompt: Repeat.}]";
        let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let record = runtime.block_on(tactic.run_until(task.into(), None, std::future::pending()));
        // Through JSON, as a reader gets it.
        serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap()
    }

    const NO_LIMIT: ExpansionLimit = ExpansionLimit {
        messages: u64::MAX,
        bytes: u64::MAX,
    };

    #[track_caller]
    fn refused(record: &SessionRecord, limit: ExpansionLimit) -> Oversized {
        record.clone().expand_within(limit).unwrap_err()
    }

    /// Messages once expanded: the dialogs', and the replies and deliveries
    /// put back into the calls.
    fn expanded_messages(record: &SessionRecord) -> u64 {
        let dialogs: usize = record
            .dialogs
            .iter()
            .map(|dialog| dialog.messages.len())
            .sum();
        let replies = record
            .agent_calls
            .iter()
            .flat_map(|call| &call.invokes)
            .filter(|invoke| invoke.response.is_some())
            .count();
        let deliveries = record
            .agent_calls
            .iter()
            .filter(|call| call.delivery.is_some())
            .count();
        let own = (dialogs + replies + deliveries) as u64;
        own + record
            .sub_tactic_sessions
            .iter()
            .map(expanded_messages)
            .sum::<u64>()
    }

    #[test]
    fn the_count_is_what_expanding_makes() {
        let record = written("Say this back, please.");
        assert!(record.dialogs.iter().any(|dialog| dialog.inherited > 0));
        let mut expanded = record.clone();
        expanded.expand();
        let messages = expanded_messages(&expanded);
        assert_eq!(messages, 3 + 3 + 1 + 1, "two dialogs, a reply, a delivery");

        let mut within = record.clone();
        let limit = ExpansionLimit {
            messages,
            ..NO_LIMIT
        };
        within.expand_within(limit).unwrap();
        assert_eq!(within, expanded, "expanded as `expand` does");
        let limit = ExpansionLimit {
            messages: messages - 1,
            ..NO_LIMIT
        };
        assert_eq!(
            refused(&record, limit),
            Oversized::Messages {
                count: messages,
                limit: messages - 1
            }
        );

        // Bytes: at least the expanded dialogs' JSON; the count is the limit
        // that lets the record through.
        let Oversized::Bytes { count: bytes, .. } = refused(
            &record,
            ExpansionLimit {
                bytes: 0,
                ..NO_LIMIT
            },
        ) else {
            panic!("refused by its bytes")
        };
        let dialogs: usize = expanded
            .dialogs
            .iter()
            .flat_map(|dialog| &dialog.messages)
            .map(|message| serde_json::to_string(message).unwrap().len())
            .sum();
        assert!(bytes > dialogs as u64, "{bytes} {dialogs}");
        record
            .clone()
            .expand_within(ExpansionLimit { bytes, ..NO_LIMIT })
            .unwrap();
        let limit = ExpansionLimit {
            bytes: bytes - 1,
            ..NO_LIMIT
        };
        assert!(matches!(refused(&record, limit), Oversized::Bytes { .. }));

        // A sub-tactic session counts against the same limit.
        let mut nested = record.clone();
        nested.sub_tactic_sessions.push(record.clone());
        let limit = ExpansionLimit {
            messages: 2 * messages - 1,
            ..NO_LIMIT
        };
        assert!(
            matches!(refused(&nested, limit), Oversized::Messages { count, .. } if count == 2 * messages)
        );
        let limit = ExpansionLimit {
            messages: 2 * messages,
            ..NO_LIMIT
        };
        nested.expand_within(limit).unwrap();
    }

    /// `record` with `count` forks after its first dialog, each a child of
    /// the one before, inheriting all of its messages and adding one.
    fn chain(mut record: SessionRecord, count: usize) -> SessionRecord {
        let root = record.dialogs[0].clone();
        let template = record.dialogs[1].clone();
        let (mut parent, listed) = (root.tree_node.dialog_id.clone(), root.messages.len());
        let mut dialogs = vec![root];
        for index in 0..count {
            let mut fork = template.clone();
            fork.messages = vec![Arc::new(Message::user("x"))];
            fork.inherited = listed + index;
            fork.tree_node.dialog_id = format!("{index:032x}");
            fork.tree_node.parent_id = Some(parent);
            fork.tree_node.depth = index + 1;
            parent = fork.tree_node.dialog_id.clone();
            dialogs.push(fork);
        }
        record.dialogs = dialogs;
        record
    }

    #[test]
    fn a_chain_of_forks_is_refused_before_anything_is_copied() {
        // 3,000 forks listing one message each expand to 4.5 million: past
        // the 4 million readers take. Counting them is arithmetic.
        let mut record = chain(written("Say this back."), 3000);
        let error = record.expand_within(ExpansionLimit::READ).unwrap_err();
        let Oversized::Messages { count, limit } = error else {
            panic!("{error}")
        };
        assert_eq!(limit, 4_000_000);
        assert!(count > 3000 * 3001 / 2, "{count}");
        assert!(
            record.dialogs[1..]
                .iter()
                .all(|dialog| dialog.messages.len() == 1),
            "nothing was copied"
        );
        assert!(
            error
                .to_string()
                .contains("more than the 4000000 lllm reads in one record")
        );
        // A short chain reads as before.
        let mut short = chain(written("Say this back."), 50);
        short.expand_within(ExpansionLimit::READ).unwrap();
        assert_eq!(short.dialogs[50].messages.len(), 3 + 50);
    }

    #[test]
    fn one_long_message_named_by_many_forks_and_replies_counts_each_copy() {
        let mut record = written("Say this back.");
        let long = "y".repeat(64 << 10);
        Arc::make_mut(&mut record.dialogs[0].messages[1]).content = long;
        // 20 forks of the dialog, each inheriting the long message: 1.3 MiB.
        let mut forks = chain(record.clone(), 0).dialogs;
        for index in 0..20 {
            let mut fork = record.dialogs[1].clone();
            fork.tree_node.dialog_id = format!("{index:032x}");
            fork.inherited = 2;
            forks.push(fork);
        }
        let mut many = record.clone();
        many.dialogs = forks;
        let limit = ExpansionLimit {
            bytes: 1 << 20,
            ..ExpansionLimit::READ
        };
        let error = refused(&many, limit);
        assert!(matches!(error, Oversized::Bytes { count, .. } if count > 20 * (64 << 10)));
        assert!(error.to_string().contains("more than the 1 MiB"), "{error}");
        // 20 invokes whose reply is that message, in a call that has none.
        let mut replies = record.clone();
        let call = &mut replies.agent_calls[0];
        let mut invoke = call.invokes[0].clone();
        invoke.request.messages = 1;
        invoke.response = None;
        invoke.response_in_dialog = true;
        call.invokes = vec![invoke; 20];
        assert!(matches!(refused(&replies, limit), Oversized::Bytes { .. }));
        // Once each, they fit.
        record.expand_within(limit).unwrap();
    }
}
