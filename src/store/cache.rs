//! The response cache of the session store: `cache.sqlite` beside the index,
//! one row per reply, keyed by `provider::cache::Binding::key` (the request
//! digest and the endpoint). A file of its own, so that caching never waits
//! for a batch registering sessions, and `logs reindex` (which rebuilds the
//! index) leaves the cache alone.
//!
//! Rows hold the provider's reply as JSON (already scrubbed of secrets by
//! the provider layer), the provider and model for `lllm cache stats`, what
//! the reply cost when it was sent, when it was stored, until when it may
//! be used, and how often it was.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use super::{Result, StoreError, connect};
use crate::dialog::Message;
use crate::provider::cache::{Entry, ResponseCache};

/// The cache's file name inside the store's directory.
pub const CACHE_FILE: &str = "cache.sqlite";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    reply TEXT NOT NULL,
    cost REAL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    last_hit_at INTEGER
);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires_at);
";

/// The session store's response cache (see the module docs).
///
/// ```
/// # fn main() -> Result<(), lllm::BoxError> {
/// use std::time::Duration;
/// use lllm::dialog::Message;
/// use lllm::provider::cache::{Entry, ResponseCache};
/// use lllm::store::Cache;
///
/// let dir = tempfile::tempdir()?;
/// let cache = Cache::open(dir.path())?;
/// let reply = Message::assistant("model", "Paris.");
/// let entry = Entry { reply: &reply, provider: "openai", model: "gpt-4o-mini", cost: Some(0.0002),
///                     ttl: Duration::from_secs(3600) };
/// cache.put("key", &entry);
/// cache.flush(); // puts are written by a thread of the cache's own
/// assert_eq!(cache.get("key", Duration::from_secs(3600)).unwrap().content, "Paris.");
/// assert_eq!(cache.stats()?.entries, 1);
/// assert_eq!(cache.clear(false)?, 1);
/// # Ok(())
/// # }
/// ```
pub struct Cache {
    /// Lookups, `stats` and `clear`.
    connection: Mutex<Connection>,
    path: PathBuf,
    /// A failing cache says so once, then keeps quiet.
    warned: Arc<AtomicBool>,
    /// Replies to keep and hits to count go to a thread of their own, which
    /// writes what has gathered in one transaction: a transaction per reply
    /// cost a batch twice its CPU time (`bench/cache.sh`).
    writer: Mutex<Option<Writer>>,
}

struct Writer {
    sender: mpsc::SyncSender<Write>,
    thread: std::thread::JoinHandle<()>,
}

/// What the writer thread does.
enum Write {
    Put {
        key: String,
        provider: String,
        model: String,
        reply: String,
        cost: Option<f64>,
        created_at: i64,
        expires_at: i64,
    },
    Hit {
        key: String,
        at: i64,
    },
    /// Answer once everything sent before is written.
    Flush(mpsc::Sender<()>),
}

/// Writes gathered into one transaction at most.
const WRITES_PER_TRANSACTION: usize = 1_000;

/// What `lllm cache stats` shows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CacheStats {
    /// The cache file.
    pub path: String,
    /// Replies kept.
    pub entries: u64,
    /// Of them, past their time to live (`lllm cache clear --expired`).
    pub expired: u64,
    /// Bytes of the replies (the file is larger: keys, pages, the WAL).
    pub bytes: u64,
    /// Times a reply was used instead of a request.
    pub hits: u64,
    /// Dollars those hits did not spend (each reply's cost when it was sent,
    /// times its hits; replies without a price count 0).
    pub saved_usd: f64,
    /// When the oldest reply was stored (RFC 3339, UTC).
    pub oldest: Option<String>,
    /// When the newest was.
    pub newest: Option<String>,
    /// The same per provider and model, most entries first.
    pub models: Vec<ModelStats>,
}

/// One model's part of [`CacheStats`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelStats {
    /// The provider's name in the tactic.
    pub provider: String,
    /// The model.
    pub model: String,
    /// Replies kept.
    pub entries: u64,
    /// Times they were used.
    pub hits: u64,
    /// Dollars the hits did not spend.
    pub saved_usd: f64,
}

