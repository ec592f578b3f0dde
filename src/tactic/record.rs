//! The session record (docs/formats.md §5, `format: lllm.session/3`): one self-contained
//! JSON document per tactic run, holding the resolved config, every prompt
//! used, every dialog of the fork tree and every agent call with all invokes.
//!
//! Bump `FORMAT` when a field changes meaning or goes away; adding a field
//! keeps the version (readers ignore what they do not know). Version 2 is
//! version 1 without the parts that repeat others (each invoke's response
//! held by its working dialog, each call's delivery); version 3 also holds
//! the task, the delivery and prompt templates once (`compact`). `expand`
//! puts everything back, so every version in `READS` reads the same.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::agent::AgentCallSession;
use crate::dialog::{DialogRecord, InvokeCost, Message};
use crate::redact::{Scrub, Scrubber};

/// Where a written record (format 3) cut its texts out of messages (`SessionRecord::shared`).
pub use super::compact::{SharedTexts, TextAt};
/// How much a record read from a file may hold once expanded, and why one was refused.
pub use super::expansion::{ExpansionLimit, Oversized};
/// Kept here for callers that name it by its old place; it lives in `crate::time`.
pub(crate) use crate::time::timestamp;

/// The format this lllm writes, in every record's `format`.
pub const FORMAT: &str = "lllm.session/3";

/// The versions this lllm reads.
pub const READS: [&str; 3] = ["lllm.session/1", "lllm.session/2", FORMAT];

/// The file a batch appends its records to, one compact record a line, in
/// its output directory; `lllm logs` and the session store find records by
/// this name.
pub const SESSIONS_FILE: &str = "sessions.jsonl";

/// [`SESSIONS_FILE`] of a batch run with `--compress`: the same lines in
/// zstd frames.
pub const SESSIONS_FILE_COMPRESSED: &str = "sessions.jsonl.zst";

/// How a tactic run ended, written `success`, `failure` or `skipped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// The run delivered: [`SessionRecord::delivery`] holds the answer.
    Success,
    /// The run gave up (or was interrupted): [`SessionRecord::error`] says why.
    Failure,
    /// A batch task stopped from outside before it could finish: cancelled
    /// (`--fail-fast`, Ctrl-C) or a call the budget (`--max-cost`) would not
    /// send; [`SessionRecord::error`] says which. Its result line is
    /// `skipped` too, and `lllm batch --resume` runs it again. Added during
    /// format 3 (a run of `Tactic::run` never ends so by itself).
    Skipped,
}

/// As records write it ([`RunState::name`]).
impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl RunState {
    /// `success`, `failure` or `skipped`, as records write it.
    pub fn name(self) -> &'static str {
        match self {
            RunState::Success => "success",
            RunState::Failure => "failure",
            RunState::Skipped => "skipped",
        }
    }
}

/// Which tactic ran, and as what: enough for `lllm replay --rerun` to run it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TacticInfo {
    /// The tactic's `tactic_type`, else its file's stem.
    pub name: String,
    /// The tactic file, as it was given; `<yaml>` for a tactic built from
    /// YAML text, `<builder>` for one built with `TacticConfig::builder`.
    pub path: String,
    /// The resolved tactic (after `base`, merges and defaults); holds no secrets.
    pub config: SharedJson,
    /// The `--model` the run was given (every agent used it), so that
    /// `lllm replay --rerun` runs the tactic with it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The `-O` model arguments the run was given (over every agent's, or
    /// one agent's), so that `lllm replay --rerun` sends them too; absent
    /// when none were. Added during format 3.
    #[serde(default, skip_serializing_if = "crate::config::ModelArgs::is_empty")]
    pub model_args: crate::config::ModelArgs,
    /// Where the tactic's program is: absent for a YAML flow (the config
    /// holds it), `rust:NAME` for a programmed tactic compiled into the
    /// binary that ran it (`Registry::flow`), which `lllm replay --rerun`
    /// needs registered too. Added in format 2; older records lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The JSON Schema the run's delivery was held to (upstream
    /// `TacticInfo.output_schema`): the tactic's `output_schema:`, or the
    /// schema `Tactic::call_typed` derived from its output type, so that
    /// `lllm replay --rerun` holds the re-run to it too; absent when none
    /// was. Added during format 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// A part of a record serialized once and shared by every record that holds
