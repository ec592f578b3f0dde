//! Agents: a model, a system prompt and tools, owning named dialogs.
//!
//! This file holds the agent and its dialog API (the seeds' verbs: open,
//! fork, close, switch, receive, receive_prompt, receive_image); `respond`
//! is the awaited builder of a call, `call` runs the agent loop on a dialog,
//! `session` records it, `context` and `tokens` keep requests inside the
//! model's window.

mod call;
pub mod context;
mod echo;
mod handler;
mod in_flight;
mod repeats;
mod respond;
pub mod session;
pub mod tokens;

use std::borrow::Cow;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::dialog::{Dialog, ImageSource, Message, Role};
use crate::prompt::{Prompt, Registry as PromptRegistry};
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::Resolved;
use crate::tool::Toolbox;

pub use context::ContextManager;
pub use handler::{DefaultHandler, Handler, Handlers};
pub use respond::{CallError, CallOptions, Respond};
pub use session::{AgentCallSession, CallState, InvokeTrace, RequestDigest};

/// Receives the text of streamed replies as it arrives: a consumer of the
/// run's events ([`crate::Event`]) that sees only their text.
pub type SharedTextSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Why an agent's dialog verb ([`Agent::open`], [`Agent::switch`],
/// [`Agent::receive_prompt`], …) failed; each variant names the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The verb named a dialog the agent does not have.
    #[error("agent `{agent}` has no dialog `{alias}` (open: {available})")]
    NoDialog {
        /// The agent's name.
        agent: String,
        /// The dialog asked for.
        alias: String,
        /// The dialogs it has, comma-separated.
        available: String,
    },
    /// `open` or `fork` named a dialog the agent already has.
    #[error("agent `{agent}` already has a dialog `{alias}`; fork or close it first")]
    DialogExists {
        /// The agent's name.
        agent: String,
        /// The dialog name already taken.
        alias: String,
    },
    /// A verb that acts on the active dialog ran with none open.
    #[error("agent `{agent}` has no active dialog; open one first")]
    NoActiveDialog {
        /// The agent's name.
        agent: String,
    },
    /// The dialog refused the change (see [`crate::dialog::Error`]).
    #[error("agent `{agent}`: {source}")]
    Dialog {
        /// The agent's name.
        agent: String,
        /// What the dialog said.
        source: crate::dialog::Error,
    },
    /// A prompt could not be found or rendered (see [`crate::prompt::Error`]).
    #[error("agent `{agent}`: {source}")]
    Prompt {
        /// The agent's name.
        agent: String,
        /// What the prompt layer said.
        source: crate::prompt::Error,
    },
    /// A prompt was named by key, but the agent was built without a prompt
    /// registry to look it up in.
    #[error("agent `{agent}` has no prompt registry to find `{key}` in; pass a `Prompt` instead")]
    NoPrompts {
        /// The agent's name.
        agent: String,
        /// The prompt key asked for.
        key: String,
    },
    /// Arguments (a prompt's, the model's, the parser's) or metadata were
    /// given as something other than a JSON object.
    #[error("agent `{agent}`: {source}")]
    Args {
        /// The agent's name.
        agent: String,
        /// What was given (`prompt arguments`, `model arguments`,
        /// `parser arguments` or `metadata`) and what it was instead.
        source: crate::args::ArgsError,
    },
}

/// The result of an agent's dialog verbs.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What every agent of a run shares: the tools, the MCP servers, the price
/// table and its warnings.
pub struct Runtime {
    /// Every tool of the tactic by name: its `tools:` and `builtin_tools:`
    /// and the tools its registry adds. An agent is offered those its
    /// `tools` list names.
    pub toolbox: Toolbox,
    /// The tactic's MCP servers (started before its first request), with their tools.
    pub mcp: crate::tool::McpServers,
    /// Models by name with their prices (the bundled table under the
    /// tactic's `pricing` and `--prices`), for the cost of each reply.
    pub prices: Arc<ModelTable>,
    /// Warns once per model that has no known price, however many calls use it.
    pub price_warnings: UnknownPriceWarnings,
    /// The handlers prompts may name (`handler: NAME`).
    pub handlers: Handlers,
    /// Every secret the run's providers know: what a record keeps of a
    /// request is scrubbed of them (`redact::Scrub`), its digest included.
    pub secrets: Arc<crate::redact::Secrets>,
}

