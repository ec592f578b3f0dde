//! Where served sessions go: each record to its own file
//! (`<session id>.json` in the records directory, written off the async
//! threads, many at once), and its row to the session store's index, by one
//! thread that registers every row waiting in one transaction (a group
//! commit: under load, one SQLite transaction for many calls instead of one
//! each, which is what `lllm::records::write_and_index` does for one run).
//! A call is answered once its record is written and indexed, so `lllm logs`
//! finds it at once. A record or row that cannot be written is a warning on
//! stderr, once per place for the index; the call is answered all the same.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use lllm::store::{Entry, RecordPlace, Store};
use lllm::tactic::SessionRecord;
use tokio::sync::oneshot;

/// The most rows registered in one transaction.
const BATCH: usize = 512;

/// Writes the sessions' records and indexes them.
pub struct Recorder {
    /// The records directory; `None`: no records (`--no-record`).
    dir: Option<PathBuf>,
    /// The index thread; `None`: no store (`--no-store`).
    index: Option<mpsc::Sender<Row>>,
}

/// A row waiting for the index thread, and who waits for it.
struct Row {
    entry: Entry,
    done: oneshot::Sender<()>,
}

impl Recorder {
    /// Records in `dir`, indexed in the store in `store`.
    pub fn new(dir: Option<PathBuf>, store: Option<PathBuf>) -> Recorder {
        let index = match (&dir, store) {
            (Some(_), Some(store)) => {
                let (sender, receiver) = mpsc::channel();
                let spawned = std::thread::Builder::new()
                    .name("lllm-serve-index".into())
                    .spawn(move || index(&store, &receiver));
                spawned.ok().map(|_| sender)
            }
            _ => None,
        };
        Recorder { dir, index }
    }

    /// Writes `record` and indexes it; a failure is said on stderr.
    pub async fn write(&self, record: &SessionRecord) {
        let Some(dir) = &self.dir else {
            return;
        };
        let path = dir.join(format!("{}.json", record.session_id));
        let written = record.clone();
        let indexed = self.index.is_some();
        let result = tokio::task::spawn_blocking(move || {
            written
                .write(&path)
                .map_err(|error| format!("{}: {error}", path.display()))?;
            Ok(indexed.then(|| entry(&written, &path)))
        })
        .await
        .unwrap_or_else(|error| Err(error.to_string()));
        match result {
            Ok(Some(entry)) => {
                let (done, indexed) = oneshot::channel();
                if let Some(index) = &self.index
                    && index.send(Row { entry, done }).is_ok()
                {
                    let _ = indexed.await;
                }
            }
            Ok(None) => {}
            Err(error) => lllm::output::stderr_line(&format!(
                "lllm serve: warning: the record of session {} was not written: {error}",
                record.session_id
            )),
        }
    }
}

/// The index row of `record`, written at `path`.
fn entry(record: &SessionRecord, path: &Path) -> Entry {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Entry::of(record, RecordPlace::File(path))
}

/// The index thread: every row waiting, in one transaction, then the next.
fn index(dir: &Path, rows: &mpsc::Receiver<Row>) {
    let mut store: Option<Store> = None;
    let mut warned = false;
    while let Ok(first) = rows.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rows.try_recv() {
                Ok(row) => batch.push(row),
                Err(_) => break,
            }
        }
        let (entries, waiting): (Vec<Entry>, Vec<oneshot::Sender<()>>) =
            batch.into_iter().map(|row| (row.entry, row.done)).unzip();
        if store.is_none() {
            match Store::open(dir) {
                Ok(opened) => store = Some(opened),
                Err(error) => warn(&mut warned, &error.to_string()),
            }
        }
        if let Some(opened) = &mut store
            && let Err(error) = opened.register(&entries)
        {
            warn(&mut warned, &error.to_string());
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
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
