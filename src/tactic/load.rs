//! A tactic file made ready for a run in one pre-flight: the config, the
//! build, and (given a task) the task's check, with every problem of every
//! phase listed at once (issue 12). A structural problem of the YAML (an
//! unknown agent) no longer hides a broken template or prompt file, and a
//! problem of the build no longer hides what the task's check finds.
//!
//! When the config itself has problems, what could be resolved is still
//! built and checked, and every problem of those phases is listed with the
//! config's (issue 27): of prompts and templates (their syntax, unknown
//! filters, files that cannot be read, the names they need, renders that fail
//! on the task), of providers, tools and servers. What would only echo the
//! config's problems is not: a reference to an agent, provider, tool or
//! server the config left out for its own problems (`TacticConfig::left_out`),
//! a step or agent with problems (kept with its name). Every problem names
//! its file, line and column when it has them.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::build::Builder;
use super::{Error, Result, Tactic, Task, check};
use crate::config::TacticConfig;
use crate::provider::budget::CostBudget;
use crate::provider::dry_run::DryRun;

/// How `load` builds a tactic: the command line's overrides, where keys and
/// base URLs come from, and where warnings go.
pub struct LoadOptions<'a> {
    /// `--model`: every agent's model, sub-tactics' too.
    pub model: Option<&'a str>,
    /// `--prices`: prices over the tactic's own.
    pub prices: Option<&'a Value>,
    /// `-O`: model arguments over every agent's (sub-tactics' too), and over
    /// a task's own `model_args`. An agent it names must be one of the
    /// tactic's or its sub-tactics'.
    pub model_args: Option<&'a crate::config::ModelArgs>,
    /// Reads environment variables (keys, base URLs).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// `--dry-run`: requests are captured here instead of sent.
    pub dry_run: Option<Arc<DryRun>>,
    /// Receives the config's warnings, one line each.
    pub warn: &'a dyn Fn(&str),
    /// `lllm batch --max-cost`: every call passes this spending cap.
    pub budget: Option<Arc<CostBudget>>,
    /// The extensions the tactic may name (`Registry::new()`: built-ins).
    pub registry: &'a crate::Registry,
    /// `--cache` / `--no-cache` and the response cache (`None`: no call is
    /// cached, whatever the tactic says).
    pub cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// `lllm batch --via batch-api`: every OpenAI and Anthropic call goes
    /// through the provider's Batch API, collected here (`None`: sent as usual).
    pub batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    /// A user's defaults (model, providers) under this tactic and its
    /// sub-tactics (`None`: none).
    pub defaults: Option<&'a crate::config::Defaults>,
}

impl<'a> LoadOptions<'a> {
    /// What [`Tactic::load`] uses: the extensions of `registry`, keys and
    /// base URLs from the process environment, warnings on stderr, and no
    /// override, dry run, budget, cache, Batch API or user defaults. Change
    /// what differs with struct update syntax:
    ///
    /// ```
    /// use lllm::{Registry, tactic::LoadOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("t.yaml");
    /// std::fs::write(&path, "agent_configs: [{name: a, model_name: openai/gpt-4o}]")?;
    /// let registry = Registry::new();
    /// let options = LoadOptions { model: Some("mock/echo"), ..LoadOptions::new(&registry) };
    /// let tactic = lllm::tactic::load(&path, &options, None)?;
    /// assert_eq!(tactic.config.agents[0].model_name, "mock/echo");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(registry: &'a crate::Registry) -> LoadOptions<'a> {
        LoadOptions {
            model: None,
            prices: None,
            model_args: None,
            env: &super::code::process_env,
            dry_run: None,
            warn: &crate::report::warn,
            budget: None,
            registry,
            cache: None,
            batch_api: None,
            defaults: None,
        }
    }
}

/// Loads, builds and (given `task`) checks the tactic at `path`; the error
/// lists every problem found in every phase.
pub fn load(path: &Path, options: &LoadOptions<'_>, task: Option<&Task>) -> Result<Tactic> {
    load_serving(path, options, task, None)
}

