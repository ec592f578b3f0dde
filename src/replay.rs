//! Session records read back, shown and re-executed: what `lllm replay`
//! does, from a program of one's own.
//!
//! - [`load`] reads a record (a `.json` file, or one session of a
//!   `sessions.jsonl` by id), [`from_value`] one already parsed;
//! - [`render`] shows it for a person: the dialog tree, every agent call
//!   with its invokes, tool rounds, repairs and retries, each dialog's
//!   messages, and the delivery or the error (control characters in recorded
//!   text escaped, so it is safe on a terminal);
//! - [`rerun`] re-executes it offline, every model call answered from the
//!   record, and says whether the re-run is identical. A programmed tactic
//!   (`Registry::flow`) re-runs in the binary that has its flow, with no
//!   dependency on the command-line crate.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lllm::BoxError> {
//! use lllm::{Records, Registry, Tactic};
//!
//! let dir = tempfile::tempdir()?;
//! let tactic = Tactic::from_yaml("agent_configs: [{name: echo, model_name: mock/echo}]", ".", &Registry::new())?
//!     .with_records(Records::dir(dir.path()));
//! let record = tactic.bcall(["ping"]).records().await.remove(0);
//!
//! let file = dir.path().join(format!("{}.json", record.session_id));
//! let loaded = lllm::replay::load(&file, None)?;
//! assert!(lllm::replay::render(&loaded).contains("ping"));
//! assert!(lllm::replay::rerun(&loaded, &Registry::new()).await?.is_identical());
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agent::AgentCallSession;
use crate::dialog::{Dialog, DialogRecord, InvokeCost, Message, Modality};
use crate::provider::ProviderError;
use crate::provider::replay::Recorded;
use crate::tactic::record::{self, SessionRecord};
use crate::words::count;

/// Why a record could not be read; each names the file (`path`).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are what the messages say
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read `{path}`: {message}")]
    Read { path: String, message: String },
    #[error(
        "`{path}` is a `{}` record; this lllm reads `{}` (re-run the tactic, or use the lllm that wrote it)",
        crate::redact::echo(found),
        record::READS.join("`, `")
    )]
    /// A record of a format this lllm does not read (`found`).
    Format { path: String, found: String },
    /// Not a record: a field missing or of the wrong type.
    #[error("`{path}` is not a valid `{}` record: {message}", record::FORMAT)]
    Invalid { path: String, message: String },
    /// No session of the id asked for in a `sessions.jsonl`.
    #[error(
        "no session `{}` in `{path}` ({count} sessions; ids are session ids or task ids)",
        crate::redact::echo(id)
    )]
    NoSuchSession {
        path: String,
        id: String,
        count: usize,
    },
    /// A `sessions.jsonl` of several sessions and no id.
    #[error("`{path}` holds {count} sessions; pick one with `--id`")]
    Ambiguous { path: String, count: usize },
    /// A record larger than a reader takes.
    #[error("cannot read `{path}`: {reason}")]
    Oversized {
        path: String,
        reason: record::Oversized,
    },
}

/// A result whose error is a record that could not be read.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A record that cannot be replayed is bad input: the command's error, exit 2.
impl From<Error> for crate::error::Error {
    fn from(error: Error) -> Self {
        crate::error::Error::Input(Box::new(error))
    }
}

/// The largest single record `replay` reads (a `.jsonl` file is streamed and
/// has no such limit): a record of thousands of calls is a few MiB.
const RECORD_CAP: u64 = 1 << 30;

/// Loads a record; in a JSONL file, the session `id` names (see
/// [`load_choosing`]), or the only line.
pub fn load(path: &Path, id: Option<&str>) -> Result<SessionRecord> {
    load_choosing(path, id).map(|loaded| loaded.record)
}

/// A record picked out of a file, with what the person choosing should know.
pub struct Loaded {
    /// The record.
    pub record: SessionRecord,
    /// Lines for stderr: the other sessions of the same task id, lines skipped.
    pub notes: Vec<String>,
}

/// What `--id` needs of a line of `sessions.jsonl` (the rest is skipped).
#[derive(serde::Deserialize)]
struct Heading {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
}

impl Heading {
    /// `019a… (failure, started 2026-…)`
    fn describe(&self) -> String {
        format!(
            "{} ({}, started {})",
            crate::redact::echo(self.session_id.as_deref().unwrap_or("?")),
            crate::redact::echo(self.state.as_deref().unwrap_or("?")),
            crate::redact::echo(self.started_at.as_deref().unwrap_or("?"))
        )
    }
}

