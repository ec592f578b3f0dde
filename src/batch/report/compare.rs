//! `lllm compare`: two batch output directories side by side, per task id —
//! state changes, a line diff of the deliveries, cost and latency deltas, ids
//! found on one side only, and for scored batches ([`ScoreComparison`]) the
//! change in pass rate and the ids that regressed (pass → fail), improved or
//! changed score. Differences are the answer, not errors.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use lllm::batch::report::{Batch, compare::compare};
//! let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let line = |id: &str, state: &str, delivery: &str| format!(
//!     r#"{{"id":"{id}","state":"{state}","delivery":"{delivery}","error":null,"cost":0.5,"session_id":null}}"#);
//! std::fs::write(a.path().join("results.jsonl"), line("t1", "success", "yes") + "\n" + &line("t2", "success", "x"))?;
//! std::fs::write(b.path().join("results.jsonl"), line("t1", "failure", "no") + "\n" + &line("t3", "success", "x"))?;
//! let comparison = compare(&Batch::read_results(a.path())?, &Batch::read_results(b.path())?);
//! assert_eq!(comparison.only_a, ["t2"]);
//! assert_eq!(comparison.only_b, ["t3"]);
//! assert!(comparison.text().starts_with("1 common ids: 1 changed (1 state change: 1 regression, 0 fixes)"));
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::diff::{self, DiffLine};
use super::html::{cost_text, escape, latency_text, one_line, page, section};
use super::scores::ScoreComparison;
use super::{Batch, TaskReport, state_name};
use crate::batch::output::TaskState;

/// One side of a compared task.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// How it ended.
    pub state: TaskState,
    /// The answer, when it succeeded.
    pub delivery: Option<String>,
    /// Why it failed or was skipped.
    pub error: Option<String>,
    /// USD; `None`: unknown.
    pub cost: Option<f64>,
    /// Milliseconds the run took.
    pub latency_ms: u64,
    /// Its score, 0–1, when it was scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Whether it passed its assertions, when it was scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<bool>,
}

impl Side {
    fn of(task: &TaskReport) -> Side {
        Side {
            state: task.state,
            delivery: task.delivery.clone(),
            error: task.error.clone(),
            cost: task.cost,
            latency_ms: task.latency_ms,
            score: task.score,
            pass: task.pass,
        }
    }
}

/// A task id found on both sides.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The task id.
    pub id: String,
    /// In the first directory.
    pub a: Side,
    /// In the second.
    pub b: Side,
    /// The state differs.
    pub state_changed: bool,
    /// The deliveries differ (a missing delivery reads as empty).
    pub delivery_changed: bool,
    /// The line diff of the deliveries; empty when they are equal.
    pub delivery_diff: Vec<DiffLine>,
    /// `b.cost - a.cost`; `None` when either is unknown.
    pub cost_delta: Option<f64>,
    /// `b.latency_ms - a.latency_ms`.
    pub latency_delta_ms: i64,
}

impl Entry {
    /// `pass → fail` or `fail → pass` when the verdict turned.
    pub fn verdict_change(&self) -> Option<&'static str> {
        match (self.a.pass, self.b.pass) {
            (Some(true), Some(false)) => Some("pass → fail"),
            (Some(false), Some(true)) => Some("fail → pass"),
            _ => None,
        }
    }

    /// The state or the delivery differs.
    pub fn changed(&self) -> bool {
        self.state_changed || self.delivery_changed
    }
}

/// Two batches compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The first directory.
    pub a: String,
    /// The second.
    pub b: String,
    /// Every id on both sides, in the first directory's order.
    pub entries: Vec<Entry>,
    /// Ids only in the first directory.
    pub only_a: Vec<String>,
    /// Ids only in the second.
    pub only_b: Vec<String>,
    /// Totals over the common ids.
    pub totals: Totals,
    /// The scores compared, when either side was scored (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<ScoreComparison>,
    /// Of `only_a` and `only_b`, those whose original id the other side has
    /// (one side ran with `--repeat`, `ID#1`…, the other not): the text
    /// counts them instead of listing each, since the scores compare them by
    /// original id.
    #[serde(skip)]
    runs_of_other_side: [HashSet<String>; 2],
}

