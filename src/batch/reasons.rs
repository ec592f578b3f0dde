//! Why a batch's tasks failed, for its end (issue 27: a summary of a batch
//! during an outage gave neither reasons nor ids): each failed task's error,
//! tallied, and the ids of the first failed tasks. `summary.json` holds the
//! most frequent reasons with their counts and first ids; the table on
//! stderr shows the first few.
//!
//! Everything is bounded, however many tasks fail: a reason is its error's
//! first 200 characters on one printable line (errors that differ only past
//! that count as one), an id is cut as every echoed value is
//! (`redact::echo`), the first [`DISTINCT`] reasons are tallied and the rest
//! counted together, and only the first ids are kept.

use std::collections::HashMap;

use serde::Serialize;

/// Distinct reasons tallied; a failure with another reason after that many
/// is counted in [`Reasons::others`].
pub const DISTINCT: usize = 1000;
/// Ids kept per reason.
pub const IDS_PER_REASON: usize = 3;
/// Ids of failed tasks kept in all.
pub const FAILED_IDS: usize = 10;
/// Reasons `summary.json` lists.
pub const LISTED: usize = 10;

/// One reason, as `summary.json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureReason {
    /// The error, cut to one printable line.
    pub reason: String,
    /// Failed tasks with this error.
    pub count: u64,
    /// The first of them ([`IDS_PER_REASON`] at most).
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Tally {
    count: u64,
    /// The order in which the reason first came.
    first: usize,
    ids: Vec<String>,
}

/// Failed tasks by their error.
#[derive(Debug, Clone, Default)]
pub struct Reasons {
    by_reason: HashMap<String, Tally>,
    /// Failures whose reason came after [`DISTINCT`] others.
    others: u64,
    failed: u64,
    failed_ids: Vec<String>,
}

/// The error of a failure that has none.
const NO_ERROR: &str = "(no error recorded)";

/// An error as a reason: its first [`ECHO_CHARS`](crate::redact::ECHO_CHARS)
/// characters, then `…`, on one line. Errors that differ only past that
/// (a long detail at their end) count as one reason.
fn shown_reason(error: &str) -> String {
    let error = without_call_counts(error);
    match error.char_indices().nth(crate::redact::ECHO_CHARS) {
        None => crate::redact::terminal_line(&error).into_owned(),
        Some((end, _)) => format!("{}…", crate::redact::terminal_line(&error[..end])),
    }
}

/// `error` without how many calls each task made before the same failure
/// (`failed after 24 calls (23 retries): X` → `failed: X`): tasks that hit
/// one outage at different moments made 1, 2 or 24 calls, and are one
/// reason (issue 27: a batch against a stopped server listed three).
fn without_call_counts(error: &str) -> std::borrow::Cow<'_, str> {
    static COUNTS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r" failed after \d+ calls?(?: \(\d+ retr(?:y|ies)\))?:")
            .expect("a valid pattern")
    });
    COUNTS.replace_all(error, " failed:")
}

impl Reasons {
    /// A failed task, `error` its result's.
    pub fn add(&mut self, id: &str, error: Option<&str>) {
        self.failed += 1;
        if self.failed_ids.len() < FAILED_IDS {
            self.failed_ids.push(crate::redact::echo(id).into_owned());
        }
        let reason = shown_reason(error.unwrap_or(NO_ERROR));
        let distinct = self.by_reason.len();
        let tally = match self.by_reason.get_mut(reason.as_str()) {
            Some(tally) => tally,
            None if distinct < DISTINCT => self.by_reason.entry(reason).or_insert(Tally {
                first: distinct,
                ..Tally::default()
            }),
            None => {
                self.others += 1;
                return;
            }
        };
        tally.count += 1;
        if tally.ids.len() < IDS_PER_REASON {
            tally.ids.push(crate::redact::echo(id).into_owned());
        }
    }

    /// Failed tasks counted.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Failures whose reason was not tallied (more than [`DISTINCT`] reasons).
    pub fn others(&self) -> u64 {
        self.others
    }

    /// The ids of the first failed tasks, in the order they came.
    pub fn failed_ids(&self) -> &[String] {
        &self.failed_ids
    }

