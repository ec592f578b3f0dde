//! Where served sessions go: each record to its own file
//! (`<session id>.json` in the records directory) and its row to the
//! session store's index, by one thread that takes every record waiting and
//! commits them as a group: their files with one sync
//! ([`lllm::file::atomic::commit_all`]), their rows in one transaction.
//! Under load, one sync and one SQLite transaction serve many calls instead
//! of one each (one `fsync` a call was the largest cost of a served call:
//! docs/benchmarks.md, "Serving"); a lone call is one group of one. The
//! record is serialized by the call's own task, so the writer only writes.
//! A call is answered once its record is written and indexed, so `lllm
//! logs` finds it at once. A record or row that cannot be written is a
//! warning on stderr, once per place for the index; the call is answered
//! all the same.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use lllm::file::atomic::{AtomicFile, commit_all};
use lllm::store::{Entry, RecordPlace, Store};
use lllm::tactic::SessionRecord;
use tokio::sync::oneshot;

/// The most records committed in one group.
const BATCH: usize = 512;

/// Writes the sessions' records and indexes them.
pub struct Recorder {
    /// The records directory; `None`: no records (`--no-record`).
    dir: Option<PathBuf>,
    /// Whether rows go to the store's index (not `--no-store`).
    indexed: bool,
    /// The writer thread.
    jobs: Option<mpsc::Sender<Job>>,
}

/// A record waiting for the writer thread, and who waits for it.
struct Job {
    session_id: String,
    path: PathBuf,
    /// The record as its file holds it.
    bytes: Vec<u8>,
    /// Its index row (`None` without a store).
    entry: Option<Entry>,
    done: oneshot::Sender<()>,
}

impl Recorder {
    /// Records in `dir`, indexed in the store in `store`.
    pub fn new(dir: Option<PathBuf>, store: Option<PathBuf>) -> Recorder {
        let indexed = store.is_some();
        let jobs = dir.clone().and_then(|dir| {
            let (sender, receiver) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("lllm-serve-records".into())
                .spawn(move || writer(&dir, store.as_deref(), &receiver));
            spawned.ok().map(|_| sender)
        });
        Recorder { dir, indexed, jobs }
    }

    /// Writes `record` and indexes it; a failure is said on stderr.
    pub async fn write(&self, record: &SessionRecord) {
        let (Some(dir), Some(jobs)) = (&self.dir, &self.jobs) else {
            if self.dir.is_some() {
                warn_record(&record.session_id, "the writer thread could not start");
            }
            return;
        };
        let path = dir.join(format!("{}.json", record.session_id));
        let mut bytes = match serde_json::to_vec_pretty(record) {
            Ok(bytes) => bytes,
            Err(error) => return warn_record(&record.session_id, &error.to_string()),
        };
        bytes.push(b'\n');
        let entry = self.indexed.then(|| entry(record, &path));
        let (done, written) = oneshot::channel();
        let job = Job {
            session_id: record.session_id.clone(),
            path,
            bytes,
            entry,
            done,
        };
        if jobs.send(job).is_ok() {
            let _ = written.await;
        } else {
            warn_record(&record.session_id, "the writer thread has stopped");
        }
    }
}

/// Says on stderr that a session's record was not written, and why.
fn warn_record(session_id: &str, error: &str) {
    lllm::output::stderr_line(&format!(
        "lllm serve: warning: the record of session {session_id} was not written: {error}"
    ));
}

/// The writer thread: every record waiting, committed as one group, their
/// rows registered in one transaction, then the next group.
fn writer(dir: &Path, store_dir: Option<&Path>, jobs: &mpsc::Receiver<Job>) {
    let mut store: Option<Store> = None;
    let mut warned = false;
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        // Made once here rather than per record; a failure shows as each
        // record's own error below.
        let _ = std::fs::create_dir_all(dir);
        let mut files = Vec::with_capacity(batch.len());
        let mut written = Vec::with_capacity(batch.len());
        let mut waiting = Vec::with_capacity(batch.len());
        for job in batch {
            let file = AtomicFile::create(&job.path).and_then(|mut file| {
                file.write_all(&job.bytes)?;
                Ok(file)
            });
            match file {
                Ok(file) => {
                    files.push(file);
                    written.push(job);
                }
                Err(error) => {
                    warn_record(&job.session_id, &format!("{}: {error}", job.path.display()));
                    waiting.push(job.done);
                }
            }
        }
        let mut entries = Vec::with_capacity(written.len());
        for (job, committed) in written.into_iter().zip(commit_all(files)) {
            match committed {
                Ok(()) => entries.extend(job.entry),
                Err(error) => {
                    warn_record(&job.session_id, &format!("{}: {error}", job.path.display()));
                }
            }
            waiting.push(job.done);
        }
        if let Some(store_dir) = store_dir
            && !entries.is_empty()
        {
            if store.is_none() {
                match Store::open(store_dir) {
                    Ok(opened) => store = Some(opened),
                    Err(error) => warn(&mut warned, &error.to_string()),
                }
            }
            if let Some(opened) = &mut store
                && let Err(error) = opened.register(&entries)
            {
                warn(&mut warned, &error.to_string());
            }
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

/// The index row of `record`, written at `path`.
fn entry(record: &SessionRecord, path: &Path) -> Entry {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Entry::of(record, RecordPlace::File(path))
}

/// Says once why sessions are not indexed.
fn warn(warned: &mut bool, error: &str) {
    if !std::mem::replace(warned, true) {
        lllm::report::warn(&format!(
            "{error}; served sessions are not registered (their records are written; \
             `lllm logs reindex --from DIR` indexes them later)"
        ));
    }
}
