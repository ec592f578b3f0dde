//! Tactics: a resolved config turned into agents, tools and a flow, run once
//! per task into a session record.
//!
//! `Tactic::build` does everything that can fail on bad input — prompt lookup,
//! provider resolution, tools, context managers, template variables — so a run
//! never sends a request for a tactic that cannot finish. `Tactic::run` never
//! fails: a failed run is a record in state `failure` (STYLE 8).

mod flow;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::agent::context::{ContextManagers, ContextSettings};
use crate::agent::{AgentSpec, Limits, Runtime};
use crate::config::{FlowItem, StepInput, SubTacticConfig, SystemPrompt, TacticConfig};
use crate::prompt::{Prompt, Registry};
use crate::provider::ToolSpec;
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::Providers;
use crate::tool::{BuiltinTool, CommandTool, McpServers, Toolbox};

pub use flow::INTERRUPTED;
pub use record::{RunState, SessionRecord};

/// Everything wrong with a tactic, one problem per line (a control character
/// inside a problem came from a name it quotes, and is shown escaped).
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.iter().map(|problem| crate::suggest::printable(problem)).collect::<Vec<_>>().join("\n"))]
pub struct Error {
    pub problems: Vec<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One task: what the user asks, with its id, template arguments and tags.
#[derive(Debug, Clone, Default)]
pub struct TaskInput {
    pub id: Option<String>,
    /// A string, or any JSON value (templates see it as `task`).
    pub task: Value,
    pub args: Map<String, Value>,
    pub tags: Map<String, Value>,
}

impl TaskInput {
    /// The task as text for a model: a string as is, anything else as JSON.
    pub fn text(&self) -> String {
        match &self.task {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
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

pub struct Tactic {
    pub config: TacticConfig,
    pub registry: Arc<Registry>,
    pub(crate) agents: IndexMap<String, Arc<AgentSpec>>,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) result: Option<Arc<Prompt>>,
    /// The resolved config and the prompts used (`key → prompt`) as every
    /// record of this tactic holds them (made once, not per run).
    pub(crate) recorded_config: record::SharedJson,
    pub(crate) recorded_prompts: record::SharedJson,
}

/// Problems are collected, not returned at the first one: the user sees them all.
struct Problems(Vec<String>);

impl Problems {
    /// Adds a problem once (two agents on one unusable model make one line).
    fn push(&mut self, problem: impl std::fmt::Display) {
        let problem = problem.to_string();
        if !self.0.contains(&problem) {
            self.0.push(problem);
        }
    }

    fn take<T, E: std::fmt::Display>(&mut self, result: std::result::Result<T, E>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }
}

impl Tactic {
    /// Builds and validates everything a run needs but the task: call `check`
    /// with the task's argument names before running it. `env` reads
    /// environment variables (keys, base URLs); tests pass their own.
    pub fn build(config: TacticConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Tactic> {
        Tactic::build_with(config, env, &ContextManagers::with_builtins())
    }

    /// `build` with your own context managers registered by name, so a tactic
    /// can pick them with `context_manager: {type: NAME}`.
    pub fn build_with(
        config: TacticConfig,
        env: &dyn Fn(&str) -> Option<String>,
        context_managers: &ContextManagers,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env,
                context_managers,
                replacement: None,
                dry_run: None,
                stack: Vec::new(),
            },
        )
    }

    /// `build` with every model served by `provider` (a replay of a record).
    pub fn build_replaying(
        config: TacticConfig,
        provider: Arc<dyn crate::provider::Provider>,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &Builder {
                env: &|_| None,
                context_managers: &ContextManagers::with_builtins(),
                replacement: Some(provider),
                dry_run: None,
                stack: Vec::new(),
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
                context_managers: &ContextManagers::with_builtins(),
                replacement: None,
                dry_run: Some(log),
                stack: Vec::new(),
            },
        )
    }

