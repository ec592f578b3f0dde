//! The output directory of a batch: `results.jsonl` (one line per finished
//! task), `sessions.jsonl` (one compact session record per run task; with
//! `--compress`, `sessions.jsonl.zst`: the same lines in zstd frames, see
//! `crate::jsonl`) and `summary.json`: what their lines hold, and how
//! `--resume` reads them. Both JSONL files are only ever appended, whole
//! lines (a whole frame) per write, so a crash or a kill loses at most what
//! is being written.
//!
//! A task's session record is written before its result line, and a record
//! on disk is a finished task: a kill between the two leaves a record
//! without a result, whose result line `--resume` rebuilds from it
//! (`rebuild`) instead of running the task again. A task holds its `-j`
//! slot until both are on disk (`writer`), so a kill loses at most the
//! tasks in flight; a kill in the middle of a write leaves a torn last line
//! (or frame), which `jsonl::repair` cuts off before anything is appended.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::redact::{Scrub, Scrubber};
use crate::tactic::{RunState, SessionRecord};

pub const RESULTS: &str = "results.jsonl";
pub use super::sessions_file::SessionsFile;
pub use super::writer::{Encoded, Lost, WriteFailure, Writer};
// The records' file names are the record format's: the session store, below
// this room, finds records by them too.
pub(crate) use crate::tactic::record::{
    SESSIONS_FILE as SESSIONS, SESSIONS_FILE_COMPRESSED as SESSIONS_COMPRESSED,
};

pub const SUMMARY: &str = "summary.json";

/// Every file a batch directory holds of its own: what `lllm batch`
/// (`--resume`, `--via batch-api`, `--output-format openai`) and `lllm merge`
/// write and read there. An output of another command written over one of
/// them would lose the batch's data, so `lllm report` and `lllm compare`
/// refuse such a path (`report::check_outputs`).
pub const OWN_FILES: &[&str] = &[
    RESULTS,
    SESSIONS,
    SESSIONS_COMPRESSED,
    SUMMARY,
    super::directory::IDENTITY,
    super::directory::LOCK,
    super::merge::MERGE,
    super::formats::DEFAULT_TACTIC_FILE,
    super::openai_output::OUTPUT,
    super::openai_output::ERRORS,
    crate::provider::batch_api::journal::FILE,
    // The judges' session records of a scored batch (issue 32).
    super::grade::JUDGES,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Success,
    Failure,
    /// Never ran: budget reached, cancelled by `--fail-fast`, or interrupted.
    /// `--resume` runs it.
    Skipped,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// `120 tokens (100 in, 20 out)`, as [`InvokeCost`](crate::dialog::InvokeCost)
/// writes its tokens.
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tokens ({} in, {} out)",
            self.total_tokens, self.prompt_tokens, self.completion_tokens
        )
    }
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub id: String,
    pub state: TaskState,
    pub delivery: Option<String>,
    /// Why it failed, or why it was skipped.
    pub error: Option<String>,
    /// USD; the known part when `cost_known` is false.
    pub cost: Option<f64>,
    #[serde(default = "known")]
    pub cost_known: bool,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub latency_ms: u64,
    pub session_id: Option<String>,
    /// Calls (`lllm::words`): requests sent to providers, retries and
    /// failed ones included.
    #[serde(default)]
    pub calls: u64,
    /// Of those, the retries: calls that repeated a request after a
    /// provider error (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u64,
    /// Replies answered from the response cache instead (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_hits: u64,
    /// The task line's `tags`, so results join to their inputs (`{}` when it
    /// had none, or when the line could not be read).
    #[serde(default)]
    pub tags: Map<String, Value>,
    /// The task line's `args` (template arguments), likewise.
    #[serde(default)]
    pub args: Map<String, Value>,
    /// The model of the task's final reply (for `--output-format openai`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why the final reply ended, as its provider said (`stop`, `length`,
    /// `tool_calls`; Anthropic's `end_turn`, `max_tokens`, …), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The HTTP status of the provider error that failed the task, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// With `--repeat N`: the id of the task line this run (`ID#k`) repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_of: Option<String>,
    /// A task with assertions (issue 32): one score per assertion, in
    /// order (the tactic's, then the line's); absent for a task without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Vec<crate::eval::Score>>,
    /// Its scores' weighted mean, from 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Whether it passed its assertions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<bool>,
}