/// Sessions of one task listed in a note.
const LISTED: usize = 10;

/// Loads a record. In a JSONL file (`sessions.jsonl` of a batch) `id` is a
/// session id, or a task id: a task run again (`--retry-errors`, `--resume`)
/// has a session per run, and the latest (the last line) is the one shown,
/// with a note naming the others and how to pick one. Lines that are not
/// records (a torn last line of a killed run) are skipped with a note.
pub fn load_choosing(path: &Path, id: Option<&str>) -> Result<Loaded> {
    let label = path.display().to_string();
    let read_error = |error: std::io::Error| Error::Read {
        path: label.clone(),
        message: error.to_string(),
    };
    // A `.jsonl` file, or a zstd one (`sessions.jsonl.zst`), but a `.json.zst`.
    let is_lines = crate::jsonl::is_lines(path).map_err(read_error)?;
    let mut notes = Vec::new();
    let value: Value = if is_lines {
        // Read as a stream, a line at a time, in either form (plain or zstd);
        // a regular file only (a named pipe would block the open, a device
        // could be endless).
        let lines = crate::jsonl::Lines::open(path).map_err(read_error)?;
        // The chosen line's text (parsed in full once, at the end) and heading.
        let mut chosen: Option<(String, Heading)> = None;
        let mut by_session_id = false;
        let mut same_task: Vec<Heading> = Vec::new();
        let (mut count, mut unreadable) = (0, Vec::new());
        for line in crate::jsonl::numbered_lines(lines) {
            let (number, line) = line.map_err(read_error)?;
            // A line that is not UTF-8 is torn or corrupted, as one that is
            // not JSON: skipped with the others.
            let line = match line {
                Some(line) if line.trim().is_empty() => continue,
                Some(line) => line,
                None => {
                    unreadable.push(number);
                    continue;
                }
            };
            let Ok(heading) = serde_json::from_str::<Heading>(&line) else {
                unreadable.push(number);
                continue;
            };
            count += 1;
            match id {
                None if chosen.is_none() => chosen = Some((line, heading)),
                None => {}
                Some(id) if heading.session_id.as_deref() == Some(id) => {
                    chosen = Some((line, heading));
                    by_session_id = true;
                    break;
                }
                Some(id) if heading.task_id.as_deref() == Some(id) => {
                    // A later line of the task is a later run: it wins.
                    if let Some((_, earlier)) = chosen.replace((line, heading)) {
                        same_task.push(earlier);
                    }
                }
                Some(_) => {}
            }
        }
        if !unreadable.is_empty() {
            let shown: Vec<String> = unreadable
                .iter()
                .take(LISTED)
                .map(usize::to_string)
                .collect();
            notes.push(format!(
                "`{label}`: skipped {} not readable as session records (line {})",
                crate::words::count(unreadable.len() as u64, "line", "lines"),
                shown.join(", ")
            ));
        }
        match (chosen, id) {
            (Some(_), None) if count > 1 => return Err(Error::Ambiguous { path: label, count }),
            (Some((line, heading)), id) => {
                if let (Some(id), false, false) = (id, by_session_id, same_task.is_empty()) {
                    let mut others: Vec<String> = same_task
                        .iter()
                        .rev()
                        .take(LISTED)
                        .map(Heading::describe)
                        .collect();
                    if same_task.len() > LISTED {
                        others.push(format!("… {} more", same_task.len() - LISTED));
                    }
                    notes.push(format!(
                        "task `{}` has {} sessions in `{label}`; showing the latest, {}; \
                         earlier: {}; hint: pick one with `--id SESSION_ID`",
                        crate::redact::echo(id),
                        same_task.len() + 1,
                        heading.describe(),
                        others.join(", ")
                    ));
                }
                serde_json::from_str(&line).map_err(|error| Error::Invalid {
                    path: label.clone(),
                    message: error.to_string(),
                })?
            }
            (None, id) => {
                return Err(Error::NoSuchSession {
                    path: label,
                    id: id.unwrap_or_default().to_string(),
                    count,
                });
            }
        }
    } else {
        let text = crate::jsonl::read_text(path, RECORD_CAP).map_err(read_error)?;
        serde_json::from_str(&text).map_err(|error| Error::Invalid {
            path: label.clone(),
            message: error.to_string(),
        })?
    };
    let record = from_value(value, &label)?;
    Ok(Loaded { record, notes })
}