    fn build_inner(config: TacticConfig, builder: &Builder<'_>) -> Result<Tactic> {
        let Builder {
            env,
            context_managers,
            ..
        } = *builder;
        let replacement = builder.replacement.clone();
        let dry_run = builder.dry_run.clone();
        let mut stack = builder.stack.clone();
        stack.push(canonical(&config.path));
        let builder = Builder {
            stack,
            replacement: replacement.clone(),
            dry_run: dry_run.clone(),
            ..*builder
        };
        let mut problems = Problems(Vec::new());
        let registry = if config.prompts_dir.is_dir() {
            problems
                .take(Registry::load(&config.prompts_dir))
                .unwrap_or_else(Registry::empty)
        } else {
            Registry::empty()
        };

        let toolbox = build_toolbox(&config, &mut problems);
        let providers =
            problems
                .take(Providers::new(&config.providers, env))
                .map(|providers| match (replacement, dry_run) {
                    (Some(provider), _) => providers.serve_all_with(provider),
                    (None, Some(log)) => providers.dry_run(log),
                    (None, None) => providers,
                });
        let mut prompts = BTreeMap::new();

        let mut agents = IndexMap::new();
        for agent in &config.agents {
            let system_prompt = match &agent.system_prompt {
                SystemPrompt::Key(key) => problems
                    .take(
                        registry
                            .get(key)
                            .map_err(|error| format!("agent `{}`: {error}", agent.name)),
                    )
                    .map(|prompt| Arc::new(prompt.clone())),
                SystemPrompt::Inline(text) => {
                    let key = format!("{}/system (inline)", agent.name);
                    problems.take(Prompt::new(key, text.clone())).map(Arc::new)
                }
            };
            let model = providers
                .as_ref()
                .and_then(|providers| problems.take(providers.resolve(&agent.model_name)));
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
                    problems.push(format!(
                        "agent `{}` names tool `{tool}`, which is not defined under `tools:`{}",
                        agent.name,
                        crate::suggest::hint(tool, toolbox.names())
                    ));
                }
            }
            let context_manager = agent.context_manager.as_ref().and_then(|settings| {
                let (provider, model) = split_model(&agent.model_name);
                problems.take(context_managers.build(&ContextSettings {
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

        if !problems.0.is_empty() {
            return Err(Error {
                problems: problems.0,
            });
        }
        let prices = match &config.pricing {
            Some(overrides) => match ModelTable::bundled().with_overrides(overrides) {
                Ok(table) => Arc::new(table),
                Err(error) => {
                    return Err(Error {
                        problems: vec![format!("`pricing`: {error}")],
                    });
                }
            },
            None => Arc::new(ModelTable::bundled().clone()),
        };
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
            .collect();
        let runtime = Arc::new(Runtime {
            toolbox,
            mcp: McpServers::new(config.mcp_servers.clone(), other_tools),
            prices,
            price_warnings: UnknownPriceWarnings::default(),
        });
        let recorded_prompts: BTreeMap<&String, record::PromptInfo> = prompts
            .iter()
            .map(|(key, prompt)| {
                let info = record::PromptInfo {
                    sha256: prompt.sha256(),
                    template: prompt.template.clone(),
                };
                (key, info)
            })
            .collect();
        let tactic = Tactic {
            recorded_config: record::SharedJson::new(&config.resolved),
            recorded_prompts: record::SharedJson::new(&recorded_prompts),
            config,
            registry: Arc::new(registry),
            agents,
            runtime,
            nodes,
            result,
        };
        Ok(tactic)
    }

    /// Checks that every template the flow reaches has its variables, given the
    /// task argument names. All problems at once.
    pub fn check(&self, arg_names: &BTreeSet<String>) -> Result<()> {
        let problems = flow::check_variables(self, arg_names);
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

    /// Pre-flight of one task (`lllm batch`): `check` with its argument names,
    /// then every template that needs nothing but the task (system prompts,
    /// step arguments and prompts naming no earlier step, `result`) is rendered
    /// with the task's values, so a template that fails on them (an attribute
    /// the value lacks, a filter on the wrong type) is reported before anything
    /// is sent. Templates that need a step's output cannot be rendered yet.
    pub fn check_task(&self, task: &TaskInput) -> Result<()> {
        let arg_names: BTreeSet<String> = task.args.keys().cloned().collect();
        self.check(&arg_names)?;
        let mut templates: Vec<&Prompt> = self
            .agents
            .values()
            .map(|agent| agent.system_prompt.as_ref())
            .collect();
        collect_templates(&self.nodes, &mut templates);
        templates.extend(self.result.as_deref());
        // Templates without variables need no context (often all of them).
        let needs_context = templates
            .iter()
            .any(|template| !template.template_vars().is_empty());
        let context = if needs_context {
            flow::base_context(task)
        } else {
            Map::new()
        };
        let mut problems = Vec::new();
        for template in templates {
            let ready = template
                .template_vars()
                .iter()
                .all(|name| context.contains_key(name));
            if ready && let Err(error) = template.render(&context) {
                problems.push(error.to_string());
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

    /// The models of this tactic's agents that have no price (the mock
    /// provider is free), as `provider/model`.
    pub fn unpriced_models(&self) -> Vec<String> {
        let mut models: Vec<String> = self
            .agents
            .values()
            .filter(|agent| {
                let (provider, model) = split_model(&agent.model_name);
                provider != "mock" && self.runtime.prices.lookup(provider, model).is_none()
            })
            .map(|agent| agent.model_name.clone())
            .collect();
        models.dedup();
        models
    }

    /// Runs one task to its session record.
    pub async fn run(&self, task: TaskInput) -> SessionRecord {
        flow::run(self, task, None, std::future::pending()).await
    }

    /// Runs one task, handing the final turn's text to `sink` as it arrives.
    pub async fn run_streaming(
        &self,
        task: TaskInput,
        sink: crate::agent::SharedTextSink,
    ) -> SessionRecord {
        flow::run(self, task, Some(sink), std::future::pending()).await
    }

    /// Runs one task until `interrupt` completes; an interrupted run is a
    /// `failure` record with error `interrupted` holding every agent call that
    /// had finished, so what was spent stays on record.
    pub async fn run_until(
        &self,
        task: TaskInput,
        sink: Option<crate::agent::SharedTextSink>,
        interrupt: impl std::future::Future<Output = ()>,
    ) -> SessionRecord {
        flow::run(self, task, sink, interrupt).await
    }
}

/// `provider/model` → (`provider`, `model`); a bare name is an OpenAI model.
pub fn split_model(model_name: &str) -> (&str, &str) {
    model_name.split_once('/').unwrap_or(("openai", model_name))
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
            problems.push(format!(
                "prompt `{}` names tool `{tool}`, which is not defined under `tools:`{}",
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
        problems.push(format!(
            "{who} names MCP server `{server}`, which is not defined under `mcp_servers:`{}",
            crate::suggest::hint(server, names)
        ));
    }
}

/// Every template of the flow's steps: argument templates, then the prompt
/// (for a sub-tactic step, its `task`).
fn collect_templates<'a>(nodes: &'a [Node], templates: &mut Vec<&'a Prompt>) {
    for node in nodes {
        match node {
            Node::Step(step) => {
                for (_, value) in &step.args {
                    if let ArgValue::Template(template) = value {
                        templates.push(template);
                    }
                }
                templates.push(&step.prompt);
            }
            // A sub-tactic's own templates see its task, rendered later; here
            // only the step's `task` and `args` templates.
            Node::Tactic(step) => {
                for (_, value) in &step.args {
                    if let ArgValue::Template(template) = value {
                        templates.push(template);
                    }
                }
                templates.extend(step.task.as_deref());
            }
            Node::Loop { nodes, .. } | Node::Parallel { nodes, .. } => {
                collect_templates(nodes, templates)
            }
        }
    }
}

fn build_toolbox(config: &TacticConfig, problems: &mut Problems) -> Toolbox {
    let mut toolbox = Toolbox::default();
    for tool in &config.tools {
        if toolbox.contains(&tool.name) {
            problems.push(format!(
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
        toolbox.insert(Arc::new(CommandTool::new(
            spec,
            tool.command.clone(),
            Duration::from_secs_f64(tool.timeout_s.max(0.001)),
            tool.cwd.clone(),
            tool.env.clone(),
        )));
    }
    for builtin in &config.builtin_tools {
        if toolbox.contains(&builtin.name) {
            problems.push(format!(
                "tool `{}` is both under `tools:` and `builtin_tools:`",
                builtin.name
            ));
            continue;
        }
        if let Some(tool) = problems.take(BuiltinTool::new(&builtin.name, builtin.root.as_deref()))
        {
            toolbox.insert(Arc::new(tool));
        }
    }
    toolbox
}

/// What building a tactic passes on to the tactics its steps run.
struct Builder<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    context_managers: &'a ContextManagers,
    replacement: Option<Arc<dyn crate::provider::Provider>>,
    dry_run: Option<Arc<crate::provider::dry_run::DryRun>>,
    /// The tactic files being built, outermost first (to find cycles).
    stack: Vec<PathBuf>,
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
    let mut config = match crate::config::load(&step.path) {
        Ok(config) => config,
        Err(error) => {
            for line in error.to_string().lines() {
                problems.push(format!("{place}: {line}"));
            }
            return None;
        }
    };
    for warning in &config.warnings {
        crate::report::warn(&format!("{place}: {warning}"));
    }
    if let Some(model) = &parent.model_override {
        config.override_model(model);
    }
    if let Some(prices) = &parent.price_overrides {
        config.override_prices(prices.clone());
    }
    let tactic = match Tactic::build_inner(config, builder) {
        Ok(tactic) => tactic,
        Err(error) => {
            for problem in error.problems {
                problems.push(format!("{place}: {problem}"));
            }
            return None;
        }
    };
    let task = step.task.as_ref().and_then(|text| {
        problems
            .take(Prompt::new(format!("{}.task", step.name), text.clone()))
            .map(Arc::new)
    });
    let args = template_args(&step.name, &step.args, problems);
    let (condition, stop) = step_conditions(&step.name, &step.condition, &step.stop, problems);
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
            Value::String(text) => problems
                .take(Prompt::new(format!("{step}.args.{name}"), text.clone()))
                .map(|prompt| ArgValue::Template(Arc::new(prompt))),
            other => Some(ArgValue::Literal(other.clone())),
        };
        if let Some(value) = value {
            args.push((name.clone(), value));
        }
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
            StepInput::Prompt(key) => problems
                .take(
                    registry
                        .get(key)
                        .map_err(|error| format!("step `{}`: {error}", step.name)),
                )
                .map(|prompt| Arc::new(prompt.clone())),
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
