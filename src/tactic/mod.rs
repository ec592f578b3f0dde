//! Tactics: a resolved config turned into agents, tools and a flow, run once
//! per task into a session record.
//!
//! `Tactic::build` (`build.rs`) does everything that can fail on bad input — prompt lookup,
//! provider resolution, tools, context managers, template checks — and
//! `check_task` what needs the task (`check.rs`), so a run never sends a
//! request for a tactic that cannot finish; `load` (`load.rs`) does all of it
//! from a file, every phase's problems at once. `Tactic::run` never fails: a
//! failed run is a record in state `failure` (STYLE 8).

mod build;
mod calls;
mod check;
mod code;
mod compact;
mod contract;
mod ctx;
mod events;
mod expansion;
mod flow;
mod load;
mod models;
mod nodes;
pub(crate) mod program;
pub mod record;
pub(crate) mod records;
pub mod remote;
mod task;
mod tools;
mod typed;

use std::collections::BTreeSet;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::Value;

use crate::agent::{AgentSpec, Runtime};
use crate::config::TacticConfig;
use crate::prompt::{Prompt, Registry};
use crate::tool::McpServers;

/// Kept here for callers that name it by its old place; it lives in the provider layer.
pub use crate::provider::registry::split_model;
pub(crate) use calls::outcome as calls_outcome;
pub use calls::{
    Bcall, BcallRecords, Ccall, CcallRecords, DEFAULT_CONCURRENCY, RunError, TryBcall,
};
pub use contract::{InputError, InputProblem, TacticInfo};
pub use ctx::{Ctx, CtxError};
pub use events::{CcallEvents, Events};
pub use flow::INTERRUPTED;
pub use load::{LoadOptions, load, load_unsent};
pub use models::ModelUse;
pub use program::{Flow, FlowResult};
pub use record::{RunState, SessionRecord};
pub use task::Task;
pub use typed::TypedError;

/// Everything wrong with a tactic, one problem per line (a control character
/// inside a problem came from a name it quotes, and is shown escaped); at
/// most [`MAX_PROBLEMS_SHOWN`](crate::config::MAX_PROBLEMS_SHOWN) are
/// shown, and a count of the rest.
#[derive(Debug, thiserror::Error)]
#[error("{}", crate::config::show_problems(problems))]
pub struct Error {
    /// The problems, each one line naming where and what: the file, line
    /// and column of the setting it is about when it has one
    /// (`t.yaml:12:5: …`, `prompts/draft.md:3: …`).
    pub problems: Vec<String>,
}

/// The result of building a tactic.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A tactic that cannot be built is bad input: the command's error, exit 2.
impl From<Error> for crate::error::Error {
    fn from(error: Error) -> Self {
        crate::error::Error::Input(Box::new(error))
    }
}

/// A flow step with its prompt looked up.
pub(crate) struct Step {
    pub name: String,
    pub agent: String,
    pub dialog: String,
    pub prompt: Arc<Prompt>,
    /// Argument values; strings are templates rendered against the run context.
    pub args: Vec<(String, ArgValue)>,
    /// Skip the step unless this holds.
    pub condition: Option<flow::Condition>,
    /// Start the step's dialog as a fork of another.
    pub fork: Option<crate::config::ForkConfig>,
    /// End the tactic after this step when it holds.
    pub stop: Option<flow::Condition>,
    /// Its path in the tactic's document (`flow[1]`), for the places of
    /// the problems pre-flight finds.
    pub at: String,
}

/// The flow as the engine runs it.
/// A flow step that runs another tactic as a unit.
pub(crate) struct SubStep {
    pub name: String,
    pub target: SubTarget,
    /// The sub-tactic's task; `None` passes this run's task on.
    pub task: Option<Arc<Prompt>>,
    /// The sub-tactic's arguments; strings are templates over the run context.
    pub args: Vec<(String, ArgValue)>,
    pub condition: Option<flow::Condition>,
    pub stop: Option<flow::Condition>,
    /// Its path in the tactic's document (`flow[1]`).
    pub at: String,
}

/// What a sub-tactic step runs: a tactic file, built with this one, or a
/// served tactic (`tactic: http://…`, issue 30).
pub(crate) enum SubTarget {
    Local(Arc<Tactic>),
    Remote(Arc<crate::tactic::remote::RemoteTactic>),
}

impl SubStep {
    /// The tactic file it runs; `None` for a served tactic.
    pub(crate) fn local(&self) -> Option<&Tactic> {
        match &self.target {
            SubTarget::Local(tactic) => Some(tactic),
            SubTarget::Remote(_) => None,
        }
    }

