//! Tactics: a resolved config turned into agents, tools and a flow, run once
//! per task into a session record.
//!
//! `Tactic::build` does everything that can fail on bad input — prompt lookup,
//! provider resolution, tools, context managers, template checks — and
//! `check_task` what needs the task (`check.rs`), so a run never sends a
//! request for a tactic that cannot finish; `load` (`load.rs`) does all of it
//! from a file, every phase's problems at once. `Tactic::run` never fails: a
//! failed run is a record in state `failure` (STYLE 8).

mod calls;
mod check;
mod code;
mod ctx;
mod flow;
mod load;
pub(crate) mod program;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::agent::context::ContextSettings;
use crate::agent::{AgentSpec, Limits, Runtime};
use crate::config::{FlowItem, StepInput, SubTacticConfig, SystemPrompt, TacticConfig};
use crate::prompt::{Prompt, Registry};
use crate::provider::ToolSpec;
use crate::provider::budget::{BudgetedProvider, CostBudget};
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::Providers;
use crate::registry::Registry as Extensions;
use crate::tool::{BuiltinTool, CommandTool, McpServers, Toolbox};

/// Kept here for callers that name it by its old place; it lives in the provider layer.
pub use crate::provider::registry::split_model;
pub(crate) use calls::outcome as calls_outcome;
pub use calls::{
    Bcall, BcallRecords, Ccall, CcallRecords, DEFAULT_CONCURRENCY, RunError, TryBcall,
};
pub use ctx::{Ctx, CtxError};
pub use flow::INTERRUPTED;
pub use load::{LoadOptions, load};
pub use program::{Flow, FlowResult};
pub use record::{RunState, SessionRecord};

/// Everything wrong with a tactic, one problem per line (a control character
/// inside a problem came from a name it quotes, and is shown escaped).
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.iter().map(|problem| crate::suggest::printable(problem)).collect::<Vec<_>>().join("\n"))]
pub struct Error {
    /// The problems, each one line naming where and what.
    pub problems: Vec<String>,
}

/// The result of building a tactic.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One task: what the user asks, with its id, template arguments and tags.
///
/// Made from text (`"…".into()`), from any JSON value, or with the builder
/// methods:
///
/// ```
/// use lllm::Task;
///
/// let task = Task::new("Summarize this.").id("doc-7").arg("words", 50).tag("team", "docs");
/// assert_eq!(task.text(), "Summarize this.");
/// assert_eq!(task.args["words"], 50);
/// let from_text: Task = "What is 2 + 2?".into();
/// assert_eq!(from_text.text(), "What is 2 + 2?");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Task {
    /// The task's id (a batch line's `id`), recorded as `task_id`.
    pub id: Option<String>,
    /// A string, or any JSON value (templates see it as `task`).
    pub task: Value,
    /// Template arguments: each is visible to templates by name and under `args`.
    pub args: Map<String, Value>,
    /// Labels recorded with the session; not sent to any model.
    pub tags: Map<String, Value>,
}

impl Task {
    /// A task of `task` (text, or any JSON value) with no id, arguments or tags.
    pub fn new(task: impl Into<Value>) -> Task {
        Task {
            task: task.into(),
            ..Task::default()
        }
    }

    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Task {
        self.id = Some(id.into());
        self
    }

