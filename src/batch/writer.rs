//! The batch writer: one thread appends every task's lines to the output
//! directory's two files, its session record to `sessions.jsonl` (or
//! `sessions.jsonl.zst`) and its result line to `results.jsonl`, many tasks
//! per write (group commit). What the lines hold is `output`'s business.
//!
//! Two rules bound what a kill or a failed write can cost (issue 26):
//!
//! - **A task holds its `-j` slot until its lines are on disk.** The slot
//!   travels with the lines ([`Encoded::holding`]) and is released by this
//!   thread once they are written (or known lost), so the tasks paid for
//!   and not yet on disk are never more than `-j`: running, or finished and
//!   waiting for this thread.
//! - **A write is whole or undone.** Records go first, then result lines (a
//!   result line never precedes its record); when either write fails (a full
//!   disk, a file size limit), both files are cut back to where they were,
//!   the run is told to stop ([`Writer::when_failed`]), and the lines are
//!   written again one task at a time, so every task that still fits is
//!   kept. What does not fit is named in the [`WriteFailure`]: the finished
//!   tasks among it are the only ones `--resume` pays for again.
//!
//! A kill between the two writes leaves records without result lines;
//! `--resume` rebuilds those result lines from the records (`rebuild`)
//! instead of running the tasks again.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::output::{RESULTS, ResultLine, SessionsFile, TaskState};
use crate::jsonl::{Form, FrameWriter};
use crate::tactic::SessionRecord;

