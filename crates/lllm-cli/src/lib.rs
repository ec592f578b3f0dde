//! The `lllm` command line: arguments (clap), the dispatch to each command,
//! errors printed once and the exit codes of docs/formats.md ("7. Exit codes").
//!
//! Each command lives in its own file and returns an `Outcome`; [`main`] maps
//! it to the exit code.

mod batch;
mod cache;
mod compare;
mod config_command;
mod envfile;
mod eval;
mod generate;
mod help;
mod inspect;
mod keys;
mod logs;
mod merge;
mod models;
mod nouns;
mod numbers;
mod progress;
mod report;
mod run;
mod run_input;
mod serve;
mod settings;
mod store;
mod table;
mod verbose;

use std::path::PathBuf;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lllm::Registry;

use lllm::error::{Outcome, Result};

#[derive(Debug, Parser)]
#[command(
    name = "lllm",
    version,
    about = "Run LLM agents from YAML tactic configs",
    after_help = help::TOP,
    after_long_help = help::TOP_LONG
)]
pub struct Cli {
    /// Trace requests and replies on stderr (`-vv` bodies, `-vvv` all); secrets redacted.
    ///
    /// `-v`: one line per request sent, per reply or failure received, per
    /// retry wait and per wait for the quota; `-vv`: the bodies and tool runs too; `-vvv`: everything
    /// lllm says. A filter in `RUST_LOG` (or `LLLM_LOG`, `EnvFilter` syntax:
    /// `lllm=debug`) wins when set; other crates' events show only when it
    /// names them.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub settings: settings::SettingsArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task through a tactic; the delivery goes to stdout.
    #[command(after_long_help = help::RUN)]
    Run(RunArgs),
    /// Show a tactic's contract (upstream's `TacticInfo`) and its agents, models, tools and prompts.
    #[command(after_long_help = help::INSPECT)]
    Inspect(inspect::InspectArgs),
    /// Run many tasks (a JSONL file) in parallel: resumable, budgeted, sharded.
    #[command(after_long_help = help::BATCH)]
    Batch(batch::BatchArgs),
    /// Show a recorded session: dialog tree, calls, invokes, tools, messages.
    #[command(after_long_help = help::REPLAY)]
    Replay(ReplayArgs),
    /// Serve tactics over HTTP: upstream lllm-core's routes, SSE events, an
    /// OpenAI-compatible face (docs/serve.md).
    #[command(after_long_help = help::SERVE)]
    Serve(serve::ServeArgs),
    /// Merge the output directories of a batch's shards into one; nothing is sent.
    Merge(merge::MergeArgs),
    /// Write a self-contained HTML report and a CSV of a batch output directory.
    Report(report::ReportArgs),
    /// Compare two batch output directories per task id: states, deliveries, cost, latency.
    Compare(compare::CompareArgs),
    /// Score a batch output again with its tasks' assertions (or `--asserts
    /// FILE`'s) without running them; only judges send anything.
    #[command(after_long_help = help::EVAL)]
    Eval(eval::EvalArgs),
    /// Sessions of earlier runs, from the session store: list, filter, show, cost.
    Logs(logs::LogsArgs),
    /// The response cache (`--cache`): what it holds and saved, or empty it.
    Cache(cache::CacheArgs),
    /// Known models with their prices, context windows and tokenizers; or
    /// (`--check TACTIC`) the models a tactic uses that have no price.
    Models(models::ModelsArgs),
    /// API keys in a private file (`keys.json` beside the config file, mode
    /// 0600); a variable in the environment or an env file wins over it.
    #[command(after_long_help = "Examples:
  lllm keys set openai                 (asks for the key; or pipe it: printf %s \"$KEY\" | lllm keys set openai)
  lllm keys list                       (names and where each is read from; never values)
  lllm keys remove OPENAI_API_KEY
")]
    Keys(keys::KeysArgs),
    /// The user config file: where it is, and the settings in effect with
    /// where each comes from.
    Config(config_command::ConfigArgs),
    /// Print a shell's completion script for lllm (bash, zsh, fish, elvish, powershell).
    #[command(after_long_help = "Examples:
  lllm completions bash > ~/.local/share/bash-completion/completions/lllm
  lllm completions zsh > ~/.zfunc/_lllm        (with fpath+=~/.zfunc before compinit)
  lllm completions fish > ~/.config/fish/completions/lllm.fish
  lllm completions powershell >> $PROFILE
")]
    Completions(generate::CompletionsArgs),
    /// Print lllm's man page (roff), or write one page per command with `--out DIR`.
    #[command(after_long_help = "Examples:
  lllm man | man -l -
  lllm man --out ~/.local/share/man/man1 && man lllm-batch
")]
    Man(generate::ManArgs),
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A session record (`.json` or `.json.zst`) or a `sessions.jsonl` file (or `sessions.jsonl.zst`).
    pub record: PathBuf,
    /// In a `.jsonl` file: the session id, or the task id (its latest session),
    /// of the session to show.
    #[arg(long)]
    pub id: Option<String>,
    /// Print the normalized record as JSON instead of the rendering.
    #[arg(long, conflicts_with = "rerun")]
    pub json: bool,
    /// Re-execute the tactic offline, answering every model call from the
    /// record; stop at the first request that differs from the recorded one.
    #[arg(long)]
    pub rerun: bool,
    /// With `--rerun`: the (possibly edited) tactic to run instead of the recorded path.
    #[arg(long, short, value_name = "FILE", requires = "rerun")]
    pub tactic: Option<PathBuf>,
    /// With `--rerun`: use this model (`provider/model`) for every agent,
    /// instead of the `--model` the run was given (or the tactic's models).
    #[arg(long, short, requires = "rerun")]
    pub model: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The tactic YAML file (or `-t FILE`; then the first argument is the task).
    #[arg(value_name = "TACTIC", required_unless_present = "tactic_option")]
    pub tactic_argument: Option<PathBuf>,
    /// The task text, as `--task` takes it. With no task given at all, a
    /// piped stdin is the task.
    #[arg(value_name = "TASK")]
    pub task_argument: Option<String>,
    /// The tactic YAML file, as `batch` and `replay --rerun` take it.
    #[arg(long = "tactic", short = 't', value_name = "FILE")]
    pub tactic_option: Option<PathBuf>,
    /// The tactic (from `TACTIC` or `-t`; set by `nouns::resolve_run`).
    #[arg(skip)]
    pub tactic: PathBuf,
    /// The task given as an argument (set by `nouns::resolve_run`).
    #[arg(skip)]
    pub task_text: Option<String>,
    /// The task text (`-` reads it from stdin).
    #[arg(long, conflicts_with = "task_file")]
    pub task: Option<String>,
    /// Read the task text from this file.
    #[arg(long)]
    pub task_file: Option<PathBuf>,
    /// A template argument, `key=value` (repeatable); templates see it as `key` and `args.key`.
    /// Without a task, the arguments are the task (its input, as a JSON object).
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// The task's input as JSON, as a tactic's `input_schema` describes it:
    /// an object is its arguments (each a template argument, with its JSON
    /// type), a string its text.
    #[arg(long, value_name = "JSON", conflicts_with_all = ["task", "task_file", "vars"])]
    pub input: Option<String>,
    /// Send a file with the task (repeatable): an image (PNG, JPEG, GIF, WebP,
    /// told by its bytes) goes out as an image part, a UTF-8 text file as text;
    /// an `http(s)` URL or a base64 `data:` URL is taken too.
    #[arg(long = "attach", value_name = "FILE")]
    pub attach: Vec<String>,
    /// Use this model (`provider/model`) for every agent, over the tactic's.
    /// Without it, an agent whose tactic names no model uses `LLLM_MODEL`,
    /// else the config file's `model`.
    #[arg(long, short)]
    pub model: Option<String>,
    /// A model argument over the tactic's (repeatable): `KEY=VALUE` for every
    /// agent, `AGENT.KEY=VALUE` for one; the value is YAML
    /// (`max_tokens=256`, `stop=["\n"]`, `KEY=null` takes the tactic's away).
    #[arg(long = "model-arg", short = 'O', value_name = "KEY=VALUE")]
    pub model_args: Vec<String>,
    /// Prices to use over the bundled table: our format or LiteLLM's
    /// `model_prices_and_context_window.json` [default: the config file's `prices`].
    #[arg(long, value_name = "FILE", env = "LLLM_PRICES")]
    pub prices: Option<PathBuf>,
    /// Where to write the session record (default: `<session id>.json` in the
    /// config file's `records` directory, else in `sessions/` of the session
    /// store, where `lllm logs` finds it from any directory). A FILE ending
    /// in `.zst` (`run.json.zst`) is written zstd-compressed.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Do not write a session record.
    #[arg(long, conflicts_with = "record")]
    pub no_record: bool,
    /// Print the resolved tactic as JSON and exit.
    #[arg(long)]
    pub show_config: bool,
    /// Render the first turns and print the exact request bodies (endpoint
    /// and JSON, no headers) without sending anything; no record is written.
    #[arg(long, conflicts_with_all = ["show_config", "stream"])]
    pub dry_run: bool,
    /// On a terminal, print the final turn's text as it arrives, marking
    /// attempts that were discarded (the delivery follows if a `result`
    /// template makes it different). Into a pipe or file, stdout gets the
    /// delivery once, at the end.
    #[arg(long)]
    pub stream: bool,
    /// Print the run's events on stdout as JSON lines, one per event as it
    /// happens (text, model calls, tool calls and results, repairs,
    /// retries, waits, sub-tactics), the last one its `result` or `error`;
    /// nothing else goes to stdout (docs/events.md).
    #[arg(long, conflicts_with_all = ["show_config", "dry_run", "stream", "json"])]
    pub events: bool,
    /// Print only the delivery: no summary line, warning or notice on
    /// stderr, only errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print one JSON object instead of the delivery: `delivery`, `state`,
    /// `error`, `tokens`, `cost`, `calls`, `retries`, `cache_hits`, `session_id`,
    /// `record`, `latency_ms` (no summary line on stderr but a failure's).
    #[arg(long, conflicts_with_all = ["show_config", "dry_run", "stream"])]
    pub json: bool,
    #[command(flatten)]
    pub store: store::StoreArgs,
}

/// The OpenTelemetry exporter the `OTEL_*` variables ask for, installed:
/// every finished run goes to it, and it sends what is queued when
/// dropped. A variable asking for what lllm cannot do is bad usage.
pub fn start_telemetry() -> Result<Option<lllm::telemetry::Installed>> {
    let telemetry = lllm::telemetry::Telemetry::from_env().map_err(lllm::error::Error::Usage)?;
    Ok(telemetry.map(lllm::telemetry::Telemetry::install))
}

/// Runs the parsed command line with the extensions of `registry`.
pub fn execute(cli: Cli, registry: &Registry) -> Result<Outcome> {
    verbose::init(cli.verbose).map_err(lllm::error::Error::Usage)?;
    // `-q` is "only errors" in every command that has it: no warning and no
    // notice from here on, the settings' own included (docs/run.md, "Flags").
    lllm::report::set_quiet(quiet(&cli.command));
    // Files only: no runtime, no registry.
    match cli.command {
        Command::Completions(args) => return generate::completions(args),
        Command::Man(args) => return generate::man(args),
        _ => {}
    }
    // The user's settings (env files, keys file, config file), read before
    // anything runs: a bad file is exit 2 with nothing done.
    let settings = settings::Settings::load(&cli.settings)?;
    settings::install(settings);
    // Files only, but its `--compress` defaults to the config file's.
    if let Command::Merge(args) = cli.command {
        return merge::run(args);
    }
    // A batch is driven by one thread unless asked otherwise: its tasks spend
    // their time waiting on the network, and one thread doing all their work
    // in turn costs a third less CPU per call than several threads handing
    // tasks to each other (no wake-ups across cores, no stealing, warm
    // caches). Pre-flight (rayon) and the output writer have threads of their
    // own either way.
    let threads = match &cli.command {
        // At least 1 (`numbers::THREADS`), checked when parsed.
        Command::Batch(args) => Some(args.threads),
        _ => None,
    };
    let runtime = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    }
    .map_err(|error| {
        lllm::error::Error::Usage(format!("cannot start the async runtime: {error}"))
    })?;
    // SIGXFSZ handled (by a handler that does nothing): a write past the
    // process's file size limit (`ulimit -f`) fails with EFBIG, as on a full
    // disk, and a batch stops with its output whole and one error line
    // (issue 26), where the signal's default action killed lllm mid-write.
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let _entered = runtime.enter();
        let _ = signal(SignalKind::from_raw(nix::libc::SIGXFSZ));
    }
    // OpenTelemetry (docs/telemetry.md): on when the standard variables
    // name an endpoint; what is queued goes out when the command ends.
    let _telemetry = match &cli.command {
        Command::Run(_) | Command::Batch(_) | Command::Serve(_) => start_telemetry()?,
        _ => None,
    };
    match cli.command {
        Command::Run(mut args) => {
            nouns::resolve_run(&mut args)?;
            runtime.block_on(run::run(args, registry))
        }
        // With several threads, on a worker rather than the main thread: the
        // scheduler and its tasks wake each other for every task, and a wake
        // across to the main thread is a context switch.
        Command::Batch(args) => runtime.block_on(async {
            tokio::spawn(batch::run(args, registry.clone()))
                .await
                .unwrap_or_else(|error| {
                    Err(lllm::error::Error::Usage(format!(
                        "the batch stopped: {error}"
                    )))
                })
        }),
        Command::Serve(args) => runtime.block_on(serve::run(args, registry)),
        Command::Replay(args) => replay(args, &runtime, registry),
        Command::Merge(args) => merge::run(args),
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Eval(args) => runtime.block_on(eval::run(args, registry.clone())),
        Command::Logs(args) => logs::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Inspect(args) => {
            // Building a tactic's providers wants a runtime to be current.
            let _entered = runtime.enter();
            inspect::run(args, registry)
        }
        Command::Models(args) => {
            // Building a tactic's providers wants a runtime to be current.
            let _entered = runtime.enter();
            models::run(args, registry)
        }
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(args),
        Command::Keys(args) => keys::run(args, &settings::current()),
        Command::Config(args) => config_command::run(args, &settings::current()),
    }
}