/// Loop limits of an agent (seed names).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How many replies that do not parse are sent back for repair before
    /// the call fails.
    pub max_exception_retry: u32,
    /// 0 means unlimited up to a hard cap of 100 rounds (D3).
    pub max_interrupt_steps: u32,
    /// How many times one request is retried after a provider error that is
    /// not permanent (rate limit, server error, timeout) before the call
    /// fails: at most `max_llm_recall + 1` attempts.
    pub max_llm_recall: u32,
}

/// Everything an agent is made of, before it owns any dialog.
#[derive(Clone)]
pub struct AgentSpec {
    /// The agent's name, unique in its tactic.
    pub name: String,
    /// The prompt every dialog of the agent opens with.
    pub system_prompt: Arc<Prompt>,
    /// As configured: `provider/model`.
    pub model_name: String,
    /// The provider that serves `model_name`, with the model's name there
    /// and its retry settings.
    pub model: Resolved,
    /// Arguments sent with every request (`temperature`, `max_tokens`, …).
    pub model_args: Map<String, Value>,
    /// Names of the tools of the [`Runtime::toolbox`] the agent is offered.
    pub tools: Vec<String>,
    /// MCP servers whose tools the agent is offered (agent config `mcp_servers`).
    pub mcp_servers: Vec<String>,
    /// The agent's loop limits.
    pub limits: Limits,
    /// What keeps requests inside the model's window; `None` sends every
    /// dialog whole.
    pub context_manager: Option<Arc<dyn ContextManager>>,
    /// Which of the provider's APIs requests go to (chat completions or responses).
    pub api_type: crate::dialog::ApiType,
}

/// One agent of a run: its spec (model, system prompt, tools, limits) and the
/// named dialogs it owns, one of them active. The seeds' verbs act on the
/// active dialog: [`open`](Agent::open), [`fork`](Agent::fork),
/// [`switch`](Agent::switch), [`close`](Agent::close),
/// [`receive`](Agent::receive), [`receive_prompt`](Agent::receive_prompt),
/// [`receive_image`](Agent::receive_image) and [`respond`](Agent::respond).
///
/// A programmed tactic gets its agents from [`Ctx`](crate::Ctx):
///
/// ```
/// # use lllm::{Ctx, Flow, FlowResult, Registry, Task};
/// # struct Echo;
/// # impl Flow for Echo {
/// #     const NAME: &'static str = "echo_twice";
/// #     const AGENTS: &'static [&'static str] = &["echo"];
/// async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
///     let echo = cx.agent("echo")?;
///     echo.open("main")?;                     // the system prompt, rendered with the task
///     echo.receive(task.text())?;
///     let first = echo.respond().await?;      // the accepted reply, a `Message`
///     echo.fork("main", "again")?;            // a copy of `main`, now the active dialog
///     echo.receive("once more")?;
///     let second = echo.respond().session().await?; // the whole `AgentCallSession`
///     assert!(second.is_success());
///     Ok(format!("{} / {}", first.content, second.delivery().unwrap().content))
/// }
/// # }
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("echo.yaml");
/// # std::fs::write(&path, "tactic_type: echo_twice\nagent_configs:\n  - {name: echo, model_name: mock/echo}\n").unwrap();
/// # let registry = Registry::new().flow(Echo);
/// # let tactic = lllm::Tactic::load(&path, &registry).unwrap();
/// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("hello".into()));
/// # assert_eq!(record.delivery.as_deref(), Some("hello / once more"), "{:?}", record.error);
/// ```
pub struct Agent {
    spec: Arc<AgentSpec>,
    runtime: Arc<Runtime>,
    dialogs: IndexMap<String, Dialog>,
    active_alias: Option<String>,
    /// Dialogs no longer reachable by alias (working forks, pruned copies,
    /// closed dialogs), kept so the session record holds the whole tree.
    archive: Vec<Dialog>,
    /// Where the agent's calls say what happens (`crate::event`): the
    /// run's event stream, or a text sink.
    events: Option<crate::event::Emitter>,
    /// What `open` renders the system prompt with and what every prompt
    /// sees under its own arguments: the run's `task` and `args`.
    context: Map<String, Value>,
    /// The tactic's prompts, for `receive_prompt` by key.
    prompts: Option<Arc<PromptRegistry>>,
    /// Where every finished call goes in a programmed run (its record).
    recorder: Option<Recorder>,
    /// Calls dropped before they ended (the run was interrupted), as
    /// failures holding what came back; the run's record takes them.
    interrupted: Vec<AgentCallSession>,
}