/// it: a tactic's resolved config and its prompts are the same for all the
/// tasks of a batch, so they are neither copied nor serialized again per task.
#[derive(Debug, Clone)]
pub struct SharedJson(Arc<RawValue>);

impl SharedJson {
    /// `value` serialized once (`null` if it cannot be serialized).
    pub fn new<T: Serialize + ?Sized>(value: &T) -> SharedJson {
        let raw = serde_json::value::to_raw_value(value)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("valid JSON"));
        SharedJson(Arc::from(raw))
    }

    /// The JSON as a `Value`, parsed anew on each call.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for SharedJson {
    fn eq(&self, other: &SharedJson) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Serialize for SharedJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedJson {
    /// Through a `Value`, so it reads from any deserializer (records are
    /// checked as a `Value` first).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SharedJson, D::Error> {
        Ok(SharedJson::new(&Value::deserialize(deserializer)?))
    }
}

/// A prompt as a record keeps it: its template and how replies to it are
/// parsed, repaired and rendered (names absent when they are the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptInfo {
    /// Hex SHA-256 of the template.
    pub sha256: String,
    /// The template as written.
    pub template: String,
    /// The parser as front matter writes it (`tags`, a mapping, or a
    /// registered parser's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parser: Option<serde_json::Value>,
    /// A registered handler's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The renderer's name, unless `jinja`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renderer: Option<String>,
}

impl PromptInfo {
    /// What the record keeps of `prompt`.
    pub fn of(prompt: &crate::prompt::Prompt) -> PromptInfo {
        PromptInfo {
            sha256: prompt.sha256(),
            template: prompt.template().to_string(),
            parser: prompt.parser.as_ref().map(crate::prompt::Parser::to_value),
            handler: prompt.handler_name.clone(),
            renderer: match prompt.renderer() {
                crate::prompt::Renderer::Jinja => None,
                other => Some(other.name().to_string()),
            },
        }
    }
}

/// One finished flow step: which agent call produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step's name (its node in the flow, or `respond().step(name)` of a
    /// programmed tactic).
    pub step: String,
    /// The agent that made the step's call (for a sub-tactic step, the
    /// sub-tactic's name).
    pub agent: String,
    /// The agent's name for the dialog the call was made on.
    pub dialog: String,
    /// Index into `agent_calls`; for a sub-tactic step, the number of this
    /// session's agent calls made before it (its place in the call order).
    pub agent_call: usize,
    /// For a step that ran another tactic: index into `sub_tactic_sessions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_tactic: Option<usize>,
}

