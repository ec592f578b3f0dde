//! Where served sessions go: each record one line of a `sessions.jsonl` of
//! the server's own (`<records>/serve-<uuid>/sessions.jsonl`: the form a
//! batch writes, read by `lllm replay FILE --id ID` and found by `lllm logs
//! reindex --from`), its row in the session store's index with the line's
//! offset. One thread takes every record waiting and writes them as a
//! group: their lines in one write at the file's end. A call is answered
//! once its record is written, so a crash of the server loses none.
//!
//! A second thread indexes: the rows of every group written while its last
//! transaction ran go in one transaction, a few milliseconds after their
//! calls were answered at most. Before, each call waited for its group's
//! commit, and the commit (a page of SQLite's log for each B-tree a row
//! touches, whatever the group's size) was half of what a served call added
//! to the provider's latency at 1,000 calls a second (docs/benchmarks.md,
//! "Serving"). A crash between an answer and its row's commit leaves a
//! record that `lllm logs reindex --from` finds.
//!
//! A file of one's own, appended to, replaced a file per record: creating a
//! file and renaming it into place was most of the kernel's work per call
//! at 1,000 calls a second (the file system searching for a free inode).
//! The file is created with `O_EXCL`, so no two servers ever write one;
//! past [`SEGMENT_BYTES`] the next group starts a new one.
//!
//! Durability against a power loss follows the index: a third thread syncs
//! the files written (`fdatasync`, and their directories once) for every
//! group indexed while its last sync ran, at most once every 10 ms
//! ([`SYNC_EVERY`]). A call never waits for the disk; a power loss can take
//! the records of the last sync's worth of calls, and a shutdown
//! ([`Recorder::sync`], from the drain) is answered once every record is
//! indexed and synced. The record is serialized by the call's own task, so
//! the writer only writes. A record or row that cannot be written, or a
//! sync that fails, is a warning on stderr (once for the index and the
//! sync); the call is answered all the same.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use lllm::store::{Entry, RecordPlace, Store};
use lllm::tactic::SessionRecord;
use tokio::sync::oneshot;

/// The most records written in one group.
const BATCH: usize = 512;

/// A server's `sessions.jsonl` grows to about this size (the group that
/// passes it is written whole), then the next group starts a new file.
pub const SEGMENT_BYTES: u64 = 64 << 20;

/// Writes the sessions' records and indexes them.
pub struct Recorder {
    /// Whether records are written (not `--no-record`).
    recording: bool,
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
    /// The record's line, its newline included.
    line: Vec<u8>,
    /// Its index row, its place filled in by the writer (`None` without a
    /// store).
    entry: Option<Entry>,
    done: oneshot::Sender<()>,
}

impl Recorder {
    /// Records in a file of their own under `dir`, indexed in the store in
    /// `store`.
    pub fn new(dir: Option<PathBuf>, store: Option<PathBuf>) -> Recorder {
        let recording = dir.is_some();
        let indexed = store.is_some();
        let jobs = dir.and_then(|dir| {
            let (sender, receiver) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("lllm-serve-records".into())
                .spawn(move || writer(&dir, store.as_deref(), &receiver));
            spawned.ok().map(|_| sender)
        });
        Recorder {
            recording,
            indexed,
            jobs,
        }
    }

    /// Writes `record` (its index row follows, off the caller's path); a
    /// failure is said on stderr.
    pub async fn write(&self, record: &SessionRecord) {
        let Some(jobs) = &self.jobs else {
            if self.recording {
                warn_record(&record.session_id, "the writer thread could not start");
            }
            return;
        };
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(error) => return warn_record(&record.session_id, &error.to_string()),
        };
        line.push(b'\n');
        let entry = self.indexed.then(|| {
            let unplaced = RecordPlace::Line {
                path: PathBuf::new(),
                offset: 0,
            };
            Entry::of(record, unplaced)
        });
        let (done, written) = oneshot::channel();
        let job = Job::Record(Box::new(Record {
            session_id: record.session_id.clone(),
            line,
            entry,
            done,
        }));
        if jobs.send(job).is_ok() {
            let _ = written.await;
        } else {
            warn_record(&record.session_id, "the writer thread has stopped");
        }
    }

    /// Waits until every record written so far is indexed and durable (the
    /// shutdown's last step).
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

/// The file records are appended to.
struct Segment {
    /// `<records>/serve-<uuid>/sessions.jsonl`, absolute.
    path: PathBuf,
    file: Arc<File>,
    /// Its length: the next line's offset.
    len: u64,
}