/// The calls of a programmed run, in the order they finished, each with the
/// step name its caller gave (`respond().step(…)`).
pub(crate) type Recorder = Arc<std::sync::Mutex<Vec<(Option<String>, AgentCallSession)>>>;

/// The seed's fork options: `Fork::default()` keeps the whole history and
/// switches to the new dialog, as `fork(from, to)` does.
///
/// ```
/// use lllm::agent::Fork;
///
/// let fork = Fork { last_n: 2, ..Fork::default() }; // the system message and the last two
/// assert_eq!((fork.first_k, fork.switch), (1, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fork {
    /// Keep only the last `n` messages (0: all of them).
    pub last_n: usize,
    /// With `last_n`: keep the first `k` messages too (the system prompt).
    pub first_k: usize,
    /// Make the new dialog the active one.
    pub switch: bool,
}

impl Default for Fork {
    fn default() -> Fork {
        Fork {
            last_n: 0,
            first_k: 1,
            switch: true,
        }
    }
}

/// A prompt for [`Agent::receive_prompt`]: a key of the tactic's prompt
/// registry (`"critic/review"`) or a [`Prompt`] made in code.
#[derive(Debug, Clone)]
pub enum PromptRef {
    /// A registry key (the prompt file's path under `prompts/`, no extension).
    Key(String),
    /// A prompt made in code.
    Prompt(Arc<Prompt>),
}

impl From<&str> for PromptRef {
    fn from(key: &str) -> PromptRef {
        PromptRef::Key(key.to_string())
    }
}

impl From<String> for PromptRef {
    fn from(key: String) -> PromptRef {
        PromptRef::Key(key)
    }
}

impl From<&String> for PromptRef {
    fn from(key: &String) -> PromptRef {
        PromptRef::Key(key.clone())
    }
}

impl From<Prompt> for PromptRef {
    fn from(prompt: Prompt) -> PromptRef {
        PromptRef::Prompt(Arc::new(prompt))
    }
}

impl From<Arc<Prompt>> for PromptRef {
    fn from(prompt: Arc<Prompt>) -> PromptRef {
        PromptRef::Prompt(prompt)
    }
}

impl Agent {
    /// An agent with no dialog, made of `spec` and sharing `runtime`.
    pub fn new(spec: Arc<AgentSpec>, runtime: Arc<Runtime>) -> Agent {
        Agent {
            spec,
            runtime,
            dialogs: IndexMap::new(),
            active_alias: None,
            archive: Vec::new(),
            events: None,
            context: Map::new(),
            prompts: None,
            recorder: None,
            interrupted: Vec::new(),
        }
    }