    /// What it runs in words: the file's path or the URL.
    pub(crate) fn target_name(&self) -> String {
        match &self.target {
            SubTarget::Local(tactic) => tactic.config.path.display().to_string(),
            SubTarget::Remote(remote) => remote.url().to_string(),
        }
    }
}

pub(crate) enum Node {
    Step(Step),
    Tactic(SubStep),
    Loop {
        max: u32,
        until: Option<flow::Condition>,
        nodes: Vec<Node>,
        /// Its path in the tactic's document.
        at: String,
    },
    /// Branches run concurrently on fresh agents: each node once, or (with
    /// `foreach`) all nodes once per element, bound to `item`.
    Parallel {
        foreach: Option<flow::Condition>,
        item: String,
        nodes: Vec<Node>,
        /// Its path in the tactic's document.
        at: String,
    },
}

pub(crate) enum ArgValue {
    Template(Arc<Prompt>),
    Literal(Value),
}

/// The tactics the steps of `nodes` run (directly, not their own sub-tactics).
fn sub_tactics_of(nodes: &[Node]) -> Vec<&Tactic> {
    fn walk<'a>(nodes: &'a [Node], found: &mut Vec<&'a Tactic>) {
        for node in nodes {
            match node {
                Node::Tactic(step) => found.extend(step.local()),
                Node::Step(_) => {}
                Node::Loop { nodes, .. } | Node::Parallel { nodes, .. } => walk(nodes, found),
            }
        }
    }
    let mut found = Vec::new();
    walk(nodes, &mut found);
    found
}

/// A loaded, validated tactic: runs tasks (`run`, `call`, `bcall`, `ccall`).
///
/// Cheap to clone, like reqwest's `Client`: every part is shared behind an
/// `Arc`, so clones share the providers (their concurrency and rate limits),
/// the MCP servers and the price table. Clone it into spawned tasks instead
/// of wrapping it in an `Arc`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::{Registry, Tactic};
///
/// let tactic = Tactic::from_yaml("
/// global: {model_name: mock/echo}
/// agent_configs: [{name: assistant, system_prompt: You summarize.}]
/// ", ".", &Registry::new())?;
/// let worker = tactic.clone(); // shares the providers and their limits
/// let answer = tokio::spawn(async move { worker.call("Tides turn twice a day.").await }).await??;
/// assert_eq!(answer, "Tides turn twice a day.");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Tactic {
    /// The contracts of its tactic tools that are served tactics, read
    /// when it loaded: every record of a run holds them (a re-run builds
    /// the tools from them, offline).
    pub(crate) remote_contracts: Arc<[crate::tactic::remote::RemoteCall]>,
    /// The resolved config the tactic was built from.
    pub config: Arc<TacticConfig>,
    /// The prompts of its prompt directory, by key.
    pub registry: Arc<Registry>,
    pub(crate) agents: Arc<IndexMap<String, Arc<AgentSpec>>>,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) result: Option<Arc<Prompt>>,
    /// What the delivery must fit (`output_schema`, or the type of
    /// `call_typed`): the delivering call is held to it, and the delivery
    /// checked after the run.
    pub(crate) output: Option<crate::prompt::JsonParser>,
    /// What a task's input must fit (`input_schema`), compiled once:
    /// [`Tactic::check_input`].
    pub(crate) input: Option<crate::config::InputSchema>,
    /// The programmed tactic (`Registry::flow`) whose name is the file's
    /// `tactic_type`; it runs instead of a YAML flow.
    pub(crate) program: Option<Arc<dyn program::DynFlow>>,
    /// The resolved config and the prompts used (`key → prompt`) as every
    /// record of this tactic holds them (made once, not per run).
    pub(crate) recorded_config: record::SharedJson,
    pub(crate) recorded_prompts: record::SharedJson,
    /// The prompt templates long enough for a record to hold once
    /// (`compact`), as `prompt:KEY` and template.
    pub(crate) shared_templates: Arc<[(String, String)]>,
    /// Where the verbs (`call`, `bcall`, `ccall`, …) write their records
    /// ([`Tactic::with_records`]); `run` writes none.
    pub(crate) records: records::Records,
}

