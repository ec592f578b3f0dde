//! `lllm batch` (docs/formats.md §3 and §4): many tasks through tactics, in
//! parallel, resumable, budgeted, observable.
//!
//! The pipeline, top to bottom: lock the output directory, copy the TASKS
//! file (the run reads only the copy) and check the run the directory holds
//! (its shard), read its results (`--resume`, which first rebuilds the result
//! lines of records that lack one), build the tactics, pre-flight every line
//! (nothing is sent for a file with problems), run the selected tasks under
//! one scheduler, then write `summary.json` and show the summary.
//! `directory` guards the output directory, `snapshot` copies the TASKS file,
//! `tasks` parses lines, `preflight` checks them, `scheduler` runs them,
//! `output` owns the files' lines, `writer` writes them, `rebuild` mends a
//! killed run's, `shard` the partitions, `progress` the display;
//! `--max-cost` is kept by `provider::budget`, which every call passes.

pub mod directory;
pub mod formats;
pub mod grade;
pub mod ids;
pub mod merge;
pub mod openai_output;
pub mod output;
pub mod preflight;
pub mod progress;
pub mod reasons;
pub mod rebuild;
pub mod report;
pub mod rescore;
pub mod scheduler;
pub mod sessions_file;
pub mod shard;
pub mod snapshot;
pub mod summary;
pub mod tactics;
pub mod tasks;
pub mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Outcome, Result};
use crate::provider::budget::CostBudget;
use output::{Previous, TaskState};
use preflight::Selector;
use scheduler::{Reason, Shared};
use shard::{Requested, Shard};
use summary::Summary;

/// A batch as the command line asked for it.
#[derive(Debug, Clone)]
pub struct Options {
    pub tasks_file: PathBuf,
    /// The tactic of lines that name none.
    pub tactic: Option<PathBuf>,
    /// `--input-format`: the TASKS file's format (`None`: told by its first line).
    pub input_format: Option<formats::InputFormat>,
    /// `--output-format`: the files written besides lllm's own.
    pub output_format: openai_output::OutputFormat,
    pub output: PathBuf,
    /// `--compress`: a new output directory's records go to
    /// `sessions.jsonl.zst` (zstd frames) instead of `sessions.jsonl`; a
    /// directory's existing records file is continued in its own form.
    pub compress: bool,
    pub concurrency: usize,
    pub resume: bool,
    pub retry_errors: bool,
    pub fail_fast: bool,
    pub max_cost: Option<f64>,
    pub limit: Option<u64>,
    /// `--shard K/N` or `--shards N`; settled against the output directory.
    pub shard: Requested,
    pub skip_invalid: bool,
    pub model: Option<String>,
    /// `-O`: model arguments over every agent's, and over a task line's
    /// `model_args` (as `model` wins over a line's `model`).
    pub model_args: crate::config::ModelArgs,
    pub prices: Option<PathBuf>,
    pub quiet: bool,
    pub progress_interval: Duration,
    /// Shows progress instead of the default (plain lines every
    /// `progress_interval`, nothing when `quiet`); the `lllm` binary passes a
    /// bar when stderr is a terminal.
    pub reporter: Option<Arc<dyn progress::Reporter>>,
    /// The extensions tactics may name (`Registry::new()`: built-ins).
    pub registry: crate::Registry,
    /// After Ctrl-C, how long running tasks may take to finish.
    pub grace: Duration,
    /// The session store directory each record is registered in (`None`:
    /// none); see `crate::store`.
    pub store: Option<PathBuf>,
    /// Tags and metadata added to every task's own (`lllm batch --tag`,
    /// `--meta`); a task line's value for the same key wins.
    pub labels: Labels,
    /// `--cache` / `--no-cache` and the response cache (`None`: nothing is
    /// cached, whatever the tactics say).
    pub cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// How model calls are sent: one by one (the default), or through the
    /// providers' Batch APIs (`--via batch-api`).
    pub via: Via,
    /// Reads environment variables (keys, base URLs) for every tactic
    /// (`None`: the process environment). The `lllm` binary passes its
    /// environment over its env files and keys file.
    pub env: Option<Environment>,
    /// A user's defaults (model, providers) under every tactic (`None`: none).
    pub defaults: Option<Arc<crate::config::Defaults>>,
    /// Which files task lines' attachments may be read from besides the
    /// TASKS file's directory (`--attachments-dir`), and which never (lllm's
    /// secrets); the batch confines it to that directory
    /// (`AttachmentScope::confine_to`). `AttachmentScope::default()`: the
    /// TASKS file's directory only.
    pub attachments: crate::dialog::AttachmentScope,
    /// Directories besides the TASKS file's and `--tactic`'s that a task
    /// line's `tactic` may name a file in (`--tactics-dir`). A tactic runs
    /// tools (programs), so a line may not pick one from anywhere on disk.
    pub tactic_dirs: Vec<PathBuf>,
    /// When a provider counts as down, how it is probed and when the batch
    /// gives up on it (`--max-outage`); `None`: calls never wait on a
    /// circuit breaker. Not used with `--via batch-api`, whose rounds wait
    /// and retry on their own.
    pub breaker: Option<crate::provider::breaker::Settings>,
    /// `--fail-under RATE`: the run ends with exit code 3 when the pass
    /// rate of its scored tasks is below this (issue 32).
    pub fail_under: Option<f64>,
    /// `--repeat N`: each line runs N times, as `ID#1` … `ID#N` (1: once,
    /// under its own id).
    pub repeat: u32,
}

