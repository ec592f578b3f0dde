//! The output directory of a batch: `results.jsonl` (one line per finished
//! task), `sessions.jsonl` (one compact session record per run task; with
//! `--compress`, `sessions.jsonl.zst`: the same lines in zstd frames, see
//! `crate::jsonl`) and `summary.json`. Both JSONL files are only ever
//! appended, whole lines (a whole frame) per write, so a crash or a kill
//! loses at most what is being written.
//!
//! A task's session record is written before its result line: the result line
//! is what marks the task done. One thread writes both files (group commit);
//! a task's lines reach the files microseconds after it ends, so a kill loses
//! at most the tasks in flight and the few just finished (which `--resume` runs
//! again). A kill between the two leaves a record without a
//! result, and `--resume` runs the task again (its second record follows the
//! first); a kill in the middle of a write leaves a torn last line (or
//! frame), which `jsonl::repair` cuts off before anything is appended.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::redact::{Scrub, Scrubber};
use crate::tactic::{RunState, SessionRecord};

pub const RESULTS: &str = "results.jsonl";
pub const SESSIONS: &str = "sessions.jsonl";
/// The records of a batch run with `--compress` (instead of [`SESSIONS`]).
pub const SESSIONS_COMPRESSED: &str = "sessions.jsonl.zst";
pub use super::sessions_file::SessionsFile;

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
    /// The HTTP status of the provider error that failed the task, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
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
            http_status: _,
        } = self;
        delivery.scrub(scrubber)
            | error.scrub(scrubber)
            | tags.scrub(scrubber)
            | args.scrub(scrubber)
            | model.scrub(scrubber)
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
            http_status: record
                .agent_calls
                .last()
                .and_then(|call| call.invokes.last())
                .and_then(|invoke| invoke.error.as_ref())
                .and_then(|error| error.status)
                .filter(|_| record.state == RunState::Failure),
        }
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
            http_status: None,
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

/// The model of a run's final reply: the last assistant message naming one
/// in the dialog of the last step, else the model the task or the run's
/// `--model` named.
fn final_model(record: &SessionRecord) -> Option<String> {
    let from_dialog = record.steps.last().and_then(|step| {
        let name = format!("{}_{}", step.agent, step.dialog);
        record
            .dialogs
            .iter()
            .rev()
            .filter(|dialog| dialog.owner == step.agent && dialog.session_name == name)
            .flat_map(|dialog| dialog.messages.iter().rev())
            .find_map(|message| message.model.clone())
    });
    from_dialog
        .or_else(|| record.model.clone())
        .or_else(|| record.tactic.model.clone())
}

/// A task's lines, serialized by the task itself (in parallel), written by
/// the writer thread.
pub struct Encoded {
    session: Option<Vec<u8>>,
    result: Vec<u8>,
    /// What the session store keeps of the record (its offset is filled in
    /// when the line is written); only when the writer registers sessions.
    #[cfg(feature = "store")]
    entry: Option<crate::store::Entry>,
}

impl Encoded {
    pub fn new(result: &ResultLine, record: Option<&SessionRecord>) -> serde_json::Result<Encoded> {
        let session = match record {
            Some(record) => {
                // Records of one batch are alike in size: start where the last
                // one ended, so the buffer is not regrown (and copied) on the way.
                static LAST: AtomicUsize = AtomicUsize::new(4096);
                let mut line = Vec::with_capacity(LAST.load(Ordering::Relaxed) + 256);
                crate::json::write(&mut line, record)?;
                line.push(b'\n');
                LAST.store(line.len(), Ordering::Relaxed);
                Some(line)
            }
            None => None,
        };
        let mut line = Vec::with_capacity(256);
        crate::json::write(&mut line, result)?;
        line.push(b'\n');
        Ok(Encoded {
            session,
            result: line,
            #[cfg(feature = "store")]
            entry: None,
        })
    }