    /// Adds the template argument `name`.
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.args.insert(name.into(), value.into());
        self
    }

    /// Adds the tag `name`.
    pub fn tag(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.tags.insert(name.into(), value.into());
        self
    }

    /// The task as text for a model: a string as is, anything else as JSON.
    pub fn text(&self) -> String {
        match &self.task {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

impl From<&str> for Task {
    fn from(text: &str) -> Task {
        Task::new(text)
    }
}

impl From<String> for Task {
    fn from(text: String) -> Task {
        Task::new(text)
    }
}

impl From<Value> for Task {
    fn from(task: Value) -> Task {
        Task::new(task)
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
}

/// The flow as the engine runs it.
/// A flow step that runs another tactic as a unit.
pub(crate) struct SubStep {
    pub name: String,
    pub tactic: Arc<Tactic>,
    /// The sub-tactic's task; `None` passes this run's task on.
    pub task: Option<Arc<Prompt>>,
    /// The sub-tactic's arguments; strings are templates over the run context.
    pub args: Vec<(String, ArgValue)>,
    pub condition: Option<flow::Condition>,
    pub stop: Option<flow::Condition>,
}

pub(crate) enum Node {
    Step(Step),
    Tactic(SubStep),
    Loop {
        max: u32,
        until: Option<flow::Condition>,
        nodes: Vec<Node>,
    },
    /// Branches run concurrently on fresh agents: each node once, or (with
    /// `foreach`) all nodes once per element, bound to `item`.
    Parallel {
        foreach: Option<flow::Condition>,
        item: String,
        nodes: Vec<Node>,
    },
}

pub(crate) enum ArgValue {
    Template(Arc<Prompt>),
    Literal(Value),
}

/// A loaded, validated tactic: runs tasks (`run`, `call`, `bcall`, `ccall`).
///
/// Cheap to clone, like reqwest's `Client`: every part is shared behind an
/// `Arc`, so clones share the providers (their concurrency and rate limits),
/// the MCP servers and the price table. Clone it into spawned tasks instead
/// of wrapping it in an `Arc`.
#[derive(Clone)]
pub struct Tactic {
    /// The resolved config the tactic was built from.
    pub config: Arc<TacticConfig>,
    /// The prompts of its prompt directory, by key.
    pub registry: Arc<Registry>,
    pub(crate) agents: Arc<IndexMap<String, Arc<AgentSpec>>>,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) result: Option<Arc<Prompt>>,
    /// The programmed tactic (`Registry::flow`) whose name is the file's
    /// `tactic_type`; it runs instead of a YAML flow.
    pub(crate) program: Option<Arc<dyn program::DynFlow>>,
    /// The resolved config and the prompts used (`key → prompt`) as every
    /// record of this tactic holds them (made once, not per run).
    pub(crate) recorded_config: record::SharedJson,
    pub(crate) recorded_prompts: record::SharedJson,
}

/// Problems are collected, not returned at the first one: the user sees them
/// all. Each is marked as about prompts and templates (`push`, `take`) or
/// about the rest of the tactic (`push_other`, `take_other`): when the config
/// itself has problems, only the first kind is worth adding to them (the rest
/// may be their consequences, like a tool the config dropped).
#[derive(Default)]
struct Problems {
    lines: Vec<String>,
    /// Indexes of the lines that are not about prompts and templates.
    others: Vec<usize>,
}

impl Problems {
    /// Adds a problem about prompts or templates once (two agents on one
    /// unusable prompt make one line).
    fn push(&mut self, problem: impl std::fmt::Display) {
        let problem = problem.to_string();
        if !self.lines.contains(&problem) {
            self.lines.push(problem);
        }
    }

    /// Adds a problem about anything else (providers, tools, servers).
    fn push_other(&mut self, problem: impl std::fmt::Display) {
        let problem = problem.to_string();
        if !self.lines.contains(&problem) {
            self.others.push(self.lines.len());
            self.lines.push(problem);
        }
    }

    fn take<T, E: std::fmt::Display>(&mut self, result: std::result::Result<T, E>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    fn take_other<T, E: std::fmt::Display>(
        &mut self,
        result: std::result::Result<T, E>,
    ) -> Option<T> {
        result.map_err(|error| self.push_other(error)).ok()
    }

    /// The problems about prompts and templates only.
    fn of_templates(self) -> Vec<String> {
        self.lines
            .into_iter()
            .enumerate()
            .filter(|(index, _)| !self.others.contains(index))
            .map(|(_, line)| line)
            .collect()
    }
}

impl Tactic {
    /// Builds and validates everything a run needs but the task: call `check`
    /// with the task's argument names before running it. `env` reads
    /// environment variables (keys, base URLs); tests pass their own.
    pub fn build(config: TacticConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Tactic> {
        Tactic::build_with(config, env, &Extensions::new())
    }

    /// `build` with the extensions of `registry` (context managers and the
    /// rest a tactic names).
    pub fn build_with(
        config: TacticConfig,
        env: &dyn Fn(&str) -> Option<String>,
        registry: &Extensions,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env,
                extensions: registry,
                replacement: None,
                dry_run: None,
                budget: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
            },
        )
    }

    /// `build` with every model served by `provider` (a replay of a record).
    pub fn build_replaying(
        config: TacticConfig,
        provider: Arc<dyn crate::provider::Provider>,
        registry: &Extensions,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env: &|_| None,
                extensions: registry,
                replacement: Some(provider),
                dry_run: None,
                budget: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
            },
        )
    }

    /// `build` with every request captured in `log` instead of sent
    /// (`lllm run --dry-run`).
    pub fn build_dry_run(
        config: TacticConfig,
        env: &dyn Fn(&str) -> Option<String>,
        log: Arc<crate::provider::dry_run::DryRun>,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env,
                extensions: &Extensions::new(),
                replacement: None,
                dry_run: Some(log),
                budget: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
            },
        )
    }

    /// `build` with every model call (sub-tactics' included) passing
    /// `budget`: a call whose worst case does not fit is not sent. Every
    /// model must then have a price and a bound on its replies.
    pub fn build_with_budget(
        config: TacticConfig,
        env: &dyn Fn(&str) -> Option<String>,
        budget: Arc<CostBudget>,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env,
                extensions: &Extensions::new(),
                replacement: None,
                dry_run: None,
                budget: Some(budget),
                stack: Vec::new(),
                hidden_variables: Vec::new(),
            },
        )
    }

    fn build_inner(config: TacticConfig, builder: &Builder<'_>) -> Result<Tactic> {
        let (tactic, problems) = Tactic::assemble(config, builder);
        if problems.lines.is_empty() {
            Ok(tactic)
        } else {
            Err(Error {
                problems: problems.lines,
            })
        }
    }

    /// Builds what `config` allows, with every problem found on the way. The
    /// tactic is only fit to run without problems; with them it still holds
    /// every template that compiled, for the checks of a later phase.
    fn assemble(config: TacticConfig, builder: &Builder<'_>) -> (Tactic, Problems) {
        let Builder {
            env, extensions, ..
        } = *builder;
        let replacement = builder.replacement.clone();
        let dry_run = builder.dry_run.clone();
        let mut stack = builder.stack.clone();
        stack.push(canonical(&config.path));
        // Tools never see a key any tactic of the run reads (issue 12); a
        // sub-tactic's tools hide its parents' `api_key_env` names too.
        let mut hidden_variables = builder.hidden_variables.clone();
        hidden_variables.extend(
            config
                .providers
                .values()
                .filter_map(|provider| provider.api_key_env.clone()),
        );
        let builder = Builder {
            stack,
            hidden_variables,
            replacement: replacement.clone(),
            dry_run: dry_run.clone(),
            budget: builder.budget.clone(),
            ..*builder
        };
        let mut problems = Problems::default();
        let registry = if config.prompts_dir.is_dir() {
            // Every bad prompt file at once; the good ones stay usable.
            let (registry, load_problems) =
                Registry::load_all_with(&config.prompts_dir, &extensions.named.prompts);
            for problem in load_problems {
                problems.push(problem);
            }
            registry
        } else {
            Registry::empty()
        };

        let toolbox = build_toolbox(&config, &builder.hidden_variables, &mut problems);
        let toolbox = add_registered_tools(toolbox, extensions, &mut problems);
        let providers = problems
            .take_other(Providers::new(&config.providers, env))
            .map(|providers| match (replacement, dry_run) {
                (Some(provider), _) => providers.serve_all_with(provider),
                (None, Some(log)) => providers.dry_run(log),
                (None, None) => providers,
            });
        let prices = match &config.pricing {
            Some(overrides) => match ModelTable::bundled().with_overrides(overrides) {
                Ok(table) => Arc::new(table),
                Err(error) => {
                    // Every number out of range is its own problem; a table
                    // of the wrong shape is one.
                    let place = config.path.display();
                    let checked = crate::provider::pricing::check_table(overrides);
                    if checked.is_empty() {
                        problems.push_other(format!("{place}: `pricing`: {error}"));
                    }
                    for problem in checked {
                        problems.push_other(format!("{place}: `pricing`: {problem}"));
                    }
                    Arc::new(ModelTable::bundled().clone())
                }
            },
            None => Arc::new(ModelTable::bundled().clone()),
        };
        let mut prompts = BTreeMap::new();

        let mut agents = IndexMap::new();
        for agent in &config.agents {
            let system_prompt = match &agent.system_prompt {
                SystemPrompt::Key(key) => lookup(
                    &registry,
                    key,
                    &format!("agent `{}`", agent.name),
                    &mut problems,
                ),
                SystemPrompt::Inline(text) => {
                    let key = format!("{}/system (inline)", agent.name);
                    problems.take(Prompt::new(key, text.clone())).map(Arc::new)
                }
            };
            let mut model = providers
                .as_ref()
                .and_then(|providers| problems.take_other(providers.resolve(&agent.model_name)));
            if let (Some(budget), Some(resolved)) = (&builder.budget, model.as_mut()) {
                let budgeted = BudgetedProvider::new(
                    resolved.provider.clone(),
                    budget.clone(),
                    prices.clone(),
                    &resolved.provider_name,
                    resolved.service,
                    &resolved.model,
                    &agent.model_args,
                );
                match budgeted {
                    Ok(budgeted) => resolved.provider = Arc::new(budgeted),
                    Err(problem) => problems.push_other(problem),
                }
            }
            for server in &agent.mcp_servers {
                check_server(
                    &config,
                    &format!("agent `{}`", agent.name),
                    server,
                    &mut problems,
                );
            }
            for tool in &agent.tools {
                if !toolbox.contains(tool) {
                    problems.push_other(format!(
                        "agent `{}` names tool `{tool}`, which is not defined under `tools:` or registered by the program{}",
                        agent.name,
                        crate::suggest::hint(tool, toolbox.names())
                    ));
                }
            }
            let context_manager = agent.context_manager.as_ref().and_then(|settings| {
                let (provider, model) = split_model(&agent.model_name);
                problems.take_other(extensions.context_managers.build(&ContextSettings {
                    kind: settings.kind.clone(),
                    model_provider: provider.to_string(),
                    model: model.to_string(),
                    max_tokens: settings.max_tokens,
                    options: settings.options.clone(),
                }))
            });
            let (Some(system_prompt), Some(model)) = (system_prompt, model) else {
                continue;
            };
            check_prompt_tools(&config, &toolbox, &system_prompt, &mut problems);
            prompts.insert(system_prompt.path.clone(), system_prompt.clone());
            let spec = AgentSpec {
                name: agent.name.clone(),
                system_prompt,
                model_name: agent.model_name.clone(),
                model,
                model_args: agent.model_args.clone(),
                tools: agent.tools.clone(),
                mcp_servers: agent.mcp_servers.clone(),
                limits: Limits {
                    max_exception_retry: agent.max_exception_retry,
                    max_interrupt_steps: agent.max_interrupt_steps,
                    max_llm_recall: agent.max_llm_recall,
                },
                context_manager,
                api_type: agent.api_type,
            };
            agents.insert(agent.name.clone(), Arc::new(spec));
        }

        let program = extensions.flow_named(&config.name);
        if let Some(flow) = &program {
            check_program(&config, flow.as_ref(), &mut problems);
            // A flow may use any prompt of the registry: the record keeps them all.
            for key in registry.keys() {
                if let Ok(prompt) = registry.get(key) {
                    prompts.insert(key.to_string(), Arc::new(prompt.clone()));
                }
            }
        }
        let nodes = build_nodes(
            &config,
            &config.flow,
            &registry,
            &toolbox,
            &mut problems,
            &mut prompts,
            &builder,
        );
        let result = config.result.as_ref().and_then(|text| {
            problems
                .take(Prompt::new("result", text.clone()))
                .map(Arc::new)
        });

        let other_tools = config
            .tools
            .iter()
            .map(|tool| (tool.name.clone(), "tools:"))
            .chain(
                config
                    .builtin_tools
                    .iter()
                    .map(|tool| (tool.name.clone(), "builtin_tools:")),
            )
            .chain(
                extensions
                    .tool_names()
                    .map(|name| (name.to_string(), "Registry::tool")),
            )
            .collect();
        check_handlers(&prompts, extensions, &mut problems);
        let runtime = Arc::new(Runtime {
            toolbox,
            mcp: McpServers::new(config.mcp_servers.clone(), other_tools)
                .hide_variables(builder.hidden_variables.clone()),
            prices,
            price_warnings: UnknownPriceWarnings::default(),
            handlers: extensions.named.handlers.clone(),
        });
        let recorded_prompts: BTreeMap<&String, record::PromptInfo> = prompts
            .iter()
            .map(|(key, prompt)| {
                let info = record::PromptInfo::of(prompt);
                (key, info)
            })
            .collect();
        let tactic = Tactic {
            recorded_config: record::SharedJson::new(&config.resolved),
            recorded_prompts: record::SharedJson::new(&recorded_prompts),
            config: Arc::new(config),
            registry: Arc::new(registry),
            agents: Arc::new(agents),
            runtime,
            nodes: nodes.into(),
            result,
            program,
        };
        (tactic, problems)
    }

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
        fn walk<'a>(nodes: &'a [Node], found: &mut Vec<&'a Tactic>) {
            for node in nodes {
                match node {
                    Node::Tactic(step) => found.push(&step.tactic),
                    Node::Step(_) => {}
                    Node::Loop { nodes, .. } | Node::Parallel { nodes, .. } => walk(nodes, found),
                }
            }
        }
        let mut found = Vec::new();
        walk(&self.nodes, &mut found);
        found
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

    /// Why a request of this tactic would wait right now (rate limit, back-off
    /// after a 429, concurrency), from its providers' limiters.
    pub fn waiting(&self) -> Option<crate::provider::limit::Waiting> {
        self.agents
            .values()
            .find_map(|agent| agent.model.provider.limiter()?.waiting())
    }

    /// Runs one task to its session record.
    pub async fn run(&self, task: Task) -> SessionRecord {
        flow::run(self, task, None, std::future::pending()).await
    }

    /// Runs one task, handing the final turn's text to `sink` as it arrives.
    pub async fn run_streaming(
        &self,
        task: Task,
        sink: crate::agent::SharedTextSink,
    ) -> SessionRecord {
        flow::run(self, task, Some(sink), std::future::pending()).await
    }

    /// Runs one task until `interrupt` completes; an interrupted run is a
    /// `failure` record with error `interrupted` holding every agent call that
    /// had finished, so what was spent stays on record.
    pub async fn run_until(
        &self,
        task: Task,
        sink: Option<crate::agent::SharedTextSink>,
        interrupt: impl std::future::Future<Output = ()>,
    ) -> SessionRecord {
        flow::run(self, task, sink, interrupt).await
    }
}

