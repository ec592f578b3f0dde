//! Building a tactic: every problem a config, its prompts, tools, providers
//! and flow can have, found before anything runs and reported at once
//! (`Problems`); a sub-tactic step builds its file the same way (`Builder`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::agent::context::ContextSettings;
use crate::agent::{AgentSpec, Limits, Runtime};
use crate::config::{AgentConfig, SystemPrompt, TacticConfig};
use crate::prompt::{Prompt, Registry};
use crate::provider::ToolSpec;
use crate::provider::budget::{BudgetedProvider, CostBudget};
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::split_model;
use crate::provider::registry::{Providers, Resolved};
use crate::redact::{Scrub, Scrubber, Secrets};
use crate::registry::Registry as Extensions;
use crate::tool::{BuiltinTool, CommandTool, McpServers, Toolbox};

use super::{Error, Result, Tactic, program, record};

/// Problems are collected, not returned at the first one: the user sees them
/// all, each once (two agents on one unusable prompt make one line). A
/// problem about a name the config left out for its own problems
/// (`TacticConfig::left_out`) is not one: it would only echo the config's.
#[derive(Default)]
pub(super) struct Problems {
    pub(super) lines: Vec<String>,
}

impl Problems {
    /// Adds a problem once.
    pub(super) fn push(&mut self, problem: impl std::fmt::Display) {
        let problem = problem.to_string();
        if !self.lines.contains(&problem) {
            self.lines.push(problem);
        }
    }

    /// The value of `result`, or its error added as a problem.
    pub(super) fn take<T, E: std::fmt::Display>(
        &mut self,
        result: std::result::Result<T, E>,
    ) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `take`, the problem placed where the setting at `path` of `config`
    /// is written.
    pub(super) fn take_at<T, E: std::fmt::Display>(
        &mut self,
        config: &TacticConfig,
        path: &str,
        result: std::result::Result<T, E>,
    ) -> Option<T> {
        result
            .map_err(|error| self.push(config.placed(path, error)))
            .ok()
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
                cache: None,
                batch_api: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
                secrets: Secrets::new(),
                defaults: None,
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
                cache: None,
                batch_api: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
                secrets: Secrets::new(),
                defaults: None,
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
                cache: None,
                batch_api: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
                secrets: Secrets::new(),
                defaults: None,
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
                cache: None,
                batch_api: None,
                stack: Vec::new(),
                hidden_variables: Vec::new(),
                secrets: Secrets::new(),
                defaults: None,
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
    pub(super) fn assemble(mut config: TacticConfig, builder: &Builder<'_>) -> (Tactic, Problems) {
        let extensions = builder.extensions;
        let mut builder = nested_builder(builder, &config);
        let mut problems = Problems::default();
        let registry = load_registry(&config, extensions, &mut problems);
        let toolbox = build_toolbox(&config, &builder.hidden_variables, &mut problems);
        let toolbox = add_registered_tools(toolbox, extensions, &mut problems);
        let (toolbox, remote_contracts) =
            super::tools::add_tactic_tools(&config, toolbox, &builder, &mut problems);
        // A tactic tool that could not be built has its problem; the agents
        // naming it are not also told it is missing.
        for tool in &config.tools {
            if tool.tactic.is_some() && !toolbox.contains(&tool.name) {
                config.left_out.tools.insert(tool.name.clone());
            }
        }
        let providers = build_providers(&config, &builder, &mut problems);
        if let Some(providers) = &providers {
            builder.secrets.extend(providers.secrets());
        }
        let prices = price_table(&config, &mut problems);
        let mut prompts = BTreeMap::new();
        let agents = AgentParts {
            config: &config,
            registry: &registry,
            toolbox: &toolbox,
            providers: providers.as_ref(),
            prices: &prices,
            builder: &builder,
        }
        .agents(&mut problems, &mut prompts);

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
        let nodes = super::nodes::build_nodes(
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
                .take_at(&config, "result", Prompt::new("result", text.clone()))
                .map(Arc::new)
        });
        // Compiled once per tactic; `resolve` placed a schema that does not compile.
        let output = config.output_schema.clone().and_then(|schema| {
            problems.take_at(
                &config,
                "output_schema",
                crate::prompt::JsonParser::new(Some(schema))
                    .map_err(|problem| format!("`output_schema`: {problem}")),
            )
        });
        // `resolve` placed a schema that does not compile (and refused one
        // without the `jsonschema` feature).
        let input = config.input_schema.as_ref().and_then(|schema| {
            problems.take_at(
                &config,
                "input_schema",
                crate::config::InputSchema::compile(schema),
            )
        });
        check_handlers(&prompts, &registry, extensions, &mut problems);
        let runtime = build_runtime(&config, builder, toolbox, prices, &nodes);
        let records = Records::of(&config, &prompts, &runtime.secrets);
        let tactic = Tactic {
            remote_contracts: remote_contracts.into(),
            recorded_config: records.config,
            recorded_prompts: records.prompts,
            shared_templates: records.shared_templates,
            config: Arc::new(config),
            registry: Arc::new(registry),
            agents: Arc::new(agents),
            runtime,
            nodes: nodes.into(),
            result,
            output,
            input,
            program,
            records: super::records::Records::default(),
        };
        (tactic, problems)
    }
}