/// Whether the command was given `-q`.
fn quiet(command: &Command) -> bool {
    match command {
        Command::Run(args) => args.quiet,
        Command::Batch(args) => args.quiet,
        Command::Merge(args) => args.quiet,
        Command::Eval(args) => args.quiet,
        Command::Serve(args) => args.quiet,
        Command::Logs(args) => args.quiet(),
        _ => false,
    }
}

fn replay(
    args: ReplayArgs,
    runtime: &tokio::runtime::Runtime,
    registry: &Registry,
) -> Result<Outcome> {
    let loaded = lllm::replay::load_choosing(&args.record, args.id.as_deref())?;
    for note in &loaded.notes {
        lllm::output::stderr_line(&format!("note: {note}"));
    }
    let record = loaded.record;
    if args.rerun {
        return runtime.block_on(lllm::replay::rerun_with(
            &record,
            args.tactic.as_deref(),
            args.model.as_deref(),
            &settings::current().defaults(),
            registry,
        ));
    }
    let text = if args.json {
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        lllm::redact::json_controls(&text).into_owned() + "\n"
    } else {
        lllm::replay::render(&record)
    };
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}

/// The stock `lllm` command line: [`main_with`] the built-ins only.
pub fn main() -> ExitCode {
    main_with(Registry::new())
}

/// The `lllm` command line on this process's arguments, with the extensions
/// of `registry` (programmed tactics, tools, parsers… a tactic names): parses
/// the arguments, runs the command, prints an error once (one `error:` line
/// per line of it, control characters escaped) and returns the exit code. A
/// program that registers its own tactics is a full `lllm` with one line:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     lllm_cli::main_with(lllm::Registry::new())
/// }
/// ```
pub fn main_with(registry: Registry) -> ExitCode {
    run_with(std::env::args_os(), registry)
}

/// [`main_with`] on the given arguments (the first is the program's name).
pub fn run_with(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    registry: Registry,
) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(error) => {
            // clap prints help and version to stdout (exit 0), usage errors to
            // stderr (exit 2).
            let _ = error.print();
            let words: Vec<String> = args
                .iter()
                .map(|argument| argument.to_string_lossy().into_owned())
                .collect();
            if let Some(hint) = nouns::hint(&error, &words) {
                lllm::output::stderr_line(hint);
            }
            return ExitCode::from(error.exit_code().clamp(0, 255) as u8);
        }
    };
    let code = match execute(cli, &registry) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            for line in error.to_string().lines() {
                lllm::output::stderr_line(&format!("error: {line}"));
            }
            error.exit_code()
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
