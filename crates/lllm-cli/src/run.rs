//! `lllm run`: one task through a tactic. The delivery goes to stdout, a
//! one-line summary to stderr, the session record to disk.
//!
//! What a model or a server wrote reaches a terminal with its control
//! characters escaped (`redact`): always on stderr; on stdout only when it is
//! a terminal, since a pipe or a file gets the delivery byte for byte.

use std::io::{IsTerminal, Write};
use std::path::Path;

use serde_json::{Map, Value};

use crate::RunArgs;
use lllm::error::{Error, Outcome, Result};
use lllm::provider::dry_run::{Captured, DryRun, NOT_SENT};
use lllm::tactic::{RunState, SessionRecord, Task};

/// `--attach`: each read now (relative paths from the working directory),
/// so a missing file or an unknown type is bad usage before anything is sent.
/// A path the user typed may name any file but lllm's own secrets.
fn read_attachments(
    specs: &[String],
    settings: &crate::settings::Settings,
) -> Result<Vec<lllm::dialog::ContentPart>> {
    let scope = settings.refuse_secrets(lllm::dialog::AttachmentScope::anywhere(""));
    specs
        .iter()
        .map(|spec| {
            lllm::dialog::Attachment::parse(spec)
                .and_then(|attachment| attachment.to_part(&scope))
                .map_err(|error| Error::Usage(format!("--attach: {error}")))
        })
        .collect()
}

/// `-O KEY=VALUE` pairs (`run` and `batch`); every bad one at once, exit 2.
pub fn model_args(pairs: &[String]) -> Result<lllm::config::ModelArgs> {
    lllm::config::ModelArgs::parse(pairs).map_err(|problems| Error::Usage(problems.join("\n")))
}

pub async fn run(args: RunArgs, registry: &lllm::Registry) -> Result<Outcome> {
    let settings = crate::settings::current();
    let defaults = settings.defaults();
    let prices = match &settings.prices(args.prices.as_deref()) {
        Some(path) => Some(lllm::provider::models::read_price_file(path).map_err(Error::Usage)?),
        None => None,
    };
    let model_args = model_args(&args.model_args)?;
    if args.show_config {
        return show_config(&args, &settings, &defaults, prices, &model_args);
    }
    let (task, source) = crate::run_input::read_input(&args)?;
    let task = Task {
        tags: crate::store::pairs("--tag", &args.store.tags)?,
        metadata: crate::store::pairs("--meta", &args.store.metadata)?,
        attachments: read_attachments(&args.attach, &settings)?,
        ..task
    };
    let env = |name: &str| settings.environment.var(name);
    let dry_run = args.dry_run.then(|| std::sync::Arc::new(DryRun::default()));
    // Config, build and this task's check in one pre-flight: every problem
    // of every phase at once, and nothing sent unless there is none.
    let cache = args.store.cache_source();
    let options = |warn: &'static dyn Fn(&str)| lllm::tactic::LoadOptions {
        model: args.model.as_deref(),
        model_args: Some(&model_args),
        prices: prices.as_ref(),
        env: &env,
        dry_run: dry_run.clone(),
        warn,
        budget: None,
        registry,
        cache: Some(cache.clone()),
        batch_api: None,
        defaults: Some(&defaults),
    };
    let tactic = match lllm::tactic::load(
        &args.tactic,
        &options(&|warning| lllm::report::warn(warning)),
        None,
    ) {
        Ok(tactic) => tactic,
        // Loaded again with the task, warnings said once: the task's
        // problems are listed with the tactic's.
        Err(first) => {
            let with_task = lllm::tactic::load(&args.tactic, &options(&|_| {}), Some(&task));
            return Err(with_task.err().unwrap_or(first).into());
        }
    };
    // The input first: what the contract says is what the user must fix,
    // and a template that needs a missing argument would only repeat it.
    crate::run_input::check_input(&tactic, &task, &source)?;
    tactic.check_task(&task)?;
    if let Some(log) = dry_run {
        // MCP servers start so that their tools are in the bodies shown.
        tactic.start().await?;
        let record = tactic.run(task).await;
        tactic.shutdown().await;
        return show_dry_run(&record, &log.captured());
    }
    // Servers start after every check passed and before the first request.
    tactic.start().await?;
    // Warnings said once per store (a model without a price) are remembered
    // there; `--no-store` remembers nothing.
    let store_dir = args.store.dir();
    lllm::report::remember_in(store_dir.as_deref());

    let streamed = std::sync::Arc::new(std::sync::Mutex::new(Streamed::new(
        std::io::stdout().is_terminal(),
    )));
    let sink = args.stream.then(|| stream_sink(&streamed));
    // Ctrl-C, or SIGTERM (a job engine's or a container's stop): the run
    // stops where it is and its record is written.
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let stop_signal = lllm::batch::scheduler::stop_signal();
    let interrupted = std::sync::Arc::new(interrupted);
    let interrupt = {
        let interrupted = interrupted.clone();
        async move {
            if stop_signal.await.is_err() {
                std::future::pending::<()>().await;
            }
            interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    };
    // What the run waits on (a retry, a slow reply) is said on stderr.
    let watch = std::sync::Arc::new(lllm::provider::watch::Watch::printing());
    let record = if args.events {
        lllm::provider::watch::scope(watch, print_events(&tactic, task, interrupt)).await
    } else {
        lllm::provider::watch::scope(watch, tactic.run_until(task, sink, interrupt)).await
    };
    // No MCP server outlives the run, however it ended.
    tactic.shutdown().await;
    // The replies the cache has not written yet are kept.
    cache.flush();
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    // A record that cannot be written (a full disk, a path that is not a
    // directory) does not hide the delivery: it is printed, then one error
    // line says what was not written, and the exit code is 1.
    let (record_path, record_error) = write_record(&args, &settings, &record, store_dir.as_deref());
    let text = streamed
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .finish(record.delivery.as_deref());
    deliver(
        &args,
        &record,
        (record_path.as_deref(), record_error),
        &text,
        interrupted,
    )
}