/// The builder of `config`'s parts: `builder`'s settings, with `config`'s
/// file on the stack of tactics being built. Tools never see a key any
/// tactic of the run reads (issue 12); a sub-tactic's tools hide its
/// parents' `api_key_env` names too.
fn nested_builder<'a>(builder: &Builder<'a>, config: &TacticConfig) -> Builder<'a> {
    let mut stack = builder.stack.clone();
    stack.push(super::nodes::canonical(&config.path));
    let mut hidden_variables = builder.hidden_variables.clone();
    hidden_variables.extend(
        config
            .providers
            .values()
            .filter_map(|provider| provider.api_key_env.clone()),
    );
    // Served tactics' tokens (issue 30) are keys too: no tool sees their
    // variables, and no record or event their values.
    let mut secrets = builder.secrets.clone();
    for variable in token_variables(config) {
        if let Some(token) = (builder.env)(&variable) {
            secrets.add(token.trim());
        }
        hidden_variables.push(variable);
    }
    Builder {
        stack,
        hidden_variables,
        secrets,
        replacement: builder.replacement.clone(),
        dry_run: builder.dry_run.clone(),
        budget: builder.budget.clone(),
        cache: builder.cache.clone(),
        batch_api: builder.batch_api.clone(),
        ..*builder
    }
}

/// The variables `config`'s tactic tools and remote steps read their
/// tokens from (`token_env:`).
fn token_variables(config: &TacticConfig) -> Vec<String> {
    fn walk(items: &[crate::config::FlowItem], found: &mut Vec<String>) {
        for item in items {
            match item {
                crate::config::FlowItem::Tactic(step) => found.extend(step.token_env.clone()),
                crate::config::FlowItem::Loop(settings) => walk(&settings.steps, found),
                crate::config::FlowItem::Parallel(settings) => walk(&settings.steps, found),
                crate::config::FlowItem::Step(_) => {}
            }
        }
    }
    let mut found: Vec<String> = config
        .tools
        .iter()
        .filter_map(|tool| tool.token_env.clone())
        .collect();
    walk(&config.flow, &mut found);
    found
}

/// The prompt files of `config`'s prompts directory (none without one):
/// every bad file at once; the good ones stay usable.
fn load_registry(
    config: &TacticConfig,
    extensions: &Extensions,
    problems: &mut Problems,
) -> Registry {
    if !config.prompts_dir.is_dir() {
        return Registry::empty();
    }
    let (registry, load_problems) =
        Registry::load_all_with(&config.prompts_dir, &extensions.named.prompts);
    for problem in load_problems {
        problems.push(problem);
    }
    registry
}