/// A record from its JSON (a `.json` file's text or a line of a
/// `sessions.jsonl`), its format checked and expanded
/// [within](SessionRecord::expand_within) [`ExpansionLimit::READ`](record::ExpansionLimit::READ);
/// `label` names where it came from in errors. The session store reads one
/// line of a batch's `sessions.jsonl` with it (`lllm logs show`).
pub fn from_value(value: Value, label: &str) -> Result<SessionRecord> {
    let label = label.to_string();
    let found = value
        .get("format")
        .and_then(Value::as_str)
        .unwrap_or("unversioned")
        .to_string();
    if !record::READS.contains(&found.as_str()) {
        return Err(Error::Format { path: label, found });
    }
    let mut record: SessionRecord =
        serde_path_to_error::deserialize(value).map_err(|error| Error::Invalid {
            path: label.clone(),
            message: format!("`{}`: {}", error.path(), error.inner()),
        })?;
    record
        .expand_within(record::ExpansionLimit::READ)
        .map_err(|reason| Error::Oversized {
            path: label,
            reason,
        })?;
    Ok(record)
}

fn cost_text(cost: &InvokeCost) -> String {
    match (cost.cost, cost.cost_known) {
        (Some(dollars), true) => format!("${dollars:.6}"),
        (Some(dollars), false) => format!("${dollars:.6} + unknown"),
        (None, _) => "cost unknown".into(),
    }
}

/// The start of `text` on one line: its words a space apart, cut at `max`
/// characters with `…`. Only the first `max` × 4 + 4 KiB bytes are looked
/// at, so a long text costs the same as a short one each time it is shown (a
/// record shows a message once per call on its dialog).
fn one_line(text: &str, max: usize) -> String {
    let mut end = text.len().min(max.saturating_mul(4).saturating_add(4096));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut flat = String::new();
    let mut shown = 0;
    for word in text[..end].split_whitespace() {
        if !flat.is_empty() {
            flat.push(' ');
            shown += 1;
        }
        flat.push_str(word);
        shown += word.chars().count();
        if shown > max {
            break;
        }
    }
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        // The words looked at fit, but more text follows them.
        None if end < text.len() => format!("{flat}…"),
        None => flat,
    }
}

