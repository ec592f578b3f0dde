//! `lllm logs`: the session store read back. A listing of the newest
//! sessions (filtered), `show` (one record, rendered as `lllm replay` does),
//! `cost` (totals grouped), `reindex` (the index rebuilt from the records).
//! The queries are `lllm::store`'s; this file parses flags and prints.

use std::path::PathBuf;

use lllm::error::{Error, Outcome, Result};
use lllm::redact::echo;
use lllm::store::{Filter, GroupBy, Store, StoreError};

use crate::table::{Align, Table};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LogsArgs {
    #[command(subcommand)]
    pub command: Option<LogsCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum LogsCommand {
    /// Show one session (a session id or a unique prefix of one), as `lllm replay` does.
    Show(ShowArgs),
    /// Cost totals of the sessions that pass the filters, grouped.
    Cost(CostArgs),
    /// Rebuild the index from the record files it names (and those under `--from`).
    Reindex(ReindexArgs),
    /// Send the sessions that pass the filters as OpenTelemetry traces,
    /// with their original timestamps, to the endpoint the `OTEL_*`
    /// variables name (docs/telemetry.md).
    Export(ExportArgs),
}

/// Where the store is; every `logs` command takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct Place {
    /// The session store (default: `$LLLM_HOME`, else `$XDG_DATA_HOME/lllm`,
    /// else `~/.local/share/lllm`).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
}

