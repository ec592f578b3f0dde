//! The batch writer's side of the store: the entries of written records
//! gathered and registered a batch at a time (`batch::output::Writer` calls
//! it after each write, with each line's byte offset).

/// Sessions per store transaction: one commit for many sessions keeps a fast
/// batch fast; a slow one still registers at least every [`REGISTER_EVERY`].
const REGISTER_BATCH: usize = 1000;

const REGISTER_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The writer's side of the session store: entries gathered and registered
/// a batch at a time. A store that fails is warned about once and left.
pub(crate) struct Registrar {
    dir: std::path::PathBuf,
    sessions: std::path::PathBuf,
    /// Opened at the first registration; `None` after a failure.
    store: Option<super::Store>,
    failed: bool,
    pending: Vec<super::Entry>,
    last: std::time::Instant,
}

impl Registrar {
    pub(crate) fn new(dir: std::path::PathBuf, sessions: std::path::PathBuf) -> Registrar {
        // The record path is kept absolute, so `lllm logs show` finds it
        // from any directory.
        let sessions = std::path::absolute(&sessions).unwrap_or(sessions);
        Registrar {
            dir,
            sessions,
            store: None,
            failed: false,
            pending: Vec::new(),
            last: std::time::Instant::now(),
        }
    }

    pub(crate) fn add(&mut self, mut entry: super::Entry, offset: u64) {
        if self.failed {
            return;
        }
        entry.place = super::RecordPlace::Line {
            path: self.sessions.clone(),
            offset,
        };
        self.pending.push(entry);
        if self.pending.len() >= REGISTER_BATCH || self.last.elapsed() >= REGISTER_EVERY {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        self.last = std::time::Instant::now();
        if self.failed || self.pending.is_empty() {
            return;
        }
        if self.store.is_none() {
            match super::Store::open(&self.dir) {
                Ok(store) => self.store = Some(store),
                Err(error) => return self.fail(&error),
            }
        }
        if let Some(store) = &mut self.store
            && let Err(error) = store.register(&self.pending)
        {
            return self.fail(&error);
        }
        self.pending.clear();
    }

    fn fail(&mut self, error: &super::StoreError) {
        self.failed = true;
        self.pending = Vec::new();
        crate::report::warn(&format!(
            "{error}; the batch goes on without it (its records are written; \
             `lllm logs reindex --from DIR` indexes them later)"
        ));
    }
}