/// The human-readable rendering of a record, safe to print on a terminal
/// (`redact::terminal_text`: newlines and tabs stay, every other control
/// character is escaped).
pub fn render(record: &SessionRecord) -> String {
    let out = render_raw(record);
    match crate::redact::terminal_text(&out) {
        std::borrow::Cow::Borrowed(_) => out,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

fn render_raw(record: &SessionRecord) -> String {
    let mut out = String::new();
    let state = record.state.name();
    let _ = writeln!(
        out,
        "session {} · tactic `{}` ({}) · {state} · {}{} · {} tokens · {} · {:.1} s",
        crate::redact::echo(&record.session_id),
        crate::redact::echo(&record.tactic.name),
        crate::redact::echo(&record.tactic.path),
        crate::words::calls(record.invoke_count() as u64, record.retry_count() as u64),
        match record.cache_hit_count() {
            0 => String::new(),
            hits => format!(" + {hits} from the cache"),
        },
        record.cost.total_tokens,
        cost_text(&record.cost),
        record.latency_ms as f64 / 1000.0
    );
    if let Some(body) = &record.tactic.body {
        let _ = writeln!(
            out,
            "program: {body} (compiled into the binary that ran it)"
        );
    }
    if let Some(model) = &record.tactic.model {
        let _ = writeln!(
            out,
            "model: {} (`--model`, every agent)",
            crate::redact::echo(model)
        );
    }
    let command_line = &record.tactic.model_args;
    if !command_line.is_empty() {
        let pairs: Vec<String> = command_line
            .all
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .chain(command_line.agents.iter().flat_map(|(agent, args)| {
                args.iter()
                    .map(move |(key, value)| format!("{agent}.{key}={value}"))
            }))
            .collect();
        let _ = writeln!(
            out,
            "model arguments (`-O`): {}",
            one_line(&pairs.join(" "), 200)
        );
    }
    if let Some(id) = &record.task_id {
        let _ = writeln!(out, "task id: {}", crate::redact::echo(id));
    }
    let task = match &record.task {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let _ = writeln!(out, "task: {}", one_line(&task, 200));

    let dialogs: Vec<Dialog> = record
        .dialogs
        .iter()
        .cloned()
        .map(|dialog| Dialog::from_record(dialog, None))
        .collect();
    let all: Vec<&Dialog> = dialogs.iter().collect();
    // Looked up by id once per call: the first dialog of an id, as listed.
    let mut by_id: HashMap<&str, &Dialog> = HashMap::with_capacity(dialogs.len());
    for dialog in &dialogs {
        by_id.entry(dialog.dialog_id()).or_insert(dialog);
    }
    // The first step of each agent call and of each sub-tactic session.
    let (mut call_steps, mut sub_steps) = (HashMap::new(), HashMap::new());
    for step in &record.steps {
        match step.sub_tactic {
            None => call_steps.entry(step.agent_call),
            Some(sub) => sub_steps.entry(sub),
        }
        .or_insert(step.step.as_str());
    }
    let _ = writeln!(out, "\ndialog tree");
    for root in dialogs.iter().filter(|dialog| dialog.tree_node.is_root()) {
        for line in root.tree_overview(&all).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }

    for (index, call) in record.agent_calls.iter().enumerate() {
        let step = call_steps.get(&index).copied();
        render_call(&mut out, index + 1, step, call);
        if let Some(dialog) = by_id.get(call.dialog_id.as_str()) {
            let _ = writeln!(
                out,
                "  dialog `{}` [{}]:",
                crate::redact::echo(&call.dialog_alias),
                // By characters: a record read from a file may hold any text.
                call.dialog_id.chars().take(8).collect::<String>()
            );
            for (position, message) in dialog.messages().iter().enumerate() {
                let _ = writeln!(out, "    {}", message_line(position, message));
            }
        }
    }

    render_remote_calls(&mut out, record);

    for (index, sub) in record.sub_tactic_sessions.iter().enumerate() {
        let by = match sub_steps.get(&index) {
            Some(step) => format!("step `{step}`"),
            None => "a tool".to_string(),
        };
        let _ = writeln!(out, "\n{by} ran tactic `{}`:", sub.tactic.name);
        for line in render(sub).lines() {
            let _ = writeln!(out, "  | {line}");
        }
    }

    match (&record.delivery, &record.error) {
        (Some(delivery), _) => {
            let _ = writeln!(out, "\ndelivery:\n{delivery}");
        }
        (None, Some(error)) => {
            let _ = writeln!(out, "\nerror: {error}");
        }
        (None, None) => {}
    }
    out
}

/// The record's calls to served tactics: who called what, and the answer.
fn render_remote_calls(out: &mut String, record: &SessionRecord) {
    for call in &record.remote_calls {
        let outcome = match (&call.error, &call.answer) {
            (Some(error), _) => format!("failed: {}", one_line(error, 200)),
            (None, answer) if call.route == "info" => format!(
                "contract of `{}`",
                crate::redact::echo(answer["name"].as_str().unwrap_or("?"))
            ),
            (None, answer) => one_line(&answer.get("output").unwrap_or(answer).to_string(), 200),
        };
        let session = call
            .session_id
            .as_deref()
            .map(|id| format!(" · remote session {}", crate::redact::echo(id)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "\n{} called `{}` ({}, {} ms{session}): {outcome}",
            crate::redact::echo(&call.by),
            crate::redact::echo(&call.url),
            call.route,
            call.latency_ms
        );
        if call.route == "run" {
            let input = call.request.get("input").unwrap_or(&call.request);
            let _ = writeln!(out, "  input: {}", one_line(&input.to_string(), 200));
        }
    }
}

fn render_call(out: &mut String, number: usize, step: Option<&str>, call: &AgentCallSession) {
    let step = step
        .map(|step| format!(" (step `{step}`)"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "\nagent call {number}{step}: `{}` on `{}` · {} · {}, {}, {}, {} · {} tokens · {} · {} ms",
        call.agent,
        call.model,
        format!("{:?}", call.state).to_lowercase(),
        count(call.invokes.len() as u64, "call", "calls"),
        count(call.retry_count() as u64, "retry", "retries"),
        count(call.interrupts.len() as u64, "tool round", "tool rounds"),
        count(call.exception_retries.len() as u64, "repair", "repairs"),
        call.cost.total_tokens,
        cost_text(&call.cost),
        call.latency_ms
    );
    for invoke in &call.invokes {
        // Which request of the round: the first, or its Nth repair.
        let repair = match invoke.repair {
            0 => String::new(),
            repair => format!(", repair {repair}"),
        };
        let head = if invoke.cached {
            format!(
                "  call in round {}{repair} · cached (not sent)",
                invoke.step
            )
        } else {
            format!(
                "  call in round {}{repair}, attempt {} · {} ms",
                invoke.step, invoke.attempt, invoke.latency_ms
            )
        };
        match (&invoke.response, &invoke.error) {
            (_, Some(error)) => {
                let _ = writeln!(
                    out,
                    "{head} · {:?} error: {error} · waited {} ms",
                    error.kind, invoke.waited_ms
                );
            }
            (Some(reply), None) => {
                let cost = reply.cost();
                let what = if reply.is_function_call() {
                    let calls: Vec<String> = reply
                        .function_calls
                        .iter()
                        .map(|call| {
                            format!("{}({})", call.name, one_line(&call.arguments_text(), 60))
                        })
                        .collect();
                    format!("tool calls: {}", calls.join(", "))
                } else {
                    format!("\"{}\"", one_line(&reply.content, 80))
                };
                let _ = writeln!(
                    out,
                    "{head} · {} in / {} out · {} → {what}",
                    cost.prompt_tokens,
                    cost.completion_tokens,
                    cost_text(&cost)
                );
                if let Some(parse_error) = &invoke.parse_error {
                    let _ = writeln!(
                        out,
                        "    rejected by the parser: {}",
                        one_line(parse_error, 160)
                    );
                }
            }
            (None, None) => {}
        }
    }
    for round in &call.interrupts {
        for tool in &round.calls {
            let outcome = match (&tool.error_message, &tool.result) {
                (Some(error), _) => format!("error: {}", one_line(error, 100)),
                (None, Some(Value::String(result))) => one_line(result, 100),
                (None, Some(other)) => one_line(&other.to_string(), 100),
                (None, None) => one_line(tool.result_str.as_deref().unwrap_or_default(), 100),
            };
            let _ = writeln!(
                out,
                "  tool round {}: {}({}) → {outcome}",
                round.step,
                tool.name,
                one_line(&tool.arguments_text(), 60)
            );
        }
    }
    if let Some(error) = &call.error {
        let _ = writeln!(out, "  failed: {error}");
    }
}

fn message_line(position: usize, message: &Message) -> String {
    let content = match message.modality {
        Modality::Image => format!("<image {}>", message.mime_type().unwrap_or("?")),
        Modality::Text if message.is_multipart() => {
            let parts: Vec<String> = message.parts.iter().map(|part| part.to_string()).collect();
            one_line(&parts.join(" "), 120)
        }
        Modality::Text => one_line(&message.content, 120),
    };
    let calls = if message.is_function_call() {
        let names: Vec<&str> = message
            .function_calls
            .iter()
            .map(|call| call.name.as_str())
            .collect();
        format!(" [calls {}]", names.join(", "))
    } else {
        String::new()
    };
    format!(
        "[{position}. {} ({})]: {content}{calls}",
        message.name, message.role
    )
}

/// The record's model calls as the replay provider serves them.
fn recorded_calls(record: &SessionRecord) -> Vec<Recorded> {
    let mut calls = Vec::new();
    enqueue(record, &mut calls);
    calls
}

/// The record's dialogs by id (the first of an id, as listed).
fn dialogs_by_id(record: &SessionRecord) -> HashMap<&str, &DialogRecord> {
    let mut by_id = HashMap::with_capacity(record.dialogs.len());
    for dialog in &record.dialogs {
        by_id
            .entry(dialog.tree_node.dialog_id.as_str())
            .or_insert(dialog);
    }
    by_id
}

/// The record's model calls in the order the run made them: its own calls,
/// with each sub-tactic's calls (recursively) where its step ran.
fn enqueue(record: &SessionRecord, queue: &mut Vec<Recorded>) {
    let dialogs = dialogs_by_id(record);
    let mut next = 0;
    for step in &record.steps {
        let Some(sub) = step
            .sub_tactic
            .and_then(|index| record.sub_tactic_sessions.get(index))
        else {
            continue;
        };
        while next < step.agent_call.min(record.agent_calls.len()) {
            enqueue_call(&dialogs, &record.agent_calls[next], queue);
            next += 1;
        }
        enqueue(sub, queue);
    }
    for call in record.agent_calls.iter().skip(next) {
        enqueue_call(&dialogs, call, queue);
    }
    // The runs of tactic tools nest without a step naming them (issue 30).
    for (index, sub) in record.sub_tactic_sessions.iter().enumerate() {
        if !record
            .steps
            .iter()
            .any(|step| step.sub_tactic == Some(index))
        {
            enqueue(sub, queue);
        }
    }
}

fn enqueue_call(
    dialogs: &HashMap<&str, &DialogRecord>,
    call: &AgentCallSession,
    queue: &mut Vec<Recorded>,
) {
    for invoke in &call.invokes {
        let messages = dialogs
            .get(invoke.request.dialog_id.as_str())
            .map(|dialog| {
                dialog
                    .messages
                    .iter()
                    .take(invoke.request.messages)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let outcome = match (&invoke.response, &invoke.error) {
            (Some(reply), _) => Ok(Message::clone(reply)),
            (None, Some(error)) => Err(ProviderError {
                retry_after: None,
                ..error.clone()
            }),
            (None, None) => Err(ProviderError::permanent(
                "the record has an invoke with no outcome",
            )),
        };
        queue.push(Recorded {
            agent: call.agent.clone(),
            dialog: call.dialog_alias.clone(),
            round: invoke.step,
            sha256: invoke.request.sha256.clone(),
            messages,
            outcome,
        });
    }
}

/// What a record is re-executed from: a record file (`.json`, or a
/// `sessions.jsonl` of one session) or a record at hand. `From` makes
/// either the first argument of [`rerun`].
#[derive(Debug, Clone)]
pub enum Source<'a> {
    /// A record file, read with [`load`].
    Path(PathBuf),
    /// A record at hand (a verb's `.records()`, [`load`]).
    Record(&'a SessionRecord),
    /// A record given away.
    Owned(Box<SessionRecord>),
}

impl<'a> From<&'a SessionRecord> for Source<'a> {
    fn from(record: &'a SessionRecord) -> Source<'a> {
        Source::Record(record)
    }
}

impl From<SessionRecord> for Source<'_> {
    fn from(record: SessionRecord) -> Self {
        Source::Owned(Box::new(record))
    }
}

impl From<&Path> for Source<'_> {
    fn from(path: &Path) -> Self {
        Source::Path(path.to_path_buf())
    }
}

impl From<PathBuf> for Source<'_> {
    fn from(path: PathBuf) -> Self {
        Source::Path(path)
    }
}

impl From<&PathBuf> for Source<'_> {
    fn from(path: &PathBuf) -> Self {
        Source::Path(path.clone())
    }
}

impl From<&str> for Source<'_> {
    fn from(path: &str) -> Self {
        Source::Path(PathBuf::from(path))
    }
}

/// Re-executes a session record from the user's own binary: the record's
/// task runs again through its tactic (a programmed one needs its flow in
/// `registry`, as the binary that ran it had), every model call answered
/// from the record, nothing sent. Await it for a [`Rerun`]: the new record
/// and whether every request matched the recorded one. `lllm replay
/// --rerun` is this.
///
/// The tactic is the record's file (a relative path is taken from the
/// directory the run started in); a tactic that had no file
/// ([`Tactic::from_yaml`](crate::Tactic::from_yaml), a config built in
/// code) is rebuilt from the config the record holds. `.tactic(path)` runs
/// another (an edited prompt shows where it changes behaviour), `.model(…)`
/// sets every agent's model. An error is a record or tactic that cannot
/// be read or built; a divergence is not an error but a [`Rerun`] that is
/// not identical.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::{Ctx, Flow, FlowResult, Records, Registry, Tactic, Task};
///
/// /// A programmed tactic: the agent's answer, twice.
/// struct Twice;
/// impl Flow for Twice {
///     const NAME: &'static str = "twice";
///     const AGENTS: &'static [&'static str] = &["echo"];
///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
///         let [echo] = cx.agents(["echo"])?;
///         echo.open("main")?;
///         echo.receive(task.text())?;
///         let reply = echo.respond().await?;
///         Ok(format!("{0} {0}", reply.content))
///     }
/// }
///
/// let registry = Registry::new().flow(Twice);
/// let yaml = "tactic_type: twice\nagent_configs: [{name: echo, model_name: mock/echo}]";
/// let dir = tempfile::tempdir()?;
/// let tactic = Tactic::from_yaml(yaml, ".", &registry)?.with_records(Records::dir(dir.path()));
/// let record = tactic.bcall(["hi"]).records().await.remove(0);
/// assert_eq!(record.delivery.as_deref(), Some("hi hi"), "{:?}", record.error);
///
/// // From the record file the call wrote, in this binary, with its registry:
/// let file = Records::dir(dir.path()).file_for(&record).unwrap();
/// let rerun = lllm::replay::rerun(&file, &registry).await?;
/// assert!(rerun.is_identical(), "{:?}", rerun.difference());
/// assert_eq!(rerun.record.delivery.as_deref(), Some("hi hi"));
/// # Ok(())
/// # }
/// ```
pub fn rerun<'a>(source: impl Into<Source<'a>>, registry: &'a crate::Registry) -> RerunBuilder<'a> {
    RerunBuilder {
        source: source.into(),
        registry,
        tactic: None,
        model: None,
        defaults: crate::config::Defaults::default(),
    }
}

/// A re-run to await: [`rerun`].
#[must_use = "a re-run only runs when awaited"]
pub struct RerunBuilder<'a> {
    source: Source<'a>,
    registry: &'a crate::Registry,
    tactic: Option<PathBuf>,
    model: Option<String>,
    defaults: crate::config::Defaults,
}

impl<'a> RerunBuilder<'a> {
    /// Runs this tactic file instead of the record's (`lllm replay --rerun
    /// --tactic`).
    pub fn tactic(mut self, path: impl Into<PathBuf>) -> RerunBuilder<'a> {
        self.tactic = Some(path.into());
        self
    }

    /// Every agent on `model` (`provider/model`) instead of the run's: any
    /// other than the recorded model diverges at the first call.
    pub fn model(mut self, model: impl Into<String>) -> RerunBuilder<'a> {
        self.model = Some(model.into());
        self
    }

    /// The default model and providers under the tactic, as the run had
    /// them (the command line's config file): a tactic that names no
    /// model needs the one the run used.
    pub fn defaults(mut self, defaults: crate::config::Defaults) -> RerunBuilder<'a> {
        self.defaults = defaults;
        self
    }
}