/// `--events`: runs `task`, each event one JSON line on stdout as it
/// happens (flushed; a reader that closed the pipe stops the printing, not
/// the run). The delivery is in the last line, the `result` event; the
/// summary line still goes to stderr.
async fn print_events(
    tactic: &lllm::Tactic,
    task: Task,
    interrupt: impl std::future::Future<Output = ()> + Send + 'static,
) -> SessionRecord {
    use futures_util::StreamExt;
    let mut events = tactic.events_until(task, interrupt);
    let mut printing = true;
    while let Some(event) = events.next().await {
        if !printing {
            continue;
        }
        let line = serde_json::to_string(&event).unwrap_or_default();
        let line = lllm::redact::json_controls(&line).into_owned() + "\n";
        if let Err(error) = lllm::output::stdout(&line) {
            lllm::output::stderr_line(&format!("error: {error}"));
            printing = false;
        }
    }
    events
        .into_record()
        .expect("an event stream that ended holds its record")
}

/// `--stream`: each piece of text goes to `streamed` as it arrives, which
/// shows it on a terminal (`Streamed`).
fn stream_sink(
    streamed: &std::sync::Arc<std::sync::Mutex<Streamed>>,
) -> lllm::agent::SharedTextSink {
    let seen = streamed.clone();
    std::sync::Arc::new(move |text: &str| {
        seen.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .piece(text, &mut std::io::stdout().lock());
    })
}

/// Prints the delivery (or, with `--json`, the run's summary as JSON) and
/// the summary line, and says how the run ended. A reader that closed the
/// pipe early is no failure of the run; a delivery that could not be
/// written is, once the summary is out, and so is a record that was not
/// written (`record`: where it went, or why it did not).
fn deliver(
    args: &RunArgs,
    record: &SessionRecord,
    (record_path, record_error): (Option<&Path>, Option<Error>),
    text: &str,
    interrupted: bool,
) -> Result<Outcome> {
    let delivered = if args.events {
        // The delivery went out in the `result` event.
        Ok(())
    } else if args.json {
        lllm::output::stdout(&format!("{}\n", json_summary(record, record_path)))
    } else {
        lllm::output::stdout(text)
    };
    if !(args.quiet || args.json) || record.state != RunState::Success {
        lllm::output::stderr_line(&summary(record, record_path));
    }
    if let Some(error) = record_error {
        if interrupted {
            lllm::output::stderr_line(&format!("error: the record was not written: {error}"));
            return Ok(Outcome::Interrupted);
        }
        return Err(error);
    }
    delivered?;
    Ok(match record.state {
        _ if interrupted => Outcome::Interrupted,
        RunState::Success => Outcome::Success,
        RunState::Failure | RunState::Skipped => Outcome::Failed,
    })
}