/// The record of one tactic run on one task (`lllm.session/2`): the tactic
/// as resolved, the task, the outcome, every dialog and every agent call
/// with all its invokes, and the cost. [`Tactic::run`](crate::Tactic::run)
/// returns it whether the run succeeded or not; `lllm run` writes it as JSON
/// (see [`write`](SessionRecord::write)), and `lllm replay` reads it back.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::tactic::RunState;
/// use lllm::{Registry, SessionRecord, Tactic};
///
/// let yaml = "
/// tactic_type: echo
/// agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]
/// ";
/// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
/// let record = tactic.run("hello".into()).await;
///
/// assert_eq!(record.state, RunState::Success);
/// assert_eq!(record.delivery.as_deref(), Some("hello"));
/// assert_eq!(record.tactic.name, "echo");
/// assert_eq!(record.tactic.path, "<yaml>");
/// assert_eq!(record.task, "hello");
/// assert_eq!(record.agent_calls.len(), 1);
/// assert_eq!(record.invoke_count(), 1);
/// assert!(record.cost_known); // the mock providers cost nothing
///
/// assert_eq!(record.agent_calls[0].delivery().map(|reply| reply.content.as_str()), Some("hello"));
///
/// // Written, each reply is kept once, in its dialog; read back, `expand`
/// // puts it back in the call.
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("session.json");
/// record.write(&path)?;
/// let mut read: SessionRecord = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
/// read.expand();
/// assert_eq!(read.session_id, record.session_id);
/// assert_eq!(read.agent_calls[0].delivery().map(|reply| reply.content.as_str()), Some("hello"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The record's format ([`FORMAT`] when this lllm wrote it).
    pub format: String,
    /// A fresh UUID (version 7, so ids sort by start time) naming this run.
    pub session_id: String,
    /// Which tactic ran.
    pub tactic: TacticInfo,
    /// The task's id (a batch line's `id`); `null` when it had none.
    pub task_id: Option<String>,
    /// The task: a string, or any JSON value.
    pub task: Value,
    /// The task's template arguments.
    #[serde(default)]
    pub args: Map<String, Value>,
    /// The task's labels (never sent to a model).
    #[serde(default)]
    pub tags: Map<String, Value>,
    /// The task's metadata: free-form notes, never sent to a model. Added
    /// in format 2 without a version bump; older records lack it.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// The model the task named for every agent (`Task::model`; issue 15,
    /// additive to format 2 like the fields below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Model arguments the task set over every agent's own.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model_args: Map<String, Value>,
    /// The conversation the task came with (system messages and history).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// The parts sent with the task's user turn (images as `data:` URLs,
    /// text files as text), so a re-run needs none of the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::dialog::ContentPart>,
    /// When the run began: RFC 3339 in UTC, with milliseconds.
    pub started_at: String,
    /// When it ended, in the same form.
    pub ended_at: String,
    /// Milliseconds from start to end.
    pub latency_ms: u64,
    /// How the run ended.
    pub state: RunState,
    /// The run's answer as text (the last step's reply, or what a programmed
    /// tactic returned); `null` when the run failed.
    pub delivery: Option<String>,
    /// Why the run failed, in one line; `null` when it succeeded.
    pub error: Option<String>,
    /// Every prompt of the tactic: `key → PromptInfo` (its SHA-256 and template).
    pub prompts: SharedJson,
    /// The finished flow steps, in the order they finished.
    pub steps: Vec<StepRecord>,
    /// Every dialog of every agent, forks included, as a tree by parent id.
    pub dialogs: Vec<DialogRecord>,
    /// Every agent call of this run, in the order they were made (a
    /// sub-tactic's calls are in its own session).
    pub agent_calls: Vec<AgentCallSession>,
    /// Sessions of the tactics this one's steps ran, in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_tactic_sessions: Vec<SessionRecord>,
    /// Every call the run made to a served tactic (a `tactic: http://…`
    /// step, a tactic tool), in the order they ended: what `lllm replay
    /// --rerun` answers them from (issue 30; additive to format 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_calls: Vec<crate::tactic::remote::RemoteCall>,
    /// The trace the run belonged to (issue 31; additive to format 3):
    /// absent when it had none (no `traceparent` came with it and no
    /// exporter was on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace_context::RunTrace>,
    /// Everything the run spent, sub-tactics included.
    pub cost: InvokeCost,
    /// Whether every call's price was known, so `cost` is the whole of it
    /// (the same as `cost.cost_known`).
    pub cost_known: bool,
    /// Present in a record's written form (format 3): the texts cut out of
    /// messages because the record holds them elsewhere, and where they go
    /// back; its presence also says that messages leave out their own
    /// dialog's id. [`expand`](SessionRecord::expand) takes it away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<super::compact::SharedTexts>,
}