/// The providers of `config`, or what serves in their place: a replay's
/// recorded replies, a dry run's log, the Batch APIs' hub.
fn build_providers(
    config: &TacticConfig,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> Option<Providers> {
    problems
        .take(Providers::new(&config.providers, builder.env))
        .map(|providers| match (&builder.replacement, &builder.dry_run) {
            (Some(provider), _) => providers.serve_all_with(provider.clone()),
            (None, Some(log)) => providers.dry_run(log.clone()),
            (None, None) => match &builder.batch_api {
                Some(hub) => providers.via_batch_api(hub.clone()),
                None => providers,
            },
        })
}

/// The bundled price table under `config`'s `pricing`. Every number out of
/// range is its own problem; a table of the wrong shape is one (and the
/// bundled table serves).
fn price_table(config: &TacticConfig, problems: &mut Problems) -> Arc<ModelTable> {
    let Some(overrides) = &config.pricing else {
        return Arc::new(ModelTable::bundled().clone());
    };
    let error = match ModelTable::bundled().with_overrides(overrides) {
        Ok(table) => return Arc::new(table),
        Err(error) => error,
    };
    // Where `path` is written, else the file.
    let place = |path: &str| {
        config
            .places
            .at(path)
            .unwrap_or_else(|| config.path.display().to_string())
    };
    let entries = overrides.as_object().into_iter().flatten();
    let mut checked = 0;
    for (model, entry) in entries {
        for problem in crate::provider::pricing::check_entry(model, entry) {
            checked += 1;
            problems.push(format!(
                "{}: `pricing`: {problem}",
                place(&crate::yaml::join_path("pricing", model))
            ));
        }
    }
    if checked == 0 {
        problems.push(format!("{}: `pricing`: {error}", place("pricing")));
    }
    Arc::new(ModelTable::bundled().clone())
}

/// What an agent of the tactic is built from: the tactic's prompts, tools,
/// providers and prices.
struct AgentParts<'a, 'b> {
    config: &'a TacticConfig,
    registry: &'a Registry,
    toolbox: &'a Toolbox,
    providers: Option<&'a Providers>,
    prices: &'a Arc<ModelTable>,
    builder: &'a Builder<'b>,
}

impl AgentParts<'_, '_> {
    /// Every agent of the config that builds, by name; their system prompts
    /// go to `prompts` (the record keeps them).
    fn agents(
        &self,
        problems: &mut Problems,
        prompts: &mut BTreeMap<String, Arc<Prompt>>,
    ) -> IndexMap<String, Arc<AgentSpec>> {
        let mut agents = IndexMap::new();
        for agent in &self.config.agents {
            if let Some(spec) = self.agent(agent, problems, prompts) {
                agents.insert(agent.name.clone(), Arc::new(spec));
            }
        }
        agents
    }

    /// The agent `agent`, when its system prompt and its model resolve;
    /// every problem of it goes to `problems` either way.
    fn agent(
        &self,
        agent: &AgentConfig,
        problems: &mut Problems,
        prompts: &mut BTreeMap<String, Arc<Prompt>>,
    ) -> Option<AgentSpec> {
        let config = self.config;
        let key_path = |key: &str| config.agent_key(&agent.at, key);
        let system_prompt = self.system_prompt(agent, problems);
        let model = self.model(agent, problems);
        self.check_references(agent, problems);
        let context_manager = agent.context_manager.as_ref().and_then(|settings| {
            let (provider, model) = split_model(&agent.model_name);
            problems.take_at(
                config,
                &key_path("context_manager"),
                self.builder
                    .extensions
                    .context_managers
                    .build(&ContextSettings {
                        kind: settings.kind.clone(),
                        model_provider: provider.to_string(),
                        model: model.to_string(),
                        max_tokens: settings.max_tokens,
                        options: settings.options.clone(),
                    }),
            )
        });
        let (Some(system_prompt), Some(model)) = (system_prompt, model) else {
            return None;
        };
        check_prompt_tools(
            config,
            self.toolbox,
            (&system_prompt, self.registry),
            problems,
        );
        prompts.insert(system_prompt.path.clone(), system_prompt.clone());
        Some(AgentSpec {
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
        })
    }

    /// The agent's system prompt: a prompt file's, or its inline text compiled.
    fn system_prompt(&self, agent: &AgentConfig, problems: &mut Problems) -> Option<Arc<Prompt>> {
        let config = self.config;
        match &agent.system_prompt {
            SystemPrompt::Key(key) => lookup(
                self.registry,
                key,
                &format!("agent `{}`", agent.name),
                problems,
                (config, &config.agent_key(&agent.at, "system_prompt_path")),
            ),
            SystemPrompt::Inline(text) => {
                let key = format!("{}/system (inline)", agent.name);
                problems
                    .take_at(
                        config,
                        &config.agent_key(&agent.at, "system_prompt"),
                        Prompt::new(key, text.clone()),
                    )
                    .map(Arc::new)
            }
        }
    }

    /// The agent's model from the providers, held to the budget and bound to
    /// the response cache when the run has them.
    fn model(&self, agent: &AgentConfig, problems: &mut Problems) -> Option<Resolved> {
        let config = self.config;
        let model_name_path = config.agent_key(&agent.at, "model_name");
        // A provider the config left out was reported with its entry.
        let left_out = config
            .left_out
            .providers
            .contains(split_model(&agent.model_name).0);
        let mut model = self.providers.filter(|_| !left_out).and_then(|providers| {
            let resolved = providers.resolve(&agent.model_name);
            let at = match &resolved {
                Err(error) => provider_problem_at(error, &model_name_path),
                Ok(_) => String::new(),
            };
            problems.take_at(config, &at, resolved)
        });
        if let (Some(budget), Some(resolved)) = (&self.builder.budget, model.as_mut()) {
            let budgeted = BudgetedProvider::new(
                resolved.provider.clone(),
                budget.clone(),
                self.prices.clone(),
                &resolved.provider_name,
                resolved.service,
                &resolved.model,
                &agent.model_args,
            );
            match budgeted {
                Ok(budgeted) => resolved.provider = Arc::new(budgeted),
                Err(problem) => problems.push(config.placed(&model_name_path, problem)),
            }
        }
        if let (Some(source), Some(resolved), Some(providers)) =
            (&self.builder.cache, model.as_mut(), self.providers)
        {
            resolved.cache = cache_binding(config, source, providers, resolved);
        }
        model
    }

    /// Checks that the MCP servers and tools the agent names exist.
    fn check_references(&self, agent: &AgentConfig, problems: &mut Problems) {
        let config = self.config;
        for server in &agent.mcp_servers {
            check_server(
                config,
                &format!("agent `{}`", agent.name),
                server,
                problems,
                config
                    .places
                    .at(&config.agent_key(&agent.at, "mcp_servers"))
                    .as_deref(),
            );
        }
        for tool in &agent.tools {
            if !self.toolbox.contains(tool) && !config.left_out.tools.contains(tool) {
                problems.push(config.placed(
                    &config.agent_key(&agent.at, "tools"),
                    format!(
                        "agent `{}` names tool `{tool}`, which is not defined under `tools:` or registered by the program{}",
                        agent.name,
                        crate::suggest::hint(tool, self.toolbox.names())
                    ),
                ));
            }
        }
    }
}

/// What the tactic's agents share when they run: its tools and MCP servers,
/// prices, handlers and every secret to scrub. A record of this tactic may
/// hold what a sub-tactic's run put in its dialogs (its delivery): scrubbed
/// of the sub-tactics' secrets too.
fn build_runtime(
    config: &TacticConfig,
    builder: Builder<'_>,
    toolbox: Toolbox,
    prices: Arc<ModelTable>,
    nodes: &[super::Node],
) -> Arc<Runtime> {
    let extensions = builder.extensions;
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
    let mut secrets = builder.secrets;
    for sub in super::sub_tactics_of(nodes) {
        secrets.extend(&sub.runtime.secrets);
    }
    Arc::new(Runtime {
        toolbox,
        mcp: McpServers::new(config.mcp_servers.clone(), other_tools)
            .hide_variables(builder.hidden_variables),
        prices,
        // A replay's costs were told when the run was made.
        price_warnings: if builder.replacement.is_some() {
            UnknownPriceWarnings::silent()
        } else {
            UnknownPriceWarnings::default()
        },
        handlers: extensions.named.handlers.clone(),
        secrets: Arc::new(secrets),
    })
}

/// What every record of the tactic holds, scrubbed once here: a key
/// written in a system prompt or in `model_args` is sent, not recorded.
struct Records {
    /// The resolved config.
    config: record::SharedJson,
    /// The prompts, their inline system prompts compacted.
    prompts: record::SharedJson,
    /// Templates long enough to be recorded once and referred to.
    shared_templates: Arc<[(String, String)]>,
}

impl Records {
    /// The records of `config` and its `prompts`, scrubbed of `secrets`.
    fn of(
        config: &TacticConfig,
        prompts: &BTreeMap<String, Arc<Prompt>>,
        secrets: &Secrets,
    ) -> Records {
        let mut scrubber = Scrubber::new(secrets);
        let mut resolved = config.resolved.clone();
        resolved.scrub(&mut scrubber);
        let recorded_prompts: BTreeMap<&String, record::PromptInfo> = prompts
            .iter()
            .map(|(key, prompt)| {
                let mut info = record::PromptInfo::of(prompt);
                info.template.scrub(&mut scrubber);
                info.parser.scrub(&mut scrubber);
                (key, info)
            })
            .collect();
        let shared_templates = super::compact::shared_templates(
            recorded_prompts
                .iter()
                .map(|(key, info)| (key.as_str(), info.template.as_str())),
        );
        Records {
            config: record::SharedJson::new(&resolved),
            prompts: super::compact::recorded_prompts(&recorded_prompts, &resolved),
            shared_templates,
        }
    }
}

/// Where the problem of resolving a model is written: the provider's entry
/// for what is wrong with it (a header, its `api_key_env`), else the
/// agent's `model_name` (at `model_name`).
fn provider_problem_at(error: &crate::provider::registry::Error, model_name: &str) -> String {
    use crate::provider::registry::Error;
    match error {
        Error::UnsetKeyVariable { provider, .. } => crate::yaml::join_path(
            &crate::yaml::join_path("providers", provider),
            "api_key_env",
        ),
        Error::Invalid { provider, .. } => crate::yaml::join_path("providers", provider),
        Error::UnknownProvider { .. } | Error::MissingKey { .. } | Error::Unavailable { .. } => {
            model_name.to_string()
        }
    }
}

/// The prompt `key` of the registry, for `who`, whose setting is at `path`
/// of `config` (`(config, path)`: where a problem is placed). A key whose
/// file failed to load was reported with the file's problem; it is not
/// reported again.
pub(super) fn lookup(
    registry: &Registry,
    key: &str,
    who: &str,
    problems: &mut Problems,
    (config, path): (&TacticConfig, &str),
) -> Option<Arc<Prompt>> {
    match registry.get(key) {
        Ok(prompt) => Some(Arc::new(prompt.clone())),
        Err(crate::prompt::Error::Broken { .. }) => None,
        Err(error) => {
            problems.push(config.placed(path, format!("{who}: {error}")));
            None
        }
    }
}

/// A programmed tactic's file: the agents the flow uses are under
/// `agent_configs`, and the file has no program of its own (`flow:`,
/// `result:`), which would never run.
fn check_program(config: &TacticConfig, flow: &dyn program::DynFlow, problems: &mut Problems) {
    // A place of the file: the key's when it has one, else the file.
    let place = |path: &str| {
        config
            .places
            .at(path)
            .unwrap_or_else(|| config.path.display().to_string())
    };
    let name = flow.name();
    for key in ["flow", "result"] {
        if config.resolved.get(key).is_some() {
            problems.push(format!(
                "{}: `tactic_type: {name}` is the programmed tactic `{name}` (registered \
                 in this binary), which never runs a `{key}:`; remove `{key}:`, or rename \
                 `tactic_type` to run the YAML flow",
                place(key)
            ));
        }
    }
    let names = config.agents.iter().map(|agent| agent.name.as_str());
    for agent in flow.agents() {
        if !names.clone().any(|name| name == *agent) && !config.left_out.agents.contains(*agent) {
            problems.push(format!(
                "{}: programmed tactic `{name}` uses agent `{agent}`, which is not under \
                 `agent_configs`{}",
                place("agent_configs"),
                crate::suggest::hint(agent, names.clone())
            ));
        }
    }
}

/// A tool or MCP server a prompt names must be declared in the tactic;
/// a problem is placed at the prompt file's front matter (`registry` knows
/// where).
pub(super) fn check_prompt_tools(
    config: &TacticConfig,
    toolbox: &Toolbox,
    (prompt, registry): (&Prompt, &Registry),
    problems: &mut Problems,
) {
    for tool in &prompt.tools {
        if !toolbox.contains(tool) && !config.left_out.tools.contains(tool) {
            problems.push(crate::config::placed(
                registry.place(&prompt.path, "tools"),
                format!(
                    "prompt `{}` names tool `{tool}`, which is not defined under `tools:` or registered by the program{}",
                    prompt.path,
                    crate::suggest::hint(tool, toolbox.names())
                ),
            ));
        }
    }
    for server in &prompt.mcp_servers {
        check_server(
            config,
            &format!("prompt `{}`", prompt.path),
            server,
            problems,
            registry.place(&prompt.path, "mcp_servers"),
        );
    }
}

/// `server`, which `who` names (written at `place`), is under `mcp_servers:`.
fn check_server(
    config: &TacticConfig,
    who: &str,
    server: &str,
    problems: &mut Problems,
    place: Option<&str>,
) {
    let names = config.mcp_servers.iter().map(|server| server.name.as_str());
    if !names.clone().any(|name| name == server) && !config.left_out.mcp_servers.contains(server) {
        problems.push(crate::config::placed(
            place,
            format!(
                "{who} names MCP server `{server}`, which is not defined under `mcp_servers:`{}",
                crate::suggest::hint(server, names)
            ),
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
            problems.push(format!(
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
    registry: &Registry,
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
            problems.push(crate::config::placed(
                registry.place(&prompt.path, "handler"),
                format!(
                    "prompt `{}` names handler `{}`, which is not registered{} (known: {})",
                    prompt.path,
                    crate::suggest::printable(name),
                    crate::suggest::hint(name, extensions.handler_names()),
                    known.join(", ")
                ),
            ));
        }
    }
}

fn build_toolbox(config: &TacticConfig, hidden: &[String], problems: &mut Problems) -> Toolbox {
    let mut toolbox = Toolbox::default();
    for tool in &config.tools {
        if toolbox.contains(&tool.name) {
            problems.push(format!(
                "tool `{}` is defined twice under `tools:`",
                tool.name
            ));
            continue;
        }
        if tool.tactic.is_some() {
            // A tactic as a tool: built with the tactic (`tools.rs`).
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
            problems.push(format!(
                "tool `{}` is both under `tools:` and `builtin_tools:`",
                builtin.name
            ));
            continue;
        }
        if let Some(tool) = problems.take_at(
            config,
            &crate::yaml::join_path("builtin_tools", &builtin.name),
            BuiltinTool::new(&builtin.name, builtin.root.as_deref()),
        ) {
            toolbox.insert(Arc::new(tool));
        }
    }
    toolbox
}

/// The response cache `resolved`'s calls use, if the settings turn it on
/// (`--cache` / `--no-cache`, the provider's `cache`, the tactic's) and its
/// provider sends requests somewhere.
fn cache_binding(
    config: &TacticConfig,
    source: &Arc<crate::provider::cache::CacheSource>,
    providers: &Providers,
    resolved: &crate::provider::registry::Resolved,
) -> Option<crate::provider::cache::Binding> {
    let provider = config.providers.get(&resolved.provider_name);
    if !source.enabled(provider.and_then(|provider| provider.cache), config.cache) {
        return None;
    }
    let scope = providers.cache_scope(&resolved.provider_name)?;
    let seconds = provider
        .and_then(|provider| provider.cache_ttl_s)
        .or(config.cache_ttl_s);
    Some(crate::provider::cache::Binding {
        source: source.clone(),
        scope,
        ttl: seconds.map_or(crate::provider::cache::DEFAULT_TTL, |seconds| {
            std::time::Duration::try_from_secs_f64(seconds)
                .unwrap_or(crate::provider::cache::DEFAULT_TTL)
        }),
    })
}

/// What building a tactic passes on to the tactics its steps run.
pub(super) struct Builder<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) extensions: &'a Extensions,
    pub(super) replacement: Option<Arc<dyn crate::provider::Provider>>,
    pub(super) dry_run: Option<Arc<crate::provider::dry_run::DryRun>>,
    /// Every call passes this spending cap (`lllm batch --max-cost`).
    pub(super) budget: Option<Arc<CostBudget>>,
    /// The response cache and the `--cache` / `--no-cache` choice.
    pub(super) cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// Collects the calls for the providers' Batch APIs (`--via batch-api`).
    pub(super) batch_api: Option<Arc<crate::provider::batch_api::BatchApi>>,
    /// The tactic files being built, outermost first (to find cycles).
    pub(super) stack: Vec<PathBuf>,
    /// The `api_key_env` names of those tactics: no tool inherits them.
    pub(super) hidden_variables: Vec<String>,
    /// The secrets of those tactics' providers: a sub-tactic's record is
    /// scrubbed of its parents' keys too (its task may carry one).
    pub(super) secrets: Secrets,
    /// A user's defaults under every tactic of the run.
    pub(super) defaults: Option<&'a crate::config::Defaults>,
}
