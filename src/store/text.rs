//! The full-text index, caught up when a search needs it. Registering a
//! session only notes it in `text_pending` (a row id, in the same
//! transaction as the session's row); the first text search after that reads
//! the pending sessions' task and delivery back from their records and feeds
//! the contentless FTS5 table `sessions_text`. Tokenizing and writing 4-5 KB
//! of text per session was a third of a realistic batch call's CPU (issue 17);
//! a batch whose sessions are never searched no longer pays it, and one that
//! is pays it once, in the search.
//!
//! Nothing is lost on a crash: a session and its pending row commit together,
//! and a pending row is deleted in the transaction that indexes its text.
//! Searches (and writers) at once are safe: records are read outside the
//! write lock, and each session's text is indexed by whichever catch-up
//! deletes its pending row, so none is indexed twice.

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Result, Store};

/// Problems [`TextIndexed`] keeps the text of (it counts them all).
const PROBLEMS_KEPT: usize = 100;

/// Sessions per catch-up transaction: a batch registering at the same time
/// waits for at most one of them.
const CATCH_UP_BATCH: usize = 1000;

/// What a catch-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextIndexed {
    /// Sessions whose text was indexed.
    pub sessions: u64,
    /// Sessions whose record could not be read back: they are searched in
    /// the first 200 characters of their task and delivery (what the index
    /// row keeps).
    pub unreadable: u64,
    /// Why, one line each, for the first 100 of them.
    pub problems: Vec<String>,
}

/// One pending session: its row id, record place, and the previews kept in
/// its row (indexed instead when the record cannot be read).
struct Pending {
    id: i64,
    path: PathBuf,
    offset: Option<u64>,
    task: String,
    delivery: Option<String>,
}

impl Store {
    /// Sessions registered whose text is not indexed yet (a text search
    /// indexes them first: [`Store::index_text`]).
    pub fn pending_text(&self) -> Result<u64> {
        self.connection
            .query_row("SELECT COUNT(*) FROM text_pending", [], |row| {
                row.get::<_, i64>(0)
            })
            .map(|count| count as u64)
            .map_err(|error| self.sql(error))
    }

    /// Indexes the text of every session registered without it, reading the
    /// task and delivery back from the records ([`Store::list`] and
    /// [`Store::cost`] call it before a text search).
    pub fn index_text(&self) -> Result<TextIndexed> {
        let mut done = TextIndexed::default();
        let mut after = 0i64;
        loop {
            let pending = self.pending_after(after)?;
            let Some(last) = pending.last() else {
                return Ok(done);
            };
            after = last.id;
            // Read outside the write lock: a batch registering meanwhile
            // waits only for the inserts below. In file order, so that a
            // compressed file's frames are each decompressed once.
            let mut order: Vec<usize> = (0..pending.len()).collect();
            order.sort_by(|&a, &b| {
                (&pending[a].path, pending[a].offset).cmp(&(&pending[b].path, pending[b].offset))
            });
            let mut cursor = crate::jsonl::Cursor::new();
            let mut read: Vec<Option<Text>> = (0..pending.len()).map(|_| None).collect();
            for at in order {
                let session = &pending[at];
                read[at] = Some(
                    match read_texts(&mut cursor, &session.path, session.offset) {
                        Ok((task, delivery)) => Text {
                            id: session.id,
                            task,
                            delivery,
                            problem: None,
                        },
                        Err(problem) => Text {
                            id: session.id,
                            task: session.task.clone(),
                            delivery: session.delivery.clone(),
                            problem: Some(problem),
                        },
                    },
                );
            }
            let texts: Vec<Text> = read.into_iter().flatten().collect();
            let transaction = rusqlite::Transaction::new_unchecked(
                &self.connection,
                TransactionBehavior::Immediate,
            )
            .map_err(|error| self.sql(error))?;
            let indexed = index_pending(&transaction, &texts).map_err(|error| self.sql(error))?;
            transaction.commit().map_err(|error| self.sql(error))?;
            done.sessions += indexed.len() as u64;
            // Only the sessions this catch-up indexed count as its problems.
            for problem in indexed.iter().filter_map(|&at| texts[at].problem.as_ref()) {
                done.unreadable += 1;
                if done.problems.len() < PROBLEMS_KEPT {
                    done.problems.push(format!(
                        "{problem}; its session is searched in the first 200 characters \
                         of its task and delivery"
                    ));
                }
            }
        }
    }

