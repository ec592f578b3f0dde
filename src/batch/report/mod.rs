//! Reports a person reads from a batch output directory: [`Batch::read`]
//! gathers each task's latest result with its session rendered as `lllm
//! replay` prints it; [`html`] writes one self-contained HTML page (no network
//! at view time), [`csv`] a spreadsheet-safe CSV, and [`compare`] sets two
//! directories side by side; [`scores`] totals and compares the scores of a
//! scored batch's lines.
//!
//! The directory is only read: `results.jsonl` is the list of tasks (the last
//! line of an id wins, as for `--resume`), `sessions.jsonl` gives each result's
//! session (found by `session_id`), `summary.json` is shown when present.
//! Running, merging and indexing batches are other modules' concern.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use lllm::batch::report::Batch;
//! let dir = tempfile::tempdir()?;
//! std::fs::write(
//!     dir.path().join("results.jsonl"),
//!     r#"{"id":"t1","state":"success","delivery":"<b>hi</b>","error":null,"cost":0.0,"session_id":null}"#,
//! )?;
//! let batch = Batch::read(dir.path())?;
//! assert_eq!(batch.tasks.len(), 1);
//! let page = lllm::batch::report::html::report(&batch);
//! assert!(page.contains("&lt;b&gt;hi&lt;/b&gt;"));
//! # Ok(())
//! # }
//! ```

pub mod compare;
pub mod csv;
pub mod diff;
pub mod html;
pub mod scores;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::output::{RESULTS, ResultLine, SESSIONS, SUMMARY, TaskState};
use crate::tactic::SessionRecord;
use crate::tactic::record::READS;

/// What can go wrong reading a batch output directory or writing a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory has no `results.jsonl`.
    #[error(
        "`{path}` is not a batch output directory: it has no `{RESULTS}`; hint: give the directory `lllm batch --output` wrote"
    )]
    NotABatch {
        /// The directory given.
        path: String,
    },
    /// A file could not be read.
    #[error("cannot read `{path}`: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// An output path is one of the files of a batch directory read (its
    /// results, records, summary, …): writing it would lose them.
    #[error(
        "`{flag} {path}` would overwrite `{name}` of the batch directory `{dir}`; hint: write it to a file outside the batch's own files"
    )]
    OwnFile {
        /// How the output was given (`-o`, `--csv`, `--html`).
        flag: String,
        /// The output path as given.
        path: String,
        /// The batch directory's file it names.
        name: &'static str,
        /// The batch directory.
        dir: String,
    },
    /// Two outputs name one file: the second would replace the first.
    #[error("`{first} {path}` and `{second}` name the same file; hint: give each its own file")]
    SameOutput {
        /// How the first output was given.
        first: String,
        /// How the second was.
        second: String,
        /// The first path as given.
        path: String,
    },
    /// A report could not be written.
    #[error("cannot write `{path}`: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One task of a batch: its latest result line, with what its session record
/// adds (the task, args, tags and the rendered session) when the record is in
/// `sessions.jsonl`.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// The task's id.
    pub id: String,
    /// How it ended.
    pub state: TaskState,
    /// The answer; `None` when it failed or was skipped.
    pub delivery: Option<String>,
    /// Why it failed or was skipped.
    pub error: Option<String>,
    /// USD (the known part when `cost_known` is false); `None`: unknown.
    pub cost: Option<f64>,
    /// Whether every call's price was known.
    pub cost_known: bool,
    /// Milliseconds the run took.
    pub latency_ms: u64,
    /// LLM requests sent.
    pub calls: u64,
    /// Tokens, prompt and completion.
    pub total_tokens: u64,
    /// The session that produced the result.
    pub session_id: Option<String>,
    /// The task as given (text or JSON), from the record.
    pub task: Option<Value>,
    /// The task's template arguments (from the result line, else the record).
    pub args: Map<String, Value>,
    /// The task's labels (from the result line, else the record).
    pub tags: Map<String, Value>,
    /// The session as `lllm replay` renders it; `None` without a record.
    pub session: Option<String>,
    /// Each assertion's verdict, when the task was scored (issue 32).
    pub scores: Vec<crate::eval::Score>,
    /// The weighted mean of `scores`, 0–1; `None`: not scored.
    pub score: Option<f64>,
    /// Whether the task passed its assertions; `None`: not scored.
    pub pass: Option<bool>,
    /// The id this task is a run of (`--repeat`: `ID#2` repeats `ID`).
    pub repeat_of: Option<String>,
}