/// Which sessions: every filter given must hold.
#[derive(Debug, Clone, clap::Args)]
pub struct FilterArgs {
    /// Sessions of this tactic (its name).
    #[arg(long)]
    pub tactic: Option<String>,
    /// `success`, `failure` or `skipped` (a batch task cancelled or stopped by its budget).
    #[arg(long, value_parser = ["success", "failure", "skipped"])]
    pub state: Option<String>,
    /// Sessions with this tag, `key=value` (repeatable: all must hold).
    #[arg(long = "tag", value_name = "KEY=VALUE")]
    pub tags: Vec<String>,
    /// Sessions one of whose calls used this model (`provider/model`).
    #[arg(long, short)]
    pub model: Option<String>,
    /// Started at or after: RFC 3339 (`2026-11-20T08:00:00Z`), a date
    /// (`2026-11-20`) or an age (`30m`, `2h`, `7d`, `2w`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Started before (same forms as `--since`).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Words in the task or the delivery (all must appear; `"a phrase"` in quotes).
    // `-s`, not `-q`: `-q` is `--quiet` in every command (docs/run.md, "Flags").
    #[arg(
        long = "search",
        short = 's',
        visible_alias = "query",
        value_name = "TEXT"
    )]
    pub text: Option<String>,
    /// Sessions of this trace (32 hex digits: a `traceparent`'s second field).
    #[arg(long = "trace", value_name = "TRACE_ID")]
    pub trace: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub place: Place,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// How many sessions, newest first.
    #[arg(short = 'n', long = "count", default_value_t = 20)]
    pub count: usize,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A session id, or a unique prefix of one.
    pub id: String,
    #[command(flatten)]
    pub place: Place,
    /// Print the record as JSON instead of the rendering.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CostArgs {
    /// Group by `tactic`, `model`, `tag:KEY` or `day`.
    #[arg(long, default_value = "tactic")]
    pub by: String,
    #[command(flatten)]
    pub place: Place,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// One JSON object per line (the groups, then the total).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReindexArgs {
    /// Directories to search for record files too (`sessions.jsonl`, `sessions.jsonl.zst`, session `.json` files).
    #[arg(long, value_name = "DIR", num_args = 1..)]
    pub from: Vec<PathBuf>,
    #[command(flatten)]
    pub place: Place,
    /// One JSON object: the sessions indexed and the problems met.
    #[arg(long)]
    pub json: bool,
    /// Print only the problems (no count of the sessions indexed).
    #[arg(long, short, conflicts_with = "json")]
    pub quiet: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Over OTLP (HTTP/protobuf) to `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); the one way there is, named
    /// so that another can come.
    #[arg(long, required = true)]
    pub otlp: bool,
    #[command(flatten)]
    pub place: Place,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// At most this many sessions, newest first (default: every one that passes).
    #[arg(short = 'n', long = "count")]
    pub count: Option<usize>,
}

impl LogsArgs {
    /// `logs reindex -q`.
    pub fn quiet(&self) -> bool {
        matches!(&self.command, Some(LogsCommand::Reindex(reindex)) if reindex.quiet)
    }
}

pub fn run(args: LogsArgs) -> Result<Outcome> {
    match args.command {
        None => list(args.list),
        Some(LogsCommand::Show(show_args)) => show(show_args),
        Some(LogsCommand::Cost(cost_args)) => cost(cost_args),
        Some(LogsCommand::Reindex(reindex_args)) => reindex(reindex_args),
        Some(LogsCommand::Export(export_args)) => export(export_args),
    }
}

/// `logs export --otlp`: each session's record read and sent as it ran
/// (the spans a live run sends, from the same conversion).
fn export(args: ExportArgs) -> Result<Outcome> {
    let filter = filter(&args.filter)?;
    let store = open(&args.place)?;
    let Some(telemetry) = lllm::telemetry::Telemetry::from_env().map_err(Error::Usage)? else {
        return Err(Error::Usage(
            "lllm logs export --otlp: no endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT \
             (e.g. http://localhost:4318) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
                .into(),
        ));
    };
    catch_up_text(&store, &filter)?;
    let sessions = store
        .list(&filter, args.count.unwrap_or(usize::MAX))
        .map_err(store_error)?;
    let mut sent = 0usize;
    let mut untraced = 0usize;
    let mut unread = Vec::new();
    for session in &sessions {
        match store.show(&session.session_id) {
            Ok(record) => {
                if record.trace.is_none() {
                    untraced += 1;
                }
                telemetry.export(&record);
                sent += 1;
            }
            Err(error) => unread.push(error.to_string()),
        }
    }
    telemetry.shutdown();
    for problem in unread.iter().take(PROBLEMS_SHOWN) {
        lllm::report::warn(problem);
    }
    let dropped = telemetry.dropped_spans();
    let mut line = format!(
        "exported {}",
        lllm::words::count(sent as u64, "session", "sessions")
    );
    if untraced > 0 {
        line.push_str(&format!(
            " ({untraced} without a trace of their own: each given one, derived from its session id)"
        ));
    }
    lllm::output::stdout(&format!("{line}\n"))?;
    if dropped > 0 || !unread.is_empty() {
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Success)
}

/// Every store problem of `lllm logs` is exit 2: nothing ran.
fn store_error(error: StoreError) -> Error {
    Error::Usage(error.to_string())
}

/// Opens the store; reading one that does not exist yet is an error, not a
/// new empty store.
fn open(place: &Place) -> Result<Store> {
    let dir = dir_of(place)?;
    if !dir.join(lllm::store::INDEX_FILE).is_file() {
        return Err(Error::Usage(format!(
            "no session store in `{}` yet: `lllm run` and `lllm batch` register their \
             sessions there; hint: `lllm logs reindex --from DIR` indexes existing records",
            dir.display()
        )));
    }
    Store::open(&dir).map_err(store_error)
}

/// The store's directory: `--store`, else the default.
fn dir_of(place: &Place) -> Result<PathBuf> {
    place
        .store
        .clone()
        .or_else(crate::store::default_dir)
        .ok_or_else(|| Error::Usage(format!("no session store: {}", crate::store::NO_STORE_DIR)))
}

fn filter(args: &FilterArgs) -> Result<Filter> {
    let time = |given: &Option<String>| {
        given
            .as_deref()
            .map(|text| lllm::store::parse_time(text).map_err(store_error))
            .transpose()
    };
    let mut tags = Vec::new();
    for (key, value) in crate::store::pairs("--tag", &args.tags)? {
        tags.push((key, lllm::store::tag_text(&value)));
    }
    Ok(Filter {
        tactic: args.tactic.clone(),
        state: args.state.clone(),
        tags,
        model: args.model.clone(),
        since: time(&args.since)?,
        until: time(&args.until)?,
        text: args.text.clone(),
        trace_id: args.trace.as_deref().map(trace_id).transpose()?,
    })
}

/// A trace id as given to `--trace`: 32 hex digits, in any case.
fn trace_id(given: &str) -> Result<String> {
    let id = given.trim().to_ascii_lowercase();
    if id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit()) && id != "0".repeat(32) {
        Ok(id)
    } else {
        Err(Error::Usage(format!(
            "--trace `{}`: a trace id is 32 hex digits (not all zeros), as in a traceparent `00-TRACE_ID-SPAN_ID-01`",
            echo(given)
        )))
    }
}

fn list(args: ListArgs) -> Result<Outcome> {
    let filter = filter(&args.filter)?;
    let store = open(&args.place)?;
    catch_up_text(&store, &filter)?;
    let sessions = store.list(&filter, args.count).map_err(store_error)?;
    let mut text = String::new();
    for session in &sessions {
        if args.json {
            text.push_str(&lllm::redact::json_controls(
                &serde_json::to_string(session).unwrap_or_default(),
            ));
        } else {
            let cost = match (session.cost, session.cost_known) {
                (Some(dollars), true) => format!("${dollars:.6}"),
                (Some(dollars), false) => format!("${dollars:.6}+?"),
                (None, _) => "$?".into(),
            };
            let tags: Vec<String> = session
                .tags
                .iter()
                .map(|(key, value)| format!("{key}={}", lllm::store::tag_text(value)))
                .collect();
            // Every value from the store is cut (`echo`): a record's tags,
            // ids and names can be of any size, and a listing of five
            // sessions printed 10 MB of one tag (issue 26).
            let line = format!(
                "{}  {}  {:<7}  {}  {}  {}{}  {}",
                // The time to the second; a char count, since a record read
                // from a file may hold any text there.
                echo(&session.started_at.chars().take(19).collect::<String>()),
                echo(&session.session_id),
                echo(&session.state),
                echo(&session.tactic),
                cost,
                session
                    .task_id
                    .as_deref()
                    .map(|id| format!("[{}] ", echo(id)))
                    .unwrap_or_default(),
                echo(&tags.join(",")),
                one_line(&session.task, 60),
            );
            text.push_str(&lllm::redact::terminal_line(&line));
        }
        text.push('\n');
    }
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}

/// Pending sessions from which a text search says, before it starts, that
/// it indexes their text first (about a second's work).
const NOTE_PENDING: u64 = 10_000;

/// Records whose read failure is warned about one by one; the rest are counted.
const PROBLEMS_SHOWN: usize = 5;

/// Before a text search: the text of the sessions registered since the last
/// one is indexed (runs and batches leave it to the first search), with a
/// note when there are many, and a warning for records that cannot be read.
fn catch_up_text(store: &Store, filter: &Filter) -> Result<()> {
    if filter.text.is_none() {
        return Ok(());
    }
    let pending = store.pending_text().map_err(store_error)?;
    if pending >= NOTE_PENDING {
        lllm::output::stderr_line(&format!(
            "lllm: indexing the text of {} for the search (once)…",
            lllm::words::count(pending, "session", "sessions")
        ));
    }
    let done = store.index_text().map_err(store_error)?;
    for problem in done.problems.iter().take(PROBLEMS_SHOWN) {
        lllm::report::warn(problem);
    }
    let shown = done.problems.len().min(PROBLEMS_SHOWN) as u64;
    if done.unreadable > shown {
        lllm::report::warn(&format!(
            "{} more could not be read; hint: `lllm logs reindex` drops sessions whose \
             records are gone",
            lllm::words::count(done.unreadable - shown, "record", "records")
        ));
    }
    Ok(())
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

fn show(args: ShowArgs) -> Result<Outcome> {
    let store = open(&args.place)?;
    let record = store.show(&args.id).map_err(store_error)?;
    let text = if args.json {
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        lllm::redact::json_controls(&text).into_owned() + "\n"
    } else {
        lllm::replay::render(&record)
    };
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}

fn cost(args: CostArgs) -> Result<Outcome> {
    let by = GroupBy::parse(&args.by).map_err(store_error)?;
    let filter = filter(&args.filter)?;
    let store = open(&args.place)?;
    catch_up_text(&store, &filter)?;
    let totals = store.cost(&filter, &by).map_err(store_error)?;
    let mut text = String::new();
    if args.json {
        for row in totals.rows.iter().chain([&totals.total]) {
            text.push_str(&lllm::redact::json_controls(
                &serde_json::to_string(row).unwrap_or_default(),
            ));
            text.push('\n');
        }
    } else {
        let mut table = Table::new(&[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ]);
        table.row([
            args.by.as_str(),
            "sessions",
            "failed",
            "skipped",
            "tokens",
            "cost",
            "",
        ]);
        for row in totals.rows.iter().chain([&totals.total]) {
            let unknown = if row.cost_unknown > 0 {
                format!("(+{} unknown)", row.cost_unknown)
            } else {
                String::new()
            };
            let group = if row.group.is_empty() {
                "-"
            } else {
                &row.group
            };
            table.row([
                group.to_string(),
                row.sessions.to_string(),
                row.failures.to_string(),
                row.skipped.to_string(),
                row.total_tokens.to_string(),
                format!("${:.6}", row.cost),
                unknown,
            ]);
        }
        text.push_str(&table.render());
    }
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}

fn reindex(args: ReindexArgs) -> Result<Outcome> {
    for dir in &args.from {
        if !dir.is_dir() {
            return Err(Error::Usage(format!(
                "`--from {}`: not a directory",
                dir.display()
            )));
        }
    }
    // An index file that is not a database, or a damaged one, is moved
    // aside and rebuilt: rebuilding is what `reindex` is for.
    let (mut store, replaced) =
        Store::open_to_rebuild(&dir_of(&args.place)?).map_err(store_error)?;
    let (count, mut problems) = store.reindex(&args.from).map_err(store_error)?;
    problems.splice(0..0, replaced);
    if args.json {
        let value = serde_json::json!({"indexed": count, "problems": problems});
        lllm::output::stdout(&format!("{value}\n"))?;
    } else {
        // What the reindex found is its report: shown under `-q` too
        // ("only the problems"), so not through the warnings `-q` silences.
        for problem in &problems {
            lllm::output::stderr_line(&format!("warning: {problem}"));
        }
        if args.quiet {
            return Ok(Outcome::Success);
        }
        lllm::output::stderr_line(&format!(
            "lllm: {} indexed in `{}`",
            lllm::words::count(count, "session", "sessions"),
            store.path().display()
        ));
    }
    Ok(Outcome::Success)
}