    /// The next pending sessions after row id `after`, oldest first.
    fn pending_after(&self, after: i64) -> Result<Vec<Pending>> {
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT p.id, s.record_path, s.record_offset, s.task, s.delivery \
                 FROM text_pending p LEFT JOIN sessions s ON s.id = p.id \
                 WHERE p.id > ?1 ORDER BY p.id LIMIT ?2",
            )
            .map_err(|error| self.sql(error))?;
        statement
            .query_map(params![after, CATCH_UP_BATCH as i64], |row| {
                Ok(Pending {
                    id: row.get(0)?,
                    path: row
                        .get::<_, Option<super::paths::StoredPath>>(1)?
                        .map(|path| path.0)
                        .unwrap_or_default(),
                    offset: row.get::<_, Option<i64>>(2)?.map(|offset| offset as u64),
                    task: row.get::<_, Option<String>>(3)?.unwrap_or_default(),
                    delivery: row.get(4)?,
                })
            })
            .and_then(Iterator::collect)
            .map_err(|error| self.sql(error))
    }
}

/// What a text search needs of a record: its task and delivery, top-level
/// fields in every version (the rest of the line is skipped, not built).
#[derive(serde::Deserialize)]
struct Texts {
    format: Option<String>,
    task: serde_json::Value,
    delivery: Option<String>,
}

/// The task and delivery of the record at `path` (`offset`: its line's
/// place in a record file), or why they cannot be read.
fn read_texts(
    cursor: &mut crate::jsonl::Cursor,
    path: &std::path::Path,
    offset: Option<u64>,
) -> std::result::Result<(String, Option<String>), String> {
    let Some(offset) = offset else {
        // A `.json` record: the store's own reader checks all of it.
        return super::read_record(path, None)
            .map(|record| (super::task_text(&record.task), record.delivery))
            .map_err(|error| error.to_string());
    };
    let label = path.display();
    let line = cursor
        .read_at(path, offset)
        .map_err(|error| format!("cannot read the record `{label}`: {error}"))?;
    let texts: Texts = serde_json::from_str(&line).map_err(|error| {
        format!(
            "cannot read the record `{label}`: not a record at byte {offset}: {error}; \
             hint: `lllm logs reindex` rebuilds the index"
        )
    })?;
    match texts.format.as_deref() {
        Some(format) if crate::tactic::record::READS.contains(&format) => {
            Ok((super::task_text(&texts.task), texts.delivery))
        }
        found => Err(format!(
            "cannot read the record `{label}` (byte {offset}): it is a `{}` record",
            found.unwrap_or("unversioned")
        )),
    }
}

/// One pending session's text, read back from its record (or, when it could
/// not be, `problem` says why and the row's previews stand in).
struct Text {
    id: i64,
    task: String,
    delivery: Option<String>,
    problem: Option<String>,
}

/// Indexes the texts whose sessions are still pending (another catch-up may
/// have done some); returns the positions of those it indexed. A pending row
/// whose session was replaced or dropped meanwhile is only deleted.
fn index_pending(connection: &Connection, texts: &[Text]) -> rusqlite::Result<Vec<usize>> {
    let mut claim = connection.prepare_cached("DELETE FROM text_pending WHERE id = ?1")?;
    let mut alive = connection.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?;
    let mut indexed = Vec::new();
    for (at, text) in texts.iter().enumerate() {
        if claim.execute([text.id])? == 0 {
            continue;
        }
        if alive.query_row([text.id], |_| Ok(())).optional()?.is_none() {
            continue;
        }
        insert_text(connection, text.id, &text.task, text.delivery.as_deref())?;
        indexed.push(at);
    }
    Ok(indexed)
}