/// The directories a task line's `tactic` may name a file in, resolved: the
/// TASKS file's, `--tactic`'s and every `--tactics-dir`.
fn tactic_roots(options: &Options) -> Result<Vec<PathBuf>, Error> {
    let resolve = |directory: &Path, what: &str| {
        let directory = if directory.as_os_str().is_empty() {
            Path::new(".")
        } else {
            directory
        };
        std::fs::canonicalize(directory)
            .and_then(|real| {
                if real.is_dir() {
                    Ok(real)
                } else {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "not a directory",
                    ))
                }
            })
            .map_err(|error| {
                Error::Usage(format!(
                    "{what} `{}`: {error}",
                    crate::suggest::printable(&directory.to_string_lossy())
                ))
            })
    };
    let parent = |path: &Path| path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut roots = vec![resolve(
        &parent(&options.tasks_file),
        "the TASKS file's directory",
    )?];
    if let Some(tactic) = &options.tactic {
        roots.push(resolve(&parent(tactic), "`--tactic`'s directory")?);
    }
    for directory in &options.tactic_dirs {
        roots.push(resolve(directory, "`--tactics-dir`")?);
    }
    Ok(roots)
}

/// Where a batch's tactics read environment variables: a lookup by name.
/// Its `Debug` shows no values (they may be keys).
#[derive(Clone)]
pub struct Environment(pub Arc<Lookup>);

/// A variable's value by its name.
pub type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Environment {
    /// The value of the variable `name`, if set.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Environment(..)")
    }
}

/// How a batch's model calls reach the providers (`--via`).
#[derive(Debug, Clone, Default)]
pub enum Via {
    /// Each call is its own request (`direct`).
    #[default]
    Direct,
    /// Calls are collected into the providers' Batch APIs (`batch-api`),
    /// at their batch price; see `provider::batch_api`.
    BatchApi(crate::provider::batch_api::Settings),
}