impl Segment {
    /// A new file under `dir`, no other's: its directory's name is a new
    /// UUID v7 (in time order, as session ids are), and the file is created
    /// with `O_EXCL` (which follows no link either).
    fn create(dir: &Path) -> std::io::Result<Segment> {
        let folder = dir.join(format!("serve-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&folder)?;
        // Absolute once here, as the index keeps it.
        let path = absolute(&folder.join(lllm::tactic::record::SESSIONS_FILE));
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)?;
        Ok(Segment {
            path,
            file: Arc::new(file),
            len: 0,
        })
    }

    /// Appends `bytes`. On a failure the file is cut back to its last whole
    /// line, so that the next group's offsets stay true; `false` when even
    /// that failed, and the next group must start a new file.
    fn append(&mut self, bytes: &[u8]) -> Result<(), (std::io::Error, bool)> {
        match (&*self.file).write_all(bytes) {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(error) => Err((error, self.file.set_len(self.len).is_ok())),
        }
    }
}

/// What the syncing thread makes durable.
enum Durable {
    /// A file's data.
    File(Arc<File>),
    /// A directory's entries (a new file's name in it).
    Directory(PathBuf),
}

/// What the syncing thread is given after each group.
struct Synced {
    durable: Vec<Durable>,
    /// Who waits for them.
    waiting: Vec<oneshot::Sender<()>>,
}

/// The writer thread: every record waiting, written as one group in the
/// current file and their callers answered; then the group's rows and what
/// it leaves to sync handed to the indexing thread, and the next group.
fn writer(dir: &Path, store_dir: Option<&Path>, jobs: &mpsc::Receiver<Job>) {
    let (syncs, pending) = mpsc::channel::<Synced>();
    let syncer = std::thread::Builder::new()
        .name("lllm-serve-sync".into())
        .spawn(move || syncer(&pending));
    let (rows, unindexed) = mpsc::channel::<Indexed>();
    let store_dir = store_dir.map(Path::to_path_buf);
    let indexer = syncer.is_ok().then(|| {
        std::thread::Builder::new()
            .name("lllm-serve-index".into())
            .spawn(move || indexer(store_dir.as_deref(), &unindexed, &syncs))
    });
    let mut segment: Option<Segment> = None;
    let mut lines = Vec::new();
    let mut unthreaded = false;
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut durable = Vec::new();
        if let Some(full) = segment.take_if(|segment| segment.len >= SEGMENT_BYTES) {
            durable.push(Durable::File(full.file));
        }
        // A file is started for records only: a server that served nothing
        // leaves none behind at its shutdown's sync.
        let recording = batch.iter().any(|job| matches!(job, Job::Record(_)));
        let opened = match &segment {
            Some(_) => Ok(()),
            None if !recording => Ok(()),
            None => Segment::create(dir).map(|created| {
                for directory in [created.path.parent(), Some(dir)].into_iter().flatten() {
                    durable.push(Durable::Directory(directory.to_path_buf()));
                }
                segment = Some(created);
            }),
        };
        let mut entries = Vec::with_capacity(batch.len());
        let mut written = Vec::with_capacity(batch.len());
        let mut answered = Vec::with_capacity(batch.len());
        let mut waiting_sync = Vec::new();
        lines.clear();
        for job in batch {
            match job {
                Job::Record(record) => {
                    let Record {
                        session_id,
                        line,
                        entry,
                        done,
                    } = *record;
                    if let Some(segment) = &segment {
                        let offset = segment.len + lines.len() as u64;
                        lines.extend_from_slice(&line);
                        entries.extend(entry.map(|mut entry| {
                            entry.place = RecordPlace::Line {
                                path: segment.path.clone(),
                                offset,
                            };
                            entry
                        }));
                    }
                    written.push(session_id);
                    answered.push(done);
                }
                Job::Sync(done) => waiting_sync.push(done),
            }
        }
        let outcome = match (opened, &mut segment) {
            (Err(error), _) => Err(format!("{}: {error}", dir.display())),
            (Ok(()), Some(open)) if !lines.is_empty() => match open.append(&lines) {
                Ok(()) => Ok(()),
                Err((error, restored)) => {
                    let message = format!("{}: {error}", open.path.display());
                    if !restored {
                        durable.push(Durable::File(open.file.clone()));
                        segment = None;
                    }
                    Err(message)
                }
            },
            _ => Ok(()),
        };
        if let Err(message) = &outcome {
            for session_id in &written {
                warn_record(session_id, message);
            }
            entries.clear();
        }
        for done in answered {
            let _ = done.send(());
        }
        if let Some(segment) = &segment {
            durable.push(Durable::File(segment.file.clone()));
        }
        match &indexer {
            // A group with nothing to index or wait for is still synced.
            Some(Ok(_)) => {
                let _ = rows.send(Indexed {
                    entries,
                    synced: Synced {
                        durable,
                        waiting: waiting_sync,
                    },
                });
            }
            // No indexing or syncing thread: the rows are left to `lllm logs
            // reindex`, said once, and each shutdown's sync is answered at
            // once (the records are written; the disk gets them in its time).
            _ => {
                if !entries.is_empty() && !std::mem::replace(&mut unthreaded, true) {
                    warn_unindexed("the indexing thread could not start");
                }
                drop(waiting_sync);
            }
        }
    }
}