/// A task's lines, serialized by the task itself (in parallel), written by
/// the writer thread.
pub struct Encoded {
    session: Option<Vec<u8>>,
    result: Vec<u8>,
    /// The task's id, and whether it ran to an end (a record, and a state
    /// other than `skipped`): named when its lines are lost.
    id: String,
    finished: bool,
    /// Released once the lines are on disk or lost (see [`Encoded::holding`]).
    slot: Option<Box<dyn Send>>,
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
                serde_json::to_writer(&mut line, record)?;
                line.push(b'\n');
                LAST.store(line.len(), Ordering::Relaxed);
                Some(line)
            }
            None => None,
        };
        // Likewise for result lines (a scored one is several times longer).
        static LAST_RESULT: AtomicUsize = AtomicUsize::new(256);
        let mut line = Vec::with_capacity(LAST_RESULT.load(Ordering::Relaxed) + 64);
        serde_json::to_writer(&mut line, result)?;
        line.push(b'\n');
        LAST_RESULT.store(line.len(), Ordering::Relaxed);
        Ok(Encoded {
            finished: session.is_some() && result.state != TaskState::Skipped,
            session,
            result: line,
            id: result.id.clone(),
            slot: None,
            #[cfg(feature = "store")]
            entry: None,
        })
    }

    /// The same lines holding `slot` (the task's `-j` permit) until the
    /// writer has written them, or knows they are lost: a task counts as in
    /// flight until it is on disk.
    pub fn holding(mut self, slot: impl Send + 'static) -> Encoded {
        self.slot = Some(Box::new(slot));
        self
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

/// Lines that never reached the disk: the finished tasks among them by
/// name (the first [`Lost::NAMED`]), the others (results of tasks that were
/// skipped or cancelled, which `--resume` runs anyway) by count.
#[derive(Debug, Default)]
pub struct Lost {
    /// Finished tasks whose record and result are not on disk: paid for,
    /// and run again by `--resume`.
    pub finished: u64,
    /// The ids of the first of them.
    pub named: Vec<String>,
    /// Other result lines not written.
    pub others: u64,
}

impl Lost {
    /// Finished tasks named in [`Lost::named`]; the rest are counted.
    pub const NAMED: usize = 10;

    /// Counts `encoded` as lost.
    pub fn add(&mut self, encoded: &Encoded) {
        if !encoded.finished {
            self.others += 1;
            return;
        }
        self.finished += 1;
        if self.named.len() < Lost::NAMED {
            self.named.push(encoded.id.clone());
        }
    }

    /// Adds `other`'s losses to these.
    pub fn merge(&mut self, other: Lost) {
        self.finished += other.finished;
        self.others += other.others;
        let room = Lost::NAMED.saturating_sub(self.named.len());
        self.named.extend(other.named.into_iter().take(room));
    }

    /// The finished tasks lost, in words (`None` when there are none):
    /// `2 finished tasks were not written (`t01`, `t07`)`.
    pub fn describe(&self) -> Option<String> {
        if self.finished == 0 {
            return None;
        }
        let mut names: Vec<String> = self.named.iter().map(|id| shown_id(id)).collect();
        if self.finished > names.len() as u64 {
            names.push(format!("and {} more", self.finished - names.len() as u64));
        }
        let verb = if self.finished == 1 { "was" } else { "were" };
        Some(format!(
            "{} {verb} not written ({})",
            crate::words::count(self.finished, "finished task", "finished tasks"),
            names.join(", ")
        ))
    }
}

/// `id` as an error line names it: in backticks, one line, cut as every
/// echoed value is (`redact::echo`).
pub(crate) fn shown_id(id: &str) -> String {
    format!("`{}`", crate::redact::echo(id))
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
    /// Called once, by the thread, at the first failed write.
    on_failure: Arc<OnceLock<FailureHook>>,
}

type FailureHook = Box<dyn Fn() + Send + Sync>;

/// A write that failed (a full disk, a file size limit, an I/O error): which
/// file, why, and what could not be written. Both files were cut back to
/// their last whole line (or frame), so what is on disk is whole; the run
/// stopped there.
#[derive(Debug)]
pub struct WriteFailure {
    /// `RESULTS`, `SESSIONS` or `SESSIONS_COMPRESSED`.
    pub file: &'static str,
    pub source: std::io::Error,
    /// The tasks whose lines are not on disk.
    pub lost: Lost,
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
        let name = sessions.name;
        let mut files = Files {
            results: FrameWriter::new(append(RESULTS)?, Form::Plain)?,
            sessions: FrameWriter::new(append(name)?, sessions.form)?,
            sessions_name: name,
            broken: false,
        };
        #[cfg(feature = "store")]
        let registrar = store.map(|store| crate::store::Registrar::new(store, dir.join(name)));
        #[cfg(not(feature = "store"))]
        let _ = store;
        #[cfg(feature = "store")]
        let indexes = registrar.is_some();
        #[cfg(not(feature = "store"))]
        let indexes = false;
        let on_failure: Arc<OnceLock<FailureHook>> = Arc::new(OnceLock::new());
        let failed = on_failure.clone();
        let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("lllm-batch-writer".into())
            .spawn(move || {
                // The session store is told of written records by a thread of
                // its own: its SQLite work must not delay the next write, which
                // finished tasks wait for with their `-j` slots.
                #[cfg(feature = "store")]
                let index = registrar.map(Index::start).transpose();
                #[cfg(feature = "store")]
                let index = match index {
                    Ok(index) => index,
                    Err(error) => {
                        crate::report::warn(&format!(
                            "the session store is not updated: cannot start its thread: {error}"
                        ));
                        None
                    }
                };
                #[cfg(feature = "store")]
                let mut hook = |encoded: &mut Encoded, at: Option<u64>| {
                    if let (Some(index), Some(entry), Some(at)) = (&index, encoded.entry.take(), at)
                    {
                        index.add(entry, at);
                    }
                };
                #[cfg(not(feature = "store"))]
                let mut hook = |_: &mut Encoded, _: Option<u64>| {};
                let failed = || {
                    if let Some(hook) = failed.get() {
                        hook();
                    }
                };
                let written = write_loop(&receiver, &mut files, &mut hook, &failed);
                #[cfg(feature = "store")]
                if let Some(index) = index {
                    index.finish();
                }
                written
            })?;
        Ok(Writer {
            sender,
            thread: std::sync::Mutex::new(Some(thread)),
            indexes,
            on_failure,
        })
    }

    /// Whether records are registered in a session store: the tasks then add
    /// the store's entry to their lines ([`Encoded::with_entry`]).
    pub fn indexes(&self) -> bool {
        self.indexes
    }

    /// Has `hook` called (once, by the writer's thread) when a write first
    /// fails, before the slots of the lines it could not write are released:
    /// the run stops starting tasks then. Set it before sending lines.
    pub fn when_failed(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_failure.set(Box::new(hook));
    }

    /// Queues a task's lines; when the writer's thread is gone (it
    /// panicked, or `finish` was called), they are lost, and said so.
    pub fn send(&self, encoded: Encoded) -> Result<(), Lost> {
        match self.sender.send(Some(encoded)) {
            Err(std::sync::mpsc::SendError(Some(lines))) => {
                let mut lost = Lost::default();
                lost.add(&lines);
                Err(lost)
            }
            _ => Ok(()),
        }
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
                lost: Lost::default(),
            }),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The session store's registrations, made on a thread of their own in the
/// order the records were written.
#[cfg(feature = "store")]
struct Index {
    sender: std::sync::mpsc::Sender<(crate::store::Entry, u64)>,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(feature = "store")]
