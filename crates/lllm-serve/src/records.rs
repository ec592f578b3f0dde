//! Where served sessions go: each record to its own file
//! (`<session id>.json` in the records directory) and its row to the
//! session store's index, by one thread that takes every record waiting and
//! writes them as a group: each file written whole under a temporary name
//! and renamed ([`AtomicFile::publish`]), their rows in one transaction. A
//! call is answered once its record is written and indexed, so `lllm logs`
//! finds it at once and a crash of the server loses none.
//!
//! Durability against a power loss follows the answers: a second thread
//! syncs the records' file system ([`sync_filesystem`]) once for every
//! group written while its last sync ran. A call never waits for the disk
//! (a sync in the answer's path was the largest part of what a served call
//! added to the provider's latency: docs/benchmarks.md, "Serving"); a power
//! loss can take the records of the last sync's worth of calls, and a
//! shutdown ([`Recorder::sync`], from the drain) syncs them all before the
//! server exits. The record is serialized by the call's own task, so the
//! writer only writes. A record or row that cannot be written, or a sync
//! that fails, is a warning on stderr (once for the index and the sync);
//! the call is answered all the same.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use lllm::file::atomic::{AtomicFile, sync_filesystem};
use lllm::store::{Entry, RecordPlace, Store};
use lllm::tactic::SessionRecord;
use tokio::sync::oneshot;

/// The most records written in one group.
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

/// What the writer thread is asked to do.
enum Job {
    /// Write a record; its caller waits. (Boxed: a record's index row is
    /// most of a kilobyte, a sync's sender one pointer.)
    Record(Box<Record>),
    /// Make every record written so far durable; answered once it is.
    Sync(oneshot::Sender<()>),
}

/// A record waiting for the writer thread, and who waits for it.
struct Record {
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
        let job = Job::Record(Box::new(Record {
            session_id: record.session_id.clone(),
            path,
            bytes,
            entry,
            done,
        }));
        if jobs.send(job).is_ok() {
            let _ = written.await;
        } else {
            warn_record(&record.session_id, "the writer thread has stopped");
        }
    }

    /// Waits until every record written so far is durable (the shutdown's
    /// last step).
    pub async fn sync(&self) {
        let Some(jobs) = &self.jobs else { return };
        let (done, synced) = oneshot::channel();
        if jobs.send(Job::Sync(done)).is_ok() {
            let _ = synced.await;
        }
    }
}

/// Says on stderr that a session's record was not written, and why.
fn warn_record(session_id: &str, error: &str) {
    lllm::output::stderr_line(&format!(
        "lllm serve: warning: the record of session {session_id} was not written: {error}"
    ));
}

/// The writer thread: every record waiting, written as one group, their rows
/// registered in one transaction, their callers answered; then the group's
/// sync asked of the syncing thread, and the next group.
fn writer(dir: &Path, store_dir: Option<&Path>, jobs: &mpsc::Receiver<Job>) {
    let (syncs, pending) = mpsc::channel::<Vec<oneshot::Sender<()>>>();
    let synced_dir = dir.to_path_buf();
    let syncer = std::thread::Builder::new()
        .name("lllm-serve-sync".into())
        .spawn(move || syncer(&synced_dir, &pending));
    let mut index = Index::new(store_dir);
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
        let mut entries = Vec::with_capacity(batch.len());
        let mut answered = Vec::with_capacity(batch.len());
        let mut waiting_sync = Vec::new();
        for job in batch {
            match job {
                Job::Record(record) => {
                    match publish(&record) {
                        Ok(()) => entries.extend(record.entry),
                        Err(error) => warn_record(
                            &record.session_id,
                            &format!("{}: {error}", record.path.display()),
                        ),
                    }
                    answered.push(record.done);
                }
                Job::Sync(done) => waiting_sync.push(done),
            }
        }
        index.register(&entries);
        for done in answered {
            let _ = done.send(());
        }
        match &syncer {
            // A group with nothing to wait for is still synced.
            Ok(_) => {
                let _ = syncs.send(waiting_sync);
            }
            // No syncing thread: each shutdown's sync is answered at once
            // (the records are written; the disk gets them in its time).
            Err(_) => drop(waiting_sync),
        }
    }
}

/// Writes one record under a temporary name and renames it into place.
fn publish(record: &Record) -> std::io::Result<()> {
    let mut file = AtomicFile::create(&record.path)?;
    file.write_all(&record.bytes)?;
    file.publish()
}

/// The syncing thread: one sync of the records' file system for every group
/// written while the last one ran; then those who asked are answered.
fn syncer(dir: &Path, pending: &mpsc::Receiver<Vec<oneshot::Sender<()>>>) {
    let mut warned = false;
    while let Ok(first) = pending.recv() {
        let mut waiting = first;
        while let Ok(more) = pending.try_recv() {
            waiting.extend(more);
        }
        if let Err(error) = sync_filesystem(dir)
            && !std::mem::replace(&mut warned, true)
        {
            lllm::report::warn(&format!(
                "{}: served records could not be synced to disk: {error} (they are \
                 written; a power loss may take the latest)",
                dir.display()
            ));
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

/// The session store's index, opened at its first rows.
struct Index<'a> {
    dir: Option<&'a Path>,
    store: Option<Store>,
    warned: bool,
}

impl<'a> Index<'a> {
    fn new(dir: Option<&'a Path>) -> Index<'a> {
        Index {
            dir,
            store: None,
            warned: false,
        }
    }

    /// Registers `entries` in one transaction; a failure is said once.
    fn register(&mut self, entries: &[Entry]) {
        let Some(dir) = self.dir else { return };
        if entries.is_empty() {
            return;
        }
        if self.store.is_none() {
            match Store::open(dir) {
                Ok(opened) => self.store = Some(opened),
                Err(error) => return self.warn(&error.to_string()),
            }
        }
        if let Some(store) = &mut self.store
            && let Err(error) = store.register(entries)
        {
            self.warn(&error.to_string());
        }
    }

    /// Says once why sessions are not indexed.
    fn warn(&mut self, error: &str) {
        if !std::mem::replace(&mut self.warned, true) {
            lllm::report::warn(&format!(
                "{error}; served sessions are not registered (their records are written; \
                 `lllm logs reindex --from DIR` indexes them later)"
            ));
        }
    }
}

/// The index row of `record`, written at `path`.
fn entry(record: &SessionRecord, path: &Path) -> Entry {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Entry::of(record, RecordPlace::File(path))
}
