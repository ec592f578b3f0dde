//! The messages a fork shares with the start of its parent dialog: a session
//! record leaves them out (`DialogRecord::inherited`) and a reader puts them
//! back. [`PrefixPlan`] says what putting them back copies before anything is
//! copied, so that a reader can refuse a record that would expand past what
//! it accepts: a record of N forks, each inheriting all of the previous one's
//! messages, lists N messages and expands to about N²/2. What a reader
//! accepts is the session record's concern (`SessionRecord::expand_within`).

use std::collections::HashMap;
use std::sync::Arc;

use super::{DialogRecord, Message};

/// Leaves out of each dialog the messages it shares with the start of its
/// parent (when the parent is among `records`); `expand_shared_prefixes`
/// puts them back.
pub fn share_prefixes(records: &mut [DialogRecord]) {
    let position: HashMap<&str, usize> = records
        .iter()
        .enumerate()
        .map(|(index, record)| (record.tree_node.dialog_id.as_str(), index))
        .collect();
    let shared: Vec<usize> = records
        .iter()
        .map(|record| {
            let Some(&parent) = record
                .tree_node
                .parent_id
                .as_deref()
                .and_then(|parent| position.get(parent))
            else {
                return 0;
            };
            let parent = &records[parent];
            if parent.inherited != 0 || record.inherited != 0 {
                return 0;
            }
            record
                .messages
                .iter()
                .zip(&parent.messages)
                .take_while(|(ours, theirs)| Arc::ptr_eq(ours, theirs) || ours.is_copy_of(theirs))
                .count()
        })
        .collect();
    for (record, shared) in records.iter_mut().zip(shared) {
        if shared > 0 {
            record.messages.drain(..shared);
            record.inherited = shared;
        }
    }
}

/// Restores the messages `share_prefixes` left out. A dialog whose parent is
/// missing, or does not hold that many messages, keeps what it has. Check
/// the [`PrefixPlan`] first when the records come from a file.
pub fn expand_shared_prefixes(records: &mut [DialogRecord]) {
    PrefixPlan::of(records).apply(records);
}

/// What [`expand_shared_prefixes`] copies: which dialog each fork takes its
/// left-out messages from, and how long every dialog is afterwards. Making
/// it reads only the records' ids, depths and lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixPlan {
    /// (fork, parent) indexes, parents put back before their forks.
    copies: Vec<(usize, usize)>,
    /// Each record's length once expanded.
    lengths: Vec<usize>,
}

impl PrefixPlan {
    /// The plan for `records`. A fork's parent is the first record with its
    /// `parent_id`; parents come before children by `depth` (a parent may have
    /// inherited from its own parent); a fork whose parent is missing, still
    /// short of its own inherited messages, or too short, is left as it is.
    pub fn of(records: &[DialogRecord]) -> PrefixPlan {
        let mut position: HashMap<&str, usize> = HashMap::with_capacity(records.len());
        for (index, record) in records.iter().enumerate() {
            position
                .entry(record.tree_node.dialog_id.as_str())
                .or_insert(index);
        }
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by_key(|&index| records[index].tree_node.depth);
        let mut lengths: Vec<usize> = records.iter().map(|record| record.messages.len()).collect();
        let mut whole: Vec<bool> = records.iter().map(|record| record.inherited == 0).collect();
        let mut copies = Vec::new();
        for index in order {
            let inherited = records[index].inherited;
            if inherited == 0 {
                continue;
            }
            let Some(&parent) = records[index]
                .tree_node
                .parent_id
                .as_deref()
                .and_then(|parent| position.get(parent))
            else {
                continue;
            };
            if whole[parent] && lengths[parent] >= inherited {
                lengths[index] = lengths[index].saturating_add(inherited);
                whole[index] = true;
                copies.push((index, parent));
            }
        }
        PrefixPlan { copies, lengths }
    }

    /// How many messages the dialogs hold once expanded, in all.
    pub fn messages(&self) -> u64 {
        self.lengths
            .iter()
            .fold(0u64, |sum, &length| sum.saturating_add(length as u64))
    }

