//! Where served sessions go: each record one line of a `sessions.jsonl` of
//! the server's own (`<records>/serve-<uuid>/sessions.jsonl`: the form a
//! batch writes, read by `lllm replay FILE --id ID` and found by `lllm logs
//! reindex --from`), its row in the session store's index with the line's
//! offset. The call's own task serializes its record and appends the line
//! (one `write`, under a lock held for that write alone: tokio's, so a
//! call waiting for it leaves its worker free); the call is answered once
//! it is written, so a crash of the server loses none. A file system that
//! hangs a `write` holds one worker, not the server.
//!
//! The append was a writer thread's, which took every record waiting and
//! wrote them as a group. At 1,000 calls a second, spread out, the groups
//! were one record each, and the hop there and back (two thread wake-ups,
//! and the answer waiting for the writer to be scheduled on a busy
//! machine) cost more than the write itself (docs/benchmarks.md,
//! "Serving", sixth round).
//!
//! A second thread indexes: the rows of every record written while its last
//! transaction ran go in one transaction, at most one an [`INDEX_EVERY`],
//! after their calls were answered. A crash between an answer and its row's
//! commit leaves a record that `lllm logs reindex --from` finds.
//!
//! A file of one's own, appended to, replaced a file per record: creating a
//! file and renaming it into place was most of the kernel's work per call
//! at 1,000 calls a second (the file system searching for a free inode).
//! The file is created with `O_EXCL`, so no two servers ever write one;
//! past [`SEGMENT_BYTES`] the next record starts a new one.
//!
//! Durability against a power loss follows the index: a third thread syncs
//! the files written (`fdatasync`, and their directories once) for every
//! transaction committed while its last sync ran, at most once a
//! [`SYNC_EVERY`]. A call never waits for the disk; a power loss can take
//! the records of the last sync's worth of calls, and a shutdown
//! ([`Recorder::sync`], from the drain) is answered once every record is
//! indexed and synced. A record or row that cannot be written, or a sync
//! that fails, is a warning on stderr (once for the index and the sync);
//! the call is answered all the same.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use lllm::store::{Entry, RecordPlace, Store};
use lllm::tactic::SessionRecord;
use tokio::sync::{Mutex, oneshot};

/// A server's `sessions.jsonl` grows to about this size (the record that
/// passes it is written whole), then the next record starts a new file.
pub const SEGMENT_BYTES: u64 = 64 << 20;

/// Writes the sessions' records and indexes them.
pub struct Recorder {
    /// Where records are appended (`None` with `--no-record`).
    appender: Option<Mutex<Appender>>,
    /// Whether rows go to the store's index (not `--no-store`).
    indexed: bool,
    /// The indexing thread's queue; `None` when it could not start.
    rows: Option<mpsc::Sender<Indexed>>,
    /// Whether the missing indexing thread was said.
    unthreaded: AtomicBool,
}

impl Recorder {
    /// Records in a file of their own under `dir`, indexed in the store in
    /// `store`.
    pub fn new(dir: Option<PathBuf>, store: Option<PathBuf>) -> Recorder {
        let indexed = store.is_some();
        let rows = match dir {
            Some(_) => start_threads(store),
            None => None,
        };
        Recorder {
            appender: dir.map(|dir| Mutex::new(Appender { dir, segment: None })),
            indexed,
            rows,
            unthreaded: AtomicBool::new(false),
        }
    }

    /// Writes `record` (its index row follows, off the caller's path); a
    /// failure is said on stderr. It is one `write` to a file (to the page
    /// cache, not the disk) on the caller's thread.
    pub async fn write(&self, record: &SessionRecord) {
        let Some(appender) = &self.appender else {
            return;
        };
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(error) => return warn_record(&record.session_id, &error.to_string()),
        };
        line.push(b'\n');
        let (placed, durable) = appender.lock().await.append(&line);
        let mut entries = Vec::new();
        match placed {
            Ok((path, offset)) if self.indexed => {
                entries.push(Entry::of(record, RecordPlace::Line { path, offset }));
            }
            Ok(_) => {}
            Err(message) => warn_record(&record.session_id, &message),
        }
        self.send(Indexed {
            entries,
            synced: Synced {
                durable,
                waiting: Vec::new(),
            },
        });
    }

    /// Waits until every record written so far is indexed and durable (the
    /// shutdown's last step).
    pub async fn sync(&self) {
        let Some(appender) = &self.appender else {
            return;
        };
        let durable = appender
            .lock()
            .await
            .segment
            .iter()
            .map(|segment| Durable::File(segment.file.clone()))
            .collect();
        let (done, synced) = oneshot::channel();
        let sent = self.send(Indexed {
            entries: Vec::new(),
            synced: Synced {
                durable,
                waiting: vec![done],
            },
        });
        if sent {
            let _ = synced.await;
        }
    }

    /// Hands `indexed` to the indexing thread; `false` when there is none
    /// (its rows are then left to `lllm logs reindex`, said once, and a
    /// sync is answered at once: the records are written, the disk gets
    /// them in its time).
    fn send(&self, indexed: Indexed) -> bool {
        if let Some(rows) = &self.rows
            && rows.send(indexed).is_ok()
        {
            return true;
        }
        if self.indexed && !self.unthreaded.swap(true, Ordering::Relaxed) {
            warn_unindexed("the indexing thread could not start");
        }
        false
    }
}