    /// The agent as a run makes it: prompts see `context` (the run's `task`
    /// and `args`) under their own arguments, `receive_prompt` finds keys in
    /// `prompts`, and every finished call goes to `recorder` when given.
    pub(crate) fn in_run(
        mut self,
        context: Map<String, Value>,
        prompts: Arc<PromptRegistry>,
        recorder: Option<Recorder>,
    ) -> Agent {
        self.context = context;
        self.prompts = Some(prompts);
        self.recorder = recorder;
        self
    }

    /// The agent's name (its `agent_configs` entry).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// What the agent is made of.
    pub fn spec(&self) -> &AgentSpec {
        &self.spec
    }

    /// Streams the text of every reply to `sink` as it arrives (a consumer
    /// of the agent's events that sees only their text).
    pub fn set_text_sink(&mut self, sink: Option<SharedTextSink>) {
        self.events = sink.map(crate::event::Emitter::text);
    }

    /// Says what the agent's calls do through `events` (a run's event
    /// stream), or nothing.
    pub(crate) fn set_events(&mut self, events: Option<crate::event::Emitter>) {
        self.events = events;
    }

    /// Opens dialog `alias`, seeded with the system prompt rendered with the
    /// run's `task` and `args`, and makes it the active dialog.
    ///
    /// ```
    /// let mut agent = lllm::Agent::builder("mock/echo").system("You are terse.").build()?;
    /// agent.open("chat")?;
    /// assert_eq!(agent.active_alias(), Some("chat"));
    /// assert_eq!(agent.current_dialog()?.messages()[0].content, "You are terse.");
    /// assert!(agent.open("chat").is_err(), "an alias is opened once");
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn open(&mut self, alias: &str) -> Result<&mut Agent> {
        let context = std::mem::take(&mut self.context);
        let opened = self
            .open_seeded(alias, &context, true, None, &[])
            .map(|_| ());
        self.context = context;
        opened.map(|()| self)
    }

    /// `open` with the system prompt rendered with `args` (a `json!`, a
    /// struct or a map, over the run's `task` and `args`); `switch` makes
    /// the new dialog the active one (the seed's `open(alias, prompt_args,
    /// switch)`). Arguments that are not a JSON object are an
    /// [`Error::Args`], and no dialog is opened.
    ///
    /// ```
    /// use lllm::Agent;
    /// use serde_json::json;
    ///
    /// let mut agent = Agent::builder("mock/echo").system("You write about {{ topic }}.").build()?;
    /// agent.open_with("owls", json!({"topic": "owls"}), true)?;
    /// assert_eq!(agent.current_dialog()?.head().unwrap().content, "You write about owls.");
    /// let error = agent.open_with("bats", "bats", true).err().unwrap();
    /// assert!(error.to_string().contains("must be a JSON object"), "{error}");
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn open_with(
        &mut self,
        alias: &str,
        args: impl Serialize,
        switch: bool,
    ) -> Result<&mut Agent> {
        let args = self.args(args, "prompt arguments")?;
        self.open_seeded(alias, &args, switch, None, &[])
    }

    /// `open_with` for a task that brings its own conversation: `system`
    /// (when given) stands in for the agent's system prompt, and `history`
    /// follows it, in order.
    pub(crate) fn open_seeded(
        &mut self,
        alias: &str,
        args: &Map<String, Value>,
        switch: bool,
        system: Option<&str>,
        history: &[Message],
    ) -> Result<&mut Agent> {
        if self.dialogs.contains_key(alias) {
            return Err(Error::DialogExists {
                agent: self.spec.name.clone(),
                alias: alias.into(),
            });
        }
        let mut dialog = Dialog::new(
            self.spec.name.clone(),
            format!("{}_{alias}", self.spec.name),
        );
        match system {
            Some(system) => {
                dialog.put_text(Role::System, system);
            }
            // An empty system prompt (the batch's default tactic) sends none.
            None if self.spec.system_prompt.template().is_empty() => {}
            None => {
                let args = self.with_context(args);
                dialog
                    .put_prompt_with(
                        self.spec.system_prompt.clone(),
                        &args,
                        Role::System,
                        "system",
                        Vec::new(),
                    )
                    .map_err(|source| self.dialog_error(source))?;
            }
        }
        for message in history {
            dialog.append(message.clone());
        }
        self.dialogs.insert(alias.to_string(), dialog);
        if switch {
            self.active_alias = Some(alias.to_string());
        }
        Ok(self)
    }