    /// Adds what the session store keeps of `record` (see [`Writer::indexes`]).
    #[cfg(feature = "store")]
    pub fn with_entry(mut self, record: &SessionRecord) -> Encoded {
        if self.session.is_some() {
            let place = crate::store::RecordPlace::Line {
                path: std::path::PathBuf::new(),
                offset: 0,
            };
            self.entry = Some(crate::store::Entry::of(record, place));
        }
        self
    }
}

/// The two appending files, written by one thread: it takes every line
/// queued so far and writes them with one `write` per file (records first,
/// so a result line never precedes its record), then waits for more. At a
/// high completion rate this is a few writes for many tasks; at a low one,
/// each task's lines are written as soon as it ends.
pub struct Writer {
    /// `None` asks the thread to finish.
    sender: std::sync::mpsc::SyncSender<Option<Encoded>>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<Result<(), WriteFailure>>>>,
    /// Whether written records are registered in a session store.
    indexes: bool,
}

/// A write that failed (a full disk, a file size limit, an I/O error): which
/// file, and why. Nothing is written after it, so the lines before it stay
/// whole; the failed write may leave a torn last line, which `--resume` cuts.
#[derive(Debug)]
pub struct WriteFailure {
    /// `RESULTS`, `SESSIONS` or `SESSIONS_COMPRESSED`.
    pub file: &'static str,
    pub source: std::io::Error,
}

/// Lines queued before a finishing task waits for the disk: enough for
/// every task of a large `-j` to finish at once, few enough that the queue
/// stays a few megabytes of records.
const QUEUE: usize = 1024;

/// Bytes the writer gathers before writing them (a few writes per
/// millisecond at thousands of tasks a second; its buffers keep this size).
const GATHER: usize = 1 << 20;

impl Writer {
    pub fn open(dir: &Path) -> std::io::Result<Writer> {
        Writer::open_indexed(dir, SessionsFile::new(false), None)
    }

    /// [`open`](Writer::open), appending records to `sessions` (one zstd
    /// frame per write when compressed) and registering each record written
    /// in the session store in `store` (a directory; see `crate::store`), a
    /// batch of sessions per transaction. A store that cannot be opened or
    /// written is a warning, never a failed run: the record files are
    /// written anyway.
    pub fn open_indexed(
        dir: &Path,
        sessions: SessionsFile,
        store: Option<std::path::PathBuf>,
    ) -> std::io::Result<Writer> {
        std::fs::create_dir_all(dir)?;
        let append = |name: &str| {
            crate::file::open_in_place(
                &dir.join(name),
                OpenOptions::new().create(true).append(true),
            )
        };
        let results = append(RESULTS)?;
        let name = sessions.name;
        let sessions = crate::jsonl::FrameWriter::new(append(name)?, sessions.form)?;
        #[cfg(feature = "store")]
        let mut registrar = store.map(|store| crate::store::Registrar::new(store, dir.join(name)));
        #[cfg(not(feature = "store"))]
        let _ = store;
        #[cfg(feature = "store")]
        let indexes = registrar.is_some();
        #[cfg(not(feature = "store"))]
        let indexes = false;
        let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("lllm-batch-writer".into())
            .spawn(move || {
                #[cfg(feature = "store")]
                let mut hook = |encoded: &mut Encoded, at: Option<u64>| {
                    if let (Some(registrar), Some(entry), Some(at)) =
                        (&mut registrar, encoded.entry.take(), at)
                    {
                        registrar.add(entry, at);
                    }
                };
                #[cfg(not(feature = "store"))]
                let mut hook = |_: &mut Encoded, _: Option<u64>| {};
                let written = write_loop(&receiver, results, sessions, name, &mut hook);
                #[cfg(feature = "store")]
                if let Some(registrar) = &mut registrar {
                    registrar.flush();
                }
                written
            })?;
        Ok(Writer {
            sender,
            thread: std::sync::Mutex::new(Some(thread)),
            indexes,
        })
    }

    /// Whether records are registered in a session store: the tasks then add
    /// the store's entry to their lines ([`Encoded::with_entry`]).
    pub fn indexes(&self) -> bool {
        self.indexes
    }