impl Cache {
    /// Opens (creating if needed) the cache of the store in `dir`.
    pub fn open(dir: &Path) -> Result<Cache> {
        let path = dir.join(CACHE_FILE);
        // Two connections: lookups in the caller, writes on the thread.
        let connection = connect(&path, SCHEMA)?;
        let writer_connection = connect(&path, "")?;
        let warned = Arc::new(AtomicBool::new(false));
        let (sender, receiver) = mpsc::sync_channel(4 * WRITES_PER_TRANSACTION);
        let thread = {
            let (thread_path, warned) = (path.clone(), warned.clone());
            std::thread::Builder::new()
                .name("lllm-cache".into())
                .spawn(move || write_loop(writer_connection, receiver, &thread_path, &warned))
                .map_err(|error| StoreError::Open {
                    path: path.display().to_string(),
                    message: error.to_string(),
                })?
        };
        Ok(Cache {
            connection: Mutex::new(connection),
            path,
            warned,
            writer: Mutex::new(Some(Writer { sender, thread })),
        })
    }

    /// Waits until every reply and hit handed over so far is written.
    pub fn flush(&self) {
        let sender = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map(|writer| writer.sender.clone());
        if let Some(sender) = sender {
            let (done, wait) = mpsc::channel();
            if sender.send(Write::Flush(done)).is_ok() {
                let _ = wait.recv();
            }
        }
    }

    fn send(&self, write: Write) {
        let sender = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map(|writer| writer.sender.clone());
        // Blocks while the thread is thousands of writes behind: back-pressure.
        if let Some(sender) = sender {
            let _ = sender.send(write);
        }
    }

