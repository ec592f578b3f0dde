//! The scores of a scored batch (issue 32), as `lllm report` and `lllm
//! compare` read them: each result line of a task that had assertions carries
//! `scores` (one [`Score`] per assertion, read as every reader of result
//! lines reads it), `score` (their weighted mean, 0–1) and `pass`; a task run N times by `--repeat` has ids `ID#1` …
//! `ID#N` and `repeat_of: "ID"`. Scoring itself (the assertions, the judge,
//! `summary.json`'s `scores`) is `lllm batch`'s and `lllm eval`'s concern;
//! this module only totals what the lines say ([`ScoreSummary`]) and sets two
//! batches' scores side by side ([`ScoreComparison`]).
//!
//! Totals are made from the lines (each id's latest), not copied from
//! `summary.json`, so merged shards and rescored outputs read the same; only
//! `fail_under` comes from `summary.json`.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::TaskReport;
use crate::eval::Score;

/// The scored runs of one task: one, or N with `--repeat N`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Runs {
    /// Scored runs.
    pub runs: usize,
    /// Of which passed.
    pub passes: usize,
    /// The mean of their scores.
    pub score: f64,
    /// The lowest score.
    pub min_score: f64,
    /// The highest.
    pub max_score: f64,
}

impl Runs {
    fn new(score: f64, pass: bool) -> Runs {
        Runs {
            runs: 1,
            passes: usize::from(pass),
            score,
            min_score: score,
            max_score: score,
        }
    }

    fn add(&mut self, score: f64, pass: bool) {
        self.score = (self.score * self.runs as f64 + score) / (self.runs + 1) as f64;
        self.runs += 1;
        self.passes += usize::from(pass);
        self.min_score = self.min_score.min(score);
        self.max_score = self.max_score.max(score);
    }

    /// The share of runs that passed, 0–1.
    pub fn pass_rate(&self) -> f64 {
        self.passes as f64 / self.runs.max(1) as f64
    }

    /// `pass`, `fail`, or `2/3 passed` for repeated runs.
    pub fn text(&self) -> String {
        match (self.runs, self.passes) {
            (1, 1) => "pass".into(),
            (1, _) => "fail".into(),
            (runs, passes) => format!("{passes}/{runs} passed"),
        }
    }
}

/// The scored tasks of a batch, each original id once (the runs of a
/// repeated task together under the id they repeat), in the order ids first
/// appear.
pub fn runs_by_id(tasks: &[TaskReport]) -> Vec<(String, Runs)> {
    let mut order: Vec<(String, Runs)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for task in tasks {
        let Some(pass) = task.pass else { continue };
        let score = task.score.unwrap_or(if pass { 1.0 } else { 0.0 });
        let id = task.repeat_of.as_deref().unwrap_or(&task.id);
        match index.get(id) {
            Some(&at) => order[at].1.add(score, pass),
            None => {
                index.insert(id, order.len());
                order.push((id.to_string(), Runs::new(score, pass)));
            }
        }
    }
    order
}

/// A batch's scores, totalled from its result lines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreSummary {
    /// Tasks (runs, with `--repeat`) that were scored.
    pub scored: usize,
    /// Of which passed.
    pub passed: usize,
    /// Of which failed.
    pub failed: usize,
    /// `passed / scored`, four decimals.
    pub pass_rate: f64,
    /// `summary.json`'s `scores.fail_under` (`--fail-under`), when set.
    pub fail_under: Option<f64>,
    /// Every scored task that failed, in order.
    pub failing_ids: Vec<String>,
    /// Per original id of repeated tasks (those with `repeat_of`): its runs.
    pub repeats: Vec<(String, Runs)>,
}

impl ScoreSummary {
    /// The totals of `tasks`; `None` when none was scored. `summary` is the
    /// batch's `summary.json`, read for `fail_under`.
    pub fn of(tasks: &[TaskReport], summary: Option<&Value>) -> Option<ScoreSummary> {
        let scored: Vec<&TaskReport> = tasks.iter().filter(|task| task.pass.is_some()).collect();
        if scored.is_empty() {
            return None;
        }
        let failing_ids: Vec<String> = scored
            .iter()
            .filter(|task| task.pass == Some(false))
            .map(|task| task.id.clone())
            .collect();
        let repeated: Vec<TaskReport> = tasks
            .iter()
            .filter(|task| task.repeat_of.is_some())
            .cloned()
            .collect();
        let fail_under = summary
            .and_then(|summary| summary.pointer("/scores/fail_under"))
            .and_then(Value::as_f64);
        Some(ScoreSummary {
            scored: scored.len(),
            passed: scored.len() - failing_ids.len(),
            failed: failing_ids.len(),
            pass_rate: rounded((scored.len() - failing_ids.len()) as f64 / scored.len() as f64),
            fail_under,
            failing_ids,
            repeats: runs_by_id(&repeated),
        })
    }