/// Tags and metadata given for a whole batch.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    /// Added to every task's `tags`.
    pub tags: serde_json::Map<String, serde_json::Value>,
    /// Added to every task's `metadata`.
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl Labels {
    /// Adds the batch's labels to a task's (its own win).
    pub fn apply(&self, task: &mut crate::tactic::Task) {
        for (key, value) in &self.tags {
            task.tags
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        for (key, value) in &self.metadata {
            task.metadata
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
    }
}

/// Problems shown before `… and N more`.
const MAX_PROBLEMS: usize = 50;

pub async fn run(options: Options) -> Result<Outcome> {
    // Held until the run ends: no other `lllm batch` writes this directory.
    let lock = directory::lock(&options.output).map_err(Error::Usage)?;
    let outcome = run_locked(options).await;
    if outcome.as_ref().is_err_and(|error| error.exit_code() == 2) {
        // Refused before anything was sent: leave no new directory behind.
        lock.discard();
    }
    outcome
}

/// The run, once the output directory is this process's.
async fn run_locked(options: Options) -> Result<Outcome> {
    let started = Instant::now();
    let (prepared, sessions) = Prepared::check(&options)?;
    let (shared, ran) = prepared.execute(&options, sessions, started).await?;
    prepared.conclude(&options, &shared, started, ran)
}

/// A batch checked and ready to run: every line pre-flighted, every tactic
/// built, nothing sent yet. Its three steps, in order: [`Prepared::check`],
/// [`Prepared::execute`], [`Prepared::conclude`].
struct Prepared {
    /// The TASKS file as it was when the run started.
    snapshot: snapshot::Snapshot,
    shard: Option<Shard>,
    /// What the output directory held already (`--resume`).
    previous: Previous,
    budget: Option<Arc<CostBudget>>,
    batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    tactics: HashMap<tactics::Key, Arc<crate::tactic::Tactic>>,
    reader: formats::LineReader,
    /// The default tactic written beside the results, when there is no `--tactic`.
    fallback: Option<PathBuf>,
    selector: Selector,
    plan: preflight::Plan,
    reporter: Arc<dyn progress::Reporter>,
    /// Scores finished tasks, when a tactic or a line has assertions.
    grader: Option<Arc<grade::Grader>>,
}

impl Prepared {
    /// Copies the TASKS file, settles the directory's shard, reads its
    /// results, builds the tactics and pre-flights every line; a file with
    /// problems is refused here (nothing was sent). Also gives the records
    /// file the run appends to.
    fn check(options: &Options) -> Result<(Prepared, output::SessionsFile)> {
        let snapshot = take_snapshot(options)?;
        let tasks_sha256 = snapshot.sha256().to_string();
        let recorded = directory::read_identity(&options.output).map_err(Error::Usage)?;
        let shard = directory::settle_shard(
            &options.output,
            &options.shard,
            recorded.as_ref(),
            &tasks_sha256,
        )
        .map_err(Error::Usage)?;
        let (previous, sessions) = previous_results(options)?;
        let done = |id: &str| finished_before(&previous, options.retry_errors, id);
        let budget = options
            .max_cost
            .map(|max| Arc::new(CostBudget::new(max, previous.spent.cost)));
        let batch_api = open_batch_api(options)?;
        let mut tactics = load_tactics(options, &budget, &batch_api)?;
        let reader = formats::LineReader::for_lines(
            &options.tasks_file,
            snapshot.lines(),
            options.input_format,
            &options.attachments,
        )
        .map_err(|error| cannot_read(options, error))?;
        let fallback = write_fallback_tactic(options)?;
        let selector = Selector::new(shard, options.limit);
        let tactic_roots = tactic_roots(options)?;
        let plan = preflight::run(
            preflight::Inputs {
                tasks_file: &options.tasks_file,
                tactic_roots: &tactic_roots,
                snapshot: &snapshot,
                reader: &reader,
                default_tactic: options.tactic.as_deref(),
                fallback_tactic: fallback.as_deref(),
                selector: selector.clone(),
                done: &done,
                repeat: options.repeat,
            },
            &mut tactics,
        )
        .map_err(|error| cannot_read(options, error))?;
        let reporter: Arc<dyn progress::Reporter> = match &options.reporter {
            Some(reporter) => reporter.clone(),
            None => Arc::from(progress::reporter(options.quiet, options.progress_interval)),
        };
        refuse_problems(options, &plan, reporter.as_ref())?;
        let scored = plan.line_assertions
            || tactics
                .all()
                .any(|(_, tactic)| !tactic.config.asserts.is_empty());
        let grader =
            scored.then(|| Arc::new(grade::Grader::new(tactics.judges(), &options.output)));
        let tactics = tactics
            .all()
            .map(|(path, tactic)| (path.clone(), tactic.clone()))
            .collect();
        // What the directory holds from now on (a `--resume` of another shard is refused).
        let identity = directory::Identity::new(&options.tasks_file, tasks_sha256, shard)
            .with_tactic(options.tactic.as_deref());
        if recorded.as_ref() != Some(&identity) {
            directory::write_identity(&options.output, &identity).map_err(|(path, source)| {
                Error::Usage(format!("cannot write `{}`: {source}", path.display()))
            })?;
        }
        let prepared = Prepared {
            snapshot,
            shard,
            previous,
            budget,
            batch_api,
            tactics,
            reader,
            fallback,
            selector,
            plan,
            reporter,
            grader,
        };
        Ok((prepared, sessions))
    }

    /// Starts the tactics, runs the selected tasks under one scheduler
    /// (watching for signals, showing progress), then stops everything it
    /// started. Gives the run's shared state and how reading the lines went.
    async fn execute(
        &self,
        options: &Options,
        sessions: output::SessionsFile,
        started: Instant,
    ) -> Result<(Arc<Shared>, std::io::Result<()>)> {
        let writer = self.start(options, sessions).await?;
        // Traced runs: one span for the batch, each task a trace linked to it.
        #[cfg(feature = "otel")]
        let batch_span = crate::telemetry::installed()
            .and_then(|telemetry| telemetry.batch_span(&batch_name(options)));
        #[cfg(feature = "otel")]
        let link = batch_span.as_ref().map(|span| span.link());
        #[cfg(not(feature = "otel"))]
        let link = None;
        let shared = Arc::new(self.shared(options, writer).with_trace_link(link));
        let collector = match &self.batch_api {
            Some(hub) => {
                let notes = self.reporter.clone();
                hub.set_notes(Arc::new(move |text: &str, warning: bool| {
                    if warning {
                        notes.note(text)
                    } else {
                        notes.event(text)
                    }
                }));
                shared.set_batch_api(hub.clone());
                Some(hub.start().await)
            }
            None => None,
        };
        let signals = tokio::spawn(scheduler::watch_signals(
            shared.clone(),
            options.grace,
            self.reporter.clone(),
        ));
        let all_tactics: Vec<Arc<crate::tactic::Tactic>> = self.tactics.values().cloned().collect();
        let ticker = tokio::spawn(tick(
            shared.clone(),
            self.reporter.clone(),
            self.plan.to_run,
            all_tactics.clone(),
        ));
        let done = |id: &str| finished_before(&self.previous, options.retry_errors, id);
        let ran = scheduler::run(
            scheduler::Run {
                tasks_file: &options.tasks_file,
                snapshot: &self.snapshot,
                reader: &self.reader,
                default_tactic: options.tactic.as_deref(),
                fallback_tactic: self.fallback.as_deref(),
                tactics: &self.tactics,
                model: options.model.as_deref(),
                plan: &self.plan,
                selector: self.selector.clone(),
                done: &done,
                concurrency: options.concurrency,
                labels: &options.labels,
                batch_api: self.batch_api.clone(),
                repeat: options.repeat,
            },
            shared.clone(),
        )
        .await;
        if let Some(hub) = &self.batch_api {
            let interrupted = shared.stop.borrow().reason() == Some(Reason::Interrupted);
            hub.finish(interrupted).await;
        }
        if let Some(collector) = collector {
            collector.abort();
        }
        self.shutdown().await;
        signals.abort();
        ticker.abort();
        self.reporter
            .finish(&shared.snapshot(self.plan.to_run, started, &all_tactics));
        #[cfg(feature = "otel")]
        if let Some(span) = batch_span {
            let totals = shared.totals();
            span.end(vec![
                opentelemetry::KeyValue::new("lllm.tasks", self.plan.to_run as i64),
                opentelemetry::KeyValue::new("lllm.output", options.output.display().to_string()),
                opentelemetry::KeyValue::new("lllm.succeeded", totals.success as i64),
                opentelemetry::KeyValue::new("lllm.failed", totals.failure as i64),
                opentelemetry::KeyValue::new("lllm.cost_usd", totals.cost),
            ]);
        }
        Ok((shared, ran))
    }

    /// Starts every tactic's MCP servers, learns the local servers' limits
    /// and opens the writer; the tactics are shut down again when one of
    /// those fails (nothing was sent: bad usage, exit 2).
    async fn start(
        &self,
        options: &Options,
        sessions: output::SessionsFile,
    ) -> Result<output::Writer> {
        // MCP servers start once per tactic, after every check and before the
        // first request; one that cannot start is bad input (nothing was sent).
        for tactic in self.all_tactics() {
            if let Err(error) = tactic.start().await {
                self.shutdown().await;
                return Err(error.into());
            }
        }
        // Local servers say how many requests they serve at once before the
        // first task starts, so that no more tasks start than they serve
        // (`scheduler`); a few seconds at most, once per provider.
        futures_util::future::join_all(self.tactics.values().map(|tactic| tactic.learn_limits()))
            .await;
        match output::Writer::open_indexed(&options.output, sessions, options.store.clone()) {
            Ok(writer) => Ok(writer),
            Err(source) => {
                self.shutdown().await;
                // Nothing was sent yet: bad usage (exit 2), not a failed run.
                Err(Error::Usage(format!(
                    "cannot write to `{}`: {source}",
                    options.output.display()
                )))
            }
        }
    }

    /// The state the scheduler's tasks share: the writer, the budget, the
    /// tactics' secrets to scrub and, for direct calls, the circuit breakers.
    fn shared(&self, options: &Options, writer: output::Writer) -> Shared {
        let mut shared = Shared::new(writer, self.budget.clone(), options.fail_fast)
            .scrubbing(self.all_tactics().map(|tactic| tactic.as_ref()));
        if let Some(grader) = &self.grader {
            shared = shared.with_grader(grader.clone());
        }
        let (Some(settings), Via::Direct) = (options.breaker, &options.via) else {
            return shared;
        };
        let told = self.reporter.clone();
        let events: crate::provider::breaker::Events =
            Arc::new(move |event: &crate::provider::breaker::Event| told.event(&event.text()));
        shared.with_breakers(Arc::new(crate::provider::breaker::Breakers::new(
            settings, events,
        )))
    }

    /// Shuts every tactic down (its MCP servers).
    async fn shutdown(&self) {
        for tactic in self.all_tactics() {
            tactic.shutdown().await;
        }
    }

    /// The batch's tactics and its judges.
    fn all_tactics(&self) -> impl Iterator<Item = &Arc<crate::tactic::Tactic>> {
        self.tactics
            .values()
            .chain(self.grader.iter().flat_map(|grader| grader.judges()))
    }

    /// After the run: finishes the files (a failed write stops there), then
    /// writes `summary.json` (and the OpenAI output), shows the summary and
    /// says how the batch ended.
    fn conclude(
        &self,
        options: &Options,
        shared: &Shared,
        started: Instant,
        ran: std::io::Result<()>,
    ) -> Result<Outcome> {
        if self.snapshot.changed() {
            crate::report::warn(&format!(
                "`{}` changed while the batch ran; the batch ran its lines as they were when it \
                 started; hint: pass `--resume` to run lines added since",
                options.tasks_file.display()
            ));
        }
        if let Err(failure) = shared.finish_writing() {
            // The run stopped there: what is on disk is whole (the writer cut
            // back what it could not finish), and every finished task that is
            // not is named.
            let lost = match failure.lost.describe() {
                Some(lost) => format!("; {lost}: `--resume` runs them again"),
                None => String::new(),
            };
            let source = std::io::Error::new(
                failure.source.kind(),
                format!(
                    "{}; the batch stopped, and what was written before is intact{lost}; hint: \
                     make room, then pass `--resume` to finish the run",
                    failure.source
                ),
            );
            return Err(Error::Write {
                path: options.output.join(failure.file).display().to_string(),
                source,
            });
        }
        ran.map_err(|error| cannot_read(options, error))?;

        let stopped = shared.stop.borrow().reason();
        let summary = write_summary(
            options,
            self.shard,
            &self.plan,
            &self.previous,
            shared,
            started,
            stopped,
        )?;
        if options.output_format == openai_output::OutputFormat::OpenAi {
            openai_output::write(&options.output).map_err(|source| Error::Write {
                path: options
                    .output
                    .join(openai_output::OUTPUT)
                    .display()
                    .to_string(),
                source,
            })?;
        }
        if !options.quiet {
            crate::output::stderr(&summary.table(&options.output.display().to_string()));
        }
        Ok(if stopped == Some(Reason::Interrupted) {
            Outcome::Interrupted
        } else if below_fail_under(options.fail_under, summary.scores.as_ref()) {
            Outcome::BelowFailUnder
        } else if summary.failure == 0 && summary.skipped == 0 && summary.not_run == 0 {
            Outcome::Success
        } else {
            Outcome::Failed
        })
    }
}

/// Whether `--fail-under` fails the run: its pass rate is below the
/// floor, or nothing was scored (a gate with nothing to gate is a
/// mistake, said here).
pub fn below_fail_under(
    fail_under: Option<f64>,
    scores: Option<&crate::eval::TallySummary>,
) -> bool {
    match (fail_under, scores) {
        (None, _) => false,
        (Some(_), Some(scores)) => scores.below_fail_under(),
        (Some(floor), None) => {
            crate::report::warn(&format!(
                "`--fail-under {floor}`: no task was scored (no tactic or task line has \
                 `asserts` or `expected`), so the pass rate is not known"
            ));
            true
        }
    }
}

/// Whether the task `id` needs no run: it succeeded before, or failed and
/// `--retry-errors` is not given.
fn finished_before(previous: &Previous, retry_errors: bool, id: &str) -> bool {
    previous.state(id).is_some_and(|state| match state {
        TaskState::Success => true,
        TaskState::Failure => !retry_errors,
        TaskState::Skipped => false,
    })
}

/// The tactics of the batch: `--tactic`'s now, the lines' as pre-flight
/// finds them; each under `--model`, `-O`, `--prices`, the budget and the
/// Batch APIs' hub.
fn load_tactics(
    options: &Options,
    budget: &Option<Arc<CostBudget>>,
    batch_api: &Option<Arc<crate::provider::batch_api::BatchApi>>,
) -> Result<tactics::Tactics> {
    let mut tactics = tactics::Tactics::new(
        options.model.clone(),
        options.model_args.clone(),
        options.prices.as_deref(),
        budget.clone(),
        options.registry.clone(),
        options.cache.clone(),
        batch_api.clone(),
    )?;
    tactics.set_sources(options.env.clone(), options.defaults.clone());
    if let Some(path) = &options.tactic {
        tactics.preload(path)?;
    }
    Ok(tactics)
}

/// The TASKS file is read once, now: what runs is what pre-flight checks.
fn take_snapshot(options: &Options) -> Result<snapshot::Snapshot> {
    snapshot::Snapshot::take(&options.tasks_file, &options.output).map_err(|error| match error {
        snapshot::SnapshotError::Read(error) => Error::Usage(format!(
            "cannot read `{}`: {error}",
            options.tasks_file.display()
        )),
        snapshot::SnapshotError::Write(error) => Error::Usage(format!(
            "cannot write to `{}`: {error}",
            options.output.display()
        )),
    })
}

/// `cannot read` the TASKS file: bad usage.
fn cannot_read(options: &Options, error: impl std::fmt::Display) -> Error {
    Error::Usage(format!(
        "cannot read `{}`: {error}",
        options.tasks_file.display()
    ))
}

/// The Batch APIs' hub under `--via batch-api` (its journal in the output
/// directory; `--resume` or `--retry-errors` continues the one there).
fn open_batch_api(options: &Options) -> Result<Option<Arc<crate::provider::batch_api::BatchApi>>> {
    match &options.via {
        Via::Direct => Ok(None),
        Via::BatchApi(settings) => Ok(Some(Arc::new(
            crate::provider::batch_api::BatchApi::open(
                &options.output,
                settings.clone(),
                options.resume || options.retry_errors,
            )
            .map_err(Error::Usage)?,
        ))),
    }
}

/// Lines that name a model and no tactic run on the default tactic,
/// written beside the results so `lllm replay --rerun` finds it; as every
/// output is (a fresh file, then a rename: a link there is replaced). Its
/// path, or `None` with `--tactic`.
fn write_fallback_tactic(options: &Options) -> Result<Option<PathBuf>> {
    if options.tactic.is_some() {
        return Ok(None);
    }
    let path = options.output.join(formats::DEFAULT_TACTIC_FILE);
    crate::file::atomic::write(&path, formats::DEFAULT_TACTIC.as_bytes())
        .map_err(|error| Error::Usage(format!("cannot write `{}`: {error}", path.display())))?;
    Ok(Some(path))
}

/// Refuses a TASKS file with problems (nothing was sent), unless
/// `--skip-invalid` records its bad lines as failed and none is fatal.
fn refuse_problems(
    options: &Options,
    plan: &preflight::Plan,
    reporter: &dyn progress::Reporter,
) -> Result<()> {
    if plan.problems.is_empty() {
        return Ok(());
    }
    let report = plan.report(&options.tasks_file, MAX_PROBLEMS);
    if !options.skip_invalid || plan.has_fatal() {
        let hint = if plan.has_fatal() {
            ""
        } else {
            "; hint: fix them, or pass `--skip-invalid` to record those tasks as failed and run the rest"
        };
        return Err(Error::Usage(format!(
            "`{}` has problems, nothing was sent{hint}\n{report}",
            options.tasks_file.display()
        )));
    }
    reporter.note(&format!(
        "{} will be recorded as failed (--skip-invalid):\n{report}",
        crate::words::count(plan.invalid.len() as u64, "bad line", "bad lines")
    ));
    Ok(())
}

/// What the output directory holds already, and the records file the run
/// appends to. Without `--resume` it must hold no results (two runs must not
/// mix silently); with it, a torn last line (or zstd frame) left by a kill
/// is cut off first.
fn previous_results(options: &Options) -> Result<(Previous, output::SessionsFile)> {
    refuse_special_files(&options.output)?;
    let (sessions, note) =
        output::SessionsFile::of_dir(&options.output, options.compress).map_err(Error::Usage)?;
    if let Some(note) = note {
        crate::report::warn(&note);
    }
    let results = options.output.join(output::RESULTS);
    let records = options.output.join(sessions.name);
    let resuming = options.resume || options.retry_errors;
    // A record on disk is a finished task, with or without its result line.
    let has_results = [&results, &records]
        .iter()
        .any(|path| std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0));
    if !resuming {
        if has_results {
            return Err(Error::Usage(format!(
                "`{}` already holds the results of a batch; hint: pass `--resume` to continue it \
                 (`--retry-errors` to re-run its failed tasks too), or choose another `-o` directory",
                options.output.display()
            )));
        }
        return Ok((Previous::default(), sessions));
    }
    cut_torn_ends(&options.output, &sessions)?;
    rebuild_missing_results(&options.output, &results, &records)?;
    // Nothing ran yet: a file that cannot be read is bad input (exit 2).
    let previous = output::read_previous(&results)
        .map_err(|error| Error::Usage(format!("cannot read `{}`: {error}", results.display())))?;
    if previous.unreadable > 0 {
        let mut lines: Vec<String> = previous
            .unreadable_lines
            .iter()
            .map(usize::to_string)
            .collect();
        if previous.unreadable > lines.len() {
            lines.push("…".into());
        }
        crate::report::warn(&format!(
            "`{}`: ignored {} not readable as results (line {})",
            results.display(),
            crate::words::count(previous.unreadable as u64, "line", "lines"),
            lines.join(", ")
        ));
    }
    Ok((previous, sessions))
}

async fn tick(
    shared: Arc<Shared>,
    reporter: Arc<dyn progress::Reporter>,
    total: u64,
    tactics: Vec<Arc<crate::tactic::Tactic>>,
) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(reporter.interval()).await;
        reporter.update(&shared.snapshot(total, started, &tactics));
    }
}