    /// Branches dialog `from` into a new dialog `to` holding its whole
    /// history, and makes `to` the active dialog (a child in the dialog tree).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// agent.open("draft")?;
    /// agent.receive("A first try.")?;
    /// agent.respond().await?;
    /// agent.fork("draft", "bolder")?;
    /// agent.receive("Bolder, please.")?;
    /// agent.respond().await?;
    /// assert_eq!(agent.current_dialog()?.len(), 5, "the parent's three and two more");
    /// assert_eq!(agent.dialog("draft").unwrap().len(), 3, "the parent is as it was");
    /// # Ok(()) }
    /// ```
    pub fn fork(&mut self, from: &str, to: &str) -> Result<&mut Agent> {
        self.fork_with(from, to, Fork::default())
    }

    /// `fork` with the seed's options: keep only the last `n` messages (and
    /// the first `k`), and whether to switch (see [`Fork`] and `Dialog::fork`).
    pub fn fork_with(&mut self, from: &str, to: &str, options: Fork) -> Result<&mut Agent> {
        if self.dialogs.contains_key(to) {
            return Err(Error::DialogExists {
                agent: self.spec.name.clone(),
                alias: to.into(),
            });
        }
        let child = self
            .dialog_at(Some(from))?
            .fork(options.last_n, options.first_k);
        self.dialogs.insert(to.to_string(), child);
        if options.switch {
            self.active_alias = Some(to.to_string());
        }
        Ok(self)
    }

    /// Removes dialog `alias` and returns it; if it was active, none is. The
    /// record still holds it.
    pub fn close(&mut self, alias: &str) -> Result<Dialog> {
        let dialog = self
            .dialogs
            .shift_remove(alias)
            .ok_or_else(|| self.no_dialog(alias))?;
        if self.active_alias.as_deref() == Some(alias) {
            self.active_alias = None;
        }
        self.archive.push(dialog.clone());
        Ok(dialog)
    }

    /// Makes dialog `alias` the active one.
    ///
    /// ```
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// agent.open("planning")?;
    /// agent.open("execution")?; // now the active dialog
    /// agent.switch("planning")?;
    /// assert_eq!(agent.active_alias(), Some("planning"));
    /// assert!(agent.switch("nowhere").is_err());
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn switch(&mut self, alias: &str) -> Result<&mut Agent> {
        if !self.dialogs.contains_key(alias) {
            return Err(self.no_dialog(alias));
        }
        self.active_alias = Some(alias.to_string());
        Ok(self)
    }

    /// Appends `text` as a user message (name `user`) to the active dialog;
    /// the next turn offers the agent's tools and parses nothing (D1).
    ///
    /// ```
    /// use lllm::Role;
    ///
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// agent.open("chat")?;
    /// let message = agent.receive("What's the plan?")?;
    /// assert_eq!((message.role, message.content.as_str()), (Role::User, "What's the plan?"));
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn receive(&mut self, text: impl AsRef<str>) -> Result<&Message> {
        self.receive_as(Role::User, "user", text)
    }

