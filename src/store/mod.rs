//! The session store: an SQLite index (`index.sqlite` in the store's
//! directory) over the session records that `lllm run` and `lllm batch`
//! write. The record files stay the source of truth: each index row names
//! its record (a `.json` file, or a `sessions.jsonl` path and the line's byte
//! offset) and [`Store::reindex`](crate::store::Store::reindex) rebuilds the index from them.
//!
//! This module owns the schema, registering entries and reading one record
//! back; `query` owns listing, filtering and cost totals. What a row holds is
//! what the record holds, which is already free of secrets.
//!
//! Several writers at once (a batch and a run, shards of one job on one
//! machine) are safe: the database is in WAL mode with a busy timeout, and
//! each registration is one short transaction. The response cache
//! (`cache`) is a file of its own beside the index.

mod cache;
mod paths;
mod query;
mod registrar;
mod text;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, params};
use serde_json::{Map, Value};

use crate::tactic::{SessionRecord, record};
use crate::trace_context::RunTrace;
use paths::{SqlPath, StoredPath};

pub use cache::{CACHE_FILE, Cache, CacheStats, ModelStats};
pub use query::{CostGroup, CostRow, Filter, GroupBy, Listed, parse_since, parse_time};
pub(crate) use registrar::Registrar;
pub use text::TextIndexed;

/// The index's file name inside the store's directory.
pub const INDEX_FILE: &str = "index.sqlite";

/// The record files the store has registered sessions from, one path a
/// line (a path that is not UTF-8 or holds a newline as `NUL path NUL`):
/// what `reindex` reads again when the index file is gone.
pub const RECORDS_FILE: &str = "records.list";

/// How long a writer waits for another's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The characters of the task and delivery kept in a row for listing (the
/// full text is in the full-text index only, once a search indexed it: see
/// `text`).
const PREVIEW: usize = 200;

/// What can go wrong with the store, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The index could not be opened or created.
    #[error("cannot open the session store `{path}`: {message}")]
    Open {
        /// The index file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A statement failed (a corrupt file, a full disk, a lock held too long).
    #[error("session store `{path}`: {source}")]
    Sql {
        /// The file.
        path: String,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// A record file could not be read back.
    #[error("cannot read the record `{path}`: {message}")]
    Record {
        /// The record file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// No session, or more than one, has this id or prefix.
    #[error("{0}")]
    NotFound(String),
    /// The index names a record that turns out to be another session's
    /// (its file was rewritten since it was indexed).
    #[error(
        "the index places session `{session_id}` at `{place}`, which holds session `{found}`: \
         the index is out of date with its records; hint: `lllm logs reindex` rebuilds it"
    )]
    Mismatch {
        /// The session asked for.
        session_id: String,
        /// Where the index says its record is (a file, and a line's byte).
        place: String,
        /// The session id the record there holds.
        found: String,
    },
    /// A filter that makes no sense (`--since tomorrow`).
    #[error("{0}")]
    Filter(String),
}

/// The store's `Result`.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Where a session's record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordPlace {
    /// A record file of its own (`lllm run`).
    File(PathBuf),
    /// A line of a batch's `sessions.jsonl`, starting at this byte (in a
    /// `sessions.jsonl.zst`: `offset` is `crate::jsonl::pack`ed, its frame's
    /// byte and the line's offset in the frame).
    Line {
        /// The `sessions.jsonl` file.
        path: PathBuf,
        /// The line's first byte.
        offset: u64,
    },
}

impl RecordPlace {
    fn path(&self) -> &Path {
        match self {
            RecordPlace::File(path) | RecordPlace::Line { path, .. } => path,
        }
    }

    fn offset(&self) -> Option<u64> {
        match self {
            RecordPlace::File(_) => None,
            RecordPlace::Line { offset, .. } => Some(*offset),
        }
    }
}

/// One model's share of a session: what its calls spent.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelUse {
    /// `provider/model`.
    pub model: String,
    /// Tokens of its calls.
    pub total_tokens: u64,
    /// Dollars of its calls (`None` when unknown).
    pub cost: Option<f64>,
}