impl Index {
    fn start(mut registrar: crate::store::Registrar) -> std::io::Result<Index> {
        let (sender, receiver) = std::sync::mpsc::channel::<(crate::store::Entry, u64)>();
        let thread = std::thread::Builder::new()
            .name("lllm-batch-index".into())
            .spawn(move || {
                for (entry, at) in receiver {
                    registrar.add(entry, at);
                }
                registrar.flush();
            })?;
        Ok(Index { sender, thread })
    }

    fn add(&self, entry: crate::store::Entry, at: u64) {
        // The thread ends only when this sender is dropped (or it panicked:
        // the store is an index, `logs reindex` rebuilds it).
        let _ = self.sender.send((entry, at));
    }

    /// Registers what is queued, then stops.
    fn finish(self) {
        drop(self.sender);
        let _ = self.thread.join();
    }
}

/// The two files, each write whole or undone.
struct Files {
    results: FrameWriter,
    sessions: FrameWriter,
    sessions_name: &'static str,
    /// A failed write could not be undone (cutting the file back failed
    /// too): nothing more is appended after its torn bytes, which
    /// `--resume` cuts.
    broken: bool,
}

impl Files {
    /// Appends `records`, then `results`; when either write fails, both
    /// files are cut back to where they were, and the error says which.
    fn commit(
        &mut self,
        records: &[u8],
        results: &[u8],
    ) -> Result<(), (&'static str, std::io::Error)> {
        let before = (self.sessions.length(), self.results.length());
        let written = self
            .sessions
            .write(records)
            .map_err(|error| (self.sessions_name, error))
            .and_then(|()| {
                self.results
                    .write(results)
                    .map_err(|error| (RESULTS, error))
            });
        if written.is_err() {
            let undone = self
                .sessions
                .cut_back(before.0)
                .and_then(|()| self.results.cut_back(before.1));
            self.broken = undone.is_err();
        }
        written
    }
}

/// The writer's loop. `written(encoded, place)` is told of each record line
/// after it is on disk, with its place (`jsonl::Lines::place`; `None` past
/// what a compressed file's places can say); `failed()` at the first write
/// that fails.
fn write_loop(
    receiver: &std::sync::mpsc::Receiver<Option<Encoded>>,
    files: &mut Files,
    written: &mut dyn FnMut(&mut Encoded, Option<u64>),
    failed: &dyn Fn(),
) -> Result<(), WriteFailure> {
    let mut chunk: Vec<(Encoded, Option<u64>)> = Vec::new();
    let (mut result_lines, mut session_lines) = (Vec::new(), Vec::new());
    let mut failure: Option<(&'static str, std::io::Error)> = None;
    let mut lost = Lost::default();
    let mut finished = false;
    while !finished {
        let Ok(first) = receiver.recv() else { break };
        result_lines.clear();
        session_lines.clear();
        let mut next = first;
        loop {
            let Some(encoded) = next else {
                finished = true;
                break;
            };
            // Every line of a frame starts within its first GATHER bytes, so a
            // compressed place always fits (`jsonl::pack`).
            let at = files.sessions.place(session_lines.len() as u64);
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
        let committed = match files.broken {
            true => Err(None),
            false => files.commit(&session_lines, &result_lines).map_err(Some),
        };
        match committed {
            Ok(()) => {
                // The lines are on disk: their slots go back first, so the
                // session store's bookkeeping below (an index, rebuilt by
                // `logs reindex` if lost) never holds a task back.
                for (encoded, _) in &mut chunk {
                    encoded.slot = None;
                }
                for (encoded, at) in &mut chunk {
                    written(encoded, *at);
                }
            }
            Err(error) => {
                if failure.is_none() {
                    // The run stops before any slot is released below, so
                    // no task starts in a freed slot.
                    failed();
                    failure = error;
                }
                // One task at a time: every task that still fits is kept.
                for (encoded, _) in &mut chunk {
                    let at = files.sessions.place(0);
                    let record = encoded.session.as_deref().unwrap_or_default();
                    if !files.broken && files.commit(record, &encoded.result).is_ok() {
                        written(encoded, at);
                    } else {
                        lost.add(encoded);
                    }
                }
            }
        }
        // Releases the tasks' slots: they are on disk, or named lost.
        chunk.clear();
        if !finished {
            // Let lines gather for a moment instead of waking for each task: at
            // thousands of tasks a second this turns into a few writes per
            // millisecond, and finishing tasks rarely have to wake this thread.
            // Short, since a finished task holds its `-j` slot until written
            // (`bench/batch.sh 20000 256 50`: 1 ms cost 3 % of throughput).
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    match failure {
        None => Ok(()),
        Some((file, source)) => Err(WriteFailure { file, source, lost }),
    }
}