/// What the record stores is a public field (serialized as it is:
/// `state`, `delivery`, `cost`, …); what is derived from it is a method
/// (`task_input()`, the `…_count()`s, `is_success()`), and no name is both
/// (docs/library.md, "Fields and methods").
impl SessionRecord {
    /// Whether the run delivered ([`RunState::Success`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// let record = lllm::quick("hi").model("mock/echo").record().await?;
    /// assert!(record.is_success());
    /// assert_eq!((record.invoke_count(), record.retry_count()), (1, 0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_success(&self) -> bool {
        self.state == RunState::Success
    }

    /// The task this record ran, as it was given (id, text, arguments,
    /// labels, model, conversation and attachments): what a re-run runs.
    pub fn task_input(&self) -> super::Task {
        super::Task {
            id: self.task_id.clone(),
            task: self.task.clone(),
            args: self.args.clone(),
            tags: self.tags.clone(),
            metadata: self.metadata.clone(),
            model: self.model.clone(),
            model_args: self.model_args.clone(),
            messages: self.messages.clone(),
            attachments: self.attachments.clone(),
        }
    }

    /// Calls (`lllm::words`): requests sent to providers, failed ones and
    /// retries included, sub-tactics included;
    /// replies from the response cache are not sent ([`cache_hit_count`](Self::cache_hit_count)).
    pub fn invoke_count(&self) -> usize {
        self.count_invokes(false)
    }

    /// Invokes answered from the response cache, sub-tactics included.
    pub fn cache_hit_count(&self) -> usize {
        self.count_invokes(true)
    }

    /// Retries (`lllm::words`): calls that repeated a request after a
    /// provider error, sub-tactics included.
    pub fn retry_count(&self) -> usize {
        let own: usize = self
            .agent_calls
            .iter()
            .map(AgentCallSession::retry_count)
            .sum();
        let nested: usize = self
            .sub_tactic_sessions
            .iter()
            .map(SessionRecord::retry_count)
            .sum();
        own + nested
    }

    fn count_invokes(&self, cached: bool) -> usize {
        let own: usize = self
            .agent_calls
            .iter()
            .flat_map(|call| &call.invokes)
            .filter(|invoke| invoke.cached == cached)
            .count();
        let nested: usize = self
            .sub_tactic_sessions
            .iter()
            .map(|session| session.count_invokes(cached))
            .sum();
        own + nested
    }

    /// Puts back what a written record leaves out because it repeats
    /// something else in it: the messages each fork shares with its parent
    /// (`DialogRecord::inherited`), each call's delivery (the last
    /// invoke's response), and the texts `shared` places in messages, here
    /// and in the sub-tactic sessions. Call it on a
    /// record read from disk, and on one fresh from a run before reading its
    /// calls' replies ([`AgentCallSession::delivery`], each invoke's
    /// `response`): a run's record keeps them in its dialogs only.
    /// Expanding twice changes nothing.
    pub fn expand(&mut self) {
        super::compact::expand(self);
    }

    /// [`expand`](Self::expand) for a record read from a file: refused
    /// before anything is copied when it would hold more than `limit` once
    /// expanded (messages, and their size as JSON, sub-tactic sessions
    /// included). A fork names the messages it shares with its parent by
    /// count, so a small file can name one history from thousands of forks;
    /// [`ExpansionLimit::READ`] is what lllm's readers accept. A record
    /// refused may be partly expanded: drop it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::tactic::record::{ExpansionLimit, Oversized};
    /// use lllm::{Registry, SessionRecord, Tactic};
    ///
    /// let yaml = "agent_configs: [{name: echo, model_name: mock/echo}]";
    /// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
    /// // The written form, as `lllm run` writes it.
    /// let record = tactic
    ///     .run_until("hello".into(), None, std::future::pending())
    ///     .await;
    /// let text = serde_json::to_string(&record)?;
    ///
    /// let mut read: SessionRecord = serde_json::from_str(&text)?;
    /// read.expand_within(ExpansionLimit::READ)?;
    /// assert_eq!(read.agent_calls[0].delivery().map(|reply| reply.content.as_str()), Some("hello"));
    ///
    /// let mut read: SessionRecord = serde_json::from_str(&text)?;
    /// let tiny = ExpansionLimit { messages: 2, bytes: 1 << 20 };
    /// assert!(matches!(read.expand_within(tiny), Err(Oversized::Messages { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expand_within(&mut self, limit: ExpansionLimit) -> Result<(), Oversized> {
        super::compact::expand_within(self, limit)
    }

    /// Writes the record as pretty JSON, atomically: a crash leaves either the
    /// old file or the new one, never half of one. When writing fails (a full
    /// disk, a path that is a directory), the temporary file is removed. A
    /// path ending in `.zst` (`run.json.zst`) is written zstd-compressed;
    /// every reader of records takes either form.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, SessionRecord, Tactic};
    ///
    /// let tactic = Tactic::from_yaml("agent_configs: [{name: a, model_name: mock/echo}]", ".", &Registry::new())?;
    /// let record = tactic.run("Hello".into()).await;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join(format!("{}.json", record.session_id));
    /// record.write(&path)?; // `lllm replay PATH` shows it
    /// let text = std::fs::read_to_string(&path)?;
    /// let read: SessionRecord = serde_json::from_str(&text)?;
    /// assert_eq!(read.delivery.as_deref(), Some("Hello"));
    /// # Ok(()) }
    /// ```
    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let path = path.as_ref();
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)?;
        }
        let mut text = serde_json::to_vec_pretty(self)?;
        text.push(b'\n');
        if path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().ends_with(".zst"))
        {
            text = crate::jsonl::encode_all(&text)?;
        }
        // A temporary file of this writer's own: runs given one `--record`
        // each leave a whole record (the last rename wins).
        crate::file::atomic::write(path, &text)
    }
}

