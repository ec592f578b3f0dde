//! Where the library's runs leave their session records: by default where
//! `lllm run` leaves its own, in the session store, so that `lllm logs` and
//! `lllm replay` find a program's runs with no code of its own.
//!
//! [`Tactic::call`](crate::Tactic::call), [`call_record`](crate::Tactic::call_record),
//! [`bcall`](crate::Tactic::bcall),
//! [`try_bcall`](crate::Tactic::try_bcall), [`ccall`](crate::Tactic::ccall)
//! (and their `.records()` forms) and [`quick`](crate::quick()) write each
//! run's record as it finishes, and index it in the store. [`Tactic::run`](crate::Tactic::run)
//! writes nothing: it is the building block under them and under the
//! command line, which writes where its flags say.
//!
//! | [`Records`] | record files in | indexed in |
//! |---|---|---|
//! | `Records::default()` | the store's `sessions/` | the store |
//! | `Records::store(DIR)` | `DIR/sessions/` | the store in `DIR` |
//! | `Records::dir(DIR)` | `DIR` | the store |
//! | `Records::none()` | nowhere | nowhere |
//!
//! "The store" is the one `lllm logs` reads: `$LLLM_HOME`, else
//! `$XDG_DATA_HOME/lllm`, else `~/.local/share/lllm` (the command line's
//! config file may name another; a program that wants it names it with
//! `Records::store`). The variable [`LLLM_RECORDS`](VARIABLE) changes what
//! the default means for a process without touching its code: `off` writes
//! no record, a directory is the store the library's runs use instead
//! (`LLLM_HOME=DIR lllm logs` lists them). A `Records` named in code wins
//! over the variable.
//!
//! Records hold no secrets: a run scrubs its record before it returns it,
//! and this writes the record as returned. A record that cannot be written
//! (a read-only directory, a full disk) or a store that cannot be opened
//! never costs the run its result: each is one warning per process naming
//! the directory, and the verbs return as they would have.
//!
//! Without the `store` feature the record files are written all the same
//! and indexed nowhere; `lllm logs reindex --from DIR` indexes them later.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lllm::BoxError> {
//! use lllm::{Records, Registry, Tactic};
//!
//! let dir = tempfile::tempdir()?;
//! let tactic = Tactic::from_yaml(
//!     "agent_configs: [{name: echo, model_name: mock/echo}]",
//!     ".",
//!     &Registry::new(),
//! )?
//! .with_records(Records::dir(dir.path()));
//! let records = tactic.bcall(["a", "b"]).records().await;
//! for record in &records {
//!     let file = dir.path().join(format!("{}.json", record.session_id));
//!     assert_eq!(lllm::replay::load(&file, None)?.delivery, record.delivery);
//! }
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use crate::tactic::SessionRecord;
use crate::tactic::records::IndexRecord;
pub use crate::tactic::records::{
    Records, SESSIONS_DIR, VARIABLE, default_store_dir, write_and_index,
};

/// The session store's side of [`write_and_index`]: one connection per
/// store for the process (opening one costs more than registering a
/// session), one short transaction a session.
#[cfg(feature = "store")]
impl IndexRecord for Records {
    fn index(dir: &Path, record: &SessionRecord, path: &Path) {
        use std::collections::HashMap;
        use std::path::PathBuf;
        use std::sync::{Arc, LazyLock, Mutex};

        use crate::store::{Entry, RecordPlace, Store};

        static OPEN: LazyLock<Mutex<HashMap<PathBuf, Arc<Mutex<Store>>>>> =
            LazyLock::new(|| Mutex::new(HashMap::new()));

        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let entry = Entry::of(record, RecordPlace::File(path));
        let opened = {
            let mut open = OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match open.get(dir) {
                Some(store) => Ok(store.clone()),
                None => Store::open(dir).map(|store| {
                    let store = Arc::new(Mutex::new(store));
                    open.insert(dir.to_path_buf(), store.clone());
                    store
                }),
            }
        };
        let registered = opened.and_then(|store| {
            store
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .register(&[entry])
        });
        if let Err(error) = registered {
            crate::tactic::records::warn_once(
                dir,
                &format!(
                    "{error}; the session was not registered (its record is written; \
                     `lllm logs reindex --from DIR` indexes it later)"
                ),
            );
        }
    }
}

/// Without the store there is no index: the file is all.
#[cfg(not(feature = "store"))]
impl IndexRecord for Records {
    fn index(_dir: &Path, _record: &SessionRecord, _path: &Path) {}
}
