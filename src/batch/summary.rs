//! Counting what a batch did: running totals while it runs, `summary.json` and
//! the table on stderr at the end.
//!
//! `summary.json` describes the whole output directory, resumed runs included:
//! task counts (`total`, `success`, `failure`, `skipped`, `not_run`) by each
//! id's latest result; what was spent (`calls`, `retries`, `cache_hits`,
//! `tokens`, `cost`) over every result line, the earlier runs of a retried
//! or resumed task included (each cost money); `this_run` over the lines this
//! invocation wrote. Every spend total is over the same lines (issue 27: a
//! reader took `calls` for cumulative and the others for not).
//! Why the failed tasks failed: `failure_reasons` and `failed_ids` (`reasons`).

use serde::Serialize;

use super::output::{Brief, TaskState, Usage};
use super::reasons::{FailureReason, Reasons};

pub const FORMAT: &str = "lllm.batch-summary/1";

/// Counts and spend over some results.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Totals {
    pub tasks: u64,
    pub success: u64,
    pub failure: u64,
    pub skipped: u64,
    /// Calls: requests sent (`lllm::words`).
    pub calls: u64,
    /// Of those, retries after a provider error.
    pub retries: u64,
    /// Replies from the response cache instead.
    pub cache_hits: u64,
    pub usage: Usage,
    /// USD (the known part when `cost_known` is false).
    pub cost: f64,
    pub cost_known: bool,
}

impl Default for Totals {
    fn default() -> Totals {
        Totals {
            tasks: 0,
            success: 0,
            failure: 0,
            skipped: 0,
            calls: 0,
            retries: 0,
            cache_hits: 0,
            usage: Usage::default(),
            cost: 0.0,
            cost_known: true,
        }
    }
}

impl Totals {
    pub fn add(&mut self, brief: &Brief) {
        self.tasks += 1;
        match brief.state {
            TaskState::Success => self.success += 1,
            TaskState::Failure => self.failure += 1,
            TaskState::Skipped => self.skipped += 1,
        }
        self.calls += brief.calls;
        self.retries += brief.retries;
        self.cache_hits += brief.cache_hits;
        // Token counts come from servers: saturate rather than overflow.
        self.usage.prompt_tokens = self
            .usage
            .prompt_tokens
            .saturating_add(brief.usage.prompt_tokens);
        self.usage.completion_tokens = self
            .usage
            .completion_tokens
            .saturating_add(brief.usage.completion_tokens);
        self.usage.total_tokens = self
            .usage
            .total_tokens
            .saturating_add(brief.usage.total_tokens);
        self.cost += brief.cost;
        self.cost_known &= brief.cost_known;
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub format: &'static str,
    /// Tasks of this run: the TASKS file's lines in this shard, within `--limit`.
    pub total: u64,
    /// Ids by their latest result.
    pub success: u64,
    pub failure: u64,
    pub skipped: u64,
    /// Tasks with no result yet (an interrupted run); `--resume` runs them.
    pub not_run: u64,
    pub tokens: Usage,
    /// USD over every result line, retried attempts included.
    pub cost: f64,
    pub cost_known: bool,
    /// Calls: requests sent (`lllm::words`), retries included.
    pub calls: u64,
    /// Of those, retries after a provider error.
    pub retries: u64,
    /// Replies from the response cache (not sent, not paid).
    pub cache_hits: u64,
    pub this_run: ThisRun,
    pub shard: Option<String>,
    pub interrupted: bool,
    /// Why scheduling stopped early (`--fail-fast`, `--max-cost`, Ctrl-C,
    /// a provider down past `--max-outage`).
    pub stopped: Option<String>,
    /// The most frequent errors of the failed tasks (by each id's latest
    /// result), most first, each with its count and first ids (`reasons`).
    pub failure_reasons: Vec<FailureReason>,
    /// The ids of the first failed tasks, in the order of their results.
    pub failed_ids: Vec<String>,
    /// The scores of the tasks that had assertions (issue 32; absent when
    /// none had): counts, pass rate, `--fail-under`, the first failing ids
    /// and, with `--repeat`, each repeated task's spread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<crate::eval::TallySummary>,
    /// Result lines of the spend totals that are no task's latest (earlier
    /// runs of retried or resumed tasks): the table says the totals hold them.
    #[serde(skip)]
    pub superseded: u64,
}

/// Reasons the table on stderr shows.
const REASONS_SHOWN: usize = 3;

#[derive(Debug, Clone, Serialize)]
pub struct ThisRun {
    /// Results written by this invocation (skipped ones included).
    pub tasks: u64,
    pub calls: u64,
    pub cost: f64,
    pub wall_time_s: f64,
    pub tasks_per_s: f64,
    pub calls_per_s: f64,
}

impl Summary {
    /// `latest`: over each id's latest result; `spent`: over every result
    /// line; `this_run`: over the lines this invocation wrote.
    pub fn new(
        total: u64,
        latest: &Totals,
        spent: &Totals,
        this_run: &Totals,
        wall_time_s: f64,
    ) -> Summary {
        let ran = this_run.tasks - this_run.skipped;
        let rate = |count: u64| {
            if wall_time_s > 0.0 {
                count as f64 / wall_time_s
            } else {
                0.0
            }
        };
        Summary {
            format: FORMAT,
            total,
            success: latest.success,
            failure: latest.failure,
            skipped: latest.skipped,
            not_run: total.saturating_sub(latest.tasks),
            tokens: spent.usage,
            cost: spent.cost,
            cost_known: spent.cost_known,
            calls: spent.calls,
            retries: spent.retries,
            cache_hits: spent.cache_hits,
            this_run: ThisRun {
                tasks: this_run.tasks,
                calls: this_run.calls,
                cost: this_run.cost,
                wall_time_s,
                tasks_per_s: rate(ran),
                calls_per_s: rate(this_run.calls),
            },
            shard: None,
            interrupted: false,
            stopped: None,
            failure_reasons: Vec::new(),
            failed_ids: Vec::new(),
            scores: None,
            superseded: spent.tasks.saturating_sub(latest.tasks),
        }
    }