impl SessionRecord {
    /// Scrubs what this run itself put in the record (see the [`Scrub`]
    /// impl) of a fresh record, before it is compacted: its sub-tactic
    /// sessions were scrubbed when their own runs made them, with these
    /// secrets among theirs (`Builder::secrets`), and are compacted already.
    pub(super) fn scrub_own(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        if scrubber.is_empty() {
            return false;
        }
        let SessionRecord {
            format: _,
            session_id: _,
            tactic,
            // The task's id joins the record to its result line and to
            // `--resume`: written as the task gave it.
            task_id: _,
            task,
            args,
            tags,
            metadata,
            model,
            model_args,
            messages,
            attachments,
            started_at: _,
            ended_at: _,
            latency_ms: _,
            state: _,
            delivery,
            error,
            // The tactic's prompts and config are scrubbed once, when it is
            // built (`Tactic::assemble`), not per record.
            prompts: _,
            steps,
            dialogs,
            agent_calls,
            sub_tactic_sessions: _,
            remote_calls,
            cost: _,
            cost_known: _,
            // Ids only: nothing of the run's.
            trace: _,
            shared: _,
        } = self;
        let TacticInfo {
            name,
            path,
            config: _,
            model: tactic_model,
            model_args: command_line_args,
            body,
            output_schema: _,
        } = tactic;
        let mut found = name.scrub(scrubber)
            | path.scrub(scrubber)
            | tactic_model.scrub(scrubber)
            | command_line_args.all.scrub(scrubber)
            | command_line_args
                .agents
                .values_mut()
                .fold(false, |found, args| args.scrub(scrubber) | found)
            | body.scrub(scrubber)
            | task.scrub(scrubber)
            | args.scrub(scrubber)
            | tags.scrub(scrubber)
            | metadata.scrub(scrubber)
            | model.scrub(scrubber)
            | model_args.scrub(scrubber)
            | messages.scrub(scrubber)
            | attachments.scrub(scrubber)
            | delivery.scrub(scrubber)
            | error.scrub(scrubber)
            | dialogs.scrub(scrubber)
            | agent_calls.scrub(scrubber);
        for call in remote_calls {
            found |= call.request.scrub(scrubber)
                | call.answer.scrub(scrubber)
                | call.error.scrub(scrubber);
        }
        for step in steps {
            let StepRecord {
                step,
                agent,
                dialog,
                agent_call: _,
                sub_tactic: _,
            } = step;
            found |= step.scrub(scrubber) | agent.scrub(scrubber) | dialog.scrub(scrubber);
        }
        found
    }
}