/// What the index keeps of one session: the record's heading, its totals
/// and where it is. Made from a record with [`Entry::of`].
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The session id (a UUID v7).
    pub session_id: String,
    /// The tactic's name.
    pub tactic: String,
    /// The tactic file, as the run was given it.
    pub tactic_path: String,
    /// The task's id (a batch line's `id`).
    pub task_id: Option<String>,
    /// The task's tags.
    pub tags: Map<String, Value>,
    /// The task's metadata.
    pub metadata: Map<String, Value>,
    /// `success`, `failure` or `skipped` (the record's `state`).
    pub state: String,
    /// Every model the session's calls used (sub-tactics included).
    pub models: Vec<ModelUse>,
    /// Prompt tokens of every call.
    pub prompt_tokens: u64,
    /// Completion tokens of every call.
    pub completion_tokens: u64,
    /// Tokens of every call.
    pub total_tokens: u64,
    /// Dollars (`None` when no price was known).
    pub cost: Option<f64>,
    /// Whether `cost` is the whole of it.
    pub cost_known: bool,
    /// When the run began (RFC 3339, UTC, milliseconds).
    pub started_at: String,
    /// When it ended.
    pub ended_at: String,
    /// Milliseconds from start to end.
    pub latency_ms: u64,
    /// The task as text (a string as is, anything else as JSON).
    pub task: String,
    /// The run's answer; `None` when it failed.
    pub delivery: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Where its record is.
    pub place: RecordPlace,
    /// The trace the run belonged to (`lllm logs --trace`), if any.
    pub trace_id: Option<String>,
}

impl Entry {
    /// What the index keeps of `record`, whose record is at `place`.
    pub fn of(record: &SessionRecord, place: RecordPlace) -> Entry {
        let mut models: Vec<ModelUse> = Vec::new();
        collect_models(record, &mut models);
        let cost = &record.cost;
        Entry {
            session_id: record.session_id.clone(),
            tactic: record.tactic.name.clone(),
            tactic_path: record.tactic.path.clone(),
            task_id: record.task_id.clone(),
            tags: record.tags.clone(),
            metadata: record.metadata.clone(),
            state: record.state.name().to_string(),
            models,
            prompt_tokens: cost.prompt_tokens,
            completion_tokens: cost.completion_tokens,
            total_tokens: cost.total_tokens,
            cost: cost.cost,
            cost_known: record.cost_known,
            started_at: record.started_at.clone(),
            ended_at: record.ended_at.clone(),
            latency_ms: record.latency_ms,
            task: task_text(&record.task),
            delivery: record.delivery.clone(),
            error: record.error.clone(),
            place,
            trace_id: record.trace.as_ref().map(RunTrace::trace_id_hex),
        }
    }
}

#[cfg(test)]
impl Entry {
    /// A succeeded session of tactic `t` (`t.yaml`) with no tags, calls,
    /// cost or delivery, for the store's tests.
    pub(crate) fn for_test(id: &str, task: &str, started_at: String, place: RecordPlace) -> Entry {
        Entry {
            session_id: id.into(),
            tactic: "t".into(),
            tactic_path: "t.yaml".into(),
            task_id: None,
            tags: Map::new(),
            metadata: Map::new(),
            state: "success".into(),
            models: Vec::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            cost: None,
            cost_known: true,
            started_at,
            ended_at: String::new(),
            latency_ms: 0,
            task: task.into(),
            delivery: None,
            error: None,
            place,
            trace_id: None,
        }
    }
}