fn known() -> bool {
    true
}

/// What a result line holds of its task and run, scrubbed as its record is
/// (`redact::Scrub`): a line written without a record (a skipped or invalid
/// task) carries the task's tags and arguments too. The id is the task's
/// own: `--resume` and the records join by it.
impl Scrub for ResultLine {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        if scrubber.is_empty() {
            return false;
        }
        let ResultLine {
            id: _,
            state: _,
            delivery,
            error,
            cost: _,
            cost_known: _,
            usage: _,
            latency_ms: _,
            session_id: _,
            calls: _,
            retries: _,
            cache_hits: _,
            tags,
            args,
            model,
            finish_reason: _,
            http_status: _,
            repeat_of: _,
            scores,
            score: _,
            pass: _,
        } = self;
        let mut reasons = false;
        for score in scores.iter_mut().flatten() {
            reasons |= score.reason.scrub(scrubber);
        }
        delivery.scrub(scrubber)
            | error.scrub(scrubber)
            | tags.scrub(scrubber)
            | args.scrub(scrubber)
            | model.scrub(scrubber)
            | reasons
    }
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl ResultLine {
    pub fn from_record(id: String, record: &SessionRecord) -> ResultLine {
        let cost = &record.cost;
        ResultLine {
            id,
            state: match record.state {
                RunState::Success => TaskState::Success,
                RunState::Failure => TaskState::Failure,
                RunState::Skipped => TaskState::Skipped,
            },
            delivery: record.delivery.clone(),
            error: record.error.clone(),
            cost: cost.cost,
            cost_known: record.cost_known,
            usage: Usage {
                prompt_tokens: cost.prompt_tokens,
                completion_tokens: cost.completion_tokens,
                total_tokens: cost.total_tokens,
            },
            latency_ms: record.latency_ms,
            session_id: Some(record.session_id.clone()),
            calls: record.invoke_count() as u64,
            retries: record.retry_count() as u64,
            cache_hits: record.cache_hit_count() as u64,
            tags: record.tags.clone(),
            args: record.args.clone(),
            model: final_model(record),
            finish_reason: final_reply(record)
                .and_then(|reply| reply.metadata.get("finish_reason"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            http_status: record
                .agent_calls
                .last()
                .and_then(|call| call.invokes.last())
                .and_then(|invoke| invoke.error.as_ref())
                .and_then(|error| error.status)
                .filter(|_| record.state == RunState::Failure),
            repeat_of: None,
            scores: None,
            score: None,
            pass: None,
        }
    }

    /// The same line with its scores (`None`: it has none).
    pub fn with_scores(mut self, scored: Option<crate::eval::Scored>) -> ResultLine {
        match scored {
            Some(scored) => {
                self.scores = Some(scored.scores);
                self.score = Some(scored.score);
                self.pass = Some(scored.pass);
            }
            None => {
                self.scores = None;
                self.score = None;
                self.pass = None;
            }
        }
        self
    }

    pub fn skipped(id: String, reason: &str) -> ResultLine {
        ResultLine {
            id,
            state: TaskState::Skipped,
            delivery: None,
            error: Some(reason.to_string()),
            cost: Some(0.0),
            cost_known: true,
            usage: Usage::default(),
            latency_ms: 0,
            session_id: None,
            calls: 0,
            retries: 0,
            cache_hits: 0,
            tags: Map::new(),
            args: Map::new(),
            model: None,
            finish_reason: None,
            http_status: None,
            repeat_of: None,
            scores: None,
            score: None,
            pass: None,
        }
    }

    /// The same line carrying `task`'s tags and args (for lines written
    /// without a record: skipped tasks, and lines with no tactic).
    pub fn with_task(mut self, task: &crate::tactic::Task) -> ResultLine {
        self.tags = task.tags.clone();
        self.args = task.args.clone();
        self
    }

    pub fn invalid(id: String, problem: &str) -> ResultLine {
        ResultLine {
            state: TaskState::Failure,
            ..ResultLine::skipped(id, problem)
        }
    }
}

/// A run's final reply: the last assistant message naming its model in the
/// dialog of the last step.
fn final_reply(record: &SessionRecord) -> Option<&crate::dialog::Message> {
    let step = record.steps.last()?;
    let name = format!("{}_{}", step.agent, step.dialog);
    record
        .dialogs
        .iter()
        .rev()
        .filter(|dialog| dialog.owner == step.agent && dialog.session_name == name)
        .flat_map(|dialog| dialog.messages.iter().rev())
        .find(|message| message.model.is_some())
        .map(|message| &**message)
}

/// The model of a run's final reply, else the model the task or the run's
/// `--model` named.
fn final_model(record: &SessionRecord) -> Option<String> {
    final_reply(record)
        .and_then(|reply| reply.model.clone())
        .or_else(|| record.model.clone())
        .or_else(|| record.tactic.model.clone())
}

/// What the summary and `--resume` need of a result line (not its delivery,
/// so a scan of a large run stays small).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Brief {
    pub state: TaskState,
    pub cost: f64,
    pub cost_known: bool,
    pub usage: Usage,
    pub calls: u64,
    pub retries: u64,
    pub cache_hits: u64,
}

impl Brief {
    fn new(
        state: TaskState,
        cost: Option<f64>,
        cost_known: bool,
        usage: Usage,
        calls: u64,
        retries: u64,
        cache_hits: u64,
    ) -> Brief {
        Brief {
            state,
            cost: cost.unwrap_or(0.0),
            cost_known: cost_known && cost.is_some(),
            usage,
            calls,
            retries,
            cache_hits,
        }
    }
}

impl From<&ResultLine> for Brief {
    fn from(result: &ResultLine) -> Brief {
        Brief::new(
            result.state,
            result.cost,
            result.cost_known,
            result.usage,
            result.calls,
            result.retries,
            result.cache_hits,
        )
    }
}

/// The latest result of each id in `results.jsonl` (a later line wins).
/// Only each id's state is kept (24 bytes an id, `ids::Latest`), so
/// `--resume` of a million-task run stays small; the totals are summed
/// while reading.
#[derive(Debug, Default)]
pub struct Previous {
    /// The state of each id's latest line.
    pub latest: super::ids::Latest<TaskState>,
    /// Every line counted, retried attempts included: what was spent.
    pub spent: super::summary::Totals,
    /// Totals over each id's latest line.
    pub latest_totals: super::summary::Totals,
    /// Lines that are not results (reported, then ignored): JSON that is
    /// not a result, not JSON, or not UTF-8 (a torn or corrupted line).
    pub unreadable: usize,
    /// The numbers (1-based) of the first [`UNREADABLE_LISTED`] of them.
    pub unreadable_lines: Vec<usize>,
    /// Why the tasks whose latest line is a failure failed.
    pub reasons: super::reasons::Reasons,
    /// The scored tasks among each id's latest line (issue 32).
    pub scores: crate::eval::Tally,
}

/// Unreadable result lines named by number in [`Previous::unreadable_lines`].
pub const UNREADABLE_LISTED: usize = 10;

impl Previous {
    /// No result line at all (a fresh output directory).
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty() && self.unreadable == 0 && self.spent.tasks == 0
    }

    /// The state of `id`'s latest result, if it has one.
    pub fn state(&self, id: &str) -> Option<TaskState> {
        self.latest.get(id)
    }
}