/// The request side of a record as its reply side: every text a task, a
/// prompt, a tool or a model put in it (task, arguments, labels, model
/// arguments, conversation, attachments, every dialog and agent call, the
/// delivery and the errors) holds `***` where it held a secret. A run's
/// record is scrubbed of its providers' secrets where the run makes it
/// ([`Tactic::run`](crate::Tactic::run) and every way of running one); the
/// requests sent kept them. Ids (the task's included: it joins the record to
/// its result), digests, times and costs are left as they are.
/// A record in its written form is expanded first (the places of its shared
/// texts would no longer fit); sub-tactic sessions are scrubbed too.
///
/// ```
/// use lllm::redact::{Scrub, Scrubber, Secrets};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// let yaml = "agent_configs: [{name: echo, model_name: mock/echo}]";
/// let tactic = lllm::Tactic::from_yaml(yaml, ".", &lllm::Registry::new())?;
/// let mut record = tactic.run("my key is sk-0123456789".into()).await;
///
/// let mut secrets = Secrets::new();
/// secrets.add("sk-0123456789");
/// assert!(record.scrub(&mut Scrubber::new(&secrets)));
/// assert_eq!(record.task, "my key is ***");
/// assert!(!serde_json::to_string(&record)?.contains("sk-0123456789"));
/// # Ok(())
/// # }
/// ```
/// One line: tactic, task id (`-` when none), state, calls (with retries),
/// cost, the session id, and why it failed when it did.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::{Registry, Tactic, Task};
///
/// let yaml = "agent_configs: [{name: echo, model_name: mock/echo}]";
/// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
/// let record = tactic.run(Task::new("hello").id("t1")).await;
/// assert_eq!(
///     record.to_string(),
///     format!("<yaml> t1: success, 1 call, {} (session {})", record.cost, record.session_id),
/// );
/// # Ok(())
/// # }
/// ```
impl std::fmt::Display for SessionRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}, {}, {} (session {})",
            self.tactic.name,
            self.task_id.as_deref().unwrap_or("-"),
            self.state,
            crate::words::calls(self.invoke_count() as u64, self.retry_count() as u64),
            self.cost,
            self.session_id
        )?;
        if let Some(error) = &self.error {
            write!(f, "; {}", error.lines().next().unwrap_or_default())?;
        }
        Ok(())
    }
}

impl Scrub for SessionRecord {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        if scrubber.is_empty() {
            return false;
        }
        if self.shared.is_some() {
            self.expand();
        }
        self.scrub_own(scrubber) | self.sub_tactic_sessions.scrub(scrubber)
    }
}