/// A count as an SQLite integer (signed 64 bits): one above `i64::MAX` (a
/// record's token count from before counts were clamped) is kept as
/// `i64::MAX`, never wrapped to a negative number.
fn sql_integer(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The line that says a damaged index was moved aside and a new one made.
fn replaced_note(path: &Path, aside: &Path, error: &StoreError) -> String {
    let cause = match error {
        StoreError::Open { message, .. } => message.clone(),
        StoreError::Sql { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    format!(
        "`{}` is not a readable session index ({cause}): moved it to `{}`; the index is \
         rebuilt from the records",
        path.display(),
        aside.display()
    )
}

/// A task as the index keeps it: a string as is, anything else as JSON.
fn task_text(task: &Value) -> String {
    match task {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn collect_models(record: &SessionRecord, models: &mut Vec<ModelUse>) {
    for call in &record.agent_calls {
        let tokens = call.cost.total_tokens;
        match models.iter_mut().find(|known| known.model == call.model) {
            Some(known) => {
                // Counts of records written before they were clamped may be
                // as large as u64::MAX: a sum saturates.
                known.total_tokens = known.total_tokens.saturating_add(tokens);
                known.cost = match (known.cost, call.cost.cost) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
            }
            None => models.push(ModelUse {
                model: call.model.clone(),
                total_tokens: tokens,
                cost: call.cost.cost,
            }),
        }
    }
    for sub in &record.sub_tactic_sessions {
        collect_models(sub, models);
    }
}

/// Bytes SQLite tries to keep its heap under (it frees page cache to stay
/// there), process-wide: without it a batch registering its sessions grew
/// by ~140 bytes a session (issue 17: 93 MB at 100k tasks, 121 MB at 300k).
const SOFT_HEAP_LIMIT: u64 = 16 << 20;

/// A connection to the SQLite file at `path` (its directory created if
/// needed), set up as every file of the store is, then `schema` run. WAL:
/// readers never wait for a writer, writers queue on the busy timeout;
/// NORMAL sync is safe in WAL mode (a power cut may lose the last
/// transactions, which `reindex` brings back from the records, and which
/// cost the cache only their requests again). `synchronous` belongs to a
/// connection, so each one is set up here.
fn connect(path: &Path, schema: &str) -> Result<Connection> {
    connect_telling(path, schema).map_err(|(error, _)| error)
}

/// [`connect`], telling whether a failure is the file's own (it is not an
/// SQLite database, or a damaged one) rather than the disk's or a lock's.
fn connect_telling(
    path: &Path,
    schema: &str,
) -> std::result::Result<Connection, (StoreError, bool)> {
    let open_error = |message: String, damaged: bool| {
        let error = StoreError::Open {
            path: path.display().to_string(),
            message,
        };
        (error, damaged)
    };
    let sql_error = |error: rusqlite::Error| {
        let damaged = is_damage(&error);
        open_error(error.to_string(), damaged)
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| open_error(error.to_string(), false))?;
    }
    let connection = Connection::open(path).map_err(sql_error)?;
    connection.busy_timeout(BUSY_TIMEOUT).map_err(sql_error)?;
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA soft_heap_limit = {SOFT_HEAP_LIMIT}; {schema}"
        ))
        .map_err(sql_error)?;
    Ok(connection)
}

/// The sessions index at `path`, as [`connect_telling`] opens it with
/// [`SCHEMA`], brought up to date ([`upgrade`]).
fn open_index(path: &Path) -> std::result::Result<Connection, (StoreError, bool)> {
    let connection = connect_telling(path, SCHEMA)?;
    upgrade(&connection).map_err(|error| {
        let damaged = is_damage(&error);
        let error = StoreError::Open {
            path: path.display().to_string(),
            message: error.to_string(),
        };
        (error, damaged)
    })?;
    Ok(connection)
}

/// Brings a store made by an earlier lllm up to [`SCHEMA`], and makes the
/// indexes of columns added since. A session's trace id was a row of a
/// table of its own (`session_traces`) before it was a column of
/// `sessions`: the statement a session cost was about 8,000 instructions
/// of a traced batch task (docs/benchmarks.md, "Telemetry"). Its rows are
/// moved into the column and the table dropped, in one transaction that
/// waits for any other process doing the same.
fn upgrade(connection: &Connection) -> rusqlite::Result<()> {
    let has_column = |connection: &Connection| {
        connection
            .prepare("SELECT trace_id FROM sessions LIMIT 0")
            .is_ok()
    };
    let has_old_table = |connection: &Connection| -> rusqlite::Result<bool> {
        connection
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'session_traces'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map(|count| count > 0)
    };
    if !has_column(connection) || has_old_table(connection)? {
        connection.execute_batch("BEGIN IMMEDIATE")?;
        let upgraded = (|| {
            // Again, in the transaction: another process may have done it.
            if !has_column(connection) {
                connection.execute_batch("ALTER TABLE sessions ADD COLUMN trace_id TEXT")?;
            }
            if has_old_table(connection)? {
                connection.execute_batch(
                    "UPDATE sessions SET trace_id = \
                     (SELECT t.trace_id FROM session_traces t WHERE t.session = sessions.id) \
                     WHERE trace_id IS NULL AND id IN (SELECT session FROM session_traces); \
                     DROP TABLE session_traces;",
                )?;
            }
            Ok(())
        })();
        match upgraded {
            Ok(()) => connection.execute_batch("COMMIT")?,
            Err(error) => {
                let _ = connection.execute_batch("ROLLBACK");
                return Err(error);
            }
        }
    }
    connection.execute_batch(
        "CREATE INDEX IF NOT EXISTS sessions_trace ON sessions (trace_id) WHERE trace_id IS NOT NULL",
    )
}

/// Whether SQLite says the file itself is bad: not a database, or damaged.
fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

/// Whether a store error is SQLite saying the file itself is damaged.
fn error_is_damage(error: &StoreError) -> bool {
    matches!(error, StoreError::Sql { source, .. } if is_damage(source))
}

/// Moves a bad index file aside, with the WAL and shared-memory files
/// that belong to it (`index.sqlite` becomes `index.sqlite.damaged`, its
/// `-wal` `index.sqlite.damaged-wal`, which SQLite pairs again if someone
/// opens it): a new index must not pick up the old file's WAL. Returns
/// where the file went.
fn move_aside(path: &Path) -> Result<PathBuf> {
    let aside = PathBuf::from(format!("{}.damaged", path.display()));
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", path.display()));
        let to = PathBuf::from(format!("{}{suffix}", aside.display()));
        let moved = match std::fs::rename(&from, &to) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                // None of its own: one left from an earlier damaged file
                // must not be paired with this one.
                std::fs::remove_file(&to).or_else(|error| match error.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(error),
                })
            }
            moved => moved,
        };
        moved.map_err(|error| StoreError::Open {
            path: from.display().to_string(),
            message: format!("cannot move it aside to `{}`: {error}", to.display()),
        })?;
    }
    Ok(aside)
}