impl<'a> std::future::IntoFuture for RerunBuilder<'a> {
    type Output = std::result::Result<Rerun, crate::BoxError>;
    type IntoFuture = futures_util::future::BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let loaded;
            let record = match self.source {
                Source::Path(path) => {
                    loaded = load(&path, None)?;
                    &loaded
                }
                Source::Record(record) => record,
                Source::Owned(record) => {
                    loaded = *record;
                    &loaded
                }
            };
            let rerun = rerun_record(
                record,
                self.tactic.as_deref(),
                self.model.as_deref(),
                &self.defaults,
                self.registry,
            )
            .await?;
            Ok(rerun)
        })
    }
}

/// What a re-run found: [`rerun`].
#[derive(Debug, Clone)]
pub struct Rerun {
    /// The re-run's own session record (written nowhere: keep it with
    /// [`Records::write`](crate::Records::write) if wanted).
    pub record: SessionRecord,
    /// The model calls answered from the record.
    pub replayed: usize,
    /// Where and how the re-run differs, `None` when identical.
    difference: Option<String>,
}

impl Rerun {
    /// Every request matched the recorded one, every recorded call was
    /// used, and the outcome (delivery or error, state) is the same.
    pub fn is_identical(&self) -> bool {
        self.difference.is_none()
    }