/// Refuses an output directory whose results or records are not regular
/// files: a pipe or a device in their place would block or never end a read.
fn refuse_special_files(directory: &Path) -> Result<()> {
    for name in [
        output::RESULTS,
        output::SESSIONS,
        output::SESSIONS_COMPRESSED,
    ] {
        let path = directory.join(name);
        if std::fs::metadata(&path).is_ok_and(|meta| !meta.is_file()) {
            return Err(Error::Usage(format!(
                "`{}` is not a regular file; hint: move it away, or choose another `-o` directory",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Cuts the torn last line (or zstd frame) a killed run left at the end of
/// the results and the records, with a warning; frames that do not parse
/// are bad input (nothing can be appended after them).
fn cut_torn_ends(directory: &Path, sessions: &output::SessionsFile) -> Result<()> {
    let write_error = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::Write { path, source }
    };
    for (name, form) in [
        (output::RESULTS, crate::jsonl::Form::Plain),
        (sessions.name, sessions.form),
    ] {
        let path = directory.join(name);
        let cut = crate::jsonl::repair(&path).map_err(|error| {
            if error.kind() == std::io::ErrorKind::InvalidData {
                // Frames that do not parse: nothing can be appended after them.
                Error::Usage(format!(
                    "cannot resume in `{}`: `{}`: {error}; hint: `lllm merge` copies what \
                     is readable into a new directory",
                    directory.display(),
                    path.display()
                ))
            } else if error.kind() == std::io::ErrorKind::InvalidInput {
                // A link at its name (`file::open_in_place`): bad input.
                Error::Usage(format!(
                    "cannot resume in `{}`: {error}",
                    directory.display()
                ))
            } else {
                write_error(&path)(error)
            }
        })?;
        if cut > 0 {
            let what = match form {
                crate::jsonl::Form::Plain => "line",
                crate::jsonl::Form::Compressed => "zstd frame",
            };
            crate::report::warn(&format!(
                "`{}`: cut a torn last {what} ({cut} bytes) left by an earlier run that was killed",
                path.display()
            ));
        }
    }
    Ok(())
}

/// A kill between a task's record and its result line: the record holds
/// the result, so the task is not run (and paid for) again. Rebuilds those
/// result lines, with a warning naming the tasks.
fn rebuild_missing_results(directory: &Path, results: &Path, records: &Path) -> Result<()> {
    let rebuilt = rebuild::missing_results(results, records).map_err(|error| {
        Error::Usage(format!(
            "cannot resume in `{}`: {error}",
            directory.display()
        ))
    })?;
    if rebuilt.count > 0 {
        let mut names: Vec<String> = rebuilt
            .named
            .iter()
            .map(|id| writer::shown_id(id))
            .collect();
        if rebuilt.count > names.len() as u64 {
            names.push("…".into());
        }
        crate::report::warn(&format!(
            "`{}`: rebuilt the result lines of {} from their records in `{}` (an earlier run \
             was stopped between the two); they are not run again: {}",
            results.display(),
            crate::words::count(rebuilt.count, "finished task", "finished tasks"),
            records.display(),
            names.join(", ")
        ));
    }
    Ok(())
}

/// Writes `summary.json` over the whole output directory. A run that started
/// on an empty one wrote every line there, once per id, so its own totals are
/// the directory's; after `--resume` the results file is read again (later
/// lines replace earlier ones of the same id).
fn write_summary(
    options: &Options,
    shard: Option<Shard>,
    plan: &preflight::Plan,
    previous: &Previous,
    shared: &Shared,
    started: Instant,
    stopped: Option<Reason>,
) -> Result<Summary> {
    let this_run = shared.totals();
    let (latest, spent, reasons, scores) = if previous.is_empty() {
        (this_run, this_run, shared.reasons(), shared.scores())
    } else {
        let results = options.output.join(output::RESULTS);
        // Without the results, the summary cannot be written.
        let everything = output::read_previous(&results).map_err(|source| Error::Write {
            path: options.output.join(output::SUMMARY).display().to_string(),
            source: std::io::Error::new(
                source.kind(),
                format!("cannot read `{}`: {source}", results.display()),
            ),
        })?;
        (
            everything.latest_totals,
            everything.spent,
            everything.reasons,
            everything.scores,
        )
    };
    let summary = Summary {
        shard: shard.map(|shard| shard.to_string()),
        stopped: stopped.map(|reason| reason.text().to_string()),
        interrupted: stopped == Some(Reason::Interrupted),
        scores: scores.summary(options.fail_under),
        ..Summary::new(
            plan.in_run,
            &latest,
            &spent,
            &this_run,
            started.elapsed().as_secs_f64(),
        )
        .with_reasons(&reasons)
    };
    let path = options.output.join(output::SUMMARY);
    let text = serde_json::to_string_pretty(&summary).unwrap_or_default() + "\n";
    crate::file::atomic::write(&path, text.as_bytes()).map_err(|source| Error::Write {
        path: path.display().to_string(),
        source,
    })?;
    Ok(summary)
}

/// The batch span's name: the tactic when there is one, else the tasks file.
#[cfg(feature = "otel")]
fn batch_name(options: &Options) -> String {
    match &options.tactic {
        Some(tactic) => tactic.display().to_string(),
        None => options.tasks_file.display().to_string(),
    }
}
