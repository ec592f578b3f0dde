//! `lllm batch`: the arguments, turned into `batch::Options`; the library does
//! the rest.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::numbers;
use crate::progress;
use lllm::batch::progress::Reporter;
use lllm::batch::{
    self,
    shard::{Requested, Shard},
};
use lllm::error::{Error, Outcome, Result};

#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// The tasks: one JSON object (`{"id", "task", "args", "tags", "metadata", "tactic",
    /// "model", "model_args", "messages", "attachments"}`) or JSON string per line; or
    /// OpenAI Batch API lines, or Anthropic Message Batches lines (see `--input-format`).
    pub tasks: PathBuf,
    /// The tactic of every line that does not name its own (without one, a line
    /// naming a model runs on the default tactic: one agent, that model, the
    /// line's messages, a plain-text reply).
    #[arg(long, short, value_name = "FILE")]
    pub tactic: Option<PathBuf>,
    /// The TASKS file's format: `lllm`, `openai` (Batch API lines: `custom_id`,
    /// `method`, `url`, `body`) or `anthropic` (Message Batches: `custom_id`,
    /// `params`); default: told by its first line.
    #[arg(long, value_name = "FORMAT", value_parser = batch::formats::InputFormat::from_name)]
    pub input_format: Option<batch::formats::InputFormat>,
    /// Also write the OpenAI Batch API's output files: `openai` writes
    /// `openai_output.jsonl` (succeeded tasks) and `openai_errors.jsonl` (the
    /// others) in the output directory, each task once, in its final state.
    #[arg(long, value_name = "FORMAT", default_value = "lllm", value_parser = batch::openai_output::OutputFormat::from_name)]
    pub output_format: batch::openai_output::OutputFormat,
    /// The output directory: `results.jsonl`, `sessions.jsonl` (or `sessions.jsonl.zst`), `summary.json`.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub compress: crate::nouns::CompressArg,
    /// Tasks running at once [default: the config file's `concurrency`, else
    /// 16; with `--via batch-api`: 10000, so that a provider batch holds a
    /// call of every task].
    #[arg(long, short = 'j', env = "LLLM_CONCURRENCY", value_parser = numbers::concurrency, allow_negative_numbers = true)]
    pub concurrency: Option<usize>,
    /// How model calls are sent: `direct` (each call its own request) or
    /// `batch-api` (collected into the providers' Batch APIs, OpenAI's and
    /// Anthropic's, at half price: every round submits the next call of
    /// every running task; the journal `batch-api.jsonl` lets `--resume`
    /// pick up batches in flight).
    #[arg(long, value_enum, default_value_t = ViaArg::Direct)]
    pub via: ViaArg,
    /// With `--via batch-api`: seconds between the first two retrievals of a
    /// provider batch (the first is right after its creation); the wait
    /// doubles up to `--poll-max`.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = numbers::poll, allow_negative_numbers = true)]
    pub poll_interval: f64,
    /// With `--via batch-api`: the longest wait between two retrievals.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0, value_parser = numbers::poll, allow_negative_numbers = true)]
    pub poll_max: f64,
    /// With `--via batch-api`: seconds calls wait for the other running
    /// tasks' calls before they are submitted anyway (a task busy with a
    /// long tool joins the next round).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = numbers::gather_window, allow_negative_numbers = true)]
    pub gather_window: f64,
    /// With `--via batch-api`: at Ctrl-C, cancel the provider batches in
    /// flight (by default they keep running and `--resume` picks them up).
    #[arg(long)]
    pub cancel_on_interrupt: bool,
    /// Continue the run in the output directory: skip tasks that already have a
    /// result (success or failure; a record whose result line a kill left
    /// unwritten gets it back from the record); run the rest.
    #[arg(long)]
    pub resume: bool,
    /// Like `--resume`, and run the failed tasks again too.
    #[arg(long)]
    pub retry_errors: bool,
    /// At the first failed task, cancel the running ones and skip the rest.
    #[arg(long)]
    pub fail_fast: bool,
    /// Spend at most USD: a call is sent only when its worst case (its
    /// `max_tokens` of output, its request's size as input) fits in what is
    /// left; the tasks left are recorded as skipped. Needs a price and a reply
    /// bound for every model.
    #[arg(long, value_name = "USD", value_parser = numbers::max_cost, allow_negative_numbers = true)]
    pub max_cost: Option<f64>,
    /// Exit with code 3 when the pass rate of the scored tasks (those with
    /// `asserts` or `expected`, docs/evals.md) is below RATE, from 0 to 1
    /// (a CI gate; with nothing scored, too).
    #[arg(long, value_name = "RATE", value_parser = numbers::fail_under, allow_negative_numbers = true)]
    pub fail_under: Option<f64>,
    /// Run every task line N times, as `ID#1` … `ID#N` (each result line
    /// has `"repeat_of": "ID"`); summary.json's `scores.spread` says how
    /// each task's runs went.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = numbers::repeat)]
    pub repeat: u32,
    /// Run only the first N tasks (of the shard).
    #[arg(long, short = 'n', value_name = "N", value_parser = numbers::limit, allow_negative_numbers = true)]
    pub limit: Option<u64>,
    /// Run the K-th of N stable partitions of the task ids (1-based: `1/4` … `4/4`).
    #[arg(long, value_name = "K/N", conflicts_with = "shards")]
    pub shard: Option<String>,
    /// Split into N shards, this one's place taken from the job array: Slurm's
    /// `SLURM_ARRAY_TASK_ID` within `SLURM_ARRAY_TASK_MIN`/`_STEP`/`_COUNT`
    /// (any evenly spaced array of N tasks), or Kubernetes' `JOB_COMPLETION_INDEX`.
    #[arg(long, value_name = "N", value_parser = numbers::shards, allow_negative_numbers = true)]
    pub shards: Option<u64>,
    /// Let task lines' attachments come from DIR too (repeatable); without
    /// it, a line's files must be inside the TASKS file's directory.
    #[arg(long = "attachments-dir", value_name = "DIR")]
    pub attachments_dirs: Vec<PathBuf>,
    /// Let task lines' `tactic` name files in DIR too (repeatable); without
    /// it, a line's tactic must be inside the TASKS file's directory or
    /// `--tactic`'s (a tactic runs its tools' programs).
    #[arg(long = "tactics-dir", value_name = "DIR")]
    pub tactics_dirs: Vec<PathBuf>,
    /// Record bad task lines as failed and run the others (duplicate ids stay an error).
    #[arg(long)]
    pub skip_invalid: bool,
    /// Use this model (`provider/model`) for every agent of every tactic.
    /// Without it, an agent whose tactic names no model uses `LLLM_MODEL`,
    /// else the config file's `model`.
    #[arg(long, short)]
    pub model: Option<String>,
    /// A model argument over the tactics' and the task lines' (repeatable):
    /// `KEY=VALUE` for every agent, `AGENT.KEY=VALUE` for one; the value is
    /// YAML (`max_tokens=256`, `stop=["\n"]`, `KEY=null` takes the tactic's away).
    #[arg(long = "model-arg", short = 'O', value_name = "KEY=VALUE")]
    pub model_args: Vec<String>,
    /// Prices over the bundled table (our format or LiteLLM's JSON)
    /// [default: the config file's `prices`].
    #[arg(long, value_name = "FILE", env = "LLLM_PRICES")]
    pub prices: Option<PathBuf>,
    /// Seconds between progress lines when stderr is not a terminal.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = numbers::progress_interval, allow_negative_numbers = true)]
    pub progress_interval: f64,
    /// Seconds a provider may stay unreachable before the batch gives up on
    /// it. After 5 connection failures in a row (refused, reset, timed out)
    /// its tasks pause and one call probes it, after 1 s, then twice as
    /// long each time, up to 30 s; any reply resumes them. Past this, its
    /// waiting calls fail and no more tasks start (`--resume` runs them).
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0, value_parser = numbers::max_outage, allow_negative_numbers = true)]
    pub max_outage: f64,
    /// Seconds running tasks get to finish after Ctrl-C.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = numbers::grace, allow_negative_numbers = true)]
    pub grace: f64,
    /// No progress display, summary table or warning: only errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Threads that drive the tasks. One (the default) costs the least CPU
    /// per LLM call and keeps up with thousands of calls a second; more help
    /// only when the runner itself is the bottleneck (very large prompts or
    /// records at a high call rate).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = numbers::threads, allow_negative_numbers = true)]
    pub threads: usize,
    #[command(flatten)]
    pub store: crate::store::StoreArgs,
}