    /// The summary with the failed tasks' reasons and first ids.
    pub fn with_reasons(mut self, reasons: &Reasons) -> Summary {
        self.failure_reasons = reasons.top(super::reasons::LISTED);
        self.failed_ids = reasons.failed_ids().to_vec();
        self
    }

    /// The table printed on stderr at the end.
    pub fn table(&self, dir: &str) -> String {
        let cost = format_cost(self.cost, self.cost_known);
        let mut rows = vec![
            ("tasks", self.total.to_string()),
            ("success", self.success.to_string()),
            ("failure", self.failure.to_string()),
            ("skipped", self.skipped.to_string()),
        ];
        if self.not_run > 0 {
            rows.push(("not run", self.not_run.to_string()));
        }
        rows.extend([
            ("calls", {
                let mut text = self.calls.to_string();
                if self.retries > 0 {
                    let retries = crate::words::count(self.retries, "retry", "retries");
                    text.push_str(&format!(" ({retries})"));
                }
                if self.cache_hits > 0 {
                    text.push_str(&format!(" (+{} from the cache)", self.cache_hits));
                }
                text
            }),
            (
                "tokens",
                format!(
                    "{} ({} in, {} out)",
                    self.tokens.total_tokens,
                    self.tokens.prompt_tokens,
                    self.tokens.completion_tokens
                ),
            ),
            ("cost", cost),
        ]);
        if self.superseded > 0 {
            rows.push((
                "",
                format!(
                    "(calls, tokens and cost: every result, {} of earlier runs of a task included)",
                    self.superseded
                ),
            ));
        }
        rows.extend([(
            "this run",
            format!(
                "{} in {:.1} s · {:.1} tasks/s · {:.1} calls/s",
                crate::words::count(self.this_run.tasks, "task", "tasks"),
                self.this_run.wall_time_s,
                self.this_run.tasks_per_s,
                self.this_run.calls_per_s
            ),
        )]);
        if let Some(reason) = &self.stopped {
            rows.push(("stopped", reason.clone()));
        }
        for (index, reason) in self.failure_reasons.iter().take(REASONS_SHOWN).enumerate() {
            let mut ids = reason.ids.join(", ");
            if reason.count > reason.ids.len() as u64 {
                ids.push_str(", …");
            }
            rows.push((
                if index == 0 { "reasons" } else { "" },
                format!("{} × {} ({ids})", reason.count, reason.reason),
            ));
        }
        let unshown = self.failure_reasons.len().saturating_sub(REASONS_SHOWN);
        if unshown > 0 {
            rows.push((
                "",
                format!(
                    "… {} more in summary.json",
                    crate::words::count(unshown as u64, "reason", "reasons")
                ),
            ));
        }
        if !self.failed_ids.is_empty() {
            let mut ids = self.failed_ids.join(", ");
            if self.failure > self.failed_ids.len() as u64 {
                ids.push_str(&format!(" … ({} in all)", self.failure));
            }
            rows.push(("failed ids", ids));
        }
        if let Some(scores) = &self.scores {
            rows.extend(score_rows(scores));
        }
        rows.push(("output", dir.to_string()));
        let mut text = String::from("lllm batch summary\n");
        for (name, value) in rows {
            text.push_str(&format!("  {name:<10} {value}\n"));
        }
        text
    }
}

/// The table's rows of the scores: the pass rate (against `--fail-under`)
/// and the first failing ids.
pub fn score_rows(scores: &crate::eval::TallySummary) -> Vec<(&'static str, String)> {
    let mut rate = format!(
        "{:.1}% ({} of {} scored passed)",
        scores.pass_rate * 100.0,
        scores.passed,
        scores.scored
    );
    if let Some(floor) = scores.fail_under {
        let verdict = if scores.below_fail_under() {
            "below"
        } else {
            "at or above"
        };
        rate.push_str(&format!(" · {verdict} --fail-under {floor}"));
    }
    let mut rows = vec![("pass rate", rate)];
    if !scores.failing_ids.is_empty() {
        let mut ids = scores
            .failing_ids
            .iter()
            .map(|id| super::writer::shown_id(id))
            .collect::<Vec<_>>()
            .join(", ");
        if scores.failed > scores.failing_ids.len() as u64 {
            ids.push_str(&format!(" … ({} in all)", scores.failed));
        }
        rows.push(("failing", ids));
    }
    rows
}

pub fn format_cost(cost: f64, known: bool) -> String {
    if known {
        format!("${cost:.4}")
    } else {
        format!("${cost:.4} + unknown")
    }
}