    /// The `count` most frequent reasons, most first (the earlier first
    /// among equals).
    pub fn top(&self, count: usize) -> Vec<FailureReason> {
        let mut tallies: Vec<(&String, &Tally)> = self.by_reason.iter().collect();
        tallies.sort_by(|(_, a), (_, b)| b.count.cmp(&a.count).then(a.first.cmp(&b.first)));
        tallies
            .into_iter()
            .take(count)
            .map(|(reason, tally)| FailureReason {
                reason: reason.clone(),
                count: tally.count,
                ids: tally.ids.clone(),
            })
            .collect()
    }
}

/// The `error` of a result line (`None` when it has none, or the line is
/// not JSON).
pub fn error_of_line(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ErrorOf {
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    match serde_json::from_str::<ErrorOf>(line).ok()?.error? {
        serde_json::Value::String(error) => Some(error),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_counted_most_first_with_their_first_ids() {
        let mut reasons = Reasons::default();
        let down = "model `local/m` failed after 1 call: cannot connect to `http://127.0.0.1:9/v1`";
        for index in 0..12 {
            reasons.add(&format!("t{index}"), Some(down));
        }
        reasons.add("bad", Some("line 3: invalid task line"));
        reasons.add("odd\nid", None);
        reasons.add("t99", Some(down));
        assert_eq!(reasons.failed(), 15);
        assert_eq!(
            reasons.failed_ids(),
            ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"]
        );
        assert_eq!(
            reasons.top(5),
            [
                FailureReason {
                    reason: down.replace(" after 1 call", ""),
                    count: 13,
                    ids: vec!["t0".into(), "t1".into(), "t2".into()],
                },
                FailureReason {
                    reason: "line 3: invalid task line".into(),
                    count: 1,
                    ids: vec!["bad".into()],
                },
                FailureReason {
                    reason: NO_ERROR.into(),
                    count: 1,
                    ids: vec!["odd\\nid".into()],
                },
            ]
        );
        assert_eq!(reasons.top(1).len(), 1);
    }

    #[test]
    fn one_failure_after_different_numbers_of_calls_is_one_reason() {
        let mut reasons = Reasons::default();
        let gone = "`local` has been unreachable for 600 s";
        reasons.add(
            "a",
            Some(&format!(
                "step `draft`: model `local/m` failed after 1 call: {gone}"
            )),
        );
        reasons.add(
            "b",
            Some(&format!(
                "step `draft`: model `local/m` failed after 24 calls (23 retries): {gone}"
            )),
        );
        reasons.add(
            "c",
            Some(&format!(
                "step `draft`: model `local/m` failed after 2 calls (1 retry): {gone}"
            )),
        );
        reasons.add("d", Some("a task failed after 3 calls of its own making"));
        assert_eq!(
            reasons.top(5),
            [
                FailureReason {
                    reason: format!("step `draft`: model `local/m` failed: {gone}"),
                    count: 3,
                    ids: vec!["a".into(), "b".into(), "c".into()],
                },
                FailureReason {
                    reason: "a task failed after 3 calls of its own making".into(),
                    count: 1,
                    ids: vec!["d".into()],
                },
            ]
        );
    }

    #[test]
    fn however_many_tasks_fail_what_is_kept_is_bounded() {
        let mut reasons = Reasons::default();
        for index in 0..(DISTINCT + 500) {
            reasons.add(&format!("t{index}"), Some(&format!("reason {index}")));
        }
        assert_eq!(reasons.failed(), (DISTINCT + 500) as u64);
        assert_eq!(reasons.others(), 500);
        assert_eq!(reasons.failed_ids().len(), FAILED_IDS);
        assert_eq!(reasons.top(LISTED).len(), LISTED);
        // Long errors that differ only in their tail are one reason; a long
        // id is cut too.
        let mut reasons = Reasons::default();
        let long = "x".repeat(100_000);
        reasons.add(&long, Some(&format!("{long} 1\n")));
        reasons.add("b", Some(&format!("{long} 22")));
        let top = reasons.top(LISTED);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].count, 2);
        assert_eq!(top[0].reason, format!("{}…", "x".repeat(200)));
        assert!(top[0].ids[0].ends_with("… (100000 characters)"), "cut");
    }
}