/// What `read_previous` takes of a result line: the id (borrowed from the
/// line when it can be), the rest of `Brief`; the delivery is skipped over
/// and the error kept as its JSON, not copied (read only for a failure).
#[derive(Deserialize)]
struct BriefLine<'a> {
    #[serde(default, borrow)]
    error: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    state: TaskState,
    cost: Option<f64>,
    #[serde(default = "known")]
    cost_known: bool,
    #[serde(default)]
    usage: Usage,
    #[serde(default)]
    calls: u64,
    #[serde(default)]
    retries: u64,
    #[serde(default)]
    cache_hits: u64,
    #[serde(default)]
    pass: Option<bool>,
    #[serde(default)]
    score: Option<f64>,
    #[serde(default, borrow)]
    repeat_of: Option<std::borrow::Cow<'a, str>>,
}

/// What a scored result line adds to the tally: its pass, score and `repeat_of`.
type ScoreRead<'a> = Option<(bool, f64, Option<&'a str>)>;

/// Told each line of `each_brief`: its number, its brief, its `error` as
/// JSON text and its scores.
type EachBrief<'f> = dyn FnMut(usize, BriefRead<'_>, Option<&str>, ScoreRead<'_>) + 'f;

/// Reads `results.jsonl` (after `repair`), keeping the latest line per id.
/// When an id has several lines (a resumed or retried run), the file is read
/// a second time to sum only the latest ones.
pub fn read_previous(path: &Path) -> std::io::Result<Previous> {
    let mut previous = Previous::default();
    let mut superseded = Vec::new();
    let mut first_pass = |number: usize,
                          brief: BriefRead<'_>,
                          error: Option<&str>,
                          scored: ScoreRead<'_>| match brief {
        Some((id, brief)) => {
            if let Some((pass, score, repeat_of)) = scored {
                previous.scores.add(id, repeat_of, score, pass);
            }
            previous.spent.add(&brief);
            previous.latest.push(id, brief.state);
            if brief.state == TaskState::Failure {
                previous.reasons.add(id, error_text(error).as_deref());
            }
        }
        None => {
            previous.unreadable += 1;
            if previous.unreadable_lines.len() < UNREADABLE_LISTED {
                previous.unreadable_lines.push(number);
            }
        }
    };
    if !each_brief(path, &mut first_pass)? {
        return Ok(previous);
    }
    superseded.extend(previous.latest.finish());
    if superseded.is_empty() {
        previous.latest_totals = previous.spent;
        return Ok(previous);
    }
    // Result lines in the order `latest` numbered them (readable ones only).
    let (mut position, mut next) = (0u32, superseded.iter().peekable());
    let latest_totals = &mut previous.latest_totals;
    let mut reasons = super::reasons::Reasons::default();
    let mut scores = crate::eval::Tally::default();
    each_brief(path, &mut |_, brief, error, scored| {
        if let Some((id, brief)) = brief {
            if next.peek().is_some_and(|&&lost| lost == position) {
                next.next();
            } else {
                if let Some((pass, score, repeat_of)) = scored {
                    scores.add(id, repeat_of, score, pass);
                }
                latest_totals.add(&brief);
                if brief.state == TaskState::Failure {
                    reasons.add(id, error_text(error).as_deref());
                }
            }
            position = position.saturating_add(1);
        }
    })?;
    previous.reasons = reasons;
    previous.scores = scores;
    Ok(previous)
}