/// A time-ordered UUID (version 7, RFC 9562), hyphenated:
/// `019a2b3c-4d5e-7f60-8a1b-2c3d4e5f6a7b`. The first 48 bits are the Unix time
/// in milliseconds, so ids sort by start time as text; the other 74 bits are a
/// counter seeded at random each millisecond plus random bits, so ids made in
/// one process are strictly increasing and ids made anywhere else collide with
/// negligible probability (the former `20261122_081500_ab12cd34` form had 32
/// random bits per second: likely to repeat within a 100k-task batch).
/// Readers take any string as a session id, so records with the old form
/// still read and replay.
pub fn new_session_id() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    uuid::Uuid::now_v7()
        .hyphenated()
        .encode_lower(&mut buffer)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_unique_and_ordered_even_within_one_millisecond() {
        let before = chrono::Utc::now().timestamp_millis() as u64;
        // Far more ids than one millisecond holds: many share their time stamp.
        let ids: Vec<String> = (0..200_000).map(|_| new_session_id()).collect();
        let after = chrono::Utc::now().timestamp_millis() as u64;
        let mut same_millisecond = 0;
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
            same_millisecond += usize::from(pair[0][..13] == pair[1][..13]);
        }
        assert!(same_millisecond > 1000, "{same_millisecond}");
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        for id in [&ids[0], &ids[ids.len() - 1]] {
            let uuid = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(uuid.get_version_num(), 7, "{id}");
            assert_eq!(id.len(), 36);
            let (seconds, nanos) = uuid.get_timestamp().unwrap().to_unix();
            let millis = seconds * 1000 + u64::from(nanos) / 1_000_000;
            assert!(before <= millis && millis <= after, "{id}");
        }
        // Ids from several threads at once are unique too.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..20_000).map(|_| new_session_id()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for thread in threads {
            for id in thread.join().unwrap() {
                assert!(all.insert(id));
            }
        }
    }

    #[test]
    fn a_run_records_its_requests_without_the_providers_secrets() {
        const KEY: &str = "sk-record-secret-0077";
        let yaml = "tactic_type: echo\nagent_configs: [{name: echo, model_name: mock/echo, \
                    system_prompt: 'You know {{ token }}.', model_args: {user: sk-record-secret-0077}}]\n";
        let config = crate::config::from_yaml(yaml, ".").unwrap();
        // A key the registry reads is a secret of every provider's run.
        let env = |name: &str| (name == "OPENAI_API_KEY").then(|| KEY.to_string());
        let tactic = crate::Tactic::build(config, &env).unwrap();
        let task = super::super::Task::new(format!("the key is {KEY}"))
            .arg("token", KEY)
            .tag("label", KEY)
            .model_arg("metadata", KEY)
            .message(Message::user(format!("earlier: {KEY}")))
            .attach(crate::dialog::ContentPart::text(format!("file {KEY}")));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let written =
            runtime.block_on(tactic.run_until(task.clone(), None, std::future::pending()));
        let text = serde_json::to_string(&written).unwrap();
        assert!(!text.contains(KEY), "{text}");
        let mut read: SessionRecord = serde_json::from_str(&text).unwrap();
        read.expand();
        let whole = runtime.block_on(tactic.run(task));
        for record in [&read, &whole] {
            assert_eq!(record.state, RunState::Success, "{:?}", record.error);
            assert_eq!(record.task, "the key is ***");
            assert_eq!(record.args["token"], "***");
            assert_eq!(record.tags["label"], "***");
            assert_eq!(record.model_args["metadata"], "***");
            assert_eq!(record.messages[0].content, "earlier: ***");
            let messages = &record.dialogs[0].messages;
            assert_eq!(messages[0].content, "You know ***.");
            assert!(
                messages
                    .iter()
                    .all(|message| !message.content.contains(KEY))
            );
            let request = &record.agent_calls[0].invokes[0].request;
            assert_eq!(request.model_args["user"], "***");
            assert_eq!(request.model_args["metadata"], "***");
            let json = serde_json::to_string(record).unwrap();
            assert!(!json.contains(KEY), "{json}");
        }
        assert_eq!(read.delivery, whole.delivery);
        assert!(!tactic.recorded_config.0.get().contains(KEY));
    }

    #[test]
    fn writers_of_one_record_path_all_succeed_with_a_whole_record() {
        // They shared `.same.json.tmp`: one writer's `File::create` cut
        // another's bytes and one's rename took the file the other was about
        // to rename ("No such file or directory", no record).
        let yaml = "tactic_type: echo\nagent_configs: [{name: echo, model_name: mock/echo}]\n";
        let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let record = runtime.block_on(tactic.run_until(
            "the same task".into(),
            None,
            std::future::pending(),
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("same.json");
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| (0..40).map(|_| record.write(&path)).collect::<Vec<_>>()))
                .collect();
            for writer in writers {
                for written in writer.join().unwrap() {
                    written.unwrap();
                }
            }
        });
        let read: SessionRecord =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read.session_id, record.session_id);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file stays");
    }
}