/// Totals of a comparison over the ids both sides have.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Ids on both sides.
    pub common: usize,
    /// Of which the state or the delivery differs.
    pub changed: usize,
    /// Of which the state differs.
    pub state_changes: usize,
    /// Success on the first side, failure or skipped on the second.
    pub regressions: usize,
    /// The other way round.
    pub fixes: usize,
    /// Sum of the known costs, first side.
    pub cost_a: f64,
    /// Second side.
    pub cost_b: f64,
    /// Sum of the latencies, first side.
    pub latency_a_ms: u64,
    /// Second side.
    pub latency_b_ms: u64,
}

/// Compares each id's latest result in `a` and `b`.
pub fn compare(a: &Batch, b: &Batch) -> Comparison {
    let in_b: HashMap<&str, &TaskReport> = b
        .tasks
        .iter()
        .map(|task| (task.id.as_str(), task))
        .collect();
    let in_a: HashMap<&str, &TaskReport> = a
        .tasks
        .iter()
        .map(|task| (task.id.as_str(), task))
        .collect();
    let mut totals = Totals::default();
    let mut entries = Vec::new();
    let mut only_a = Vec::new();
    for first in &a.tasks {
        let Some(second) = in_b.get(first.id.as_str()) else {
            only_a.push(first.id.clone());
            continue;
        };
        let (delivery_a, delivery_b) = (
            first.delivery.as_deref().unwrap_or(""),
            second.delivery.as_deref().unwrap_or(""),
        );
        let delivery_changed = first.delivery != second.delivery;
        let entry = Entry {
            id: first.id.clone(),
            a: Side::of(first),
            b: Side::of(second),
            state_changed: first.state != second.state,
            delivery_changed,
            delivery_diff: if delivery_changed {
                diff::lines(delivery_a, delivery_b)
            } else {
                Vec::new()
            },
            cost_delta: first.cost.zip(second.cost).map(|(x, y)| y - x),
            latency_delta_ms: second.latency_ms as i64 - first.latency_ms as i64,
        };
        totals.common += 1;
        totals.changed += usize::from(entry.changed());
        totals.state_changes += usize::from(entry.state_changed);
        let success = |state| state == TaskState::Success;
        totals.regressions += usize::from(success(first.state) && !success(second.state));
        totals.fixes += usize::from(!success(first.state) && success(second.state));
        totals.cost_a += first.cost.unwrap_or(0.0);
        totals.cost_b += second.cost.unwrap_or(0.0);
        totals.latency_a_ms += first.latency_ms;
        totals.latency_b_ms += second.latency_ms;
        entries.push(entry);
    }
    let only_b: Vec<String> = b
        .tasks
        .iter()
        .filter(|task| !in_a.contains_key(task.id.as_str()))
        .map(|task| task.id.clone())
        .collect();
    let runs_of_other_side = [runs_of(&only_a, a, b), runs_of(&only_b, b, a)];
    Comparison {
        a: a.dir.display().to_string(),
        b: b.dir.display().to_string(),
        entries,
        only_a,
        only_b,
        totals,
        scores: ScoreComparison::of(&a.tasks, &b.tasks),
        runs_of_other_side,
    }
}

/// Of `ids` (one-sided ids of `side`), those whose original id (the id a
/// `--repeat` run repeats, else its own) is one `other` has too.
fn runs_of(ids: &[String], side: &Batch, other: &Batch) -> HashSet<String> {
    let originals: HashSet<&str> = other
        .tasks
        .iter()
        .map(|task| task.repeat_of.as_deref().unwrap_or(&task.id))
        .collect();
    let ids: HashSet<&str> = ids.iter().map(String::as_str).collect();
    side.tasks
        .iter()
        .filter(|task| ids.contains(task.id.as_str()))
        .filter(|task| originals.contains(task.repeat_of.as_deref().unwrap_or(&task.id)))
        .map(|task| task.id.clone())
        .collect()
}