/// The session store: an open index in a directory.
///
/// ```
/// # fn main() -> Result<(), lllm::BoxError> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// use lllm::store::{Entry, Filter, RecordPlace, Store};
/// use lllm::{Registry, Tactic, Task};
///
/// let yaml = "
/// tactic_type: echo
/// agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]
/// ";
/// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
/// let record = tactic.run(Task::new("hello").tag("team", "docs")).await;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("session.json");
/// record.write(&path)?;
/// let mut store = Store::open(dir.path())?;
/// store.register(&[Entry::of(&record, RecordPlace::File(path))])?;
///
/// let filter = Filter { tags: vec![("team".into(), "docs".into())], ..Filter::default() };
/// let found = store.list(&filter, 20)?;
/// assert_eq!(found.len(), 1);
/// assert_eq!(found[0].session_id, record.session_id);
/// assert_eq!(store.show(&record.session_id[..8])?.delivery.as_deref(), Some("hello"));
/// # Ok::<(), lllm::BoxError>(())
/// # })
/// # }
/// ```
pub struct Store {
    connection: Connection,
    /// The file.
    path: PathBuf,
}

impl Store {
    /// The default store directory: `$LLLM_HOME`, else `$XDG_DATA_HOME/lllm`,
    /// else `~/.local/share/lllm`; `None` when none of them is set. `env`
    /// reads a variable (`std::env::var(..).ok()` in a program).
    pub fn default_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        crate::tactic::records::default_store_dir(env)
    }

    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        let path = dir.join(INDEX_FILE);
        let connection = open_index(&path).map_err(|(error, _)| error)?;
        Ok(Store { connection, path })
    }

    /// Opens the store in `dir` to rebuild it ([`Store::reindex`]): an
    /// index file that is not an SQLite database, or a damaged one, is
    /// moved aside (`index.sqlite.damaged`) and a new one made, with a line
    /// saying so. Nothing is lost: the records are the source of truth, and
    /// `records.list` names every record file the index had seen.
    pub fn open_to_rebuild(dir: &Path) -> Result<(Store, Option<String>)> {
        let path = dir.join(INDEX_FILE);
        match open_index(&path) {
            Ok(connection) => Ok((Store { connection, path }, None)),
            Err((error, true)) => {
                let note = replaced_note(&path, &move_aside(&path)?, &error);
                let connection = open_index(&path).map_err(|(error, _)| error)?;
                Ok((Store { connection, path }, Some(note)))
            }
            Err((error, false)) => Err(error),
        }
    }

    /// Moves the index file aside after `error` said it is damaged, and
    /// opens a new one in its place; returns the line that says so.
    fn replace_damaged(&mut self, error: &StoreError) -> Result<String> {
        let empty = Connection::open_in_memory().map_err(|error| self.sql(error))?;
        drop(std::mem::replace(&mut self.connection, empty));
        let note = replaced_note(&self.path, &move_aside(&self.path)?, error);
        self.connection = open_index(&self.path).map_err(|(error, _)| error)?;
        Ok(note)
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Registers sessions in one transaction; a session already there (by
    /// session id) is replaced. Their text is indexed when a search first
    /// needs it ([`Store::index_text`]).
    pub fn register(&mut self, entries: &[Entry]) -> Result<()> {
        self.register_with(entries, false)
    }

    /// [`Store::register`]; `with_text`: the entries' text is indexed in the
    /// same transaction (`reindex`, which has it at hand).
    fn register_with(&mut self, entries: &[Entry], with_text: bool) -> Result<()> {
        let path = self.path.display().to_string();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        // IMMEDIATE: the write lock is taken (waiting on the busy timeout)
        // before the first read. A deferred transaction that reads, then
        // writes, fails at once with SQLITE_BUSY when another writer went
        // first, since waiting could not help it.
        let transaction = self
            .connection
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let new_files = insert(&transaction, entries, with_text).map_err(sql)?;
        transaction.commit().map_err(sql)?;
        if !new_files.is_empty() {
            self.remember(&new_files)?;
        }
        Ok(())
    }

    /// Appends record files to `records.list` (one `write`, so lines of
    /// concurrent writers never mix), each path byte for byte (`paths`).
    fn remember(&self, files: &[PathBuf]) -> Result<()> {
        let list = self.path.with_file_name(RECORDS_FILE);
        let mut bytes = Vec::new();
        for file in files {
            paths::push_entry(&mut bytes, file);
        }
        crate::file::open_in_place(&list, std::fs::OpenOptions::new().create(true).append(true))
            .and_then(|mut file| std::io::Write::write_all(&mut file, &bytes))
            .map_err(|error| StoreError::Open {
                path: list.display().to_string(),
                message: error.to_string(),
            })
    }

    /// Reads back the record of the session with this id or unique prefix.
    /// The record read must be that session's: an index out of date with
    /// its files (a `sessions.jsonl` rewritten since) is named, never
    /// answered with another session.
    pub fn show(&self, id: &str) -> Result<SessionRecord> {
        let (session_id, path, offset) = self.locate(id)?;
        let record = read_record(&path, offset)?;
        if record.session_id != session_id {
            let place = match offset {
                Some(offset) => format!("{} (byte {offset})", path.display()),
                None => path.display().to_string(),
            };
            return Err(StoreError::Mismatch {
                session_id,
                place,
                found: crate::redact::echo(&record.session_id).into_owned(),
            });
        }
        Ok(record)
    }

    /// The id and record place of the session with this id or unique prefix.
    fn locate(&self, id: &str) -> Result<(String, PathBuf, Option<u64>)> {
        if id.is_empty() {
            return Err(StoreError::NotFound("an empty session id".into()));
        }
        let mut statement = self
            .connection
            .prepare(
                "SELECT session_id, record_path, record_offset FROM sessions \
                 WHERE session_id >= ?1 AND session_id < ?1 || char(1114111) LIMIT 2",
            )
            .map_err(|error| self.sql(error))?;
        let mut rows: Vec<(String, StoredPath, Option<i64>)> = statement
            .query_map([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .and_then(Iterator::collect)
            .map_err(|error| self.sql(error))?;
        match rows.as_mut_slice() {
            [] => Err(StoreError::NotFound(format!(
                "no session `{}` in the store `{}`; hint: `lllm logs` lists them",
                crate::redact::echo(id),
                self.path.display()
            ))),
            [(session_id, path, offset)] => Ok((
                std::mem::take(session_id),
                std::mem::take(&mut path.0),
                offset.map(|offset| offset as u64),
            )),
            [(first, ..), (second, ..), ..] => Err(StoreError::NotFound(format!(
                "`{}` names more than one session ({}, {}, …); give more of the id",
                crate::redact::echo(id),
                crate::redact::echo(first),
                crate::redact::echo(second)
            ))),
        }
    }

    /// Rebuilds the index from the records it names and the record files
    /// found under `dirs` (`*.json` and `*.json.zst` session records and `sessions.jsonl`
    /// files, searched recursively): every row is dropped, then every record
    /// still readable is registered again. Returns the sessions indexed and
    /// the problems met (a record gone, a line that is not a record, an
    /// entry of `records.list` that cannot be read), one line each. An index
    /// file found damaged on the way is moved aside and rebuilt whole (a
    /// problem line says so).
    pub fn reindex(&mut self, dirs: &[PathBuf]) -> Result<(u64, Vec<String>)> {
        let mut problems = Vec::new();
        // Each record file, with the line of `records.list` that names it
        // (a file that cannot be read at all is named by that line).
        let mut files: std::collections::BTreeMap<PathBuf, Option<usize>> = Default::default();
        let list = self.path.with_file_name(RECORDS_FILE);
        let label = list.display().to_string();
        match std::fs::read(&list) {
            Ok(bytes) => {
                let (listed, found) = paths::read_list(&bytes, &label);
                problems.extend(found);
                for entry in listed {
                    files.entry(entry.path).or_insert(Some(entry.line));
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => problems.push(format!("cannot read `{label}`: {error}")),
        }
        let indexed = match self.clear() {
            Ok(indexed) => indexed,
            Err(error) if error_is_damage(&error) => {
                problems.push(self.replace_damaged(&error)?);
                Vec::new()
            }
            Err(error) => return Err(error),
        };
        for file in indexed {
            files.entry(file).or_insert(None);
        }
        let mut found = Vec::new();
        for dir in dirs {
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            find_records(&dir, &mut found, &mut problems);
        }
        for file in found {
            files.entry(file).or_insert(None);
        }
        let mut count = 0;
        for (file, line) in files {
            let mut entries = Vec::new();
            if let Err(problem) = entries_of_file(&file, &mut entries, &mut problems) {
                problems.push(match line {
                    Some(line) => format!("`{label}` line {line}: {problem}"),
                    None => problem,
                });
            }
            for chunk in entries.chunks(1000) {
                self.register_with(chunk, true)?;
                count += chunk.len() as u64;
            }
        }
        Ok((count, problems))
    }

    /// Drops every row; returns the record files the rows named.
    fn clear(&mut self) -> Result<Vec<PathBuf>> {
        let files = {
            let mut statement = self
                .connection
                .prepare("SELECT DISTINCT record_path FROM sessions")
                .map_err(|error| self.sql(error))?;
            statement
                .query_map([], |row| row.get::<_, StoredPath>(0))
                .and_then(Iterator::collect::<rusqlite::Result<Vec<StoredPath>>>)
                .map_err(|error| self.sql(error))?
        };
        self.connection
            .execute_batch("DELETE FROM sessions; DELETE FROM session_tags; DELETE FROM session_models; INSERT INTO sessions_text (sessions_text) VALUES ('delete-all'); DELETE FROM text_pending; DELETE FROM record_files;")
            .map_err(|error| self.sql(error))?;
        Ok(files.into_iter().map(|file| file.0).collect())
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    -- AUTOINCREMENT: a replaced session's id is never reused, so terms the
    -- contentless full-text index keeps for it match nothing.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE,
    tactic TEXT NOT NULL,
    tactic_path TEXT NOT NULL,
    task_id TEXT,
    state TEXT NOT NULL,
    models TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    total_tokens INTEGER NOT NULL,
    cost REAL,
    cost_known INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT NOT NULL,
    latency_ms INTEGER NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    task TEXT NOT NULL,
    delivery TEXT,
    error TEXT,
    record_path TEXT NOT NULL,
    record_offset INTEGER,
    trace_id TEXT
);
-- `trace_id`: the trace of a session that had one (issue 31), indexed in
-- `upgrade`, which adds the column to a store made before it.
CREATE INDEX IF NOT EXISTS sessions_started ON sessions (started_at);
CREATE INDEX IF NOT EXISTS sessions_tactic ON sessions (tactic, started_at);
CREATE INDEX IF NOT EXISTS sessions_state ON sessions (state, started_at);
CREATE TABLE IF NOT EXISTS session_tags (
    key TEXT NOT NULL, value TEXT NOT NULL, session INTEGER NOT NULL,
    PRIMARY KEY (key, value, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_tags_session ON session_tags (session);
CREATE TABLE IF NOT EXISTS session_models (
    model TEXT NOT NULL, session INTEGER NOT NULL,
    total_tokens INTEGER NOT NULL, cost REAL,
    PRIMARY KEY (model, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_models_session ON session_models (session);
CREATE TABLE IF NOT EXISTS record_files (path TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS sessions_text USING fts5 (task, delivery, content = '');
-- Sessions whose text is not in `sessions_text` yet (see `text`). A store
-- made before this table indexed every session at registration.
CREATE TABLE IF NOT EXISTS text_pending (id INTEGER PRIMARY KEY);
";

fn preview(text: &str) -> &str {
    match text.char_indices().nth(PREVIEW) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// A tag's value as the index keeps it: a string as is, anything else as JSON.
pub fn tag_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Inserts the entries, their text indexed (`with_text`) or noted as
/// pending; returns the record files not seen before.
fn insert(
    connection: &Connection,
    entries: &[Entry],
    with_text: bool,
) -> rusqlite::Result<Vec<PathBuf>> {
    let mut new_files = Vec::new();
    let mut last_file: Option<&Path> = None;
    let mut file = connection.prepare_cached("INSERT OR IGNORE INTO record_files VALUES (?1)")?;
    let mut old = connection.prepare_cached("SELECT id FROM sessions WHERE session_id = ?1")?;
    let mut forget = connection.prepare_cached("DELETE FROM sessions WHERE id = ?1; ")?;
    let mut forget_tags =
        connection.prepare_cached("DELETE FROM session_tags WHERE session = ?1")?;
    let mut forget_models =
        connection.prepare_cached("DELETE FROM session_models WHERE session = ?1")?;
    let mut session = connection.prepare_cached(
        "INSERT INTO sessions (session_id, tactic, tactic_path, task_id, state, models, \
         prompt_tokens, completion_tokens, total_tokens, cost, cost_known, started_at, ended_at, \
         latency_ms, tags, metadata, task, delivery, error, record_path, record_offset, trace_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22) ON CONFLICT (session_id) DO NOTHING",
    )?;
    let mut tag =
        connection.prepare_cached("INSERT OR IGNORE INTO session_tags VALUES (?1, ?2, ?3)")?;
    let mut model = connection
        .prepare_cached("INSERT OR IGNORE INTO session_models VALUES (?1, ?2, ?3, ?4)")?;
    let mut pending = connection.prepare_cached("INSERT INTO text_pending VALUES (?1)")?;
    let mut forget_pending = connection.prepare_cached("DELETE FROM text_pending WHERE id = ?1")?;
    for entry in entries {
        let models: Vec<&str> = entry
            .models
            .iter()
            .map(|used| used.model.as_str())
            .collect();
        let (models, tags, metadata) = (
            models.join(" "),
            Value::Object(entry.tags.clone()).to_string(),
            Value::Object(entry.metadata.clone()).to_string(),
        );
        let record_path = SqlPath(entry.place.path());
        let row = params![
            entry.session_id,
            entry.tactic,
            entry.tactic_path,
            entry.task_id,
            entry.state,
            models,
            sql_integer(entry.prompt_tokens),
            sql_integer(entry.completion_tokens),
            sql_integer(entry.total_tokens),
            entry.cost,
            entry.cost_known,
            entry.started_at,
            entry.ended_at,
            entry.latency_ms as i64,
            tags,
            metadata,
            preview(&entry.task),
            entry.delivery.as_deref().map(preview),
            entry.error.as_deref().map(preview),
            record_path,
            entry.place.offset().map(|offset| offset as i64),
            entry.trace_id,
        ];
        // A new session (nearly always) is one insert. One registered before
        // is replaced, not updated: a contentless full-text index cannot
        // delete a row's terms, so the old rowid is left to match nothing.
        if session.execute(row)? == 0 {
            let id: i64 = old.query_row([&entry.session_id], |row| row.get(0))?;
            forget.execute([id])?;
            forget_tags.execute([id])?;
            forget_models.execute([id])?;
            forget_pending.execute([id])?;
            session.execute(row)?;
        }
        let id = connection.last_insert_rowid();
        for (key, value) in &entry.tags {
            tag.execute(params![key, tag_text(value), id])?;
        }
        for used in &entry.models {
            model.execute(params![
                used.model,
                id,
                sql_integer(used.total_tokens),
                used.cost
            ])?;
        }
        if with_text {
            text::insert_text(connection, id, &entry.task, entry.delivery.as_deref())?;
        } else {
            pending.execute([id])?;
        }
        // A batch's entries share one file: it is looked up once per run of
        // them, not once per session.
        let path = entry.place.path();
        if last_file != Some(path) {
            last_file = Some(path);
            if file.execute([SqlPath(path)])? == 1 {
                new_files.push(path.to_path_buf());
            }
        }
    }
    Ok(new_files)
}

/// The largest record `show` reads.
const RECORD_CAP: u64 = 1 << 30;

/// Reads the record at `path` (at byte `offset` of a `.jsonl` file).
pub fn read_record(path: &Path, offset: Option<u64>) -> Result<SessionRecord> {
    let label = path.display().to_string();
    let failed = |message: String| StoreError::Record {
        path: label.clone(),
        message,
    };
    let text =
        match offset {
            None => crate::jsonl::read_text(path, RECORD_CAP)
                .map_err(|error| failed(error.to_string()))?,
            // One line; of a compressed file, from the one frame holding it.
            Some(offset) => crate::jsonl::Lines::read_at(path, offset)
                .map_err(|error| failed(error.to_string()))?,
        };
    let value: Value = serde_json::from_str(&text).map_err(|error| {
        failed(format!(
            "not a record at byte {}: {error}; hint: `lllm logs reindex` rebuilds the index",
            offset.unwrap_or(0)
        ))
    })?;
    let place = match offset {
        Some(offset) => format!("{label} (byte {offset})"),
        None => label.clone(),
    };
    crate::replay::from_value(value, &place).map_err(|error| failed(error.to_string()))
}

/// The entries of one record file: a `.jsonl` file line by line (with each
/// line's offset), any other file as one record.
fn entries_of_file(
    path: &Path,
    entries: &mut Vec<Entry>,
    problems: &mut Vec<String>,
) -> Result<(), String> {
    let label = path.display().to_string();
    let is_lines =
        crate::jsonl::is_lines(path).map_err(|error| format!("cannot read `{label}`: {error}"))?;
    if !is_lines {
        match read_record(path, None) {
            Ok(record) => entries.push(Entry::of(&record, RecordPlace::File(path.to_path_buf()))),
            Err(error) => return Err(error.to_string()),
        }
        return Ok(());
    }
    // Either form; a line's place is its byte offset, or in a compressed
    // file its frame's offset and its offset in the frame (`jsonl::pack`).
    let mut reader = crate::jsonl::Lines::open(path)
        .map_err(|error| format!("cannot read `{label}`: {error}"))?;
    let mut line = String::new();
    let mut number = 0;
    loop {
        let offset = reader.place();
        let read = crate::jsonl::read_text_line(&mut reader, &mut line)
            .map_err(|error| format!("cannot read `{label}`: {error}"))?;
        number += 1;
        match read {
            crate::jsonl::LineRead::End => break,
            crate::jsonl::LineRead::NotText => {
                problems.push(format!(
                    "`{label}` line {number} skipped: not UTF-8 text (a torn or corrupted line)"
                ));
                continue;
            }
            crate::jsonl::LineRead::Text => {}
        }
        if !line.trim().is_empty() {
            let parsed = serde_json::from_str::<Value>(&line)
                .map_err(|error| error.to_string())
                .and_then(|value| {
                    crate::replay::from_value(value, &label).map_err(|error| error.to_string())
                });
            match (parsed, offset) {
                (Ok(record), Some(offset)) => entries.push(Entry::of(
                    &record,
                    RecordPlace::Line {
                        path: path.to_path_buf(),
                        offset,
                    },
                )),
                (Ok(_), None) => problems.push(format!(
                    "`{label}` line {number} skipped: too far into its zstd frame to be \
                     indexed; hint: `lllm merge --compress` rewrites the file in small frames"
                )),
                (Err(error), _) => {
                    problems.push(format!("`{label}` line {number} skipped: {error}"))
                }
            }
        }
    }
    Ok(())
}

/// Record files under `dir`: `sessions.jsonl` (and `sessions.jsonl.zst`)
/// files, and `.json` (and `.json.zst`) files that are session records
/// (their `format` says so).
fn find_records(dir: &Path, files: &mut Vec<PathBuf>, problems: &mut Vec<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            problems.push(format!("cannot read `{}`: {error}", dir.display()));
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            find_records(&path, files, problems);
        } else if kind.is_file() {
            let batch_records = entry.file_name() == record::SESSIONS_FILE
                || entry.file_name() == record::SESSIONS_FILE_COMPRESSED;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let is_json = name.ends_with(".json") || name.ends_with(".json.zst");
            if batch_records || (is_json && is_session_record(&path)) {
                files.push(path);
            }
        }
    }
}

/// Whether a `.json` (or `.json.zst`) file starts as a session record does.
fn is_session_record(path: &Path) -> bool {
    let Ok(file) = crate::jsonl::Lines::open(path) else {
        return false;
    };
    let mut head = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(file, 256), &mut head);
    let head = String::from_utf8_lossy(&head);
    head.contains("\"format\": \"lllm.session/") || head.contains("\"format\":\"lllm.session/")
}

#[cfg(test)]
mod tests;