    /// Opens the cache of the store in `dir` only if it exists (for
    /// `stats` and `clear`, which should not create one).
    pub fn open_existing(dir: &Path) -> Result<Option<Cache>> {
        if dir.join(CACHE_FILE).is_file() {
            Cache::open(dir).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic elsewhere while holding the lock leaves a usable connection.
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts, sizes and savings, overall and per model.
    pub fn stats(&self) -> Result<CacheStats> {
        self.flush();
        let now = now_ms();
        let connection = self.connection();
        let (entries, expired, bytes, hits, saved, oldest, newest) = connection
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(expires_at <= ?1), 0),
                        COALESCE(SUM(LENGTH(CAST(reply AS BLOB))), 0), COALESCE(SUM(hits), 0),
                        COALESCE(SUM(COALESCE(cost, 0) * hits), 0.0),
                        MIN(created_at), MAX(created_at)
                 FROM responses",
                params![now],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, f64>(4)?,
                        row.get::<_, Option<i64>>(5)?,
                        row.get::<_, Option<i64>>(6)?,
                    ))
                },
            )
            .map_err(|error| self.sql(error))?;
        let mut statement = connection
            .prepare(
                "SELECT provider, model, COUNT(*), COALESCE(SUM(hits), 0),
                        COALESCE(SUM(COALESCE(cost, 0) * hits), 0.0)
                 FROM responses GROUP BY provider, model
                 ORDER BY COUNT(*) DESC, provider, model",
            )
            .map_err(|error| self.sql(error))?;
        let models = statement
            .query_map([], |row| {
                Ok(ModelStats {
                    provider: row.get(0)?,
                    model: row.get(1)?,
                    entries: count(row.get(2)?),
                    hits: count(row.get(3)?),
                    saved_usd: row.get(4)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|error| self.sql(error))?;
        Ok(CacheStats {
            path: self.path.display().to_string(),
            entries: count(entries),
            expired: count(expired),
            bytes: count(bytes),
            hits: count(hits),
            saved_usd: saved,
            oldest: oldest.map(time),
            newest: newest.map(time),
            models,
        })
    }

    /// Removes every reply (`expired_only`: those past their time to live);
    /// returns how many.
    pub fn clear(&self, expired_only: bool) -> Result<u64> {
        self.flush();
        let connection = self.connection();
        let removed = if expired_only {
            connection.execute(
                "DELETE FROM responses WHERE expires_at <= ?1",
                params![now_ms()],
            )
        } else {
            connection.execute("DELETE FROM responses", [])
        }
        .map_err(|error| self.sql(error))?;
        // Give the space back: a cleared cache of a large batch should not
        // keep its gigabytes (VACUUM needs no other connection writing; if one
        // is, the file shrinks on a later clear).
        let _ = connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM;");
        Ok(removed as u64)
    }

    fn warn_once(&self, error: &StoreError) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::report::warn(&format!("response cache: {error}; calls go on without it"));
        }
    }

    fn read(&self, key: &str, max_age: Duration) -> Result<Option<Message>> {
        let now = now_ms();
        let oldest = now.saturating_sub(i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX));
        let connection = self.connection();
        // Prepared once per connection: preparing is most of a lookup's cost.
        // A row larger than a reply may be (an edited file) is a miss, and
        // is never read into memory (`octet_length` reads its size only).
        let found: Option<String> = connection
            .prepare_cached(
                "SELECT reply FROM responses WHERE key = ?1 AND created_at >= ?2 \
                 AND octet_length(reply) <= ?3",
            )
            .and_then(|mut statement| {
                let cap = crate::provider::http::MAX_REPLY_BYTES as i64;
                statement
                    .query_row(params![key, oldest, cap], |row| row.get(0))
                    .optional()
            })
            .map_err(|error| self.sql(error))?;
        let Some(reply) = found else {
            return Ok(None);
        };
        // A row that does not read back (written by another version) is a miss.
        let Ok(reply) = serde_json::from_str::<Message>(&reply) else {
            return Ok(None);
        };
        drop(connection);
        self.send(Write::Hit {
            key: key.to_string(),
            at: now,
        });
        Ok(Some(reply))
    }

    fn write(&self, key: &str, entry: &Entry<'_>) -> Result<()> {
        let reply = serde_json::to_string(entry.reply).map_err(|error| StoreError::Record {
            path: self.path.display().to_string(),
            message: error.to_string(),
        })?;
        let now = now_ms();
        let ttl = i64::try_from(entry.ttl.as_millis()).unwrap_or(i64::MAX);
        self.send(Write::Put {
            key: key.to_string(),
            provider: entry.provider.to_string(),
            model: entry.model.to_string(),
            reply,
            cost: entry.cost.filter(|cost| cost.is_finite()),
            created_at: now,
            expires_at: now.saturating_add(ttl),
        });
        Ok(())
    }
}

impl Drop for Cache {
    /// Writes what is pending before the cache goes.
    fn drop(&mut self) {
        let writer = self
            .writer
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(Writer { sender, thread }) = writer {
            drop(sender);
            let _ = thread.join();
        }
    }
}

/// The writer thread: takes what is waiting (up to
/// `WRITES_PER_TRANSACTION`), writes it in one transaction, answers flushes.
fn write_loop(
    mut connection: Connection,
    receiver: mpsc::Receiver<Write>,
    path: &Path,
    warned: &AtomicBool,
) {
    let mut batch = Vec::with_capacity(WRITES_PER_TRANSACTION);
    let mut flushes = Vec::new();
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        while let Some(write) = next.take() {
            match write {
                Write::Flush(done) => flushes.push(done),
                write => batch.push(write),
            }
            if batch.len() < WRITES_PER_TRANSACTION {
                next = receiver.try_recv().ok();
            }
        }
        if let Err(error) = write_all(&mut connection, &batch)
            && !warned.swap(true, Ordering::Relaxed)
        {
            crate::report::warn(&format!(
                "response cache: session store `{}`: {error}; replies are not kept",
                path.display()
            ));
        }
        batch.clear();
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

fn write_all(connection: &mut Connection, writes: &[Write]) -> rusqlite::Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    // IMMEDIATE: the write lock first (see `Store::register`).
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut put = transaction.prepare_cached(
            "INSERT INTO responses (key, provider, model, reply, cost, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (key) DO UPDATE SET
                 provider = excluded.provider, model = excluded.model,
                 reply = excluded.reply, cost = excluded.cost,
                 created_at = excluded.created_at, expires_at = excluded.expires_at,
                 hits = 0, last_hit_at = NULL",
        )?;
        let mut hit = transaction.prepare_cached(
            "UPDATE responses SET hits = hits + 1, last_hit_at = ?2 WHERE key = ?1",
        )?;
        for write in writes {
            match write {
                Write::Put {
                    key,
                    provider,
                    model,
                    reply,
                    cost,
                    created_at,
                    expires_at,
                } => {
                    put.execute(params![
                        key, provider, model, reply, cost, created_at, expires_at
                    ])?;
                }
                Write::Hit { key, at } => {
                    hit.execute(params![key, at])?;
                }
                Write::Flush(_) => {}
            }
        }
    }
    transaction.commit()
}