/// A batch output directory, read for a report.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The directory.
    pub dir: PathBuf,
    /// Each id's latest result, in the order ids first appear.
    pub tasks: Vec<TaskReport>,
    /// `summary.json`, when present and readable.
    pub summary: Option<Value>,
    /// Lines for stderr: lines skipped as unreadable, results without a record.
    pub notes: Vec<String>,
    /// The scores' totals, when any task was scored.
    pub scores: Option<scores::ScoreSummary>,
}

/// A result line with the fields later formats may add (args, tags).
#[derive(serde::Deserialize)]
struct Line {
    #[serde(flatten)]
    result: ResultLine,
    #[serde(default)]
    args: Option<Map<String, Value>>,
    #[serde(default)]
    tags: Option<Map<String, Value>>,
}

impl Batch {
    /// Reads `dir` with every task's session rendered (for [`html::report`]).
    pub fn read(dir: &Path) -> Result<Batch> {
        Batch::read_with(dir, true)
    }

    /// Reads `dir`'s results only: no session records are opened (for
    /// [`compare::compare`] and [`csv::report`] of what the result lines hold).
    pub fn read_results(dir: &Path) -> Result<Batch> {
        Batch::read_with(dir, false)
    }

    fn read_with(dir: &Path, sessions: bool) -> Result<Batch> {
        let results_path = dir.join(RESULTS);
        if !results_path.is_file() {
            return Err(Error::NotABatch {
                path: dir.display().to_string(),
            });
        }
        let mut notes = Vec::new();
        let mut tasks: Vec<TaskReport> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut unreadable = Vec::new();
        for_each_line(&results_path, |number, line| {
            let Ok(parsed) = serde_json::from_str::<Line>(line) else {
                unreadable.push(number);
                return;
            };
            let task = TaskReport::from_line(parsed);
            match index.get(&task.id) {
                Some(&at) => tasks[at] = task,
                None => {
                    index.insert(task.id.clone(), tasks.len());
                    tasks.push(task);
                }
            }
        })?;
        skipped_note(&mut notes, &results_path, "result lines", &unreadable);
        if sessions {
            attach_sessions(dir, &mut tasks, &mut notes)?;
        }
        let summary = std::fs::read_to_string(dir.join(SUMMARY))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
        Ok(Batch {
            dir: dir.to_path_buf(),
            scores: scores::ScoreSummary::of(&tasks, summary.as_ref()),
            tasks,
            summary,
            notes,
        })
    }
}

impl TaskReport {
    fn from_line(line: Line) -> TaskReport {
        let result = line.result;
        TaskReport {
            id: result.id,
            state: result.state,
            delivery: result.delivery,
            error: result.error,
            cost: result.cost,
            cost_known: result.cost_known,
            latency_ms: result.latency_ms,
            calls: result.calls,
            total_tokens: result.usage.total_tokens,
            session_id: result.session_id,
            task: None,
            args: line.args.unwrap_or_default(),
            tags: line.tags.unwrap_or_default(),
            session: None,
            scores: result.scores.unwrap_or_default(),
            score: result.score,
            pass: result.pass,
            repeat_of: result.repeat_of,
        }
    }

    /// `success`, `failure` or `skipped`.
    pub fn state_name(&self) -> &'static str {
        state_name(self.state)
    }
}

/// `success`, `failure` or `skipped`.
pub fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Success => "success",
        TaskState::Failure => "failure",
        TaskState::Skipped => "skipped",
    }
}