    /// Where the re-run differs and how, as `lllm replay --rerun` prints
    /// it: the call (agent, dialog, round), the first message that
    /// differs and a line diff of its text; or the calls left over; or the
    /// outcome. `None` when identical.
    pub fn difference(&self) -> Option<&str> {
        self.difference.as_deref()
    }
}

/// [`rerun`] on a loaded record, with the errors the command line tells
/// apart (bad usage, exit 2).
async fn rerun_record(
    record: &SessionRecord,
    tactic: Option<&Path>,
    model: Option<&str>,
    defaults: &crate::config::Defaults,
    registry: &crate::Registry,
) -> crate::error::Result<Rerun> {
    use crate::provider::replay::ReplayProvider;
    use std::sync::Arc;

    // A programmed tactic's body is compiled into the binary that ran it.
    if let Some(name) = record
        .tactic
        .body
        .as_deref()
        .and_then(|body| body.strip_prefix("rust:"))
        && registry.flow_named(name).is_none()
    {
        return Err(crate::error::Error::Usage(format!(
            "tactic `{name}` is a programmed tactic (Rust) that this binary does not register; \
             re-run the record with a binary whose registry has `.flow(…)` for `{name}` \
             (`lllm::replay::rerun(record, &registry)`, or `lllm_cli::main_with(registry)`)"
        )));
    }
    let recorded = record.tactic.path.as_str();
    let mut config = match tactic {
        Some(path) => crate::config::load_with(path, defaults)?,
        // A tactic made in code has no file: the record holds its config.
        None if recorded == crate::config::YAML_LABEL
            || recorded == crate::config::BUILDER_LABEL =>
        {
            // Resolved: the models the run used are in it.
            crate::config::from_recorded(record.tactic.config.value(), recorded)?
        }
        None => {
            // Recorded as given on the command line of the run: relative to
            // the directory it ran in.
            let path = Path::new(recorded);
            if !path.exists() {
                return Err(crate::error::Error::Usage(format!(
                    "the record's tactic `{recorded}` is not here (a relative path is taken from \
                     the directory the run started in); run from there or pass `--tactic FILE`"
                )));
            }
            crate::config::load_with(path, defaults)?
        }
    };
    // `--model`, else the run's: its `--model`, else the task's own.
    if let Some(model) = model
        .or(record.tactic.model.as_deref())
        .or(record.model.as_deref())
    {
        config.override_model(model);
    }
    // The run's `-O` too: the requests it sent had them.
    config.override_model_args(&record.tactic.model_args);
    let provider = Arc::new(ReplayProvider::new(recorded_calls(record)));
    // Served tactics answer from the record too: their contracts while the
    // tactic builds, their runs while it runs (issue 30).
    let remote = Arc::new(crate::tactic::remote::exchange::Replay::new(
        crate::tactic::remote::exchange::recorded(record),
    ));
    let mut built = crate::tactic::remote::exchange::replaying_sync(remote.clone(), || {
        crate::tactic::Tactic::build_replaying(config, provider.clone(), registry)
    })?;
    // A typed run (`call_typed`) was held to a schema its tactic lacks.
    built.hold_as_recorded(&record.tactic)?;
    built.check(&record.args.keys().cloned().collect())?;
    built.start().await?;
    let task = record.task_input();
    let rerun = crate::tactic::remote::exchange::replaying(remote.clone(), built.run(task)).await;
    built.shutdown().await;
    let replayed = provider.served();
    let difference = if let Some(divergence) = provider.divergence() {
        Some(divergence.to_string())
    } else if let Some(divergence) = remote.divergence() {
        Some(divergence)
    } else if remote.remaining() > 0 {
        Some(format!(
            "the re-run made {} to served tactics; the record has {} more",
            count(remote.served() as u64, "call", "calls"),
            remote.remaining()
        ))
    } else if provider.remaining() > 0 {
        Some(format!(
            "the re-run made {}; the record has {} more",
            count(replayed as u64, "model call", "model calls"),
            provider.remaining()
        ))
    } else if rerun.delivery != record.delivery || rerun.state != record.state {
        Some(format!(
            "every model call matched, but the outcome differs (tools or templates): recorded {:?}, now {:?}",
            record.delivery.as_deref().or(record.error.as_deref()),
            rerun.delivery.as_deref().or(rerun.error.as_deref())
        ))
    } else {
        None
    };
    Ok(Rerun {
        record: rerun,
        replayed,
        difference,
    })
}