/// Adds one session's task and delivery to the full-text index.
pub(super) fn insert_text(
    connection: &Connection,
    id: i64,
    task: &str,
    delivery: Option<&str>,
) -> rusqlite::Result<()> {
    connection
        .prepare_cached("INSERT INTO sessions_text (rowid, task, delivery) VALUES (?1, ?2, ?3)")?
        .execute(params![id, task, delivery])
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::super::{Entry, Filter, RecordPlace, Store};

    /// An entry whose record is `sessions.jsonl` line `offset` (a line that
    /// is not there, unless the test writes it).
    fn entry(id: &str, task: &str, place: RecordPlace) -> Entry {
        Entry {
            delivery: Some(format!("reply to {task}")),
            ..Entry::for_test(id, task, format!("2026-01-01T00:00:00.000Z{id}"), place)
        }
    }

    fn found(store: &Store, words: &str) -> Vec<String> {
        let filter = Filter {
            text: Some(words.into()),
            ..Filter::default()
        };
        let mut ids: Vec<String> = store
            .list(&filter, 100)
            .unwrap()
            .into_iter()
            .map(|session| session.session_id)
            .collect();
        ids.sort();
        ids
    }

    /// Rows in the full-text index (its per-row size table).
    fn text_rows(store: &Store) -> i64 {
        store
            .connection
            .query_row("SELECT COUNT(*) FROM sessions_text_docsize", [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// A real record (an echo tactic's run) written to `path`.
    fn record_file(path: &std::path::Path, task: &str) -> Entry {
        let yaml = "tactic_type: echo
agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]
";
        let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let record = runtime.block_on(tactic.run(crate::Task::new(task)));
        record.write(path).unwrap();
        Entry::of(&record, RecordPlace::File(path.to_path_buf()))
    }

    /// Registered sessions are pending until a search; it reads their whole
    /// text from the records, and a store opened later (as after a crash of
    /// the writer) finds them just the same.
    #[test]
    fn registered_sessions_are_found_by_the_first_search_from_their_records() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{} the snowy owl", "word ".repeat(100));
        let first = record_file(&dir.path().join("a.json"), &long);
        let second = record_file(&dir.path().join("b.json"), "a grey wolf");
        {
            let mut store = Store::open(dir.path()).unwrap();
            store.register(&[first.clone(), second.clone()]).unwrap();
            assert_eq!(store.pending_text().unwrap(), 2);
            assert_eq!(text_rows(&store), 0);
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(found(&store, "\"snowy owl\""), [first.session_id]);
        assert_eq!(store.pending_text().unwrap(), 0);
        assert_eq!(found(&store, "wolf"), [second.session_id]);
        assert_eq!(found(&store, "\"owl snowy\""), Vec::<String>::new());
        assert_eq!(text_rows(&store), 2);
    }

    /// A catch-up that never commits (a crash mid-way) leaves every session
    /// pending; the next one indexes them.
    #[test]
    fn a_catch_up_cut_short_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let entry = record_file(&dir.path().join("a.json"), "a barn owl");
        let mut store = Store::open(dir.path()).unwrap();
        store.register(std::slice::from_ref(&entry)).unwrap();
        {
            let transaction = store.connection.transaction().unwrap();
            let text = super::Text {
                id: 1,
                task: "a barn owl".into(),
                delivery: None,
                problem: None,
            };
            let indexed = super::index_pending(&transaction, &[text]).unwrap();
            assert_eq!(indexed, [0]);
            // Dropped: rolled back.
        }
        assert_eq!(store.pending_text().unwrap(), 1);
        assert_eq!(found(&store, "barn"), [entry.session_id]);
        assert_eq!(text_rows(&store), 1);
    }

    /// Several stores catching up at once (threads, each its own
    /// connection): each session's text is indexed once.
    #[test]
    fn catch_ups_at_once_index_each_session_once() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<Entry> = (0..2500)
            .map(|i| {
                let place = RecordPlace::Line {
                    path: dir.path().join("gone.jsonl"),
                    offset: i * 10,
                };
                entry(&format!("{i:05}"), &format!("task number{i}"), place)
            })
            .collect();
        Store::open(dir.path()).unwrap().register(&entries).unwrap();
        let results: Vec<super::TextIndexed> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|_| scope.spawn(|| Store::open(dir.path()).unwrap().index_text().unwrap()))
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap())
                .collect()
        });
        let indexed: u64 = results.iter().map(|done| done.sessions).sum();
        assert_eq!(indexed, 2500);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(text_rows(&store), 2500);
        // The records are gone: the previews were indexed, and said so.
        let unreadable: u64 = results.iter().map(|done| done.unreadable).sum();
        assert_eq!(unreadable, 2500);
        assert!(results.iter().all(|done| done.problems.len() <= 100));
        assert_eq!(found(&store, "number17"), ["00017"]);
        assert_eq!(found(&store, "\"reply to task number2499\""), ["02499"]);
    }

    /// A session registered again before any search is indexed once, with
    /// its new text; `reindex` indexes the text it reads, leaving nothing
    /// pending.
    #[test]
    fn a_replaced_session_is_indexed_once_and_reindex_leaves_nothing_pending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        let old = record_file(&path, "an old heron");
        let mut store = Store::open(dir.path()).unwrap();
        store.register(std::slice::from_ref(&old)).unwrap();
        let mut new = old.clone();
        new.task = "a new crane".into();
        new.delivery = None;
        new.place = RecordPlace::Line {
            path: dir.path().join("gone.jsonl"),
            offset: 0,
        };
        store.register(std::slice::from_ref(&new)).unwrap();
        assert_eq!(store.pending_text().unwrap(), 1);
        assert_eq!(found(&store, "crane"), [new.session_id.clone()]);
        assert_eq!(found(&store, "heron"), Vec::<String>::new());
        let (count, _) = store.reindex(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(count, 1);
        assert_eq!(store.pending_text().unwrap(), 0);
        assert_eq!(found(&store, "heron"), [old.session_id]);
    }
}