/// The prompt `key` of the registry, for `who`. A key whose file failed to
/// load was reported with the file's problem; it is not reported again.
fn lookup(
    registry: &Registry,
    key: &str,
    who: &str,
    problems: &mut Problems,
) -> Option<Arc<Prompt>> {
    match registry.get(key) {
        Ok(prompt) => Some(Arc::new(prompt.clone())),
        Err(crate::prompt::Error::Broken { .. }) => None,
        Err(error) => {
            problems.push(format!("{who}: {error}"));
            None
        }
    }
}

/// A programmed tactic's file: the agents the flow uses are under
/// `agent_configs`, and the file has no program of its own (`flow:`,
/// `result:`), which would never run.
fn check_program(config: &TacticConfig, flow: &dyn program::DynFlow, problems: &mut Problems) {
    let place = config.path.display();
    let name = flow.name();
    for key in ["flow", "result"] {
        if config.resolved.get(key).is_some() {
            problems.push_other(format!(
                "{place}: `tactic_type: {name}` is the programmed tactic `{name}` (registered \
                 in this binary), which never runs a `{key}:`; remove `{key}:`, or rename \
                 `tactic_type` to run the YAML flow"
            ));
        }
    }
    let names = config.agents.iter().map(|agent| agent.name.as_str());
    for agent in flow.agents() {
        if !names.clone().any(|name| name == *agent) {
            problems.push_other(format!(
                "{place}: programmed tactic `{name}` uses agent `{agent}`, which is not under \
                 `agent_configs`{}",
                crate::suggest::hint(agent, names.clone())
            ));
        }
    }
}

