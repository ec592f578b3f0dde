//! Scoring a finished task (issue 32): the tactic's `asserts`, then the task
//! line's (`expected` last), checked on its result; the graders that run
//! something are run here. A `command` grader runs as a command tool does
//! (`tool::command`: no shell, its own process group, without lllm's
//! credentials); a judge (`llm-rubric`) is a tactic, built once with the
//! batch's budget, cache and limits, whose verdict `{score, pass, reason}`
//! is checked here, and whose session records go to `judges.jsonl` beside
//! the results (replayable with `lllm replay DIR/judges.jsonl --id …`).
//! `lllm batch` scores as each task ends; `lllm eval` rescores a finished
//! output (`rescore`).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::output::{ResultLine, TaskState};
use crate::eval::{Assertion, Assertions, Kind, Score, Scored, Subject};
use crate::tactic::{RunState, Tactic};
use crate::tool::Tool;

/// The judges' session records, beside the results.
pub const JUDGES: &str = "judges.jsonl";

/// What a judge's verdict must hold: the output a judge tactic declares.
pub const VERDICT_FIELDS: [&str; 3] = ["score", "pass", "reason"];

/// Runs the graders of a batch's assertions.
pub struct Grader {
    /// Judge tactics by their file as the assertions name it.
    judges: HashMap<PathBuf, Arc<Tactic>>,
    /// `judges.jsonl`, opened on the first verdict.
    records: Mutex<Option<std::fs::File>>,
    directory: PathBuf,
    /// A record that could not be written: said once.
    failed_write: std::sync::atomic::AtomicBool,
}

/// The task a result is of, as graders see it.
#[derive(Debug, Clone)]
pub struct Graded<'a> {
    pub id: &'a str,
    /// The task value, its arguments and tags (what a command grader and
    /// a judge are given).
    pub task: &'a Value,
    pub args: &'a Map<String, Value>,
    pub tags: &'a Map<String, Value>,
    /// The line's `expected`, if it has one.
    pub expected: Option<&'a Value>,
}

impl Grader {
    /// Runs `judges`' tactics; their records go to `directory`'s `judges.jsonl`.
    pub fn new(judges: HashMap<PathBuf, Arc<Tactic>>, directory: &Path) -> Grader {
        Grader {
            judges,
            records: Mutex::new(None),
            directory: directory.to_path_buf(),
            failed_write: Default::default(),
        }
    }

    /// The judge tactics, to start and shut down with the batch's.
    pub fn judges(&self) -> impl Iterator<Item = &Arc<Tactic>> {
        self.judges.values()
    }

    /// The scores of `result` (a task's outcome) under `tactic`'s
    /// assertions and then the line's; `None` for a task with none, or one
    /// that never ran (skipped: `--resume` runs it again).
    pub async fn grade(
        &self,
        tactic: &[Assertion],
        line: Option<&Assertions>,
        task: &Graded<'_>,
        result: &ResultLine,
    ) -> Option<Scored> {
        if result.state == TaskState::Skipped {
            return None;
        }
        let line_items = line.map_or(&[][..], |line| &line.items[..]);
        if tactic.is_empty() && line_items.is_empty() {
            return None;
        }
        let subject = Subject::new(
            result.delivery.as_deref(),
            result.error.as_deref(),
            result.cost.filter(|_| result.cost_known),
            result.latency_ms,
            result.calls,
        );
        let mut scores = Vec::with_capacity(tactic.len() + line_items.len());
        for (index, assertion) in tactic.iter().chain(line_items).enumerate() {
            let score = match crate::eval::check(assertion, &subject) {
                Some(score) => score,
                None => {
                    let delivery = result.delivery.as_deref().unwrap_or_default();
                    self.run_grader(assertion, index, task, delivery).await
                }
            };
            scores.push(score);
        }
        Some(crate::eval::combine(
            scores,
            line.and_then(|line| line.threshold),
        ))
    }