impl Tactic {
    /// Checks that every template the flow reaches has its variables, given the
    /// task argument names. All problems at once.
    pub fn check(&self, arg_names: &BTreeSet<String>) -> Result<()> {
        let problems = check::check_variables(self, arg_names);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error { problems })
        }
    }

    /// Starts the MCP servers (`mcp_servers:`) and lists their tools. Call it
    /// after `check` so a server that cannot start is bad input reported
    /// before anything is sent; `run` starts them too if nobody did. Once per
    /// tactic: later calls return the first outcome.
    /// Sub-tactics' servers start too.
    pub fn start(&self) -> futures_util::future::BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.runtime
                .mcp
                .start()
                .await
                .map_err(|problems| Error { problems })?;
            for sub in self.sub_tactics() {
                if let Err(error) = sub.start().await {
                    self.shutdown().await;
                    return Err(error);
                }
            }
            Ok(())
        })
    }

    /// Ends the MCP servers (stdin closed, then SIGTERM, then SIGKILL after a
    /// grace period each), sub-tactics' included. Call it when the tactic's
    /// runs are over.
    pub fn shutdown(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            self.runtime.mcp.shutdown().await;
            for sub in self.sub_tactics() {
                sub.shutdown().await;
            }
        })
    }

    /// The tactics the flow's steps run (directly, not their own sub-tactics).
    fn sub_tactics(&self) -> Vec<&Tactic> {
        sub_tactics_of(&self.nodes)
    }

    /// The MCP servers of the tactic (running after `start`).
    pub fn mcp_servers(&self) -> &McpServers {
        &self.runtime.mcp
    }

    /// Pre-flight of one task: `check` with its argument names, then every
    /// template and expression that needs nothing but the task is rendered
    /// with the task's values, in flow order, so a template that fails on them
    /// (an attribute the value lacks, a filter on the wrong type) is reported
    /// before anything is sent. Templates that need a step's output cannot be
    /// rendered yet. All problems of both at once.
    pub fn check_task(&self, task: &Task) -> Result<()> {
        let arg_names: BTreeSet<String> = task.args.keys().cloned().collect();
        let mut problems = check::check_variables(self, &arg_names);
        for problem in check::trial(self, task) {
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error { problems })
        }
    }

    /// The agents a run of `task` makes: the tactic's, with the task's
    /// `model_args` over each one's own, key by key (the task wins), and
    /// the command line's (`-O`, `TacticConfig::model_args_override`) over
    /// both, as `--model` wins over a task's `model`.
    pub(crate) fn agents_for(&self, task: &Task) -> Arc<IndexMap<String, Arc<AgentSpec>>> {
        if task.model_args.is_empty() {
            return self.agents.clone();
        }
        let command_line = &self.config.model_args_override;
        let agents = self
            .agents
            .iter()
            .map(|(name, spec)| {
                let mut spec = AgentSpec::clone(spec);
                for (key, value) in &task.model_args {
                    spec.model_args.insert(key.clone(), value.clone());
                }
                command_line.apply(name, &mut spec.model_args);
                (name.clone(), Arc::new(spec))
            })
            .collect();
        Arc::new(agents)
    }

    /// The names of the agents of this tactic and of the tactics its steps
    /// run, at any depth.
    pub fn agent_names(&self) -> std::collections::BTreeSet<String> {
        let mut names: std::collections::BTreeSet<String> = self.agents.keys().cloned().collect();
        for sub in self.sub_tactics() {
            names.extend(sub.agent_names());
        }
        names
    }

    /// Why a task that names a model cannot run on this tactic: it was
    /// neither built for that model (`LoadOptions::model`, what `lllm batch`
    /// does per line) nor do all its agents use it already. `--model`
    /// given when the tactic was built wins over the task's model.
    pub(crate) fn model_mismatch(&self, task: &Task) -> Option<String> {
        let model = task.model.as_deref()?;
        let served = self.config.model_override.is_some()
            || self.agents.values().all(|agent| agent.model_name == model);
        (!served).then(|| {
            format!(
                "the task names model `{model}`, and tactic `{}` was not built for it; hint: \
                 load the tactic with `LoadOptions {{ model: Some(\"{model}\"), .. }}`",
                self.config.name
            )
        })
    }

    /// Every secret the tactic's providers know (sub-tactics' included):
    /// what its records and result lines are scrubbed of.
    pub fn secrets(&self) -> &crate::redact::Secrets {
        &self.runtime.secrets
    }

    /// Why a request of this tactic would wait right now (rate limit, back-off
    /// after a 429, concurrency), from its providers' limiters.
    pub fn waiting(&self) -> Option<crate::provider::limit::Waiting> {
        self.agents
            .values()
            .find_map(|agent| agent.model.provider.limiter()?.waiting())
    }

    /// The names of the providers its agents' models use, sub-tactics'
    /// included, sorted, each once (`lllm batch` holds back the tasks of a
    /// provider that is down: `provider::breaker`).
    pub fn provider_names(&self) -> Vec<String> {
        fn collect(tactic: &Tactic, names: &mut BTreeSet<String>) {
            for agent in tactic.agents.values() {
                names.insert(agent.model.provider_name.clone());
            }
            for sub in sub_tactics_of(&tactic.nodes) {
                collect(sub, names);
            }
        }
        let mut names = BTreeSet::new();
        collect(self, &mut names);
        names.into_iter().collect()
    }

    /// The provider of this tactic that sends the fewest requests at once
    /// right now (its `max_concurrency`, its server's slots, its adaptive
    /// limit or a back-off after 429s), named: what `lllm batch` holds the
    /// number of running tasks to. `None` while no provider is limited.
    pub fn provider_limit(&self) -> Option<(&str, crate::provider::limit::Limit)> {
        self.agents
            .values()
            .filter_map(|agent| {
                let limit = agent.model.provider.limiter()?.limit()?;
                Some((agent.model.provider_name.as_str(), limit))
            })
            .min_by_key(|(_, limit)| limit.requests)
    }

    /// Asks the local servers of this tactic's providers how many requests
    /// they serve at once (llama.cpp's `/props`), each once per run; a
    /// provider's first request does it otherwise. `lllm batch` calls it
    /// before it starts tasks, so that it starts no more than fit.
    pub async fn learn_limits(&self) {
        let limiters = self
            .agents
            .values()
            .filter_map(|agent| agent.model.provider.limiter());
        futures_util::future::join_all(limiters.map(|limiter| limiter.learn())).await;
    }

    /// Runs one task to its session record, in full: every call's replies
    /// are in its invokes and [`delivery`](crate::agent::AgentCallSession::delivery)
    /// (a written record holds each reply once, in its dialog; reading one
    /// back, [`SessionRecord::expand`] restores them).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic, Task};
    /// use lllm::tactic::RunState;
    ///
    /// let yaml = "agent_configs: [{name: assistant, model_name: mock/echo}]";
    /// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
    /// let record = tactic.run(Task::new("Owls hunt at night.").id("owls")).await;
    /// assert_eq!(record.state, RunState::Success);
    /// assert_eq!(record.task_id.as_deref(), Some("owls"));
    /// assert_eq!(record.delivery.as_deref(), Some("Owls hunt at night."));
    /// assert_eq!(record.agent_calls.len(), 1);
    /// # Ok(()) }
    /// ```
    #[must_use = "the record holds the run's delivery, or why it failed"]
    pub async fn run(&self, task: Task) -> SessionRecord {
        let mut record = flow::run(self, Box::new(task), None, std::future::pending()).await;
        record.expand();
        record
    }

    /// [`Tactic::run`], saying what happens through `events` when given.
    pub(crate) async fn run_with_events(
        &self,
        task: Task,
        events: Option<crate::event::Emitter>,
    ) -> SessionRecord {
        let mut record = flow::run(self, Box::new(task), events, std::future::pending()).await;
        record.expand();
        record
    }

    /// [`Tactic::run`], handing the final turn's text to `sink` as it
    /// arrives: a consumer of the run's events that sees only the text of
    /// the last step ([`Tactic::events`] gives them all).
    #[must_use = "the record holds the run's delivery, or why it failed"]
    pub async fn run_streaming(
        &self,
        task: Task,
        sink: crate::agent::SharedTextSink,
    ) -> SessionRecord {
        let events = Some(crate::event::Emitter::text(sink));
        let mut record = flow::run(self, Box::new(task), events, std::future::pending()).await;
        record.expand();
        record
    }

    /// Runs one task until `interrupt` completes; an interrupted run is a
    /// `failure` record with error `interrupted` holding every agent call that
    /// had finished, so what was spent stays on record. The record is in its
    /// compact, written form (each reply held once, by its dialog: what
    /// `lllm run` and `lllm batch` write); [`SessionRecord::expand`] gives
    /// the full one.
    // Not an `async fn`: its future would keep room for the task (456
    // bytes) beside the run's own, for the whole run (`lllm serve` holds
    // a thousand at once).
    #[must_use = "the record holds the run's delivery, or why it failed"]
    pub fn run_until(
        &self,
        task: Task,
        sink: Option<crate::agent::SharedTextSink>,
        interrupt: impl std::future::Future<Output = ()>,
    ) -> impl std::future::Future<Output = SessionRecord> {
        let events = sink.map(crate::event::Emitter::text);
        flow::run(self, Box::new(task), events, interrupt)
    }
}

/// Sets (or with `None` clears) what is told of each finished run that is
/// not nested in another and has a trace: the OpenTelemetry exporter's way
/// in, so that this module never names it.
#[cfg(feature = "otel")]
pub(crate) fn on_finished(hook: Option<fn(&SessionRecord)>) {
    flow::on_finished(hook);
}