/// Writes the run's record (`--record`, else the store's records
/// directory; none with `--no-record`) and registers it in the store in
/// `store` (the library verbs' way, `lllm::records::write_and_index`):
/// where it went, or why it did not.
fn write_record(
    args: &RunArgs,
    settings: &crate::settings::Settings,
    record: &SessionRecord,
    store: Option<&Path>,
) -> (Option<std::path::PathBuf>, Option<Error>) {
    if args.no_record {
        return (None, None);
    }
    let path = args.record.clone().unwrap_or_else(|| {
        settings
            .records_dir(args.store.store.as_deref())
            .join(format!("{}.json", record.session_id))
    });
    match lllm::records::write_and_index(record, &path, store) {
        Ok(()) => (Some(path), None),
        Err(source) => (
            None,
            Some(Error::Write {
                path: path.display().to_string(),
                source,
            }),
        ),
    }
}

/// `--show-config`: the tactic's resolved config as a run would use it
/// (`--model`, `-O` and `--prices` applied), shown as a record keeps it.
fn show_config(
    args: &RunArgs,
    settings: &crate::settings::Settings,
    defaults: &lllm::config::Defaults,
    prices: Option<Value>,
    model_args: &lllm::config::ModelArgs,
) -> Result<Outcome> {
    let mut config = lllm::config::load_with(&args.tactic, defaults)?;
    if let Some(model) = &args.model {
        config.override_model(model);
    }
    config.override_model_args(model_args);
    if let Some(prices) = prices {
        config.override_prices(prices);
    }
    for warning in &config.warnings {
        lllm::report::warn(warning);
    }
    // Shown as a record keeps it: a key the tactic holds (in a prompt,
    // in `model_args`) is `***`.
    let env = |name: &str| settings.environment.var(name);
    let secrets = lllm::provider::registry::known_secrets(&config.providers, &env);
    let mut resolved = config.resolved.clone();
    show_providers(&config, &env, &mut resolved)?;
    secrets.scrub_value(&mut resolved);
    let text = serde_json::to_string_pretty(&resolved).unwrap_or_default();
    lllm::output::stdout(&(lllm::redact::json_controls(&text).into_owned() + "\n"))?;
    Ok(Outcome::Success)
}