/// [`load`] for looking at a tactic, not running it (`lllm models --check`):
/// every model is served by a stand-in that sends nothing and answers every
/// call with an error, so no key is needed; each model keeps the provider
/// name and the hosted service its endpoint belongs to, and so its price. A
/// provider no tactic defines is not an error here (it has no service, and
/// so no bundled price).
pub fn load_unsent(path: &Path, options: &LoadOptions<'_>) -> Result<Tactic> {
    load_serving(path, options, None, Some(Arc::new(Unsent)))
}

/// The stand-in of [`load_unsent`].
struct Unsent;

impl crate::provider::Provider for Unsent {
    fn invoke<'a>(
        &'a self,
        _request: crate::provider::ChatRequest<'a>,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<crate::dialog::Message, crate::provider::ProviderError>,
    > {
        Box::pin(async {
            Err(crate::provider::ProviderError::permanent(
                "this tactic was loaded to be looked at, not run: nothing is sent",
            ))
        })
    }
}

fn load_serving(
    path: &Path,
    options: &LoadOptions<'_>,
    task: Option<&Task>,
    replacement: Option<Arc<dyn crate::provider::Provider>>,
) -> Result<Tactic> {
    let builder = Builder {
        env: options.env,
        extensions: options.registry,
        replacement,
        dry_run: options.dry_run.clone(),
        budget: options.budget.clone(),
        cache: options.cache.clone(),
        batch_api: options.batch_api.clone(),
        stack: Vec::new(),
        hidden_variables: Vec::new(),
        secrets: crate::redact::Secrets::new(),
        defaults: options.defaults,
    };
    let adjust = |config: &mut TacticConfig| {
        for warning in &config.warnings {
            (options.warn)(warning);
        }
        if let Some(model) = options.model {
            config.override_model(model);
        }
        if let Some(prices) = options.prices {
            config.override_prices(prices.clone());
        }
        if let Some(args) = options.model_args {
            config.override_model_args(args);
        }
    };
    let tactic = load_config(path, adjust, &builder, task)?;
    if let Some(args) = options.model_args {
        let agents = tactic.agent_names();
        let problems = args.unknown_agents(agents.iter().map(String::as_str));
        if !problems.is_empty() {
            return Err(Error { problems });
        }
    }
    // Prompt files that load but look wrong (a ported `{var}`), sub-tactics'
    // prompt directories included, each once.
    let mut warned = std::collections::BTreeSet::new();
    let mut pending = vec![&tactic];
    while let Some(next) = pending.pop() {
        for warning in next.registry.warnings() {
            if warned.insert(warning.as_str()) {
                (options.warn)(warning);
            }
        }
        pending.extend(next.sub_tactics());
    }
    Ok(tactic)
}

/// `load` for a tactic file with `adjust` applied to its config (overrides,
/// warnings) and `builder` passed on; sub-tactics load this way too.
pub(super) fn load_config(
    path: &Path,
    adjust: impl FnOnce(&mut TacticConfig),
    builder: &Builder<'_>,
    task: Option<&Task>,
) -> Result<Tactic> {
    let no_defaults = crate::config::Defaults::default();
    let defaults = builder.defaults.unwrap_or(&no_defaults);
    let (mut config, config_problems) = match crate::config::load_with(path, defaults) {
        Ok(config) => (config, Vec::new()),
        // Each problem names its file and place already.
        Err(crate::config::Error::Incomplete {
            problems, partial, ..
        }) => (*partial, problems),
        Err(other) => {
            return Err(Error {
                problems: other.to_string().lines().map(str::to_string).collect(),
            });
        }
    };
    adjust(&mut config);
    let (tactic, built) = Tactic::assemble(config, builder);
    let mut problems = config_problems;
    problems.extend(built.lines);
    if let Some(task) = task {
        // With problems, the config keeps every step it could (an entry
        // with problems is kept with what it has, a step whose prompt failed
        // stands in with an empty one), so the names templates need are
        // still known: their problems are listed with the config's (issue 27).
        let arg_names = task.args.keys().cloned().collect();
        let mut found = check::check_variables(&tactic, &arg_names);
        found.extend(check::trial(&tactic, task));
        for problem in found {
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    if problems.is_empty() {
        Ok(tactic)
    } else {
        Err(Error { problems })
    }
}