fn signed_cost(delta: f64) -> String {
    format!("{}{:.6}", if delta < 0.0 { "-" } else { "+" }, delta.abs())
}

fn signed(delta: i64) -> String {
    format!("{delta:+}")
}

impl Comparison {
    /// The summary line alone.
    pub fn summary(&self) -> String {
        let totals = &self.totals;
        format!(
            "{} common ids: {} changed ({} state change{}: {} regression{}, {} fix{}), {} same; \
             only in A: {}, only in B: {}; cost ${:.6} -> ${:.6} ({}); latency {} ms -> {} ms ({} ms)",
            totals.common,
            totals.changed,
            totals.state_changes,
            plural(totals.state_changes),
            totals.regressions,
            plural(totals.regressions),
            totals.fixes,
            if totals.fixes == 1 { "" } else { "es" },
            totals.common - totals.changed,
            self.only_a.len(),
            self.only_b.len(),
            totals.cost_a,
            totals.cost_b,
            signed_cost(totals.cost_b - totals.cost_a),
            totals.latency_a_ms,
            totals.latency_b_ms,
            signed(totals.latency_b_ms as i64 - totals.latency_a_ms as i64),
        )
    }

    /// What `lllm compare` prints: the summary line, the scores compared
    /// (when either side was scored), then each changed id (state, cost and
    /// latency deltas, the delivery diff), then the ids found on one side
    /// only. Control characters are escaped for a terminal.
    pub fn text(&self) -> String {
        let mut out = self.summary();
        out.push('\n');
        if let Some(scores) = &self.scores {
            out.push_str(&scores.text());
        }
        for entry in self.entries.iter().filter(|entry| entry.changed()) {
            let state = if entry.state_changed {
                format!(
                    "{} -> {}",
                    state_name(entry.a.state),
                    state_name(entry.b.state)
                )
            } else {
                state_name(entry.a.state).to_string()
            };
            let cost = entry
                .cost_delta
                .map(signed_cost)
                .unwrap_or_else(|| "unknown".into());
            let _ = writeln!(
                out,
                "\n{}: {state}; cost {cost}; latency {} ms",
                entry.id,
                signed(entry.latency_delta_ms)
            );
            for line in &entry.delivery_diff {
                let _ = writeln!(out, "  {}", line.text());
            }
            if let (TaskState::Success, Some(error)) = (entry.a.state, &entry.b.error) {
                let _ = writeln!(out, "  error in B: {}", one_line(error, 200));
            }
        }
        for (at, (side, other, ids)) in [("A", "B", &self.only_a), ("B", "A", &self.only_b)]
            .into_iter()
            .enumerate()
        {
            let runs = &self.runs_of_other_side[at];
            let listed: Vec<&str> = ids
                .iter()
                .filter(|id| !runs.contains(*id))
                .map(String::as_str)
                .collect();
            if !listed.is_empty() {
                let _ = writeln!(out, "\nonly in {side}: {}", listed.join(", "));
            }
            if !runs.is_empty() {
                let _ = writeln!(
                    out,
                    "\nonly in {side}: {} whose original id {other} has too (--repeat runs): compared by original id under scores",
                    crate::words::count(runs.len() as u64, "id", "ids"),
                );
            }
        }
        match crate::redact::terminal_text(&out) {
            std::borrow::Cow::Borrowed(_) => out,
            std::borrow::Cow::Owned(escaped) => escaped,
        }
    }