/// `lllm replay --rerun`: [`rerun`] with what it found printed: `identical:
/// …` on stdout (exit 0), or where it differs on stderr (exit 1).
#[doc(hidden)]
pub async fn rerun_with(
    record: &SessionRecord,
    tactic: Option<&Path>,
    model: Option<&str>,
    defaults: &crate::config::Defaults,
    registry: &crate::Registry,
) -> crate::error::Result<crate::error::Outcome> {
    use crate::error::Outcome;

    let rerun = rerun_record(record, tactic, model, defaults, registry).await?;
    if let Some(difference) = rerun.difference() {
        // One line at a time: a line of a message is a line of the diff
        // (each still has its control characters escaped).
        let text = format!("lllm replay: {difference}");
        for line in text.lines() {
            crate::output::stderr_line(line);
        }
        return Ok(Outcome::Failed);
    }
    crate::output::stdout(&format!(
        "identical: {} replayed, same {}\n",
        count(rerun.replayed as u64, "model call", "model calls"),
        if rerun.record.delivery.is_some() {
            "delivery"
        } else {
            "error"
        }
    ))?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_shows_the_start_of_a_text_of_any_length() {
        for (text, max, shown) in [
            ("a  b\n\tc", 10, "a b c"),
            ("one two three", 7, "one two…"),
            ("", 5, ""),
            ("naïve café au lait", 10, "naïve café…"),
        ] {
            assert_eq!(one_line(text, max), shown, "{text:?}");
        }
        // Only the start is looked at: a long text of spaces then words
        // shows as continuing.
        let long = format!("start{}end", " ".repeat(1 << 20));
        assert_eq!(one_line(&long, 10), "start…");
        let words = "word ".repeat(1 << 20);
        assert_eq!(one_line(&words, 12), "word word wo…");
    }
}