/// A tool or MCP server a prompt names must be declared in the tactic.
fn check_prompt_tools(
    config: &TacticConfig,
    toolbox: &Toolbox,
    prompt: &Prompt,
    problems: &mut Problems,
) {
    for tool in &prompt.tools {
        if !toolbox.contains(tool) {
            problems.push_other(format!(
                "prompt `{}` names tool `{tool}`, which is not defined under `tools:` or registered by the program{}",
                prompt.path,
                crate::suggest::hint(tool, toolbox.names())
            ));
        }
    }
    for server in &prompt.mcp_servers {
        check_server(
            config,
            &format!("prompt `{}`", prompt.path),
            server,
            problems,
        );
    }
}

fn check_server(config: &TacticConfig, who: &str, server: &str, problems: &mut Problems) {
    let names = config.mcp_servers.iter().map(|server| server.name.as_str());
    if !names.clone().any(|name| name == server) {
        problems.push_other(format!(
            "{who} names MCP server `{server}`, which is not defined under `mcp_servers:`{}",
            crate::suggest::hint(server, names)
        ));
    }
}

/// The registry's Rust tools join the toolbox: one namespace with the YAML's
/// command and built-in tools (MCP tools are checked when their servers
/// start), so a name in both is a problem naming both places.
fn add_registered_tools(
    mut toolbox: Toolbox,
    extensions: &Extensions,
    problems: &mut Problems,
) -> Toolbox {
    for (name, tool) in extensions.named.tools.iter() {
        if toolbox.contains(name) {
            problems.push_other(format!(
                "tool `{name}` is both defined in the tactic (`tools:` or `builtin_tools:`) and \
                 registered by the program (`Registry::tool`); rename one"
            ));
            continue;
        }
        toolbox.insert(tool.clone());
    }
    toolbox
}