    /// Queues a task's lines. `false` when the writer has stopped on an error
    /// (`finish` returns it).
    pub fn send(&self, encoded: Encoded) -> bool {
        self.sender.send(Some(encoded)).is_ok()
    }

    /// Writes what is queued and stops; the first write error, if any.
    pub fn finish(&self) -> Result<(), WriteFailure> {
        let _ = self.sender.send(None);
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match thread.map(std::thread::JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(WriteFailure {
                file: RESULTS,
                source: std::io::Error::other("the writer thread panicked"),
            }),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The writer's loop. `written(encoded, place)` is told of each record line
/// after it is on disk, with its place (`jsonl::Lines::place`; `None` past
/// what a compressed file's places can say).
fn write_loop(
    receiver: &std::sync::mpsc::Receiver<Option<Encoded>>,
    mut results: File,
    mut sessions: crate::jsonl::FrameWriter,
    sessions_name: &'static str,
    written: &mut dyn FnMut(&mut Encoded, Option<u64>),
) -> Result<(), WriteFailure> {
    let mut chunk: Vec<(Encoded, Option<u64>)> = Vec::new();
    let (mut result_lines, mut session_lines) = (Vec::new(), Vec::new());
    let mut finished = false;
    while !finished {
        let Ok(first) = receiver.recv() else { break };
        result_lines.clear();
        session_lines.clear();
        chunk.clear();
        let mut next = first;
        loop {
            let Some(encoded) = next else {
                finished = true;
                break;
            };
            // Every line of a frame starts within its first GATHER bytes, so a
            // compressed place always fits (`jsonl::pack`).
            let at = sessions.place(session_lines.len() as u64);
            if let Some(session) = &encoded.session {
                session_lines.extend_from_slice(session);
            }
            result_lines.extend_from_slice(&encoded.result);
            chunk.push((encoded, at));
            if result_lines.len() + session_lines.len() >= GATHER {
                break;
            }
            match receiver.try_recv() {
                Ok(more) => next = more,
                Err(_) => break,
            }
        }
        // Records first (one frame when compressed): a result line (the
        // commit mark) never goes without its record.
        sessions
            .write(&session_lines)
            .map_err(|source| WriteFailure {
                file: sessions_name,
                source,
            })?;
        results
            .write_all(&result_lines)
            .map_err(|source| WriteFailure {
                file: RESULTS,
                source,
            })?;
        for (encoded, at) in &mut chunk {
            written(encoded, *at);
        }
        if !finished {
            // Let lines gather for a moment instead of waking for each task: at
            // thousands of tasks a second this turns into a few writes per
            // millisecond, and finishing tasks rarely have to wake this thread.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Ok(())
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
/// line when it can be), the rest of `Brief`; the delivery and the error are
/// skipped over, not copied.
#[derive(Deserialize)]
struct BriefLine<'a> {
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
}

/// Reads `results.jsonl` (after `repair`), keeping the latest line per id.
/// When an id has several lines (a resumed or retried run), the file is read
/// a second time to sum only the latest ones.
pub fn read_previous(path: &Path) -> std::io::Result<Previous> {
    let mut previous = Previous::default();
    let mut superseded = Vec::new();
    let mut first_pass = |number: usize, brief: BriefRead<'_>| match brief {
        Some((id, brief)) => {
            previous.spent.add(&brief);
            previous.latest.push(id, brief.state);
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
    each_brief(path, &mut |_, brief| {
        if let Some((_, brief)) = brief {
            if next.peek().is_some_and(|&&lost| lost == position) {
                next.next();
            } else {
                latest_totals.add(&brief);
            }
            position = position.saturating_add(1);
        }
    })?;
    Ok(previous)
}

/// A result line's id and brief, `None` for a line that is not a result.
type BriefRead<'a> = Option<(&'a str, Brief)>;

/// Calls `each` with every non-blank line of `path` as a brief, with its
/// number; `false` when there is no such file.
fn each_brief(path: &Path, each: &mut dyn FnMut(usize, BriefRead<'_>)) -> std::io::Result<bool> {
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
                each(number, None);
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
            ),
            Err(_) => each(number, None),
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