/// A written group's rows, and what is to be synced after them.
struct Indexed {
    entries: Vec<Entry>,
    synced: Synced,
}

/// The indexing thread: the rows of every group written while the last
/// transaction ran, registered in one; then their groups' syncs handed to
/// the syncing thread, so a shutdown's sync is answered once every record
/// is indexed too. A call is answered before its row is committed: the
/// commit, and SQLite's checkpoints now and then, never hold an answer.
fn indexer(
    store_dir: Option<&Path>,
    groups: &mpsc::Receiver<Indexed>,
    syncs: &mpsc::Sender<Synced>,
) {
    let mut index = Index::new(store_dir);
    let mut last = std::time::Instant::now();
    while let Ok(first) = groups.recv() {
        // At most one transaction an `INDEX_EVERY`: what arrives meanwhile
        // joins it (`INDEX_EVERY` says why).
        if let Some(wait) = INDEX_EVERY.checked_sub(last.elapsed()) {
            std::thread::sleep(wait);
        }
        last = std::time::Instant::now();
        let Indexed {
            mut entries,
            synced,
        } = first;
        let mut synced = vec![synced];
        while let Ok(more) = groups.try_recv() {
            entries.extend(more.entries);
            synced.push(more.synced);
        }
        index.register(&entries);
        for synced in synced {
            let _ = syncs.send(synced);
        }
    }
}

/// `path` made absolute (as the current directory is now).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The syncing thread: the files and directories of every group written
/// while the last sync ran, each synced once; then those who asked are
/// answered.
fn syncer(pending: &mpsc::Receiver<Synced>) {
    let mut warned = false;
    let mut last = std::time::Instant::now();
    while let Ok(first) = pending.recv() {
        // At most one sync a `SYNC_EVERY`: what arrives meanwhile joins it.
        if let Some(wait) = SYNC_EVERY.checked_sub(last.elapsed()) {
            std::thread::sleep(wait);
        }
        last = std::time::Instant::now();
        let Synced {
            mut durable,
            mut waiting,
        } = first;
        while let Ok(more) = pending.try_recv() {
            durable.extend(more.durable);
            waiting.extend(more.waiting);
        }
        let mut files: Vec<Arc<File>> = Vec::new();
        let mut directories: Vec<PathBuf> = Vec::new();
        for item in durable {
            match item {
                Durable::File(file) if !files.iter().any(|seen| Arc::ptr_eq(seen, &file)) => {
                    files.push(file);
                }
                Durable::Directory(path) if !directories.contains(&path) => {
                    directories.push(path);
                }
                _ => {}
            }
        }
        let synced = files
            .iter()
            .map(|file| file.sync_data())
            .chain(directories.iter().map(|path| sync_directory(path)))
            .find_map(Result::err);
        if let Some(error) = synced
            && !std::mem::replace(&mut warned, true)
        {
            lllm::report::warn(&format!(
                "served records could not be synced to disk: {error} (they are \
                 written; a power loss may take the latest)"
            ));
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

/// The shortest time between two syncs of the records. Each sync is a
/// journal commit of the file system: at 1,000 calls a second, spread out,
/// one per group was one per call (`bench/serve.sh`'s /run at 1,000
/// clients, a non-LTO build: 516 µs of the server's CPU per call, 438
/// without any sync, 504 and 482 in two runs with this pause). A power loss
/// can take this much more of the latest records.
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// The least time between two of the index's transactions. A transaction
/// writes a page of SQLite's log for every B-tree its rows touch (about a
/// dozen for a session), however few rows it holds; with three to seven
/// rows a transaction the index was a fifth of a served call's
/// instructions (callgrind; docs/benchmarks.md, "Serving"). A row lands
/// this much later at most, and a record is written (and its call
/// answered) before its row either way.
const INDEX_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Makes a directory's entries durable (on Unix; elsewhere a directory
/// cannot be opened to sync, and its entries follow the files').
fn sync_directory(path: &Path) -> std::io::Result<()> {
    if cfg!(unix) {
        File::open(path)?.sync_all()
    } else {
        Ok(())
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
            warn_unindexed(error);
        }
    }
}

/// Says why served sessions are not indexed, and how to index them later.
fn warn_unindexed(error: &str) {
    lllm::report::warn(&format!(
        "{error}; served sessions are not registered (their records are written; \
         `lllm logs reindex --from DIR` indexes them later)"
    ));
}