    /// `8 of 10 scored passed (80.0%)`, with the `--fail-under` verdict.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{} of {} scored passed ({})",
            self.passed,
            self.scored,
            percent(self.pass_rate)
        );
        if let Some(rate) = self.fail_under {
            let verdict = if self.pass_rate < rate {
                "below"
            } else {
                "met"
            };
            out.push_str(&format!("; fail under {}: {verdict}", percent(rate)));
        }
        out
    }
}

/// A rate written with four decimals, as `summary.json` writes its own
/// (`0.8333`): the JSON says the same number whichever file it came from.
fn rounded(rate: f64) -> f64 {
    (rate * 10_000.0).round() / 10_000.0
}

/// `83.3%`.
pub fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// One side's pass rate in a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rate {
    /// Scored tasks (runs).
    pub scored: usize,
    /// Of which passed.
    pub passed: usize,
    /// `passed / scored`, four decimals.
    pub pass_rate: f64,
}

/// An id scored on both sides whose verdict or score moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreChange {
    /// The task's id (the original id of repeated runs).
    pub id: String,
    /// Its runs in the first directory.
    pub a: Runs,
    /// In the second.
    pub b: Runs,
    /// `b.score - a.score` (mean scores).
    pub score_delta: f64,
    /// The assertions whose verdict differs (single runs on both sides,
    /// matched by name): those that turned and those on one side only that
    /// failed there, in B's order, then A's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assertions: Vec<AssertionChange>,
}

/// One assertion's verdict on a task, A and B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssertionChange {
    /// What it is read by ([`Score::label`]).
    pub name: String,
    /// Passed in A; `None`: A did not have it.
    pub pass_a: Option<bool>,
    /// Passed in B; `None`: B does not have it.
    pub pass_b: Option<bool>,
    /// B's reason (A's when B does not have it).
    pub reason: String,
}

/// Two batches' scores compared per original id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreComparison {
    /// The first directory's pass rate; `None`: it has no scores.
    pub a: Option<Rate>,
    /// The second's.
    pub b: Option<Rate>,
    /// `b.pass_rate - a.pass_rate` when both have scores, four decimals.
    pub pass_rate_change: Option<f64>,
    /// Ids scored on both sides.
    pub common: usize,
    /// Ids whose share of passing runs fell (pass → fail), in A's order.
    pub regressions: Vec<ScoreChange>,
    /// Ids whose share rose (fail → pass).
    pub improvements: Vec<ScoreChange>,
    /// Ids passing as before whose mean score moved.
    pub score_changes: Vec<ScoreChange>,
}

/// Scores closer than this are the same (they are written rounded).
const SAME_SCORE: f64 = 1e-9;

impl ScoreComparison {
    /// `a`'s and `b`'s scores compared; `None` when neither has any.
    pub fn of(a: &[TaskReport], b: &[TaskReport]) -> Option<ScoreComparison> {
        let (runs_a, runs_b) = (runs_by_id(a), runs_by_id(b));
        if runs_a.is_empty() && runs_b.is_empty() {
            return None;
        }
        let rate = |tasks: &[TaskReport]| {
            let scored = tasks.iter().filter(|task| task.pass.is_some()).count();
            let passed = tasks.iter().filter(|task| task.pass == Some(true)).count();
            (scored > 0).then(|| Rate {
                scored,
                passed,
                pass_rate: rounded(passed as f64 / scored as f64),
            })
        };
        let (rate_a, rate_b) = (rate(a), rate(b));
        let in_b: HashMap<&str, &Runs> = runs_b
            .iter()
            .map(|(id, tally)| (id.as_str(), tally))
            .collect();
        let mut comparison = ScoreComparison {
            a: rate_a,
            b: rate_b,
            pass_rate_change: rate_a
                .zip(rate_b)
                .map(|(a, b)| rounded(b.pass_rate - a.pass_rate)),
            common: 0,
            regressions: Vec::new(),
            improvements: Vec::new(),
            score_changes: Vec::new(),
        };
        for (id, first) in &runs_a {
            let Some(&second) = in_b.get(id.as_str()) else {
                continue;
            };
            comparison.common += 1;
            let score_delta = second.score - first.score;
            let list = if second.pass_rate() < first.pass_rate() {
                &mut comparison.regressions
            } else if second.pass_rate() > first.pass_rate() {
                &mut comparison.improvements
            } else if score_delta.abs() > SAME_SCORE {
                &mut comparison.score_changes
            } else {
                continue;
            };
            let assertions = if first.runs == 1 && second.runs == 1 {
                assertion_changes(single(a, id), single(b, id))
            } else {
                Vec::new()
            };
            list.push(ScoreChange {
                id: id.clone(),
                a: *first,
                b: *second,
                score_delta,
                assertions,
            });
        }
        Some(comparison)
    }

