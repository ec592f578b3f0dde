//! Scores: one per assertion, how they add up to a task's score and pass
//! (promptfoo's rule), and the tally of a whole batch that `summary.json`
//! shows (docs/formats.md §4, "Scores").

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// One assertion's score, as a result line's `scores` holds it.
///
/// The one reader of a written score, for every command that reads result
/// lines (`lllm batch --resume`, `lllm eval`, `lllm merge`, `lllm report`,
/// `lllm compare`). It takes an item of an older or hand-edited output with
/// a field missing or `null`: no `name` or `type` reads as empty (the score
/// is then [labelled](Score::label) by the other), except that no `type`
/// with a `name` that starts with one (`contains "Paris"`) reads as that
/// type; no `reason` reads as empty, no
/// `weight` as 1 (an assertion's default), no `score` as 1 or 0 by its
/// `pass`, no `pass` as a score of at least 0.5 (a grader's rule when it
/// answers only a score), and neither as a failing 0. A field of the wrong
/// kind (a `score` that is text) is not guessed at: the line is not read as
/// a result, as with any other field of the wrong kind.
///
/// It is written the same way round: a field at the value it reads as
/// when missing is left out (an empty `name` or `reason`, a `type` its
/// name starts with, a `weight` of 1, a `score` of 1 that passed or 0 that
/// failed), so a score of a hundred thousand result lines writes only what
/// it says.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "ScoreAsWritten")]
pub struct Score {
    /// The assertion's `metric`, else its type and value (shared with the
    /// assertion, as are the reasons of most checks: a score of a hundred
    /// thousand copies no text).
    pub name: Arc<str>,
    /// Its type as written (`not-contains`).
    #[serde(rename = "type")]
    pub type_name: Arc<str>,
    /// From 0 to 1.
    pub score: f64,
    /// Whether it passed.
    pub pass: bool,
    /// Why, in a few words (a judge's own reason).
    pub reason: Arc<str>,
    /// Its `weight`.
    pub weight: f64,
}

impl Score {
    /// What a person reads it by: its name, else its type.
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.type_name
        } else {
            &self.name
        }
    }
}

impl Serialize for Score {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut item = serializer.serialize_struct("Score", 6)?;
        if !self.name.is_empty() {
            item.serialize_field("name", &*self.name)?;
        }
        if !self.type_name.is_empty() && type_in_name(&self.name) != Some(&*self.type_name) {
            item.serialize_field("type", &*self.type_name)?;
        }
        if self.score != if self.pass { 1.0 } else { 0.0 } {
            item.serialize_field("score", &self.score)?;
        }
        item.serialize_field("pass", &self.pass)?;
        if !self.reason.is_empty() {
            item.serialize_field("reason", &*self.reason)?;
        }
        if self.weight != 1.0 {
            item.serialize_field("weight", &self.weight)?;
        }
        item.end()
    }
}

/// The assertion type a score's name starts with (`contains` of
/// `contains "Paris"`, the default name), if it starts with one.
fn type_in_name(name: &str) -> Option<&str> {
    let first = name.split(' ').next().unwrap_or_default();
    super::assertion::is_type_name(first).then_some(first)
}

/// A score as a result line may hold it (see [`Score`]'s leniency).
#[derive(Deserialize)]
struct ScoreAsWritten {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "type")]
    type_name: Option<String>,
    #[serde(default)]
    score: Option<f64>,
    #[serde(default)]
    pass: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    weight: Option<f64>,
}

impl From<ScoreAsWritten> for Score {
    fn from(written: ScoreAsWritten) -> Score {
        let (score, pass) = match (written.score, written.pass) {
            (Some(score), Some(pass)) => (score, pass),
            (Some(score), None) => (score, score >= 0.5),
            (None, Some(pass)) => (if pass { 1.0 } else { 0.0 }, pass),
            (None, None) => (0.0, false),
        };
        let text = |text: Option<String>| Arc::from(text.unwrap_or_default());
        let type_name = match (written.type_name, &written.name) {
            (None, Some(name)) => type_in_name(name).map(str::to_string),
            (type_name, _) => type_name,
        };
        Score {
            name: text(written.name),
            type_name: text(type_name),
            score,
            pass,
            reason: text(written.reason),
            weight: written.weight.unwrap_or(1.0),
        }
    }
}