impl ResponseCache for Cache {
    fn get(&self, key: &str, max_age: Duration) -> Option<Message> {
        self.read(key, max_age).unwrap_or_else(|error| {
            self.warn_once(&error);
            None
        })
    }

    fn put(&self, key: &str, entry: &Entry<'_>) {
        if let Err(error) = self.write(key, entry) {
            self.warn_once(&error);
        }
    }

    fn flush(&self) {
        Cache::flush(self);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|time| time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(reply: &'a Message, ttl: Duration) -> Entry<'a> {
        Entry {
            reply,
            provider: "local",
            model: "m",
            cost: Some(0.5),
            ttl,
        }
    }

    #[test]
    fn replies_come_back_until_they_are_too_old() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut reply = Message::assistant("model", "hi");
        reply
            .usage
            .insert("prompt_tokens".into(), serde_json::json!(3));
        assert!(cache.get("k", Duration::from_secs(60)).is_none());
        cache.put("k", &entry(&reply, Duration::from_secs(60)));
        cache.flush();
        let back = cache.get("k", Duration::from_secs(60)).unwrap();
        assert_eq!(back, reply);
        // Another handle (another process) sees it too.
        let other = Cache::open(dir.path()).unwrap();
        assert_eq!(
            other.get("k", Duration::from_secs(60)).unwrap().content,
            "hi"
        );
        // Each handle writes its own hits; `stats` waits for its own only.
        cache.flush();
        let stats = other.stats().unwrap();
        assert_eq!((stats.entries, stats.hits, stats.expired), (1, 2, 0));
        assert_eq!(stats.saved_usd, 1.0);
        assert_eq!(stats.models[0].model, "m");
        assert!(stats.bytes > 0);
    }

    #[test]
    fn expired_replies_are_cleared_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let reply = Message::assistant("model", "old");
        cache.put("old", &entry(&reply, Duration::ZERO));
        cache.flush();
        cache.put("new", &entry(&reply, Duration::from_secs(3600)));
        cache.flush();
        assert_eq!(cache.stats().unwrap().expired, 1);
        assert_eq!(cache.clear(true).unwrap(), 1);
        assert!(cache.get("new", Duration::from_secs(3600)).is_some());
        assert_eq!(cache.clear(false).unwrap(), 1);
        assert_eq!(cache.stats().unwrap().entries, 0);
    }

    #[test]
    fn a_stored_reply_is_replaced_and_its_hits_restart() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let day = Duration::from_secs(86_400);
        cache.put("k", &entry(&Message::assistant("model", "one"), day));
        cache.flush();
        cache.get("k", day).unwrap();
        cache.put("k", &entry(&Message::assistant("model", "two"), day));
        cache.flush();
        assert_eq!(cache.get("k", day).unwrap().content, "two");
        assert_eq!(cache.stats().unwrap().hits, 1);
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CACHE_FILE), "not sqlite at all, not at all").unwrap();
        let error = Cache::open(dir.path()).err().unwrap().to_string();
        assert!(error.contains(CACHE_FILE), "{error}");
        assert!(
            Cache::open_existing(tempfile::tempdir().unwrap().path())
                .unwrap()
                .is_none()
        );
    }
}
