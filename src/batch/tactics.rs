//! The tactics of a batch: `--tactic` and every tactic a task line names, each
//! built once and shared by all its tasks — so its providers, and with them
//! their `max_concurrency` / `rpm` / `tpm` limits, are shared by the whole batch.
//! (Two different tactic files build their providers separately.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::provider::budget::CostBudget;
use crate::tactic::Tactic;

/// Loads tactics the way `lllm run` does, with the batch's `--model` and
/// `--prices` applied to each.
pub struct Tactics {
    model: Option<String>,
    prices: Option<Value>,
    /// `--max-cost`: every call of every tactic passes it.
    budget: Option<Arc<CostBudget>>,
    /// The extensions tactics may name.
    registry: crate::Registry,
    /// `--cache` / `--no-cache` and the response cache, for every tactic.
    cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// `--via batch-api`: the collector every tactic's calls go through.
    batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    built: HashMap<PathBuf, Arc<Tactic>>,
    /// Tactics that failed to build, with their error (reported once).
    failed: HashMap<PathBuf, String>,
    /// Paths as task lines give them → `key` (canonicalizing is a syscall
    /// per component; pre-flight asks once per line).
    keys: HashMap<PathBuf, PathBuf>,
}

impl Tactics {
    pub fn new(
        model: Option<String>,
        prices: Option<&Path>,
        budget: Option<Arc<CostBudget>>,
        registry: crate::Registry,
        cache: Option<Arc<crate::provider::cache::CacheSource>>,
        batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    ) -> Result<Tactics> {
        let prices = match prices {
            Some(path) => {
                Some(crate::provider::models::read_price_file(path).map_err(Error::Usage)?)
            }
            None => None,
        };
        Ok(Tactics {
            model,
            prices,
            budget,
            registry,
            cache,
            batch_api,
            built: HashMap::new(),
            failed: HashMap::new(),
            keys: HashMap::new(),
        })
    }

    /// The tactic at `path`, built on first use. `Err` holds its error; the
    /// `bool` says whether this is the first time it was asked for.
    pub fn get(&mut self, path: &Path) -> std::result::Result<Arc<Tactic>, (String, bool)> {
        let path = &self
            .keys
            .entry(path.to_path_buf())
            .or_insert_with(|| key(path))
            .clone();
        if let Some(tactic) = self.built.get(path) {
            return Ok(tactic.clone());
        }
        if let Some(error) = self.failed.get(path) {
            return Err((error.clone(), false));
        }
        match self.load(path) {
            Ok(tactic) => {
                let tactic = Arc::new(tactic);
                self.built.insert(path.to_path_buf(), tactic.clone());
                Ok(tactic)
            }
            Err(error) => {
                let text = error.to_string().replace('\n', "; ");
                self.failed.insert(path.to_path_buf(), text.clone());
                Err((text, true))
            }
        }
    }

    /// Builds the `--tactic` default up front: its errors are the command's
    /// error, as with `lllm run`.
    pub fn preload(&mut self, path: &Path) -> Result<()> {
        let tactic = self.load(path)?;
        self.built.insert(key(path), Arc::new(tactic));
        Ok(())
    }

    /// Loads and builds one tactic; warnings go to stderr once.
    fn load(&self, path: &Path) -> Result<Tactic> {
        // Config and build in one pre-flight: every problem of both at once.
        let options = crate::tactic::LoadOptions {
            model: self.model.as_deref(),
            prices: self.prices.as_ref(),
            env: &|name| std::env::var(name).ok(),
            dry_run: None,
            warn: &|warning| crate::report::warn(&format!("{}: {warning}", path.display())),
            budget: self.budget.clone(),
            registry: &self.registry,
            cache: self.cache.clone(),
            batch_api: self.batch_api.clone(),
        };
        Ok(crate::tactic::load(path, &options, None)?)
    }

    /// Every tactic built so far.
    pub fn all(&self) -> impl Iterator<Item = (&PathBuf, &Arc<Tactic>)> {
        self.built.iter()
    }
}

/// The name a tactic file is known by: its canonical path when it exists, so
/// `t.yaml` and `sub/../t.yaml` are one tactic (one set of providers).
pub fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
