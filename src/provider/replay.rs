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

/// Lines of what both texts have shown around each change.
const CONTEXT: usize = 2;
/// The most diff lines shown; the rest are counted.
const MAX_DIFF_LINES: usize = 40;
/// The most characters of one line shown.
const MAX_LINE_CHARS: usize = 200;
/// Above this many line pairs, the changed middle is not aligned line by
/// line (the table would take too long): it is shown as removed, then added.
const MAX_ALIGNED: usize = 250_000;

/// One line of a line diff.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Line<'t> {
    Same(&'t str),
    Recorded(&'t str),
    Now(&'t str),
}

/// The recorded text and this one as a line diff, each line on its own line
/// (issue 27: they were one line each, their line breaks shown as `\n`):
/// `- ` lines only the record has, `+ ` lines only the re-run has, with
/// `CONTEXT` lines both have around each change and `…` where more are left
/// out. Every line is cut at `MAX_LINE_CHARS`, and the whole at
/// `MAX_DIFF_LINES`.
fn line_diff(recorded: &str, now: &str) -> Vec<String> {
    let before: Vec<&str> = recorded.lines().collect();
    let after: Vec<&str> = now.lines().collect();
    let lines = aligned(&before, &after);
    let changed: Vec<bool> = lines
        .iter()
        .map(|line| !matches!(line, Line::Same(_)))
        .collect();
    // A line is shown when a change is within `CONTEXT` lines of it.
    let near = |index: usize| {
        let start = index.saturating_sub(CONTEXT);
        let end = (index + CONTEXT + 1).min(changed.len());
        changed[start..end].iter().any(|changed| *changed)
    };
    let cut = |text: &str| match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    };
    let mut shown = Vec::new();
    let mut skipped = false;
    for (index, line) in lines.iter().enumerate() {
        if !near(index) {
            skipped = true;
            continue;
        }
        if std::mem::take(&mut skipped) {
            shown.push("    …".to_string());
        }
        let line = match line {
            Line::Same(text) => format!("      {}", cut(text)),
            Line::Recorded(text) => format!("    - {}", cut(text)),
            Line::Now(text) => format!("    + {}", cut(text)),
        };
        shown.push(line.trim_end().to_string());
    }
    if skipped {
        shown.push("    …".to_string());
    }
    if shown.len() > MAX_DIFF_LINES {
        let more = shown.len() - MAX_DIFF_LINES;
        shown.truncate(MAX_DIFF_LINES);
        shown.push(format!("    … {more} more lines of the diff"));
    }
    shown
}

/// Both texts' lines aligned: the common start and end as they are, the
/// middle by a longest common subsequence (when it is small enough).
fn aligned<'t>(before: &[&'t str], after: &[&'t str]) -> Vec<Line<'t>> {
    let head = before.iter().zip(after).take_while(|(a, b)| a == b).count();
    let tail = before[head..]
        .iter()
        .rev()
        .zip(after[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old, new) = (
        &before[head..before.len() - tail],
        &after[head..after.len() - tail],
    );
    let mut lines: Vec<Line<'t>> = before[..head].iter().map(|line| Line::Same(line)).collect();
    if old.len().saturating_mul(new.len()) > MAX_ALIGNED {
        lines.extend(old.iter().map(|line| Line::Recorded(line)));
        lines.extend(new.iter().map(|line| Line::Now(line)));
    } else {
        // common[i][j]: the longest common subsequence of old[i..] and new[j..].
        let width = new.len() + 1;
        let mut common = vec![0u32; (old.len() + 1) * width];
        for i in (0..old.len()).rev() {
            for j in (0..new.len()).rev() {
                common[i * width + j] = if old[i] == new[j] {
                    common[(i + 1) * width + j + 1] + 1
                } else {
                    common[(i + 1) * width + j].max(common[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            if i < old.len() && j < new.len() && old[i] == new[j] {
                lines.push(Line::Same(old[i]));
                i += 1;
                j += 1;
            } else if j == new.len()
                || (i < old.len() && common[(i + 1) * width + j] >= common[i * width + j + 1])
            {
                lines.push(Line::Recorded(old[i]));
                i += 1;
            } else {
                lines.push(Line::Now(new[j]));
                j += 1;
            }
        }
    }
    lines.extend(
        before[before.len() - tail..]
            .iter()
            .map(|line| Line::Same(line)),
    );
    lines
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
            let mut text = format!(
                "  message {index} ({} `{}`) differs (- recorded, + now):",
                after.role, after.name
            );
            let diff = if before.content == after.content {
                vec!["    the same text; its name, role or tool calls differ".to_string()]
            } else {
                line_diff(&before.content, &after.content)
            };
            for line in diff {
                text.push('\n');
                text.push_str(&line);
            }
            return text;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(recorded: &str, now: &str, expected: &[&str]) {
        assert_eq!(line_diff(recorded, now), expected, "{recorded:?} → {now:?}");
    }

    #[test]
    fn a_changed_line_is_shown_between_what_both_have() {
        case(
            "Source: owls\nSummary: hoot\nIs the summary faithful?\nReply ok.",
            "Source: owls\nSummary: hoot\nIs it faithful?\nReply ok.",
            &[
                "      Source: owls",
                "      Summary: hoot",
                "    - Is the summary faithful?",
                "    + Is it faithful?",
                "      Reply ok.",
            ],
        );
        // Far from a change, lines are left out.
        let recorded = (1..=20)
            .map(|n| format!("line {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let now = recorded.replace("line 10\n", "line ten\nline 10½\n");
        case(
            &recorded,
            &now,
            &[
                "    …",
                "      line 8",
                "      line 9",
                "    - line 10",
                "    + line ten",
                "    + line 10½",
                "      line 11",
                "      line 12",
                "    …",
            ],
        );
        // Lines added at the end, a text that was empty.
        case("a", "a\nb", &["      a", "    + b"]);
        case("", "new", &["    + new"]);
    }

    #[test]
    fn long_diffs_and_lines_are_cut() {
        let recorded = (0..100)
            .map(|n| format!("old {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let now = (0..100)
            .map(|n| format!("new {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let diff = line_diff(&recorded, &now);
        assert_eq!(diff.len(), MAX_DIFF_LINES + 1);
        assert_eq!(diff.last().unwrap(), "    … 160 more lines of the diff");
        let long = "x".repeat(1000);
        let diff = line_diff(&long, "y");
        assert_eq!(diff[0].chars().count(), 6 + MAX_LINE_CHARS + 1);
        // Past the aligned size, the middle is removed then added, whole.
        let big_old = (0..600)
            .map(|n| format!("o{n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let big_new = (0..600)
            .map(|n| format!("n{n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let diff = line_diff(&big_old, &big_new);
        assert_eq!(diff[0], "    - o0");
        assert_eq!(diff.len(), MAX_DIFF_LINES + 1);
    }
}
