//! The tactics of a batch: `--tactic` and every tactic a task line names, each
//! built once and shared by all its tasks — so its providers, and with them
//! their `max_concurrency` / `rpm` / `tpm` limits, are shared by the whole batch.
//! (Two different tactic files build their providers separately.) A task
//! line naming a `model` runs on its tactic built for that model (as with
//! `--model`: every agent), one build per tactic and model; `--model` wins
//! over a line's model.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::provider::budget::CostBudget;
use crate::tactic::Tactic;

/// Loads tactics the way `lllm run` does, with the batch's `--model`, `-O`
/// and `--prices` applied to each.
pub struct Tactics {
    model: Option<String>,
    /// `-O`: over every agent's model arguments, and a task line's.
    model_args: crate::config::ModelArgs,
    prices: Option<Value>,
    /// `--max-cost`: every call of every tactic passes it.
    budget: Option<Arc<CostBudget>>,
    /// The extensions tactics may name.
    registry: crate::Registry,
    /// `--cache` / `--no-cache` and the response cache, for every tactic.
    cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// `--via batch-api`: the collector every tactic's calls go through.
    batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    /// Where keys and base URLs are read (`None`: the process environment).
    env: Option<super::Environment>,
    /// A user's defaults under every tactic.
    defaults: Option<Arc<crate::config::Defaults>>,
    built: HashMap<Key, Arc<Tactic>>,
    /// Tactics that failed to build, with their error (reported once).
    failed: HashMap<Key, String>,
    /// Paths as task lines give them → `key` (canonicalizing is a syscall
    /// per component; pre-flight asks once per line).
    keys: HashMap<PathBuf, PathBuf>,
    /// Judge tactics (`llm-rubric` assertions) by their path as the
    /// assertion names it, or why they cannot judge.
    judges: HashMap<PathBuf, std::result::Result<Arc<Tactic>, String>>,
}