    /// `receive` with the seed's `role` and `name` (a second speaker, a
    /// system note, a tool's words).
    ///
    /// ```
    /// # use lllm::{Ctx, Flow, FlowResult, Task};
    /// # use lllm::dialog::Role;
    /// # struct Panel;
    /// # impl Flow for Panel {
    /// #     const NAME: &'static str = "panel";
    /// #     const AGENTS: &'static [&'static str] = &["host"];
    /// async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
    ///     let host = cx.agent("host")?;
    ///     host.open("panel")?;
    ///     let said = host.receive_as(Role::User, "ann", "Owls hunt at night.")?;
    ///     assert_eq!((said.role, said.name.as_str()), (Role::User, "ann"));
    ///     Ok(host.respond().await?.content)
    /// }
    /// # }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("panel.yaml");
    /// # std::fs::write(&path, "tactic_type: panel\nagent_configs:\n  - {name: host, model_name: mock/echo}\n").unwrap();
    /// # let registry = lllm::Registry::new().flow(Panel);
    /// # let tactic = lllm::Tactic::load(&path, &registry).unwrap();
    /// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("".into()));
    /// # assert_eq!(record.delivery.as_deref(), Some("Owls hunt at night."), "{:?}", record.error);
    /// ```
    pub fn receive_as(
        &mut self,
        role: Role,
        name: &str,
        text: impl AsRef<str>,
    ) -> Result<&Message> {
        let agent = self.spec.name.clone();
        let put = self.dialog_at(None)?.put(role).name(name);
        put.text(text.as_ref())
            .map_err(|source| Error::Dialog { agent, source })
    }

    /// Renders `prompt` (a registry key or a [`Prompt`]) with `args` (a
    /// `json!`, a struct or a map, `()` for none; over the run's `task` and
    /// `args`) into the active dialog as a user message; the prompt governs
    /// the next turn (parser, format, tools, handlers). Arguments that are
    /// not a JSON object are an [`Error::Args`], and nothing is appended.
    ///
    /// ```
    /// use lllm::{Agent, Prompt};
    /// use serde::Serialize;
    ///
    /// #[derive(Serialize)]
    /// struct Draft { topic: &'static str, words: u32 }
    ///
    /// let mut agent = Agent::builder("mock/echo").build()?;
    /// agent.open("main")?;
    /// let draft = Prompt::new("writer/draft", "{{ words }} words about {{ topic }}.")?;
    /// let asked = agent.receive_prompt(draft, Draft { topic: "owls", words: 50 })?;
    /// assert_eq!(asked.content, "50 words about owls.");
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn receive_prompt(
        &mut self,
        prompt: impl Into<PromptRef>,
        args: impl Serialize,
    ) -> Result<&Message> {
        let args = self.args(args, "prompt arguments")?;
        self.receive_prompt_with(prompt, args, Vec::new())
    }

    /// `args` as a JSON object, or the misuse as this agent's error.
    fn args(&self, args: impl Serialize, what: &'static str) -> Result<Map<String, Value>> {
        crate::args::object(args, what).map_err(|source| Error::Args {
            agent: self.spec.name.clone(),
            source,
        })
    }

    /// `receive_prompt`, with `parts` (a task's attachments) sent after the
    /// rendered text in the same user turn.
    pub(crate) fn receive_prompt_with(
        &mut self,
        prompt: impl Into<PromptRef>,
        args: Map<String, Value>,
        parts: Vec<crate::dialog::ContentPart>,
    ) -> Result<&Message> {
        let agent = self.spec.name.clone();
        let prompt = match prompt.into() {
            PromptRef::Prompt(prompt) => prompt,
            PromptRef::Key(key) => match &self.prompts {
                Some(registry) => match registry.get(&key) {
                    Ok(prompt) => Arc::new(prompt.clone()),
                    Err(source) => return Err(Error::Prompt { agent, source }),
                },
                None => return Err(Error::NoPrompts { agent, key }),
            },
        };
        let args = self.with_context(&args).into_owned();
        self.dialog_at(None)?
            .put_prompt_with(prompt, &args, Role::User, "user", parts)
            .map_err(|source| Error::Dialog { agent, source })
    }