/// `--via`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViaArg {
    /// Each call is its own request.
    Direct,
    /// Calls go through the providers' Batch APIs.
    BatchApi,
}

/// `-j` when not given.
const DEFAULT_CONCURRENCY: usize = 16;
/// `-j` with `--via batch-api` when not given: a round submits a call of
/// every running task, so they should be many.
const BATCH_API_CONCURRENCY: usize = 10_000;

/// Open files a batch holds whatever its `-j`: the standard streams, the
/// task file, results, records and lock, the session store and the cache
/// (SQLite files and journals), the runtime's poller; about 16 measured,
/// with room for what a tactic opens once (MCP servers' pipes).
const FILES_BASE: u64 = 64;
/// Open files a running task may hold at once: its connection to the
/// provider and a command tool's pipes.
const FILES_PER_TASK: u64 = 4;

/// `-j` as the open-file limit allows: the limit is raised (up to the hard
/// limit, as `ulimit -S -n` could) to what `concurrency` tasks need; when
/// even that is too low, fewer tasks run at once, with one warning, so no
/// connection fails for lack of a descriptor (issue 26).
fn fit_open_files(concurrency: usize) -> usize {
    let wanted = FILES_BASE.saturating_add(FILES_PER_TASK.saturating_mul(concurrency as u64));
    let Some(limit) = lllm::fds::raise(wanted) else {
        return concurrency;
    };
    if limit >= wanted {
        return concurrency;
    }
    let fit = (limit.saturating_sub(FILES_BASE) / FILES_PER_TASK).max(1) as usize;
    lllm::report::warn(&format!(
        "`-j {concurrency}` needs about {wanted} open files and this process may have {limit} \
         (`ulimit -n`); running {} at once; hint: raise the limit (`ulimit -n {wanted}`) or \
         lower -j",
        lllm::words::count(fit as u64, "task", "tasks")
    ));
    fit
}