    /// What `lllm compare` prints of the scores: the pass rates and counts,
    /// then each regression, improvement and score change on a line (with
    /// the assertions that turned).
    pub fn text(&self) -> String {
        let side = |rate: Option<Rate>| match rate {
            Some(rate) => format!(
                "{} ({} of {})",
                percent(rate.pass_rate),
                rate.passed,
                rate.scored
            ),
            None => "none".into(),
        };
        let change = match self.pass_rate_change {
            Some(change) => format!(" ({:+.1} points)", change * 100.0),
            None => String::new(),
        };
        let mut out = format!(
            "scores: pass rate {} -> {}{change}; {} scored on both sides: {} regression{}, {} improvement{}, {} score change{}\n",
            side(self.a),
            side(self.b),
            self.common,
            self.regressions.len(),
            plural(self.regressions.len()),
            self.improvements.len(),
            plural(self.improvements.len()),
            self.score_changes.len(),
            plural(self.score_changes.len()),
        );
        for (title, list) in [
            ("regressions (pass -> fail)", &self.regressions),
            ("improvements (fail -> pass)", &self.improvements),
            ("score changes", &self.score_changes),
        ] {
            if list.is_empty() {
                continue;
            }
            out.push_str(&format!("\n{title}:\n"));
            for change in list {
                out.push_str(&format!("  {}\n", change.text()));
            }
        }
        out
    }
}

impl ScoreChange {
    /// `q7: pass -> fail; score 1.00 -> 0.40 (-0.60); contains "Paris": pass -> fail (reason)`.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}: {} -> {}; score {:.2} -> {:.2} ({:+.2})",
            self.id,
            self.a.text(),
            self.b.text(),
            self.a.score,
            self.b.score,
            self.score_delta
        );
        for assertion in &self.assertions {
            let verdict = |pass: Option<bool>| match pass {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "absent",
            };
            out.push_str(&format!(
                "; {}: {} -> {}",
                assertion.name,
                verdict(assertion.pass_a),
                verdict(assertion.pass_b)
            ));
            if !assertion.reason.is_empty() {
                out.push_str(&format!(
                    " ({})",
                    super::html::one_line(&assertion.reason, 120)
                ));
            }
        }
        out
    }
}

/// The one scored task of `tasks` under original id `id`.
fn single<'a>(tasks: &'a [TaskReport], id: &str) -> &'a [Score] {
    tasks
        .iter()
        .find(|task| task.pass.is_some() && task.repeat_of.as_deref().unwrap_or(&task.id) == id)
        .map(|task| task.scores.as_slice())
        .unwrap_or_default()
}