/// The records' directory and the file being appended to.
struct Appender {
    dir: PathBuf,
    segment: Option<Segment>,
}

impl Appender {
    /// Appends `line` to the current file, starting one when there is none
    /// or it is full: where the line went (or why it did not) and what is
    /// to be synced for it.
    fn append(&mut self, line: &[u8]) -> (Result<(PathBuf, u64), String>, Vec<Durable>) {
        let mut durable = Vec::new();
        if let Some(full) = self.segment.take_if(|segment| segment.len >= SEGMENT_BYTES) {
            durable.push(Durable::File(full.file));
        }
        let segment = match &mut self.segment {
            Some(segment) => segment,
            None => match Segment::create(&self.dir) {
                Ok(created) => {
                    for directory in [created.path.parent(), Some(&self.dir)]
                        .into_iter()
                        .flatten()
                    {
                        durable.push(Durable::Directory(directory.to_path_buf()));
                    }
                    self.segment.insert(created)
                }
                Err(error) => {
                    return (Err(format!("{}: {error}", self.dir.display())), durable);
                }
            },
        };
        let offset = segment.len;
        let placed = match segment.append(line) {
            Ok(()) => Ok((segment.path.clone(), offset)),
            Err((error, restored)) => {
                let message = format!("{}: {error}", segment.path.display());
                if !restored {
                    durable.push(Durable::File(segment.file.clone()));
                    self.segment = None;
                }
                Err(message)
            }
        };
        if let Some(segment) = &self.segment {
            durable.push(Durable::File(segment.file.clone()));
        }
        (placed, durable)
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
    /// line, so that the next record's offset stays true; `false` when
    /// even that failed, and the next record must start a new file.
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

/// What the syncing thread is given after each record (or shutdown's sync).
struct Synced {
    durable: Vec<Durable>,
    /// Who waits for them.
    waiting: Vec<oneshot::Sender<()>>,
}

/// Starts the syncing thread and the indexing thread; the indexing
/// thread's queue, or `None` when either could not start.
fn start_threads(store: Option<PathBuf>) -> Option<mpsc::Sender<Indexed>> {
    let (syncs, pending) = mpsc::channel::<Synced>();
    std::thread::Builder::new()
        .name("lllm-serve-sync".into())
        .spawn(move || syncer(&pending))
        .ok()?;
    let (rows, unindexed) = mpsc::channel::<Indexed>();
    std::thread::Builder::new()
        .name("lllm-serve-index".into())
        .spawn(move || indexer(store.as_deref(), &unindexed, &syncs))
        .ok()?;
    Some(rows)
}

/// Written records' rows, and what is to be synced after them.
struct Indexed {
    entries: Vec<Entry>,
    synced: Synced,
}

/// The indexing thread: the rows of every record written while the last
/// transaction ran, registered in one; then their syncs handed to
/// the syncing thread, so a shutdown's sync is answered once every record
/// is indexed too. A call is answered before its row is committed: the
/// commit, and SQLite's checkpoints now and then, never hold an answer.
fn indexer(store_dir: Option<&Path>, rows: &mpsc::Receiver<Indexed>, syncs: &mpsc::Sender<Synced>) {
    let mut index = Index::new(store_dir);
    let mut last = std::time::Instant::now();
    while let Ok(first) = rows.recv() {
        // At most one transaction an `INDEX_EVERY`: what arrives meanwhile
        // joins it (`INDEX_EVERY` says why).
        if let Some(wait) = INDEX_EVERY.checked_sub(last.elapsed()) {
            std::thread::sleep(wait);
        }
        last = std::time::Instant::now();
        let Indexed {
            mut entries,
            mut synced,
        } = first;
        while let Ok(more) = rows.try_recv() {
            entries.extend(more.entries);
            synced.durable.extend(more.synced.durable);
            synced.waiting.extend(more.synced.waiting);
        }
        index.register(&entries);
        let _ = syncs.send(synced);
    }
}

/// `path` made absolute (as the current directory is now).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The syncing thread: the files and directories of every record written
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