/// A task's scores, its weighted score and whether it passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// One per assertion, in order.
    pub scores: Vec<Score>,
    /// The weighted mean of the scores, from 0 to 1.
    pub score: f64,
    /// Whether the task passed.
    pub pass: bool,
}

/// Adds a task's scores up, promptfoo's way: its score is the mean of the
/// scores weighted by their `weight`; it passes when every assertion with
/// a weight passes or, with a task `threshold`, when its score reaches it.
/// Assertions of weight 0 are shown and count nowhere.
pub fn combine(scores: Vec<Score>, threshold: Option<f64>) -> Scored {
    let weights: f64 = scores.iter().map(|score| score.weight).sum();
    let score = if weights > 0.0 {
        scores
            .iter()
            .map(|score| score.score * score.weight)
            .sum::<f64>()
            / weights
    } else {
        1.0
    };
    let score = round(score.clamp(0.0, 1.0));
    let pass = match threshold {
        Some(threshold) => score >= threshold,
        None => scores
            .iter()
            .filter(|score| score.weight > 0.0)
            .all(|score| score.pass),
    };
    Scored {
        scores,
        score,
        pass,
    }
}

/// Scores are written with four decimals: enough to read, and the same
/// text whichever order the sum was taken in.
pub fn round(score: f64) -> f64 {
    (score * 10_000.0).round() / 10_000.0
}

/// Failing ids `summary.json` lists.
pub const FAILING_IDS_LISTED: usize = 10;

/// The scored tasks of a batch, counted as their result lines are read or
/// written (each id once: its latest line).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    scored: u64,
    passed: u64,
    failing_ids: Vec<String>,
    /// Per original id of repeated tasks (`repeat_of`), in order of first sight.
    spread: IndexMap<String, Spread>,
}

/// How the runs of one repeated task went.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Runs scored.
    pub runs: u64,
    /// Of those, the ones that passed.
    pub passed: u64,
    /// The lowest score of a run.
    pub min_score: f64,
    /// The highest.
    pub max_score: f64,
}

impl Tally {
    /// Counts one scored task.
    pub fn add(&mut self, id: &str, repeat_of: Option<&str>, score: f64, pass: bool) {
        self.scored += 1;
        if pass {
            self.passed += 1;
        } else if self.failing_ids.len() < FAILING_IDS_LISTED {
            self.failing_ids.push(id.to_string());
        }
        if let Some(original) = repeat_of {
            let spread = self.spread.entry(original.to_string()).or_insert(Spread {
                runs: 0,
                passed: 0,
                min_score: score,
                max_score: score,
            });
            spread.runs += 1;
            spread.passed += u64::from(pass);
            spread.min_score = spread.min_score.min(score);
            spread.max_score = spread.max_score.max(score);
        }
    }

    /// Tasks scored.
    pub fn scored(&self) -> u64 {
        self.scored
    }

    /// Scored tasks that passed, over those scored (0 when none was).
    pub fn pass_rate(&self) -> f64 {
        if self.scored == 0 {
            0.0
        } else {
            self.passed as f64 / self.scored as f64
        }
    }

    /// What `summary.json` shows (`None` when no task was scored).
    pub fn summary(&self, fail_under: Option<f64>) -> Option<TallySummary> {
        (self.scored > 0).then(|| TallySummary {
            scored: self.scored,
            passed: self.passed,
            failed: self.scored - self.passed,
            pass_rate: round(self.pass_rate()),
            fail_under,
            failing_ids: self.failing_ids.clone(),
            spread: (!self.spread.is_empty()).then(|| self.spread.clone()),
        })
    }
}