    /// Appends a user message of parts (text, images, text files: a task's
    /// [`parts`](crate::Task::parts)) to the active dialog; like `receive`,
    /// the next turn offers the agent's tools and parses nothing.
    pub fn receive_parts(&mut self, parts: Vec<crate::dialog::ContentPart>) -> Result<&Message> {
        Ok(self.dialog_at(None)?.put_parts(Role::User, parts))
    }

    /// Appends an image with an optional caption to the active dialog, as
    /// a user message of parts made the way a task's attachments are: a
    /// path, bytes or a URL as [`Dialog::put_image`] takes them.
    ///
    /// ```
    /// use lllm::Agent;
    ///
    /// let mut agent = Agent::builder("mock/echo").build()?;
    /// agent.open("main")?;
    /// let owl = agent.receive_image(b"GIF89a...", Some("Which bird is this?"))?;
    /// assert_eq!(owl.parts[0].to_string(), "<image image/gif>");
    /// agent.receive_image("https://example.com/owl.png", None)?;
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn receive_image<'i>(
        &mut self,
        image: impl Into<ImageSource<'i>>,
        caption: Option<&str>,
    ) -> Result<&Message> {
        let agent = self.spec.name.clone();
        let mut put = self.dialog_at(None)?.put(Role::User);
        if let Some(caption) = caption {
            put = put.caption(caption);
        }
        put.image(image)
            .map_err(|source| Error::Dialog { agent, source })
    }

    /// Asks the model: runs the agent loop (repairs, tool rounds, retries)
    /// on the active dialog. The builder takes the call's options —
    /// [`dialog`](Respond::dialog), [`args`](Respond::args),
    /// [`parser_args`](Respond::parser_args), [`metadata`](Respond::metadata)
    /// — and is awaited: to the accepted [`Message`], or with
    /// [`session`](Respond::session) to the whole [`AgentCallSession`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// agent.open("chat")?;
    /// agent.receive("Hello")?;
    /// let reply = agent.respond().await?;
    /// assert_eq!(reply.content, "Hello"); // mock/echo repeats the question
    /// assert_eq!(agent.current_dialog()?.tail().map(|last| last.content.as_str()), Some("Hello"));
    /// # Ok(()) }
    /// ```
    pub fn respond(&mut self) -> Respond<'_> {
        Respond::new(self)
    }

    /// Runs one call; a failed call is a session in state `failure`, not an
    /// `Err`: `Err` means there was no dialog. The session goes to the run's
    /// recorder, if any.
    pub(crate) async fn call(
        &mut self,
        alias: Option<&str>,
        options: &CallOptions,
    ) -> Result<AgentCallSession> {
        let alias = self.alias_or_active(alias)?;
        let Some(dialog) = self.dialogs.get_mut(&alias) else {
            return Err(self.no_dialog(&alias));
        };
        let call = call::Call {
            spec: &self.spec,
            runtime: &self.runtime,
            events: self.events.as_ref(),
            alias: &alias,
            options,
        };
        // Dropped before it ends, the call lands in `interrupted`. (Not
        // handed to an `async fn` by value: its future would hold it twice,
        // as its argument and as its local.)
        let mut in_flight = call.start(dialog, &mut self.interrupted);
        call.run_loop(dialog, &mut self.archive, in_flight.session())
            .await;
        let session = in_flight.end();
        if let Some(recorder) = &self.recorder {
            recorder
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((options.step.clone(), session.clone()));
        }
        Ok(session)
    }

    /// The active dialog.
    ///
    /// ```
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// assert!(agent.current_dialog().is_err(), "none is open yet");
    /// agent.open("chat")?;
    /// agent.receive("Hi")?;
    /// assert_eq!(agent.current_dialog()?.len(), 2, "the system prompt and the question");
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn current_dialog(&self) -> Result<&Dialog> {
        let alias = self
            .active_alias
            .as_deref()
            .ok_or_else(|| Error::NoActiveDialog {
                agent: self.spec.name.clone(),
            })?;
        self.dialogs.get(alias).ok_or_else(|| self.no_dialog(alias))
    }

    /// The dialog `alias`, if open.
    pub fn dialog(&self, alias: &str) -> Option<&Dialog> {
        self.dialogs.get(alias)
    }

    /// Alias → dialog, in the order they were opened.
    pub fn dialogs(&self) -> &IndexMap<String, Dialog> {
        &self.dialogs
    }

    /// The alias of the active dialog.
    pub fn active_alias(&self) -> Option<&str> {
        self.active_alias.as_deref()
    }

    /// Every dialog this agent made, open or not, oldest first.
    pub fn all_dialogs(&self) -> impl Iterator<Item = &Dialog> {
        self.dialogs.values().chain(self.archive.iter())
    }

    /// The calls that were dropped before they ended (a run interrupted
    /// while they ran), each a failure with error `interrupted` holding the
    /// invokes that came back; taken, so each is recorded once.
    pub(crate) fn take_interrupted(&mut self) -> Vec<AgentCallSession> {
        std::mem::take(&mut self.interrupted)
    }

    /// Every dialog, as `all_dialogs` orders them, taken out of the agent.
    pub fn into_dialogs(self) -> impl Iterator<Item = Dialog> {
        self.dialogs.into_values().chain(self.archive)
    }

    /// The dialog `alias`, for changes the verbs do not make.
    pub fn dialog_mut(&mut self, alias: &str) -> Option<&mut Dialog> {
        self.dialogs.get_mut(alias)
    }

    /// `args` over the run's context (`task`, `args`); `args` itself when
    /// there is none (a YAML flow passes its whole context).
    fn with_context<'m>(&self, args: &'m Map<String, Value>) -> Cow<'m, Map<String, Value>> {
        if self.context.is_empty() {
            return Cow::Borrowed(args);
        }
        let mut merged = self.context.clone();
        merged.extend(args.iter().map(|(key, value)| (key.clone(), value.clone())));
        Cow::Owned(merged)
    }

    /// Holds the next call on the active dialog to `output`: its governing
    /// prompt (the last one received, or the system prompt) with `output`
    /// as its format (`Prompt::held_to`), so that a reply that does not fit
    /// is repaired in the agent loop. The tactic's delivering call
    /// (`output_schema`, `Tactic::call_typed`).
    pub(crate) fn hold_to(&mut self, output: &crate::prompt::JsonParser) -> Result<()> {
        let system = self.spec.system_prompt.clone();
        let dialog = self.dialog_at(None)?;
        let top = dialog.top_prompt.clone().unwrap_or(system);
        dialog.top_prompt = Some(Arc::new(top.held_to(output)));
        Ok(())
    }

    fn dialog_at(&mut self, alias: Option<&str>) -> Result<&mut Dialog> {
        let alias = self.alias_or_active(alias)?;
        if !self.dialogs.contains_key(&alias) {
            return Err(self.no_dialog(&alias));
        }
        Ok(self.dialogs.get_mut(&alias).expect("checked above"))
    }

    /// `alias`, or the active dialog's alias when none is given.
    fn alias_or_active(&self, alias: Option<&str>) -> Result<String> {
        match alias {
            Some(alias) => Ok(alias.to_string()),
            None => self
                .active_alias
                .clone()
                .ok_or_else(|| Error::NoActiveDialog {
                    agent: self.spec.name.clone(),
                }),
        }
    }

    fn no_dialog(&self, alias: &str) -> Error {
        let available: Vec<String> = self
            .dialogs
            .keys()
            .map(|alias| format!("`{alias}`"))
            .collect();
        Error::NoDialog {
            agent: self.spec.name.clone(),
            alias: alias.to_string(),
            available: if available.is_empty() {
                "none".into()
            } else {
                available.join(", ")
            },
        }
    }

    fn dialog_error(&self, source: crate::dialog::Error) -> Error {
        Error::Dialog {
            agent: self.spec.name.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests;