impl Tactics {
    pub fn new(
        model: Option<String>,
        model_args: crate::config::ModelArgs,
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
            model_args,
            prices,
            budget,
            registry,
            cache,
            batch_api,
            env: None,
            defaults: None,
            built: HashMap::new(),
            failed: HashMap::new(),
            keys: HashMap::new(),
            judges: HashMap::new(),
        })
    }

    /// Where every tactic reads environment variables, and the user's
    /// defaults laid under each (both `None` by default).
    pub fn set_sources(
        &mut self,
        env: Option<super::Environment>,
        defaults: Option<Arc<crate::config::Defaults>>,
    ) {
        self.env = env;
        self.defaults = defaults;
    }

    /// The tactic at `path` for a task naming `model` (or none), built on
    /// first use. `Err` holds its error; the `bool` says whether this is the
    /// first time it was asked for.
    pub fn get(
        &mut self,
        path: &Path,
        model: Option<&str>,
    ) -> std::result::Result<Arc<Tactic>, (String, bool)> {
        let canonical = self
            .keys
            .entry(path.to_path_buf())
            .or_insert_with(|| key(path))
            .clone();
        let model = self.effective(model);
        let entry = (canonical, model.clone());
        if let Some(tactic) = self.built.get(&entry) {
            return Ok(tactic.clone());
        }
        if let Some(error) = self.failed.get(&entry) {
            return Err((error.clone(), false));
        }
        match self
            .load(&entry.0, model.as_deref())
            .and_then(|tactic| self.load_judges_of(tactic))
        {
            Ok(tactic) => {
                let tactic = Arc::new(tactic);
                self.built.insert(entry, tactic.clone());
                Ok(tactic)
            }
            Err(error) => {
                let text = error.to_string().replace('\n', "; ");
                self.failed.insert(entry, text.clone());
                Err((text, true))
            }
        }
    }

    /// The model a tactic is built for: `--model`, else the task's.
    fn effective(&self, model: Option<&str>) -> Option<String> {
        self.model.clone().or_else(|| model.map(str::to_string))
    }

    /// Builds the `--tactic` default up front: its errors are the command's
    /// error, as with `lllm run`.
    pub fn preload(&mut self, path: &Path) -> Result<()> {
        let tactic = self.load(path, self.model.as_deref())?;
        let tactic = self.load_judges_of(tactic)?;
        self.built
            .insert((key(path), self.model.clone()), Arc::new(tactic));
        Ok(())
    }

    /// `tactic`, once the judges its `asserts` name are built and fit to
    /// judge; else the first one's problem, placed at its assertion.
    fn load_judges_of(&mut self, tactic: Tactic) -> Result<Tactic> {
        let config = tactic.config.clone();
        for (index, assertion) in config.asserts.iter().enumerate() {
            if let crate::eval::Kind::Judge { judge, .. } = &assertion.kind
                && let Err(problem) = self.judge(judge)
            {
                return Err(Error::Usage(config.placed(
                    &format!("asserts[{index}].judge"),
                    format!("`asserts`: {problem}"),
                )));
            }
        }
        Ok(tactic)
    }

    /// The judge tactic at `path` (as an assertion names it), built on first
    /// use: with the batch's budget, cache and Batch APIs, but its own
    /// model and model arguments (`--model` and `-O` are the tactic's under
    /// test, not the judge's). The problem says why it cannot judge.
    pub fn judge(&mut self, path: &Path) -> std::result::Result<Arc<Tactic>, String> {
        if let Some(judge) = self.judges.get(path) {
            return judge.clone();
        }
        let judge = self
            .load_with(path, None, &crate::config::ModelArgs::default())
            .map_err(|error| {
                format!(
                    "judge `{}`: {}",
                    path.display(),
                    error.to_string().replace('\n', "; ")
                )
            })
            .and_then(|tactic| {
                super::grade::check_judge(&tactic)
                    .map(|()| Arc::new(tactic))
                    .map_err(|problem| format!("judge `{}`: {problem}", path.display()))
            });
        self.judges.insert(path.to_path_buf(), judge.clone());
        judge
    }

    /// The judges built, by their path as assertions name them.
    pub fn judges(&self) -> HashMap<PathBuf, Arc<Tactic>> {
        self.judges
            .iter()
            .filter_map(|(path, judge)| Some((path.clone(), judge.as_ref().ok()?.clone())))
            .collect()
    }

    /// Loads and builds one tactic; warnings go to stderr once.
    fn load(&self, path: &Path, model: Option<&str>) -> Result<Tactic> {
        self.load_with(path, model, &self.model_args)
    }

    /// [`load`](Tactics::load) with these model arguments over its agents'.
    fn load_with(
        &self,
        path: &Path,
        model: Option<&str>,
        model_args: &crate::config::ModelArgs,
    ) -> Result<Tactic> {
        // Config and build in one pre-flight: every problem of both at once.
        let options = crate::tactic::LoadOptions {
            model,
            prices: self.prices.as_ref(),
            model_args: Some(model_args),
            env: &|name| match &self.env {
                Some(env) => env.get(name),
                None => std::env::var(name).ok(),
            },
            dry_run: None,
            // A warning that names its file already (`t.yaml:4:5: …`, a
            // prompt file's) is not given the tactic's name again.
            warn: &|warning| {
                let file = path.display().to_string();
                if warning.starts_with(&file) {
                    crate::report::warn(warning);
                } else {
                    crate::report::warn(&format!("{file}: {warning}"));
                }
            },
            budget: self.budget.clone(),
            registry: &self.registry,
            cache: self.cache.clone(),
            batch_api: self.batch_api.clone(),
            defaults: self.defaults.as_deref(),
        };
        Ok(crate::tactic::load(path, &options, None)?)
    }

    /// Every tactic built so far.
    pub fn all(&self) -> impl Iterator<Item = (&Key, &Arc<Tactic>)> {
        self.built.iter()
    }
}

/// A built tactic: its file's canonical path and the model it was built for.
pub type Key = (PathBuf, Option<String>);

/// The name a tactic file is known by: its canonical path when it exists, so
/// `t.yaml` and `sub/../t.yaml` are one tactic (one set of providers).
pub fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