/// What a result line's scores add to a tally: its id, pass, score and
/// `repeat_of` (`None`: not a result, or not scored).
pub fn scored_of_line(line: &str) -> Option<(String, bool, f64, Option<String>)> {
    let brief: BriefLine<'_> = serde_json::from_str(line).ok()?;
    Some((
        brief.id.into_owned(),
        brief.pass?,
        brief.score.unwrap_or(0.0),
        brief.repeat_of.map(std::borrow::Cow::into_owned),
    ))
}

/// A result line's `error` from its JSON (`None` for `null` or a value that
/// is not text).
fn error_text(json: Option<&str>) -> Option<String> {
    serde_json::from_str::<Option<String>>(json?).ok().flatten()
}

/// A result line's id and brief, `None` for a line that is not a result.
type BriefRead<'a> = Option<(&'a str, Brief)>;

/// Calls `each` with every non-blank line of `path` as a brief, with its
/// number and its `error` as JSON text; `false` when there is no such file.
fn each_brief(path: &Path, each: &mut EachBrief<'_>) -> std::io::Result<bool> {
    let mut reader = match crate::jsonl::Lines::open(path) {
        Ok(reader) => reader,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    let mut line = String::new();
    let mut number = 0;
    loop {
        let read = crate::jsonl::read_text_line(&mut reader, &mut line)?;
        number += 1;
        match read {
            crate::jsonl::LineRead::End => break,
            // Torn or corrupted: not a result, as a line that is not JSON.
            crate::jsonl::LineRead::NotText => {
                each(number, None, None, None);
                continue;
            }
            crate::jsonl::LineRead::Text if line.trim().is_empty() => continue,
            crate::jsonl::LineRead::Text => {}
        }
        match serde_json::from_str::<BriefLine<'_>>(&line) {
            Ok(result) => each(
                number,
                Some((
                    result.id.as_ref(),
                    Brief::new(
                        result.state,
                        result.cost,
                        result.cost_known,
                        result.usage,
                        result.calls,
                        result.retries,
                        result.cache_hits,
                    ),
                )),
                result.error.map(|raw| raw.get()),
                result.pass.map(|pass| {
                    (
                        pass,
                        result.score.unwrap_or(0.0),
                        result.repeat_of.as_deref(),
                    )
                }),
            ),
            Err(_) => each(number, None, None, None),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_lines_win_and_junk_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let failed = ResultLine::invalid("a".into(), "boom");
        let skipped = ResultLine::skipped("a".into(), "budget");
        let text = format!(
            "{}\nnot json\n{}\n",
            serde_json::to_string(&failed).unwrap(),
            serde_json::to_string(&skipped).unwrap()
        );
        std::fs::write(&path, text).unwrap();
        let previous = read_previous(&path).unwrap();
        assert_eq!(previous.state("a"), Some(TaskState::Skipped));
        assert_eq!(previous.state("b"), None);
        assert_eq!(previous.unreadable, 1);
        // Spent counts both lines of `a`; the latest totals only the last.
        assert_eq!(previous.spent.tasks, 2);
        assert_eq!(previous.latest_totals.tasks, 1);
        assert_eq!(previous.latest_totals.skipped, 1);
        assert_eq!(previous.latest_totals.failure, 0);
        assert_eq!(previous.unreadable_lines, [2]);
        assert_eq!(previous.reasons.failed(), 0, "`a` failed, then was skipped");
    }

    #[test]
    fn the_reasons_are_those_of_each_id_s_latest_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let line = |result: ResultLine| serde_json::to_string(&result).unwrap();
        let retried = ResultLine {
            state: TaskState::Success,
            ..ResultLine::skipped("a".into(), "")
        };
        let text = [
            line(ResultLine::invalid("a".into(), "cannot connect")),
            line(ResultLine::invalid("b".into(), "cannot connect")),
            line(ResultLine::invalid("c".into(), "HTTP 400")),
            line(retried),
            r#"{"id": "d", "state": "failure", "error": 42, "cost": 0}"#.to_string(),
        ]
        .join("\n");
        std::fs::write(&path, text).unwrap();
        let previous = read_previous(&path).unwrap();
        assert_eq!(previous.reasons.failed(), 3);
        assert_eq!(previous.reasons.failed_ids(), ["b", "c", "d"]);
        let top = previous.reasons.top(5);
        let counted: Vec<(&str, u64)> = top
            .iter()
            .map(|reason| (reason.reason.as_str(), reason.count))
            .collect();
        assert_eq!(
            counted,
            [
                ("cannot connect", 1),
                ("HTTP 400", 1),
                ("(no error recorded)", 1)
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_unreadable_like_junk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let done = serde_json::to_string(&ResultLine::skipped("a".into(), "budget")).unwrap();
        let mut bytes = format!("{done}\n\n").into_bytes();
        bytes.extend_from_slice(b"{\"id\":\"x\"\xff\n{garbage\n");
        bytes.extend_from_slice(done.replace("\"a\"", "\"b\"").as_bytes());
        std::fs::write(&path, bytes).unwrap();
        let previous = read_previous(&path).unwrap();
        assert_eq!(previous.unreadable, 2);
        assert_eq!(previous.unreadable_lines, [3, 4]);
        assert_eq!(previous.state("a"), Some(TaskState::Skipped));
        assert_eq!(
            previous.state("b"),
            Some(TaskState::Skipped),
            "read on past it"
        );
    }
}
