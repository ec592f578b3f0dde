//! Where the verbs' session records go, and how a record file is written:
//! the public face and the docs are [`crate::records`], which also indexes
//! a written record in the session store ([`IndexRecord`]: the store is a
//! room above this one, so this names what it needs and the store's side
//! implements it).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::tactic::SessionRecord;

/// The variable that changes where the verbs' records go by default:
/// `off` (or `none`, `0`, `false`) for nowhere, else the directory of the
/// store they use.
pub const VARIABLE: &str = "LLLM_RECORDS";

/// Where a tactic's verbs write their session records: see the
/// [module](crate::records) docs. Set it with [`Tactic::with_records`](crate::Tactic::with_records)
/// or, for one call, the builders' `write_records`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    place: Place,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Place {
    /// The store `LLLM_RECORDS` names, else the default store, resolved at
    /// each write (a test's environment is read when it runs).
    #[default]
    Default,
    Store(PathBuf),
    Dir(PathBuf),
    Nowhere,
}

/// A place resolved: record files go into `files`, and are indexed in
/// `store` when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    files: PathBuf,
    store: Option<PathBuf>,
}

impl Records {
    /// Records in the session store in `dir`: files in `dir/sessions/`,
    /// indexed in `dir` (`lllm logs --store DIR`).
    pub fn store(dir: impl Into<PathBuf>) -> Records {
        Records {
            place: Place::Store(dir.into()),
        }
    }

    /// Record files in `dir` (`SESSION_ID.json`), indexed in the default
    /// store, as `lllm run --record` does.
    pub fn dir(dir: impl Into<PathBuf>) -> Records {
        Records {
            place: Place::Dir(dir.into()),
        }
    }

    /// No record is written.
    pub fn none() -> Records {
        Records {
            place: Place::Nowhere,
        }
    }

    /// Where [`write`](Records::write) puts `record`'s file: `None` when
    /// records go nowhere (`Records::none()`, `LLLM_RECORDS=off`, or no
    /// home directory to find the store by).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Records, Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml("agent_configs: [{name: a, model_name: mock/echo}]", ".", &Registry::new())?;
    /// let record = tactic.run("hi".into()).await; // `run` writes nothing
    /// let file = Records::dir("runs").file_for(&record).unwrap();
    /// assert_eq!(file, std::path::Path::new("runs").join(format!("{}.json", record.session_id)));
    /// assert_eq!(Records::none().file_for(&record), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn file_for(&self, record: &SessionRecord) -> Option<PathBuf> {
        let target = self.target(&env_var)?;
        Some(target.files.join(file_name(record)))
    }

    /// Writes `record` where these records go and indexes it, as the verbs
    /// do after each run; for a record of [`Tactic::run`](crate::Tactic::run).
    /// Returns the file written, `None` when records go nowhere or it could
    /// not be written (a warning, once per directory, says why). It blocks:
    /// in async code the verbs do this on tokio's blocking pool.
    pub fn write(&self, record: &SessionRecord) -> Option<PathBuf> {
        let Some(target) = self.target(&env_var) else {
            if self.place == Place::Default && !records_off(&env_var) {
                warn_no_home();
            }
            return None;
        };
        let path = target.files.join(file_name(record));
        match write_and_index(record, &path, target.store.as_deref()) {
            Ok(()) => Some(path),
            Err(error) => {
                warn_once(
                    &target.files,
                    &format!(
                        "cannot write session records in `{}`: {error}; the runs' results are \
                         returned, their records are not kept (hint: `Records::dir(DIR)` or \
                         `LLLM_RECORDS=DIR` names a directory that can be written)",
                        target.files.display()
                    ),
                );
                None
            }
        }
    }

    /// [`write`](Records::write) on tokio's blocking pool, giving the
    /// record back: what the verbs do after each run.
    pub(crate) async fn keep(&self, record: SessionRecord) -> SessionRecord {
        if self.place == Place::Nowhere {
            return record;
        }
        let records = self.clone();
        let kept = tokio::task::spawn_blocking(move || {
            // A panic while writing (a bug) costs the record, not the run.
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                records.write(&record);
            }));
            if written.is_err() {
                warn_once(
                    Path::new("<panic>"),
                    "internal error: writing a session record panicked; this is a bug, \
                     please report it (the runs' results are returned)",
                );
            }
            record
        })
        .await;
        match kept {
            Ok(record) => record,
            // Only a runtime shutting down cancels a blocking task; the task
            // awaiting this is being dropped with it.
            Err(_) => std::future::pending().await,
        }
    }

    /// Where records go, with `env` read for the default.
    fn target(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<Target> {
        let in_store = |dir: PathBuf| Target {
            files: dir.join(SESSIONS_DIR),
            store: Some(dir),
        };
        match &self.place {
            Place::Default => library_store(env).map(in_store),
            Place::Store(dir) => Some(in_store(dir.clone())),
            Place::Dir(dir) => Some(Target {
                files: dir.clone(),
                store: library_store(env),
            }),
            Place::Nowhere => None,
        }
    }
}

/// The directory of a store that holds its record files (`lllm run`'s).
pub const SESSIONS_DIR: &str = "sessions";

/// `SESSION_ID.json`.
fn file_name(record: &SessionRecord) -> String {
    format!("{}.json", record.session_id)
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The default store directory, as `lllm logs` finds it without a config
/// file: `$LLLM_HOME`, else `$XDG_DATA_HOME/lllm`, else
/// `~/.local/share/lllm`; `None` when none of them is set (an empty value
/// is not set). `env` reads a variable.
pub fn default_store_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(home) = set("LLLM_HOME") {
        return Some(PathBuf::from(home));
    }
    if let Some(data) = set("XDG_DATA_HOME") {
        return Some(PathBuf::from(data).join("lllm"));
    }
    set("HOME").map(|home| PathBuf::from(home).join(".local/share/lllm"))
}