/// The assertions whose verdict differs between `a` and `b`, by label: those
/// on both sides that turned, and those on one side only that failed there
/// (one passing on one side only explains no change, and rescoring with a
/// new list would name every assertion of both).
fn assertion_changes(a: &[Score], b: &[Score]) -> Vec<AssertionChange> {
    let find = |list: &[Score], label: &str| {
        list.iter()
            .find(|score| score.label() == label)
            .map(|score| score.pass)
    };
    let mut changes: Vec<AssertionChange> = b
        .iter()
        .filter(|score| match find(a, score.label()) {
            Some(before) => before != score.pass,
            None => !score.pass,
        })
        .map(|score| AssertionChange {
            name: score.label().to_string(),
            pass_a: find(a, score.label()),
            pass_b: Some(score.pass),
            reason: score.reason.to_string(),
        })
        .collect();
    changes.extend(
        a.iter()
            .filter(|score| !score.pass && find(b, score.label()).is_none())
            .map(|score| AssertionChange {
                name: score.label().to_string(),
                pass_a: Some(false),
                pass_b: None,
                reason: score.reason.to_string(),
            }),
    );
    changes
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::output::TaskState;

    fn task(id: &str, pass: Option<bool>, score: f64, repeat_of: Option<&str>) -> TaskReport {
        TaskReport {
            id: id.into(),
            state: TaskState::Success,
            delivery: None,
            error: None,
            cost: None,
            cost_known: true,
            latency_ms: 0,
            calls: 0,
            total_tokens: 0,
            session_id: None,
            task: None,
            args: Default::default(),
            tags: Default::default(),
            session: None,
            scores: pass
                .map(|pass| {
                    vec![Score {
                        name: "check".into(),
                        type_name: "contains".into(),
                        score,
                        pass,
                        reason: format!("{id} reason").into(),
                        weight: 1.0,
                    }]
                })
                .unwrap_or_default(),
            score: pass.map(|_| score),
            pass,
            repeat_of: repeat_of.map(str::to_string),
        }
    }

    #[test]
    fn a_summary_counts_scored_tasks_only() {
        let tasks = [
            task("a", Some(true), 1.0, None),
            task("b", Some(false), 0.2, None),
            task("c", None, 0.0, None),
            task("d#1", Some(true), 1.0, Some("d")),
            task("d#2", Some(false), 0.0, Some("d")),
        ];
        let summary = serde_json::json!({"scores": {"fail_under": 0.75}});
        let totals = ScoreSummary::of(&tasks, Some(&summary)).unwrap();
        assert_eq!(
            (totals.scored, totals.passed, totals.failed),
            (4, 2, 2),
            "{totals:?}"
        );
        assert_eq!(totals.failing_ids, ["b", "d#2"]);
        assert_eq!(totals.repeats.len(), 1);
        assert_eq!(totals.repeats[0].0, "d");
        assert_eq!(totals.repeats[0].1.text(), "1/2 passed");
        assert_eq!(totals.repeats[0].1.score, 0.5);
        assert_eq!(
            totals.text(),
            "2 of 4 scored passed (50.0%); fail under 75.0%: below"
        );
        assert!(ScoreSummary::of(&tasks[2..3], None).is_none());
    }

    #[test]
    fn a_comparison_sorts_ids_into_regressions_improvements_and_changes() {
        let a = [
            task("down", Some(true), 1.0, None),
            task("up", Some(false), 0.0, None),
            task("moved", Some(true), 0.6, None),
            task("same", Some(true), 1.0, None),
            task("gone", Some(true), 1.0, None),
            task("r#1", Some(true), 1.0, Some("r")),
            task("r#2", Some(true), 1.0, Some("r")),
        ];
        let b = [
            task("down", Some(false), 0.4, None),
            task("up", Some(true), 1.0, None),
            task("moved", Some(true), 0.9, None),
            task("same", Some(true), 1.0, None),
            task("r#1", Some(true), 1.0, Some("r")),
            task("r#2", Some(false), 0.0, Some("r")),
            task("new", Some(false), 0.0, None),
        ];
        let comparison = ScoreComparison::of(&a, &b).unwrap();
        let ids = |list: &[ScoreChange]| list.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&comparison.regressions), ["down", "r"]);
        assert_eq!(ids(&comparison.improvements), ["up"]);
        assert_eq!(ids(&comparison.score_changes), ["moved"]);
        assert_eq!(comparison.common, 5);
        let change = comparison.pass_rate_change.unwrap();
        assert_eq!(change, -0.2857);
        let text = comparison.text();
        assert!(
            text.starts_with("scores: pass rate 85.7% (6 of 7) -> 57.1% (4 of 7) (-28.6 points); 5 scored on both sides: 2 regressions, 1 improvement, 1 score change\n"),
            "{text}"
        );
        assert!(
            text.contains("\n  down: pass -> fail; score 1.00 -> 0.40 (-0.60); check: pass -> fail (down reason)\n"),
            "{text}"
        );
        assert!(
            text.contains("\n  r: 2/2 passed -> 1/2 passed; score 1.00 -> 0.50 (-0.50)\n"),
            "{text}"
        );
        assert!(text.contains("\n  moved: pass -> pass; score 0.60 -> 0.90 (+0.30)\n"));
        let plain = [task("x", None, 0.0, None)];
        assert!(ScoreComparison::of(&plain, &plain).is_none());
    }

    #[test]
    fn assertion_changes_match_by_label() {
        let score = |name: &str, pass: bool| Score {
            name: name.into(),
            type_name: "equals".into(),
            score: f64::from(u8::from(pass)),
            pass,
            reason: "".into(),
            weight: 1.0,
        };
        let a = [
            score("x", true),
            score("y", true),
            score("old", false),
            score("dropped", true),
        ];
        let b = [
            score("x", true),
            score("y", false),
            score("new", true),
            score("added", false),
        ];
        let names: Vec<(String, Option<bool>, Option<bool>)> = assertion_changes(&a, &b)
            .into_iter()
            .map(|change| (change.name, change.pass_a, change.pass_b))
            .collect();
        assert_eq!(
            names,
            [
                ("y".to_string(), Some(true), Some(false)),
                ("added".to_string(), None, Some(false)),
                ("old".to_string(), Some(false), None),
            ]
        );
        let unnamed: Score = serde_json::from_str(
            r#"{"type": "is-json", "score": 1, "pass": true, "reason": null}"#,
        )
        .unwrap();
        assert_eq!((unnamed.label(), unnamed.weight), ("is-json", 1.0));
    }
}