    /// The self-contained HTML page: the summary, one row per id of either
    /// side (changed rows first) opening the two deliveries and their diff.
    pub fn html(&self) -> String {
        let mut rows = String::new();
        let mut details = Vec::new();
        // A verdict that turned is a change to look at too (a rescored
        // batch: same deliveries, other assertions).
        let shown_changed = |entry: &&Entry| entry.changed() || entry.verdict_change().is_some();
        let ordered = self
            .entries
            .iter()
            .filter(shown_changed)
            .chain(self.entries.iter().filter(|entry| !shown_changed(entry)));
        for entry in ordered {
            let index = details.len();
            let state = if entry.state_changed {
                format!(
                    "{} → {}",
                    state_name(entry.a.state),
                    state_name(entry.b.state)
                )
            } else {
                state_name(entry.a.state).to_string()
            };
            let class = if shown_changed(&entry) {
                "changed"
            } else {
                "same"
            };
            let _ = writeln!(
                rows,
                "<tr data-row=\"{index}\" class=\"{class} {b_state}\" tabindex=\"0\"><td class=\"id\">{id}</td>\
                 <td class=\"state\">{state}</td><td>{what}</td><td class=\"num\">{cost_a}</td><td class=\"num\">{cost_b}</td>\
                 <td class=\"num\">{cost_delta}</td><td class=\"num\">{latency_a}</td><td class=\"num\">{latency_b}</td></tr>",
                b_state = state_name(entry.b.state),
                id = escape(&entry.id),
                state = escape(&state),
                what = {
                    let mut what: Vec<&str> = Vec::new();
                    if entry.delivery_changed {
                        what.push("delivery differs");
                    } else if entry.state_changed {
                        what.push("state");
                    }
                    what.extend(entry.verdict_change());
                    if what.is_empty() {
                        what.push("same");
                    }
                    what.join("; ")
                },
                cost_a = cost_text(entry.a.cost, true),
                cost_b = cost_text(entry.b.cost, true),
                cost_delta = entry
                    .cost_delta
                    .map(signed_cost)
                    .unwrap_or_else(|| "unknown".into()),
                latency_a = latency_text(entry.a.latency_ms),
                latency_b = latency_text(entry.b.latency_ms),
            );
            let mut sections = Vec::new();
            if entry.delivery_changed {
                let diff: Vec<String> = entry.delivery_diff.iter().map(DiffLine::text).collect();
                sections.push(section("delivery diff (A → B)", &diff.join("\n"), true));
            }
            for (name, side) in [("A", &entry.a), ("B", &entry.b)] {
                if let Some(delivery) = &side.delivery {
                    sections.push(section(&format!("delivery {name}"), delivery, false));
                }
                if let Some(error) = &side.error {
                    sections.push(section(&format!("error {name}"), error, false));
                }
            }
            details.push(Value::Array(sections));
        }
        for (side, ids) in [("A", &self.only_a), ("B", &self.only_b)] {
            for id in ids {
                let index = details.len();
                let _ = writeln!(
                    rows,
                    "<tr data-row=\"{index}\" class=\"only\" tabindex=\"0\"><td class=\"id\">{id}</td>\
                     <td class=\"state\">only in {side}</td><td></td><td></td><td></td><td></td><td></td><td></td></tr>",
                    id = escape(id),
                );
                details.push(Value::Array(vec![section(
                    "only on one side",
                    &format!("`{id}` is only in {side}"),
                    false,
                )]));
            }
        }
        let mut summary = format!(
            "<p class=\"summary\">A: {}<br>B: {}</p>\n<p class=\"summary\">{}</p>",
            escape(&self.a),
            escape(&self.b),
            escape(&self.summary())
        );
        if let Some(scores) = &self.scores {
            let _ = write!(
                summary,
                "\n<pre class=\"scores\">{}</pre>",
                escape(scores.text().trim_end())
            );
        }
        page(
            "lllm compare",
            &summary,
            "<th>id</th><th>state (A → B)</th><th>what</th><th>cost A</th><th>cost B</th><th>Δ cost</th><th>latency A</th><th>latency B</th>",
            &rows,
            &Value::Array(details),
        )
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}