/// `--show-config`: the providers the agents use, each as a run would use
/// it (issue 27: with `-m openai/…` only the tactic's `mock` entry showed,
/// and no base URL): its entry, over which the API, the base URL and where
/// it came from, and the key's variable are written (`Providers::effective`).
/// A name no provider has is left out; running would say so.
fn show_providers(
    config: &lllm::config::TacticConfig,
    env: &dyn Fn(&str) -> Option<String>,
    resolved: &mut Value,
) -> Result<()> {
    let providers = lllm::provider::registry::Providers::new(&config.providers, env)
        .map_err(|error| Error::Usage(error.to_string()))?;
    let Some(document) = resolved.as_object_mut() else {
        return Ok(());
    };
    let shown = document
        .entry("providers")
        .or_insert_with(|| Value::Object(Map::new()));
    if !shown.is_object() {
        *shown = Value::Object(Map::new());
    }
    let Some(shown) = shown.as_object_mut() else {
        return Ok(());
    };
    for agent in &config.agents {
        let (name, _) = lllm::provider::registry::split_model(&agent.model_name);
        let Some(effective) = providers.effective(name) else {
            continue;
        };
        let entry = shown
            .entry(name.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(entry) = entry {
            entry.extend(effective);
        }
    }
    Ok(())
}

/// What `lllm run` prints on stdout, streamed or not. On a terminal
/// (`--stream`) the text is shown as it arrives, and a marker line follows
/// the text of an attempt that turned out not to be the answer (a retry after
/// a failure, a repair, a tool round), so attempts never run together; the
/// delivery follows at the end only if it differs from the last attempt's
/// text (a `result` template). Anywhere else (a pipe, a file) text already
/// written cannot be taken back, so nothing is streamed: stdout gets the
/// delivery once, at the end, as without `--stream`.
struct Streamed {
    terminal: bool,
    /// The text of the attempt streaming now.
    attempt: String,
}

/// Printed on a terminal after the text of an attempt that was discarded.
const DISCARDED: &str =
    "[lllm: the text above is not the answer (retried, repaired or a tool round)]";

impl Streamed {
    fn new(terminal: bool) -> Streamed {
        Streamed {
            terminal,
            attempt: String::new(),
        }
    }

    /// One piece of streamed text; an empty one starts a new attempt
    /// (`provider::TextSink`).
    fn piece(&mut self, text: &str, out: &mut dyn Write) {
        if text.is_empty() {
            if !self.attempt.is_empty() && self.terminal {
                let _ = writeln!(out, "\n{DISCARDED}");
                let _ = out.flush();
            }
            self.attempt.clear();
            return;
        }
        self.attempt.push_str(text);
        if self.terminal {
            let _ = out.write_all(lllm::redact::terminal_text(text).as_bytes());
            let _ = out.flush();
        }
    }

    /// What ends the output: the delivery, unless the terminal shows it
    /// already as the last attempt's text. Written by the caller, which
    /// decides what a failed write means (`output::stdout`).
    fn finish(&mut self, delivery: Option<&str>) -> String {
        let shown = self.terminal && !self.attempt.is_empty();
        let mut text = String::new();
        if shown {
            text.push('\n');
        }
        match delivery {
            Some(delivery) if shown && delivery == self.attempt => {}
            Some(delivery) => {
                if shown {
                    text.push('\n');
                }
                if self.terminal {
                    text.push_str(&lllm::redact::terminal_text(delivery));
                } else {
                    text.push_str(delivery);
                }
                text.push('\n');
            }
            None => {}
        }
        text
    }
}

/// Prints each captured request, named by the agent and dialog that made it.
fn show_dry_run(record: &SessionRecord, captured: &[Captured]) -> Result<Outcome> {
    let mut text = String::new();
    for (index, request) in captured.iter().enumerate() {
        let place = who_sent(record, &request.sha256)
            .map(|(agent, dialog, model)| {
                format!(" · agent `{agent}` · dialog `{dialog}` · model {model}")
            })
            .unwrap_or_default();
        let body = serde_json::to_string_pretty(&request.wire.body).unwrap_or_default();
        let head = format!("── request {} of {}{place}", index + 1, captured.len());
        text.push_str(&format!(
            "{}\nPOST {}\n{}\n\n",
            lllm::redact::terminal_line(&head),
            lllm::redact::terminal_line(&request.wire.url),
            lllm::redact::json_controls(&body)
        ));
    }
    lllm::output::stdout(&text)?;
    match record.error.as_deref() {
        Some(error) if !error.contains(NOT_SENT) => {
            lllm::output::stderr_line(&format!(
                "lllm: dry run: the run failed before sending: {error}"
            ));
            Ok(Outcome::Failed)
        }
        _ => {
            lllm::output::stderr_line(&format!(
                "lllm: dry run: {} shown, nothing sent; later turns need model replies",
                lllm::words::count(captured.len() as u64, "request", "requests")
            ));
            Ok(Outcome::Success)
        }
    }
}

/// The agent, dialog and model of the invoke with this request digest.
fn who_sent(record: &SessionRecord, sha256: &str) -> Option<(String, String, String)> {
    for call in &record.agent_calls {
        for invoke in &call.invokes {
            if invoke.request.sha256 == sha256 {
                let model = call.model.clone();
                return Some((call.agent.clone(), call.dialog_alias.clone(), model));
            }
        }
    }
    record
        .sub_tactic_sessions
        .iter()
        .find_map(|sub| who_sent(sub, sha256))
}

/// `--json`: what the summary line says, as one object.
fn json_summary(record: &SessionRecord, path: Option<&Path>) -> Value {
    let cost = &record.cost;
    serde_json::json!({
        "delivery": record.delivery,
        "state": record.state.name(),
        "error": record.error,
        "tokens": {
            "prompt": cost.prompt_tokens,
            "completion": cost.completion_tokens,
            "total": cost.total_tokens,
        },
        "cost": cost.cost,
        "cost_known": record.cost_known,
        "calls": record.invoke_count(),
        "retries": record.retry_count(),
        "cache_hits": record.cache_hit_count(),
        "latency_ms": record.latency_ms,
        "session_id": record.session_id,
        "record": path.map(|path| path.display().to_string()),
    })
}

/// `lllm: success in 1.2 s · 2 calls (1 retry) · 120 tokens (100 in, 20 out) · $0.000030 · record sessions/….json`
/// (the words of `lllm::words`).
fn summary(record: &SessionRecord, path: Option<&Path>) -> String {
    let state = match (&record.state, &record.error) {
        (RunState::Success, _) => "success".to_string(),
        (state, Some(error)) => format!("{}: {error}", state.name()),
        (state, None) => state.name().to_string(),
    };
    let cost = &record.cost;
    let dollars = match (cost.cost, cost.cost_known) {
        (Some(dollars), true) => format!("${dollars:.6}"),
        (Some(dollars), false) => format!("${dollars:.6} + unknown"),
        (None, _) => "cost unknown".to_string(),
    };
    let mut line = format!(
        "lllm: {state} in {:.1} s · {} · {} tokens ({} in, {} out) · {dollars}",
        record.latency_ms as f64 / 1000.0,
        lllm::words::calls(record.invoke_count() as u64, record.retry_count() as u64),
        cost.total_tokens,
        cost.prompt_tokens,
        cost.completion_tokens,
    );
    let hits = record.cache_hit_count();
    if hits > 0 {
        line.push_str(&format!(" · {hits} from the cache"));
    }
    if let Some(path) = path {
        line.push_str(&format!(" · record {}", path.display()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What stdout holds after `pieces` were streamed and `delivery` delivered.
    #[track_caller]
    fn printed(terminal: bool, pieces: &[&str], delivery: Option<&str>) -> String {
        let mut out = Vec::new();
        let mut streamed = Streamed::new(terminal);
        for piece in pieces {
            streamed.piece(piece, &mut out);
        }
        let mut printed = String::from_utf8(out).unwrap();
        printed.push_str(&streamed.finish(delivery));
        printed
    }

    #[test]
    fn streamed_attempts_are_marked_and_the_delivery_is_printed_once() {
        // A cut attempt, then the answer: on a terminal the cut text is
        // marked, the answer is not repeated.
        let pieces = ["", "this reply is ", "", "The ", "answer."];
        assert_eq!(
            printed(true, &pieces, Some("The answer.")),
            format!("this reply is \n{DISCARDED}\nThe answer.\n")
        );
        // A pipe gets the delivery once, nothing of the attempts.
        assert_eq!(
            printed(false, &pieces, Some("The answer.")),
            "The answer.\n"
        );
        // A `result` template: the delivery follows after a blank line.
        assert_eq!(
            printed(true, &["", "draft"], Some("Final: draft")),
            "draft\n\nFinal: draft\n"
        );
        // Attempts that failed before any text print no marker.
        assert_eq!(printed(true, &["", "", "ok"], Some("ok")), "ok\n");
        // A failed run: what was streamed, ended with a newline.
        assert_eq!(printed(true, &["", "part"], None), "part\n");
        assert_eq!(printed(false, &["", "part"], None), "");
        // Not streamed at all.
        assert_eq!(printed(false, &[], Some("x")), "x\n");
        assert_eq!(printed(true, &[], Some("x")), "x\n");
    }
}