    /// The score a `command` or a judge gives (0, failing, with the reason,
    /// when it could not give one).
    async fn run_grader(
        &self,
        assertion: &Assertion,
        index: usize,
        task: &Graded<'_>,
        delivery: &str,
    ) -> Score {
        let answer = match &assertion.kind {
            Kind::Command {
                command,
                cwd,
                timeout_s,
            } => run_command(command, cwd, *timeout_s, task, delivery).await,
            Kind::Judge { rubric, judge } => {
                self.run_judge(judge, rubric, index, task, delivery).await
            }
            _ => Err("not a grader".to_string()),
        };
        let (score, pass, reason) = match answer {
            Ok(verdict) => {
                let pass = match assertion.threshold {
                    Some(threshold) => verdict.score >= threshold,
                    None => verdict.pass.unwrap_or(verdict.score >= 0.5),
                };
                (verdict.score, pass, verdict.reason)
            }
            Err(problem) => (0.0, false, problem),
        };
        Score {
            name: assertion.name.clone(),
            type_name: assertion.type_name.clone(),
            score: crate::eval::round(score),
            pass,
            reason: reason.into(),
            weight: assertion.weight,
        }
    }

    /// Runs the judge at `path` on the delivery; its record is written.
    async fn run_judge(
        &self,
        path: &Path,
        rubric: &str,
        index: usize,
        task: &Graded<'_>,
        delivery: &str,
    ) -> Result<Verdict, String> {
        let Some(judge) = self.judges.get(path) else {
            return Err(format!("judge `{}` was not loaded", path.display()));
        };
        let mut input = crate::tactic::Task::new(Value::String(rubric.to_string()))
            .id(format!("{}/judge-{index}", task.id))
            .arg("rubric", rubric)
            .arg("delivery", delivery)
            .arg("input", task.task.clone())
            .arg("expected", task.expected.cloned().unwrap_or(Value::Null));
        input.tags = task.tags.clone();
        input
            .tags
            .insert("judged".into(), Value::String(task.id.to_string()));
        let record = judge.run_until(input, None, std::future::pending()).await;
        self.write_record(&record);
        match record.state {
            RunState::Success => {}
            _ => {
                return Err(format!(
                    "the judge failed: {}",
                    record.error.as_deref().unwrap_or("no error recorded")
                ));
            }
        }
        let delivery = record.delivery.as_deref().unwrap_or_default();
        verdict(delivery).map_err(|problem| format!("the judge's verdict {problem}"))
    }

    /// Appends a judge's record to `judges.jsonl`; a failure is said once
    /// (the verdict stands: it is in the result line).
    fn write_record(&self, record: &crate::tactic::SessionRecord) {
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(_) => return,
        };
        line.push(b'\n');
        let mut file = self
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if file.is_none() {
            *file = crate::file::open_in_place(
                &self.directory.join(JUDGES),
                std::fs::OpenOptions::new().create(true).append(true),
            )
            .ok();
        }
        let written = file
            .as_mut()
            .map(|file| file.write_all(&line))
            .unwrap_or_else(|| Err(std::io::Error::other("cannot open")));
        if let Err(error) = written
            && !self
                .failed_write
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            crate::report::warn(&format!(
                "cannot write `{}`: {error}; the judges' verdicts are in the result lines, \
                 their records are not kept",
                self.directory.join(JUDGES).display()
            ));
        }
    }
}

/// What a grader answered.
#[derive(Debug, Clone, PartialEq)]
struct Verdict {
    score: f64,
    /// `None`: the grader said only a score.
    pass: Option<bool>,
    reason: String,
}

/// A verdict from a grader's answer: a number from 0 to 1, or a JSON
/// object `{score, pass?, reason?}` (a judge's must have all three); the
/// problem reads after "the verdict".
fn verdict(text: &str) -> Result<Verdict, String> {
    let text = text.trim();
    let value: Value = serde_json::from_str(text)
        .map_err(|_| format!("is not JSON: {}", crate::redact::echo(text)))?;
    let score_of = |value: &Value| {
        value
            .as_f64()
            .filter(|score| (0.0..=1.0).contains(score))
            .ok_or_else(|| format!("has `score` {value}, not a number from 0 to 1"))
    };
    match &value {
        Value::Number(_) => Ok(Verdict {
            score: score_of(&value)?,
            pass: None,
            reason: format!("scored {value}"),
        }),
        Value::Object(map) => {
            let score = score_of(map.get("score").unwrap_or(&Value::Null))?;
            let pass = match map.get("pass") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(pass)) => Some(*pass),
                Some(other) => return Err(format!("has `pass` {other}, not true or false")),
            };
            let reason = match map.get("reason") {
                None | Some(Value::Null) => format!("scored {score}"),
                Some(Value::String(reason)) => reason.clone(),
                Some(other) => return Err(format!("has `reason` {other}, not a text")),
            };
            Ok(Verdict {
                score,
                pass,
                reason,
            })
        }
        other => Err(format!(
            "is {}, not a score or `{{score, pass, reason}}`",
            crate::words::json_kind(other)
        )),
    }
}

