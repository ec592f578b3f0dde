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
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::agent::context::{ContextManagers, ContextSettings};
use crate::agent::{AgentSpec, Limits, Runtime};
use crate::config::{FlowItem, StepInput, SystemPrompt, TacticConfig};
use crate::prompt::{Prompt, Registry};
use crate::provider::ToolSpec;
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::Providers;
use crate::tool::{BuiltinTool, CommandTool, Toolbox};

pub use record::{RunState, SessionRecord};

/// Everything wrong with a tactic, one problem per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.join("\n"))]
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
pub(crate) enum Node {
    Step(Step),
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
    /// Prompts used by the run, for the record (`key → prompt`).
    pub(crate) prompts: BTreeMap<String, Arc<Prompt>>,
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
        Tactic::build_inner(config, env, context_managers, None)
    }

    /// `build` with every model served by `provider` (a replay of a record).
    pub fn build_replaying(
        config: TacticConfig,
        provider: Arc<dyn crate::provider::Provider>,
    ) -> Result<Tactic> {
        Tactic::build_inner(
            config,
            &|_| None,
            &ContextManagers::with_builtins(),
            Some(provider),
        )
    }

    fn build_inner(
        config: TacticConfig,
        env: &dyn Fn(&str) -> Option<String>,
        context_managers: &ContextManagers,
        replacement: Option<Arc<dyn crate::provider::Provider>>,
    ) -> Result<Tactic> {
        let mut problems = Problems(Vec::new());
        let registry = if config.prompts_dir.is_dir() {
            problems
                .take(Registry::load(&config.prompts_dir))
                .unwrap_or_else(Registry::empty)
        } else {
            Registry::empty()
        };

        let toolbox = build_toolbox(&config, &mut problems);
        let providers = problems
            .take(Providers::new(&config.providers, env))
            .map(|providers| match replacement {
                Some(provider) => providers.serve_all_with(provider),
                None => providers,
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
            for tool in &system_prompt.tools {
                if !toolbox.contains(tool) {
                    problems.push(format!(
                        "prompt `{}` names tool `{tool}`, which is not defined under `tools:`",
                        system_prompt.path
                    ));
                }
            }
            prompts.insert(system_prompt.path.clone(), system_prompt.clone());
            let spec = AgentSpec {
                name: agent.name.clone(),
                system_prompt,
                model_name: agent.model_name.clone(),
                model,
                model_args: agent.model_args.clone(),
                tools: agent.tools.clone(),
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
            &config.flow,
            &registry,
            &toolbox,
            &mut problems,
            &mut prompts,
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
        let runtime = Arc::new(Runtime {
            toolbox,
            prices,
            price_warnings: UnknownPriceWarnings::default(),
        });
        let tactic = Tactic {
            config,
            registry: Arc::new(registry),
            agents,
            runtime,
            nodes,
            result,
            prompts,
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

    /// Pre-flight of one task (`lllm batch`): `check` with its argument names,
    /// then every template that needs nothing but the task (system prompts,
    /// step arguments and prompts naming no earlier step, `result`) is rendered
    /// with the task's values, so a template that fails on them (an attribute
    /// the value lacks, a filter on the wrong type) is reported before anything
    /// is sent. Templates that need a step's output cannot be rendered yet.
    pub fn check_task(&self, task: &TaskInput) -> Result<()> {
        let arg_names: BTreeSet<String> = task.args.keys().cloned().collect();
        self.check(&arg_names)?;
        let context = flow::base_context(task);
        let mut templates: Vec<&Prompt> = self
            .agents
            .values()
            .map(|agent| agent.system_prompt.as_ref())
            .collect();
        collect_templates(&self.nodes, &mut templates);
        templates.extend(self.result.as_deref());
        let mut problems = Vec::new();
        for template in templates {
            let ready = template
                .template_vars()
                .iter()
                .all(|name| context.contains_key(name));
            if ready {
                if let Err(error) = template.render(&context) {
                    problems.push(error.to_string());
                }
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
        flow::run(self, task, None).await
    }

    /// Runs one task, handing the final turn's text to `sink` as it arrives.
    pub async fn run_streaming(
        &self,
        task: TaskInput,
        sink: crate::agent::SharedTextSink,
    ) -> SessionRecord {
        flow::run(self, task, Some(sink)).await
    }
}

/// `provider/model` → (`provider`, `model`); a bare name is an OpenAI model.
pub fn split_model(model_name: &str) -> (&str, &str) {
    model_name.split_once('/').unwrap_or(("openai", model_name))
}

/// Every template of the flow's steps: argument templates, then the prompt.
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

fn build_nodes(
    items: &[FlowItem],
    registry: &Registry,
    toolbox: &Toolbox,
    problems: &mut Problems,
    prompts: &mut BTreeMap<String, Arc<Prompt>>,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for item in items {
        let step = match item {
            FlowItem::Loop(settings) => {
                let until = settings
                    .until
                    .as_ref()
                    .and_then(|source| problems.take(flow::Condition::new(source, "loop `until`")));
                let inner = build_nodes(&settings.steps, registry, toolbox, problems, prompts);
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
                let inner = build_nodes(&settings.steps, registry, toolbox, problems, prompts);
                nodes.push(Node::Parallel {
                    foreach,
                    item: settings.item.clone(),
                    nodes: inner,
                });
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
        let mut args = Vec::new();
        for (name, value) in &step.args {
            let value = match value {
                Value::String(text) => problems
                    .take(Prompt::new(
                        format!("{}.args.{name}", step.name),
                        text.clone(),
                    ))
                    .map(|prompt| ArgValue::Template(Arc::new(prompt))),
                other => Some(ArgValue::Literal(other.clone())),
            };
            if let Some(value) = value {
                args.push((name.clone(), value));
            }
        }
        let condition = step.condition.as_ref().and_then(|source| {
            problems.take(flow::Condition::new(
                source,
                &format!("step `{}` `if`", step.name),
            ))
        });
        let stop = step.stop.as_ref().and_then(|source| {
            problems.take(flow::Condition::new(
                source,
                &format!("step `{}` `stop`", step.name),
            ))
        });
        let Some(prompt) = prompt else { continue };
        for tool in &prompt.tools {
            if !toolbox.contains(tool) {
                problems.push(format!(
                    "prompt `{}` names tool `{tool}`, which is not defined under `tools:`",
                    prompt.path
                ));
            }
        }
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