/// `summary.json`'s `scores`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TallySummary {
    /// Tasks with assertions that ran.
    pub scored: u64,
    /// Of those, the ones that passed.
    pub passed: u64,
    /// And the others.
    pub failed: u64,
    /// `passed / scored`, from 0 to 1.
    pub pass_rate: f64,
    /// `--fail-under`, when given.
    pub fail_under: Option<f64>,
    /// The first [`FAILING_IDS_LISTED`] ids that failed, in the order of
    /// their result lines.
    pub failing_ids: Vec<String>,
    /// With `--repeat`: per original id, how its runs went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<IndexMap<String, Spread>>,
}

impl TallySummary {
    /// Whether the pass rate is below `--fail-under`.
    pub fn below_fail_under(&self) -> bool {
        self.fail_under.is_some_and(|floor| self.pass_rate < floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(value: f64, pass: bool, weight: f64) -> Score {
        Score {
            name: "n".into(),
            type_name: "t".into(),
            score: value,
            pass,
            reason: "".into(),
            weight,
        }
    }

    #[test]
    fn scores_add_up_by_weight_and_pass_by_threshold() {
        let cases = [
            // (scores, task threshold, score, pass)
            (
                vec![score(1.0, true, 1.0), score(0.0, false, 1.0)],
                None,
                0.5,
                false,
            ),
            (
                vec![score(1.0, true, 3.0), score(0.0, false, 1.0)],
                None,
                0.75,
                false,
            ),
            (
                vec![score(1.0, true, 3.0), score(0.0, false, 1.0)],
                Some(0.7),
                0.75,
                true,
            ),
            (
                vec![score(1.0, true, 1.0), score(0.0, false, 0.0)],
                None,
                1.0,
                true,
            ),
            (vec![score(0.0, false, 0.0)], None, 1.0, true),
            (vec![score(2.0 / 3.0, true, 1.0)], None, 0.6667, true),
        ];
        for (scores, threshold, expected, pass) in cases {
            let scored = combine(scores.clone(), threshold);
            assert_eq!(scored.score, expected, "{scores:?}");
            assert_eq!(scored.pass, pass, "{scores:?}");
        }
    }

    #[test]
    fn a_written_score_with_fields_missing_or_null_is_read_with_their_defaults() {
        let read = |text: &str| serde_json::from_str::<Score>(text);
        let whole = score(0.25, false, 2.0);
        assert_eq!(
            read(&serde_json::to_string(&whole).unwrap()).unwrap(),
            whole
        );
        let cases = [
            // (as written, label, score, pass, reason, weight)
            (
                r#"{"type": "is-json", "score": 1, "pass": true, "reason": null}"#,
                "is-json",
                1.0,
                true,
                "",
                1.0,
            ),
            (
                r#"{"name": "polite", "score": 0.7, "weight": null}"#,
                "polite",
                0.7,
                true,
                "",
                1.0,
            ),
            (
                r#"{"name": "n", "type": null, "score": 0.4, "reason": "meh"}"#,
                "n",
                0.4,
                false,
                "meh",
                1.0,
            ),
            (
                r#"{"type": "regex", "pass": true}"#,
                "regex",
                1.0,
                true,
                "",
                1.0,
            ),
            (
                r#"{"type": "regex", "pass": false, "weight": 0}"#,
                "regex",
                0.0,
                false,
                "",
                0.0,
            ),
            (r#"{}"#, "", 0.0, false, "", 1.0),
        ];
        for (text, label, value, pass, reason, weight) in cases {
            let score = read(text).unwrap();
            assert_eq!(
                (
                    score.label(),
                    score.score,
                    score.pass,
                    &*score.reason,
                    score.weight
                ),
                (label, value, pass, reason, weight),
                "{text}"
            );
        }
        for wrong in [
            r#"{"type": "regex", "score": "high", "pass": true}"#,
            r#"{"type": "regex", "pass": "yes"}"#,
            r#"{"type": 3, "pass": true}"#,
            r#""contains 'a'""#,
        ] {
            assert!(read(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn a_score_is_written_without_the_fields_at_their_defaults() {
        let written = |score: &Score| serde_json::to_string(score).unwrap();
        let cases = [
            // (score, pass, reason, weight, as written)
            (1.0, true, "", 1.0, r#"{"name":"n","type":"t","pass":true}"#),
            (
                0.0,
                false,
                "no",
                1.0,
                r#"{"name":"n","type":"t","pass":false,"reason":"no"}"#,
            ),
            (
                0.9,
                true,
                "good",
                2.0,
                r#"{"name":"n","type":"t","score":0.9,"pass":true,"reason":"good","weight":2.0}"#,
            ),
            (
                1.0,
                false,
                "",
                0.0,
                r#"{"name":"n","type":"t","score":1.0,"pass":false,"weight":0.0}"#,
            ),
            (
                0.0,
                true,
                "",
                1.0,
                r#"{"name":"n","type":"t","score":0.0,"pass":true}"#,
            ),
        ];
        for (value, pass, reason, weight, expected) in cases {
            let score = Score {
                reason: reason.into(),
                ..score(value, pass, weight)
            };
            assert_eq!(written(&score), expected);
            let read: Score = serde_json::from_str(expected).unwrap();
            assert_eq!(read, score, "{expected}");
        }
        let unnamed = Score {
            name: "".into(),
            type_name: "".into(),
            ..score(1.0, true, 1.0)
        };
        assert_eq!(written(&unnamed), r#"{"pass":true}"#);
        // A type its name starts with is left out, and read back from it.
        let cases = [
            // (name, type, as written)
            (
                "contains \"a\"",
                "contains",
                r#"{"name":"contains \"a\"","pass":true}"#,
            ),
            (
                "not-is-json",
                "not-is-json",
                r#"{"name":"not-is-json","pass":true}"#,
            ),
            (
                "cheap",
                "cost",
                r#"{"name":"cheap","type":"cost","pass":true}"#,
            ),
            (
                "contains \"a\"",
                "icontains",
                r#"{"name":"contains \"a\"","type":"icontains","pass":true}"#,
            ),
            (
                "polite x",
                "polite",
                r#"{"name":"polite x","type":"polite","pass":true}"#,
            ),
            (
                "not-cost",
                "not-cost",
                r#"{"name":"not-cost","type":"not-cost","pass":true}"#,
            ),
        ];
        for (name, type_name, expected) in cases {
            let score = Score {
                name: name.into(),
                type_name: type_name.into(),
                ..score(1.0, true, 1.0)
            };
            assert_eq!(written(&score), expected);
            let read: Score = serde_json::from_str(expected).unwrap();
            assert_eq!(read, score, "{expected}");
        }
        let read: Score = serde_json::from_str(r#"{"name": "polite", "pass": true}"#).unwrap();
        assert_eq!(&*read.type_name, "");
    }

    #[test]
    fn the_tally_counts_lists_failures_and_spreads_repeats() {
        let mut tally = Tally::default();
        assert_eq!(tally.summary(None), None);
        tally.add("a#1", Some("a"), 1.0, true);
        tally.add("a#2", Some("a"), 0.25, false);
        tally.add("b", None, 0.0, false);
        let summary = tally.summary(Some(0.5)).unwrap();
        assert_eq!((summary.scored, summary.passed, summary.failed), (3, 1, 2));
        assert_eq!(summary.pass_rate, 0.3333);
        assert_eq!(summary.failing_ids, ["a#2", "b"]);
        assert!(summary.below_fail_under());
        let spread = summary.spread.unwrap();
        assert_eq!(
            spread["a"],
            Spread {
                runs: 2,
                passed: 1,
                min_score: 0.25,
                max_score: 1.0
            }
        );
        assert_eq!(spread.len(), 1);
    }
}