/// Reads the records the tasks' results name, one line at a time, and keeps
/// only their rendering: memory stays at the report's size, not the file's.
fn attach_sessions(dir: &Path, tasks: &mut [TaskReport], notes: &mut Vec<String>) -> Result<()> {
    // `sessions.jsonl` or `sessions.jsonl.zst`, whichever the batch wrote.
    let found = super::output::SessionsFile::path_in(dir).map_err(|message| Error::Read {
        path: dir.display().to_string(),
        message,
    })?;
    let path = found.unwrap_or_else(|| dir.join(SESSIONS));
    let wanted: HashMap<String, usize> = tasks
        .iter()
        .enumerate()
        .filter_map(|(at, task)| task.session_id.clone().map(|id| (id, at)))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    if !path.is_file() {
        notes.push(format!(
            "`{}` is missing: the report has no session views",
            path.display()
        ));
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct Heading {
        #[serde(default)]
        session_id: Option<String>,
    }
    let mut unreadable = Vec::new();
    let mut found: HashSet<usize> = HashSet::new();
    for_each_line(&path, |number, line| {
        let Ok(heading) = serde_json::from_str::<Heading>(line) else {
            unreadable.push(number);
            return;
        };
        let Some(&at) = heading.session_id.as_ref().and_then(|id| wanted.get(id)) else {
            return;
        };
        match parse_record(line) {
            Some(record) => {
                let task = &mut tasks[at];
                task.session = Some(crate::replay::render(&record));
                task.task = Some(record.task.clone());
                if task.args.is_empty() {
                    task.args = record.args.clone();
                }
                if task.tags.is_empty() {
                    task.tags = record.tags.clone();
                }
                found.insert(at);
            }
            None => unreadable.push(number),
        }
    })?;
    skipped_note(notes, &path, "session records", &unreadable);
    let missing = wanted.len() - found.len();
    if missing > 0 {
        notes.push(format!(
            "{} no record in `{}`: {} session view is empty",
            crate::words::count(missing as u64, "result has", "results have"),
            path.display(),
            if missing == 1 { "its" } else { "their" }
        ));
    }
    Ok(())
}

/// A record of a format this lllm reads, expanded as `replay` shows it
/// (`None` for one that would expand past what `replay` reads either).
fn parse_record(line: &str) -> Option<SessionRecord> {
    let value: Value = serde_json::from_str(line).ok()?;
    let format = value.get("format").and_then(Value::as_str)?;
    if !READS.contains(&format) {
        return None;
    }
    let mut record: SessionRecord = serde_json::from_value(value).ok()?;
    record
        .expand_within(crate::tactic::record::ExpansionLimit::READ)
        .ok()?;
    Some(record)
}

/// Calls `each` with every non-blank line and its 1-based number; a line
/// that is not UTF-8 (torn or corrupted) is given as `""`, which no reader
/// takes for JSON.
fn for_each_line(path: &Path, mut each: impl FnMut(usize, &str)) -> Result<()> {
    let read_error = |error: std::io::Error| Error::Read {
        path: path.display().to_string(),
        message: error.to_string(),
    };
    // Either form: plain or zstd-compressed (`lllm batch --compress`).
    let lines = crate::jsonl::Lines::open(path).map_err(read_error)?;
    for line in crate::jsonl::numbered_lines(lines) {
        match line.map_err(read_error)? {
            (number, None) => each(number, ""),
            (number, Some(line)) if !line.trim().is_empty() => each(number, &line),
            (_, Some(_)) => {}
        }
    }
    Ok(())
}

/// How many lines were skipped, naming the first few.
fn skipped_note(notes: &mut Vec<String>, path: &Path, what: &str, lines: &[usize]) {
    if lines.is_empty() {
        return;
    }
    let shown: Vec<String> = lines.iter().take(10).map(usize::to_string).collect();
    notes.push(format!(
        "`{}`: skipped {} not readable as {what} (line {})",
        path.display(),
        crate::words::count(lines.len() as u64, "line", "lines"),
        shown.join(", ")
    ));
}

/// Refuses outputs (each with the flag that gave it) that would replace one
/// of the own files of the batch directories `dirs` (see
/// [`OWN_FILES`](super::output::OWN_FILES); resolved paths compared, so a
/// symbolic link, `..` or a hard link is caught too, whether the file exists
/// or not), and two outputs that are one file. Checked before anything is
/// read or written.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::path::Path;
/// use lllm::batch::report::check_outputs;
/// let dir = tempfile::tempdir()?;
/// let results = dir.path().join("results.jsonl");
/// let error = check_outputs(&[("-o", &results)], &[dir.path()]).unwrap_err();
/// assert!(error.to_string().contains("would overwrite `results.jsonl`"));
/// assert!(check_outputs(&[("-o", &dir.path().join("report.html"))], &[dir.path()]).is_ok());
/// # Ok(())
/// # }
/// ```
pub fn check_outputs(outputs: &[(&str, &Path)], dirs: &[&Path]) -> Result<()> {
    for (at, (flag, path)) in outputs.iter().enumerate() {
        for dir in dirs {
            let own = super::output::OWN_FILES
                .iter()
                .find(|name| crate::file::same::same_file(path, &dir.join(name)));
            if let Some(name) = own {
                return Err(Error::OwnFile {
                    flag: flag.to_string(),
                    path: path.display().to_string(),
                    name,
                    dir: dir.display().to_string(),
                });
            }
        }
        for (second, other) in &outputs[at + 1..] {
            if crate::file::same::same_file(path, other) {
                return Err(Error::SameOutput {
                    first: flag.to_string(),
                    second: format!("{second} {}", other.display()),
                    path: path.display().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Writes a report file, naming it in the error: as every output is written
/// (`file::atomic`: a fresh file, then a rename), so a link at its name is
/// replaced, not written through.
pub fn write(path: &Path, content: &str) -> Result<()> {
    crate::file::atomic::write(path, content.as_bytes()).map_err(|source| Error::Write {
        path: path.display().to_string(),
        source,
    })
}