/// Every prompt that names a handler (`handler: NAME`) names a registered one.
fn check_handlers(
    prompts: &BTreeMap<String, Arc<Prompt>>,
    extensions: &Extensions,
    problems: &mut Problems,
) {
    for prompt in prompts.values() {
        let Some(name) = &prompt.handler_name else {
            continue;
        };
        if extensions.named.handlers.get(name).is_none() {
            let known: Vec<String> = extensions
                .handler_names()
                .map(|name| format!("`{name}`"))
                .collect();
            problems.push(format!(
                "prompt `{}` names handler `{}`, which is not registered{} (known: {})",
                prompt.path,
                crate::suggest::printable(name),
                crate::suggest::hint(name, extensions.handler_names()),
                known.join(", ")
            ));
        }
    }
}

fn build_toolbox(config: &TacticConfig, hidden: &[String], problems: &mut Problems) -> Toolbox {
    let mut toolbox = Toolbox::default();
    for tool in &config.tools {
        if toolbox.contains(&tool.name) {
            problems.push_other(format!(
                "tool `{}` is defined twice under `tools:`",
                tool.name
            ));
            continue;
        }
        let spec = ToolSpec {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: tool.parameters.clone(),
        };
        toolbox.insert(Arc::new(
            CommandTool::new(
                spec,
                tool.command.clone(),
                crate::config::numbers::seconds(tool.timeout_s),
                tool.cwd.clone(),
                tool.env.clone(),
            )
            .hide_variables(hidden.iter().cloned()),
        ));
    }
    for builtin in &config.builtin_tools {
        if toolbox.contains(&builtin.name) {
            problems.push_other(format!(
                "tool `{}` is both under `tools:` and `builtin_tools:`",
                builtin.name
            ));
            continue;
        }
        if let Some(tool) =
            problems.take_other(BuiltinTool::new(&builtin.name, builtin.root.as_deref()))
        {
            toolbox.insert(Arc::new(tool));
        }
    }
    toolbox
}