pub async fn run(args: BatchArgs, registry: lllm::Registry) -> Result<Outcome> {
    if args.via == ViaArg::Direct && args.cancel_on_interrupt {
        return Err(Error::Usage(
            "`--cancel-on-interrupt` needs `--via batch-api`".into(),
        ));
    }
    let via = match args.via {
        ViaArg::Direct => batch::Via::Direct,
        ViaArg::BatchApi => batch::Via::BatchApi(lllm::provider::batch_api::Settings {
            // All checked against their ranges (`numbers`) when parsed.
            poll_interval: Duration::from_secs_f64(args.poll_interval),
            poll_max: Duration::from_secs_f64(args.poll_max),
            gather_window: Duration::from_secs_f64(args.gather_window),
            cancel_on_interrupt: args.cancel_on_interrupt,
        }),
    };
    let settings = crate::settings::current();
    let concurrency = match args.via {
        ViaArg::Direct => fit_open_files(
            args.concurrency
                .unwrap_or(settings.file.concurrency.unwrap_or(DEFAULT_CONCURRENCY)),
        ),
        // A round's calls go out in a few requests, not a connection each.
        ViaArg::BatchApi => args.concurrency.unwrap_or(BATCH_API_CONCURRENCY),
    };
    let shard = match (&args.shard, args.shards) {
        (Some(text), _) => Requested::Given(Shard::parse(text).map_err(Error::Usage)?),
        (None, Some(count)) => {
            Shard::from_env(count, &crate::settings::var).map_err(Error::Usage)?
        }
        (None, None) => Requested::Whole,
    };
    let mut attachments = lllm::dialog::AttachmentScope::default();
    for directory in &args.attachments_dirs {
        attachments = attachments.allow_directory(directory).map_err(|error| {
            Error::Usage(format!(
                "`--attachments-dir {}`: {error}",
                lllm::suggest::printable(&directory.to_string_lossy())
            ))
        })?;
    }
    let cache = args.store.cache_source();
    // Warnings said once per store (a model without a price) are remembered
    // there; `--no-store` remembers nothing.
    let store = args.store.dir();
    lllm::report::remember_in(store.as_deref());
    let options = batch::Options {
        tasks_file: args.tasks,
        tactic: args.tactic,
        input_format: args.input_format,
        output_format: args.output_format,
        output: args.output,
        compress: settings.compress(args.compress.compress),
        concurrency,
        resume: args.resume,
        retry_errors: args.retry_errors,
        fail_fast: args.fail_fast,
        max_cost: args.max_cost,
        limit: args.limit,
        shard,
        skip_invalid: args.skip_invalid,
        model: args.model,
        model_args: crate::run::model_args(&args.model_args)?,
        prices: settings.prices(args.prices.as_deref()),
        quiet: args.quiet,
        // Both checked against their ranges (`numbers`) when parsed.
        progress_interval: Duration::from_secs_f64(args.progress_interval),
        reporter: (!args.quiet && std::io::stderr().is_terminal())
            .then(|| Arc::new(progress::Bar::new()) as Arc<dyn Reporter>),
        registry,
        grace: Duration::from_secs_f64(args.grace),
        labels: batch::Labels {
            tags: crate::store::pairs("--tag", &args.store.tags)?,
            metadata: crate::store::pairs("--meta", &args.store.metadata)?,
        },
        store,
        cache: Some(cache.clone()),
        via,
        env: Some(crate::settings::batch_environment()),
        defaults: Some(Arc::new(settings.defaults())),
        attachments: settings.refuse_secrets(attachments),
        tactic_dirs: args.tactics_dirs,
        breaker: Some(lllm::provider::breaker::Settings {
            // Checked against its range (`numbers`) when parsed.
            give_up_after: Duration::from_secs_f64(args.max_outage),
            ..Default::default()
        }),
        fail_under: args.fail_under,
        repeat: args.repeat,
    };
    let outcome = batch::run(options).await;
    // Replies the cache has not written yet are kept before the process ends.
    cache.flush();
    outcome
}