/// The store the library's records go to: `LLLM_RECORDS`, else the default
/// store; `None` for `off` or when no directory is known.
fn library_store(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if records_off(env) {
        return None;
    }
    match env(VARIABLE).as_deref().map(str::trim) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => default_store_dir(env),
    }
}

/// `LLLM_RECORDS=off` (or `none`, `0`, `false`).
fn records_off(env: &dyn Fn(&str) -> Option<String>) -> bool {
    matches!(
        env(VARIABLE).as_deref().map(str::trim),
        Some("off" | "none" | "0" | "false")
    )
}

/// Writes `record` at `path` and indexes it in the store in `store`: the
/// one way a record file of its own is kept, for `lllm run` and the
/// library's verbs alike. The path is indexed absolute, so `lllm logs show`
/// finds it from any directory. A record that cannot be written is the
/// error; a store that cannot be opened or written is a warning (once per
/// store and process), since the record, the source of truth, is written
/// and `lllm logs reindex --from DIR` indexes it later.
pub fn write_and_index(
    record: &SessionRecord,
    path: &Path,
    store: Option<&Path>,
) -> std::io::Result<()> {
    record.write(path)?;
    if let Some(store) = store {
        <Records as IndexRecord>::index(store, record, path);
    }
    Ok(())
}

/// Indexes a record file just written in the store in `dir` (the session
/// store's side, `crate::records`; nothing without the `store` feature). A
/// store that cannot be opened or written is for it to warn about: the
/// record, the source of truth, is written.
pub(crate) trait IndexRecord {
    /// Registers `record`, written at `path`, in the store in `dir`.
    fn index(dir: &Path, record: &SessionRecord, path: &Path);
}

/// The places warned about in this process.
static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// `text` as a warning, the first time `place` goes wrong in this process.
pub(crate) fn warn_once(place: &Path, text: &str) {
    let first = WARNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(place.to_path_buf());
    if first {
        crate::report::warn(text);
    }
}

fn warn_no_home() {
    warn_once(
        Path::new(""),
        "no session store for the runs' records: none of `LLLM_RECORDS`, `LLLM_HOME`, \
         `XDG_DATA_HOME` and `HOME` is set; hint: `Records::store(DIR)` or \
         `LLLM_RECORDS=DIR` names one, `Records::none()` writes none",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn target(records: &Records, vars: &[(&str, &str)]) -> Option<Target> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        records.target(&move |name: &str| {
            vars.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
    }

    fn at(files: &str, store: Option<&str>) -> Option<Target> {
        Some(Target {
            files: PathBuf::from(files),
            store: store.map(PathBuf::from),
        })
    }

    #[test]
    fn the_default_is_the_store_lllm_logs_reads_unless_the_variable_says_otherwise() {
        let default = Records::default();
        let home = [("HOME", "/home/u")];
        assert_eq!(
            target(&default, &home),
            at(
                "/home/u/.local/share/lllm/sessions",
                Some("/home/u/.local/share/lllm")
            )
        );
        let xdg = [("HOME", "/home/u"), ("XDG_DATA_HOME", "/data")];
        assert_eq!(
            target(&default, &xdg),
            at("/data/lllm/sessions", Some("/data/lllm"))
        );
        let lllm_home = [("XDG_DATA_HOME", "/data"), ("LLLM_HOME", "/l")];
        assert_eq!(target(&default, &lllm_home), at("/l/sessions", Some("/l")));
        // LLLM_RECORDS: off, or a store of the library's own.
        for off in ["off", "none", "0", "false", " off "] {
            assert_eq!(target(&default, &[("HOME", "/h"), (VARIABLE, off)]), None);
        }
        let own = [("HOME", "/h"), (VARIABLE, "/tmp/t")];
        assert_eq!(
            target(&default, &own),
            at("/tmp/t/sessions", Some("/tmp/t"))
        );
        // Empty is unset; nothing set is nowhere (a warning says so).
        assert_eq!(
            target(&default, &[("HOME", "/h"), (VARIABLE, "")]),
            at(
                "/h/.local/share/lllm/sessions",
                Some("/h/.local/share/lllm")
            )
        );
        assert_eq!(target(&default, &[]), None);
    }

    #[test]
    fn a_place_named_in_code_wins_over_the_variable() {
        let off = [("HOME", "/h"), (VARIABLE, "off")];
        assert_eq!(
            target(&Records::store("/s"), &off),
            at("/s/sessions", Some("/s"))
        );
        // A directory's files are still indexed in the default store, which
        // `off` turns off.
        assert_eq!(target(&Records::dir("/d"), &off), at("/d", None));
        assert_eq!(
            target(&Records::dir("/d"), &[("LLLM_HOME", "/l")]),
            at("/d", Some("/l"))
        );
        assert_eq!(target(&Records::none(), &[("LLLM_HOME", "/l")]), None);
    }

    #[tokio::test]
    async fn a_record_that_cannot_be_written_is_a_warning_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "not a directory").unwrap();
        let tactic = crate::Tactic::from_yaml(
            "agent_configs: [{name: a, model_name: mock/echo}]",
            "/nonexistent",
            &crate::Registry::new(),
        )
        .unwrap();
        let record = tactic.run("hi".into()).await;
        assert_eq!(Records::dir(blocker.join("records")).write(&record), None);
        let written = Records::store(dir.path().join("store")).write(&record);
        assert_eq!(
            written,
            Some(
                dir.path()
                    .join("store/sessions")
                    .join(format!("{}.json", record.session_id))
            )
        );
    }
}