/// What building a tactic passes on to the tactics its steps run.
pub(super) struct Builder<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    extensions: &'a Extensions,
    replacement: Option<Arc<dyn crate::provider::Provider>>,
    dry_run: Option<Arc<crate::provider::dry_run::DryRun>>,
    /// Every call passes this spending cap (`lllm batch --max-cost`).
    budget: Option<Arc<CostBudget>>,
    /// The tactic files being built, outermost first (to find cycles).
    stack: Vec<PathBuf>,
    /// The `api_key_env` names of those tactics: no tool inherits them.
    hidden_variables: Vec<String>,
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Loads and builds the tactic a step runs; its problems are this tactic's,
/// each naming the step and the file.
fn build_sub_tactic(
    parent: &TacticConfig,
    step: &SubTacticConfig,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> Option<SubStep> {
    let place = format!("step `{}` (tactic `{}`)", step.name, step.path.display());
    // The step's own templates are checked whatever becomes of the tactic
    // it runs, so their problems are listed with the tactic's.
    let task = step.task.as_ref().and_then(|text| {
        problems
            .take(Prompt::new(format!("{}.task", step.name), text.clone()))
            .map(Arc::new)
    });
    let args = template_args(&step.name, &step.args, problems);
    let (condition, stop) = step_conditions(&step.name, &step.condition, &step.stop, problems);
    let path = canonical(&step.path);
    if builder.stack.contains(&path) {
        let mut chain: Vec<String> = builder
            .stack
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        chain.push(path.display().to_string());
        problems.push(format!(
            "{place}: tactics run each other in a cycle: {}",
            chain.join(" → ")
        ));
        return None;
    }
    let adjust = |config: &mut TacticConfig| {
        for warning in &config.warnings {
            crate::report::warn(&format!("{place}: {warning}"));
        }
        if let Some(model) = &parent.model_override {
            config.override_model(model);
        }
        if let Some(prices) = &parent.price_overrides {
            config.override_prices(prices.clone());
        }
    };
    let tactic = match load::load_config(&step.path, adjust, builder, None) {
        Ok(tactic) => tactic,
        Err(error) => {
            for problem in error.problems {
                problems.push(format!("{place}: {problem}"));
            }
            return None;
        }
    };
    Some(SubStep {
        name: step.name.clone(),
        tactic: Arc::new(tactic),
        task,
        args,
        condition,
        stop,
    })
}

/// A step's `if` and `stop` expressions, compiled.
fn step_conditions(
    name: &str,
    condition: &Option<String>,
    stop: &Option<String>,
    problems: &mut Problems,
) -> (Option<flow::Condition>, Option<flow::Condition>) {
    let mut compile = |source: &Option<String>, key: &str| {
        source.as_ref().and_then(|source| {
            problems.take(flow::Condition::new(
                source,
                &format!("step `{name}` `{key}`"),
            ))
        })
    };
    (compile(condition, "if"), compile(stop, "stop"))
}

/// A step's `args`: strings are templates, anything else a literal value.
fn template_args(
    step: &str,
    values: &serde_json::Map<String, Value>,
    problems: &mut Problems,
) -> Vec<(String, ArgValue)> {
    let mut args = Vec::new();
    for (name, value) in values {
        let value = match value {
            // A template that does not compile is reported here; its name
            // stays, so the step's prompt is not also said to lack it.
            Value::String(text) => problems
                .take(Prompt::new(format!("{step}.args.{name}"), text.clone()))
                .map_or(ArgValue::Literal(Value::Null), |prompt| {
                    ArgValue::Template(Arc::new(prompt))
                }),
            other => ArgValue::Literal(other.clone()),
        };
        args.push((name.clone(), value));
    }
    args
}

fn build_nodes(
    config: &TacticConfig,
    items: &[FlowItem],
    registry: &Registry,
    toolbox: &Toolbox,
    problems: &mut Problems,
    prompts: &mut BTreeMap<String, Arc<Prompt>>,
    builder: &Builder<'_>,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for item in items {
        let step = match item {
            FlowItem::Loop(settings) => {
                let until = settings
                    .until
                    .as_ref()
                    .and_then(|source| problems.take(flow::Condition::new(source, "loop `until`")));
                let inner = build_nodes(
                    config,
                    &settings.steps,
                    registry,
                    toolbox,
                    problems,
                    prompts,
                    builder,
                );
                nodes.push(Node::Loop {
                    max: settings.max,
                    until,
                    nodes: inner,
                });
                continue;
            }
            FlowItem::Parallel(settings) => {
                let foreach = settings.foreach.as_ref().and_then(|source| {
                    problems.take(flow::Condition::new(source, "parallel `foreach`"))
                });
                let inner = build_nodes(
                    config,
                    &settings.steps,
                    registry,
                    toolbox,
                    problems,
                    prompts,
                    builder,
                );
                nodes.push(Node::Parallel {
                    foreach,
                    item: settings.item.clone(),
                    nodes: inner,
                });
                continue;
            }
            FlowItem::Tactic(step) => {
                nodes.extend(build_sub_tactic(config, step, builder, problems).map(Node::Tactic));
                continue;
            }
            FlowItem::Step(step) => step,
        };
        let prompt = match &step.input {
            StepInput::Prompt(key) => {
                lookup(registry, key, &format!("step `{}`", step.name), problems)
            }
            StepInput::Text(text) => problems
                .take(Prompt::new(format!("{} (inline)", step.name), text.clone()))
                .map(Arc::new),
        };
        let args = template_args(&step.name, &step.args, problems);
        let (condition, stop) = step_conditions(&step.name, &step.condition, &step.stop, problems);
        let Some(prompt) = prompt else { continue };
        check_prompt_tools(config, toolbox, &prompt, problems);
        prompts.insert(prompt.path.clone(), prompt.clone());
        nodes.push(Node::Step(Step {
            name: step.name.clone(),
            agent: step.agent.clone(),
            dialog: step.dialog.clone(),
            prompt,
            args,
            condition,
            fork: step.fork.clone(),
            stop,
        }));
    }
    nodes
}