    /// Each dialog's length once expanded.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// For each dialog once expanded, the running sums of `size` over its
    /// messages: `sums[dialog][k]` is the size of its first `k` messages.
    /// `size` is called once per message the records list, never per copy;
    /// the sums take a number per message once expanded
    /// ([`messages`](Self::messages)), so check that first.
    pub fn sizes(
        &self,
        records: &[DialogRecord],
        mut size: impl FnMut(&Message) -> u64,
    ) -> Vec<Vec<u64>> {
        let mut sums: Vec<Vec<u64>> = records
            .iter()
            .map(|record| {
                let mut sum = Vec::with_capacity(record.messages.len() + 1);
                sum.push(0u64);
                for message in &record.messages {
                    let last = sum.last().copied().unwrap_or_default();
                    sum.push(last.saturating_add(size(message)));
                }
                sum
            })
            .collect();
        for &(fork, parent) in &self.copies {
            let inherited = records[fork].inherited;
            let own = std::mem::take(&mut sums[fork]);
            let mut whole = sums[parent][..=inherited].to_vec();
            let base = whole[inherited];
            whole.extend(own[1..].iter().map(|sum| base.saturating_add(*sum)));
            sums[fork] = whole;
        }
        sums
    }

    fn apply(self, records: &mut [DialogRecord]) {
        for (fork, parent) in self.copies {
            let inherited = records[fork].inherited;
            let mut prefix = records[parent].messages[..inherited].to_vec();
            let record = &mut records[fork];
            prefix.append(&mut record.messages);
            record.messages = prefix;
            record.inherited = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::Dialog;

    /// A dialog record with `own` messages, forked from `parent` (its
    /// index) with `inherited` messages of it left out.
    fn record(
        id: &str,
        parent: Option<&str>,
        depth: usize,
        own: usize,
        inherited: usize,
    ) -> DialogRecord {
        let mut dialog = Dialog::new("agent", "session");
        for number in 0..own {
            dialog.append(Message::user(format!("{id} {number}")));
        }
        let mut record = dialog.into_record();
        record.tree_node.dialog_id = id.to_string();
        record.tree_node.parent_id = parent.map(str::to_string);
        record.tree_node.depth = depth;
        record.inherited = inherited;
        record
    }

    #[track_caller]
    fn case(records: &[DialogRecord], messages: u64, lengths: &[usize]) {
        let plan = PrefixPlan::of(records);
        assert_eq!(plan.messages(), messages);
        assert_eq!(plan.lengths(), lengths);
        let mut expanded = records.to_vec();
        expand_shared_prefixes(&mut expanded);
        let actual: Vec<usize> = expanded
            .iter()
            .map(|record| record.messages.len())
            .collect();
        assert_eq!(actual, lengths, "the plan is what expanding does");
    }

    #[test]
    fn the_plan_counts_what_expanding_copies() {
        // Parent, fork, fork of the fork (listed before its parent).
        case(
            &[
                record("a", None, 0, 3, 0),
                record("c", Some("b"), 2, 1, 4),
                record("b", Some("a"), 1, 1, 3),
            ],
            3 + 5 + 4,
            &[3, 5, 4],
        );
        // A missing parent, a parent too short, a fork of itself: left as they are.
        case(
            &[
                record("a", None, 0, 2, 0),
                record("b", Some("x"), 1, 1, 2),
                record("c", Some("a"), 1, 1, 3),
                record("d", Some("d"), 1, 1, 1),
            ],
            5,
            &[2, 1, 1, 1],
        );
        // A depth that puts the fork before its parent: the parent is not
        // whole yet, so the fork keeps what it has, as before the plan.
        case(
            &[
                record("a", None, 0, 2, 0),
                record("b", Some("a"), 5, 1, 2),
                record("c", Some("b"), 1, 1, 3),
            ],
            2 + 3 + 1,
            &[2, 3, 1],
        );
    }

    #[test]
    fn a_chain_of_forks_is_counted_without_being_copied() {
        // Each fork inherits all of the previous one's messages and adds one:
        // 2,000 listed messages would expand to about two million.
        let mut records = vec![record("0", None, 0, 1, 0)];
        for index in 1..2000usize {
            let parent = (index - 1).to_string();
            records.push(record(&index.to_string(), Some(&parent), index, 1, index));
        }
        let plan = PrefixPlan::of(&records);
        assert_eq!(plan.messages(), 2000 * 2001 / 2);
        assert_eq!(plan.lengths()[1999], 2000);
    }

    #[test]
    fn sizes_add_up_over_the_expanded_dialogs() {
        let records = [
            record("a", None, 0, 3, 0),
            record("b", Some("a"), 1, 2, 2),
            record("c", Some("b"), 2, 1, 4),
        ];
        let plan = PrefixPlan::of(&records);
        let sums = plan.sizes(&records, |message| message.content.len() as u64);
        let mut expanded = records.to_vec();
        expand_shared_prefixes(&mut expanded);
        for (sum, record) in sums.iter().zip(&expanded) {
            let mut running = vec![0u64];
            for message in &record.messages {
                running.push(running.last().unwrap() + message.content.len() as u64);
            }
            assert_eq!(sum, &running);
        }
    }
}