/// Runs a `command` grader: `{id, task, args, tags, expected, delivery}` on
/// its stdin, a verdict on its stdout.
async fn run_command(
    command: &[String],
    cwd: &Path,
    timeout_s: f64,
    task: &Graded<'_>,
    delivery: &str,
) -> Result<Verdict, String> {
    let tool = crate::tool::CommandTool::new(
        crate::provider::ToolSpec {
            name: "grader".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        },
        command.to_vec(),
        Duration::from_secs_f64(timeout_s),
        cwd.to_path_buf(),
        Default::default(),
    );
    let mut input = Map::new();
    input.insert("id".into(), Value::String(task.id.to_string()));
    input.insert("task".into(), task.task.clone());
    input.insert("args".into(), Value::Object(task.args.clone()));
    input.insert("tags".into(), Value::Object(task.tags.clone()));
    input.insert(
        "expected".into(),
        task.expected.cloned().unwrap_or(Value::Null),
    );
    input.insert("delivery".into(), Value::String(delivery.to_string()));
    let answer = tool
        .call(&input)
        .await
        .map_err(|error| format!("the grader failed: {error}"))?;
    verdict(&answer).map_err(|problem| format!("the grader's answer {problem}"))
}

/// Whether the judge tactic `tactic` declares the output a verdict needs:
/// an `output_schema` whose `properties` has `score`, `pass` and `reason`.
/// The problem says what is missing.
pub fn check_judge(tactic: &Tactic) -> Result<(), String> {
    let Some(schema) = &tactic.config.output_schema else {
        return Err(
            "a judge tactic must declare its verdict: `output_schema` with `score` (0 to 1), \
             `pass` and `reason` (see tactics/grader.yaml)"
                .into(),
        );
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let missing: Vec<&str> = VERDICT_FIELDS
        .into_iter()
        .filter(|field| !properties.is_some_and(|properties| properties.contains_key(*field)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a judge tactic's `output_schema` must have the properties `score`, `pass` and \
             `reason`; it lacks {}",
            missing
                .iter()
                .map(|field| format!("`{field}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// The judges `assertions` name.
pub fn judges_of<'a>(assertions: impl IntoIterator<Item = &'a Assertion>) -> Vec<&'a Path> {
    assertions
        .into_iter()
        .filter_map(|assertion| match &assertion.kind {
            Kind::Judge { judge, .. } => Some(judge.as_path()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_from_numbers_and_objects() {
        let cases = [
            ("0.5", Ok((0.5, None, "scored 0.5"))),
            (
                r#"{"score": 1, "pass": true, "reason": "fine"}"#,
                Ok((1.0, Some(true), "fine")),
            ),
            (
                r#"{"score": 2}"#,
                Err("has `score` 2, not a number from 0 to 1"),
            ),
            (
                r#"{"score": 0.1, "pass": "no"}"#,
                Err("has `pass` \"no\", not true or false"),
            ),
            (
                "[1]",
                Err("is an array, not a score or `{score, pass, reason}`"),
            ),
            ("ok", Err("is not JSON: ok")),
        ];
        for (text, expected) in cases {
            let read = verdict(text);
            match (read, expected) {
                (Ok(read), Ok((score, pass, reason))) => {
                    assert_eq!(
                        (read.score, read.pass, read.reason.as_str()),
                        (score, pass, reason)
                    )
                }
                (Err(problem), Err(words)) => assert_eq!(problem, words, "{text}"),
                (read, expected) => panic!("{text}: {read:?} vs {expected:?}"),
            }
        }
    }
}
