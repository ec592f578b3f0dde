//! From the merged document to the validated `TacticConfig`: defaults applied,
//! `global` merged under each agent (D14), names checked, every problem
//! collected so the user sees them all at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::flow::{FlowItem, FlowParser};
use super::merge::merge;
use super::numbers::{self, read, read_whole};
use super::places::{LeftOut, Places, Problems};
use super::raw::{AGENT_KEYS, RawAgent, RawMcpServer, RawProvider, RawTactic, RawTool};
use super::typed::{entry_map, top_key, typed};
use crate::dialog::ApiType;
use crate::suggest;
pub(crate) use crate::yaml::join_path as join;

/// An agent's repairs of replies that do not parse, unless set.
pub(crate) const DEFAULT_MAX_EXCEPTION_RETRY: u32 = 3;
/// An agent's tool rounds per call, unless set.
pub(crate) const DEFAULT_MAX_INTERRUPT_STEPS: u32 = 5;
/// An agent's retries of one request after provider errors, unless set.
pub(crate) const DEFAULT_MAX_LLM_RECALL: u32 = 3;

/// The system prompt of an agent that sets none (the seeds' default).
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant.";

/// A tactic ready to build: defaults applied, names unique, references valid.
#[derive(Debug, Clone, Serialize)]
pub struct TacticConfig {
    /// `tactic_type`, else the file's stem.
    pub name: String,
    /// `description`, for people.
    pub description: Option<String>,
    /// The tactic file (relative paths in it resolve against its directory).
    pub path: PathBuf,
    /// Where prompt files are looked up (`prompts_dir`, default `prompts/`).
    pub prompts_dir: PathBuf,
    /// `agent_configs`, each with `global` merged under it.
    pub agents: Vec<AgentConfig>,
    /// `providers`: name → settings (presets fill the rest).
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `tools`: command tools.
    pub tools: Vec<ToolConfig>,
    /// `builtin_tools` switched on.
    pub builtin_tools: Vec<BuiltinToolConfig>,
    /// `mcp_servers`: stdio MCP servers whose tools agents may use.
    pub mcp_servers: Vec<McpServerConfig>,
    /// `flow`: the steps, loops, branches and sub-tactics (empty: the first
    /// agent answers the task).
    pub flow: Vec<FlowItem>,
    /// `result`: a template over the finished steps giving the delivery.
    pub result: Option<String>,
    /// `output_schema`: the JSON Schema the delivery must fit (upstream
    /// `TacticInfo.output_schema`); checked to compile when read.
    pub output_schema: Option<Value>,
    /// `input_schema`: the JSON Schema of a task's input (its `args` as an
    /// object when it has any, else its task value), upstream
    /// `TacticInfo.input_schema`; checked to compile when read, and every
    /// task is checked against it before anything is sent.
    pub input_schema: Option<Value>,
    /// `examples`: free-form mappings (upstream `TacticInfo.examples`), each
    /// one's `input` checked against `input_schema` when read.
    pub examples: Vec<Map<String, Value>>,
    /// `metadata`: public notes about the tactic (upstream
    /// `TacticInfo.metadata`), shown by `lllm inspect` and served as they are.
    pub metadata: Map<String, Value>,
    /// `pricing`: prices over the bundled table.
    pub pricing: Option<Value>,
    /// `max_workers`: how many tasks `Tactic::bcall` / `ccall` run at once
    /// when the call does not set its own concurrency (the seeds'
    /// `Tactic(max_workers=4)`). That and nothing more: `lllm run` runs one
    /// task, and `lllm batch` takes its concurrency from `-j`.
    pub max_workers: Option<usize>,
    /// `cache`: whether this tactic's calls use the response cache (see
    /// `provider::cache`; `--cache` / `--no-cache` and a provider's own
    /// `cache` win over it).
    pub cache: Option<bool>,
    /// `cache_ttl_s`: how long a cached reply is used (a provider's own wins).
    pub cache_ttl_s: Option<f64>,
    /// `asserts`: what `lllm batch` scores every task's delivery with
    /// (issue 32), checked when read (regexes compiled, schemas built).
    #[serde(skip)]
    pub asserts: Vec<crate::eval::Assertion>,
    /// What was accepted but is worth a word (unknown keys moved aside, …).
    pub warnings: Vec<String>,
    /// The merged document after `base` and defaults, for records and `--show-config`.
    pub resolved: Value,
    /// `--model` and `--prices` as given on the command line: they hold for
    /// the tactics this one's steps run too.
    pub model_override: Option<String>,
    /// `--prices` as given.
    pub price_overrides: Option<Value>,
    /// `-O` as given: over every agent's `model_args` (and the tactics this
    /// one's steps run).
    pub model_args_override: super::ModelArgs,
    /// Where each setting is written, for the problems later phases find
    /// (a prompt a step names, a template that does not compile).
    #[serde(skip)]
    pub(crate) places: Places,
    /// What the file names but the config left out for its problems.
    #[serde(skip)]
    pub(crate) left_out: LeftOut,
}

/// One agent of `agent_configs`, with `global` merged under it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentConfig {
    /// The agent's name, unique in the tactic.
    pub name: String,
    /// `provider/model` (a bare name is an OpenAI model).
    pub model_name: String,
    /// `system_prompt` (inline) or `system_prompt_path` (a prompt key).
    pub system_prompt: SystemPrompt,
    /// Sent with every request (`temperature`, `max_tokens`, …).
    pub model_args: Map<String, Value>,
    /// Tools the agent is offered, by name.
    pub tools: Vec<String>,
    /// Servers under `mcp_servers:` whose tools this agent is offered.
    pub mcp_servers: Vec<String>,
    /// Repairs of a reply the parser rejects, per call.
    pub max_exception_retry: u32,
    /// Tool rounds per call (0: unlimited, up to 100).
    pub max_interrupt_steps: u32,
    /// Retries of a failed provider request, per call.
    pub max_llm_recall: u32,
    /// `context_manager`: what keeps requests inside the model's window.
    pub context_manager: Option<ContextManagerConfig>,
    /// Chat completions or the Responses API (OpenAI).
    pub api_type: ApiType,
    /// Its entry's path in the document (`agent_configs[0]`), for the
    /// places of later problems.
    #[serde(skip)]
    pub(crate) at: String,
}

/// Where an agent's system prompt comes from.
#[derive(Debug, Clone, Serialize)]
pub enum SystemPrompt {
    /// The text itself (`system_prompt`), a template.
    Inline(String),
    /// A prompt file's key (`system_prompt_path`).
    Key(String),
}

/// An agent's `context_manager:` entry.
#[derive(Debug, Clone, Serialize)]
pub struct ContextManagerConfig {
    /// `type`: a registered name (`default`, `last_n`, or a program's own).
    pub kind: String,
    /// The window to keep requests within (default: the model's).
    pub max_tokens: Option<u64>,
    /// The entry's other keys, for the manager's factory.
    pub options: Map<String, Value>,
}

/// The API a provider speaks (`api:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderApi {
    /// OpenAI's APIs and every server compatible with them.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// The offline in-process providers (`mock/echo`, `mock/script`).
    Mock,
}

/// A `providers:` entry (docs/providers.md, "Providers").
#[derive(Debug, Clone, Serialize)]
pub struct ProviderConfig {
    /// Which API it speaks.
    pub api: ProviderApi,
    /// Serialized without its credentials and query values (`redact::url`).
    #[serde(serialize_with = "redacted_url")]
    pub base_url: Option<String>,
    /// The environment variable holding the key.
    pub api_key_env: Option<String>,
    /// Requests in flight at once.
    pub max_concurrency: Option<usize>,
    /// Requests per minute.
    pub rpm: Option<u32>,
    /// Tokens per minute.
    pub tpm: Option<u64>,
    /// Limit for one request, in seconds.
    pub timeout_s: Option<f64>,
    /// Limit for connecting, in seconds.
    pub connect_timeout_s: Option<f64>,
    /// The role system prompts are sent as (`system` or `developer`).
    pub system_role: Option<String>,
    /// Send each message's `name` (chat completions); the default depends
    /// on the server (see `provider::registry`).
    pub send_name: Option<bool>,
    /// How a prompt's `format` goes on the Messages API (`api: anthropic`
    /// only); `auto` when not given.
    pub structured_output: Option<super::StructuredOutput>,
    /// The first back-off, in milliseconds.
    pub retry_base_ms: Option<u64>,
    /// The longest pause, in milliseconds (a server's `Retry-After` too).
    pub retry_cap_ms: Option<u64>,
    /// The script of a `mock` provider.
    pub script: Option<PathBuf>,
    /// Serialized as `***` each: a header value may be a key.
    /// Extra HTTP headers sent with every request.
    #[serde(serialize_with = "masked_values")]
    pub headers: BTreeMap<String, String>,
    /// Whether calls to this provider use the response cache (over the
    /// tactic's `cache`; `--cache` / `--no-cache` win over both).
    pub cache: Option<bool>,
    /// How long a cached reply of this provider is used, in seconds.
    pub cache_ttl_s: Option<f64>,
}

fn redacted_url<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_some(&crate::redact::url(url)),
        None => serializer.serialize_none(),
    }
}

fn masked_values<S: serde::Serializer>(
    values: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(values.keys().map(|name| (name, crate::redact::MASK)))
}

/// A command tool (`tools:`): a program that gets the call's arguments as
/// JSON on stdin and answers on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct ToolConfig {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// Limit for one call, in seconds.
    pub timeout_s: f64,
    /// Where it runs (default: the directory of the declaring file).
    pub cwd: PathBuf,
    /// Added to its environment (shown as `***`).
    pub env: BTreeMap<String, String>,
    /// For a tool that runs a tactic (`tactic:` instead of `command:`):
    /// the tactic file (absolute) or served tactic's URL; its parameters
    /// and description come from that tactic's contract when it loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tactic: Option<String>,
    /// The variable holding the served tactic's bearer token (`token_env:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
}

/// A built-in tool switched on (`builtin_tools: {read_file: {root: data}}`).
#[derive(Debug, Clone, Serialize)]
pub struct BuiltinToolConfig {
    /// `read_file`, `list_dir`, ….
    pub name: String,
    /// The directory file tools may see, resolved against the declaring file.
    pub root: Option<PathBuf>,
}

/// A stdio MCP server: `command` then `args` is the program line (no shell).
#[derive(Debug, Clone, Serialize)]
pub struct McpServerConfig {
    /// The name agents and prompts use for it.
    pub name: String,
    /// The program (and its first arguments).
    pub command: Vec<String>,
    /// Further arguments.
    pub args: Vec<String>,
    /// Added to the inherited environment; values may be secrets and are never shown.
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// Where the server runs (default: the directory of the declaring file).
    pub cwd: PathBuf,
    /// Limit for one tool call, and for the start (initialize and tools/list).
    pub timeout_s: f64,
}

impl TacticConfig {
    /// `--model`: every agent uses `model`; the resolved document says so
    /// too, under `global` and on every agent (`--show-config` and records
    /// show the model that runs).
    pub fn override_model(&mut self, model: &str) {
        self.model_override = Some(model.to_string());
        for agent in &mut self.agents {
            agent.model_name = model.to_string();
        }
        if let Some(global) = resolved_global(&mut self.resolved) {
            global.insert("model_name".into(), Value::String(model.into()));
        }
        for agent in resolved_agents(&mut self.resolved) {
            agent.insert("model_name".into(), Value::String(model.into()));
        }
    }

    /// `-O`: `args` over every agent's `model_args`, key by key (a `null`
    /// takes the key away); the resolved document says so too (`global`
    /// gets the arguments for every agent). An agent `args` names that this
    /// tactic lacks is left to the caller (`ModelArgs::unknown_agents`): a
    /// sub-tactic may have it.
    pub fn override_model_args(&mut self, args: &super::ModelArgs) {
        if args.is_empty() {
            return;
        }
        self.model_args_override = args.clone();
        for agent in &mut self.agents {
            args.apply(&agent.name, &mut agent.model_args);
        }
        if !args.all.is_empty()
            && let Some(global) = resolved_global(&mut self.resolved)
        {
            let mut own = match global.remove("model_args") {
                Some(Value::Object(own)) => own,
                _ => Map::new(),
            };
            args.apply("", &mut own);
            // Only what every agent gets: `for_agent("")` names no agent's own.
            global.insert("model_args".into(), Value::Object(own));
        }
        for agent in resolved_agents(&mut self.resolved) {
            let name = agent
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let mut own = match agent.remove("model_args") {
                Some(Value::Object(own)) => own,
                _ => Map::new(),
            };
            args.apply(&name, &mut own);
            agent.insert("model_args".into(), Value::Object(own));
        }
    }

    /// `--prices`: `prices` over the tactic's own `pricing`.
    pub fn override_prices(&mut self, prices: Value) {
        let own = self.pricing.take().unwrap_or(Value::Null);
        self.pricing = Some(merge(own, prices.clone()));
        self.price_overrides = Some(prices);
    }

    /// The agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|agent| agent.name == name)
    }

    /// `problem` with the place of the setting at `path` in front
    /// (`t.yaml:12:5: problem`; see `Places::at`), or alone when it has none
    /// (a config built in code).
    pub(crate) fn placed(&self, path: &str, problem: impl std::fmt::Display) -> String {
        Places::placed(self.places.at(path).as_deref(), &problem.to_string())
    }

    /// The path of `key` of the agent whose entry is at `at`: the entry's
    /// when it sets it, else `global`'s when that does.
    pub(crate) fn agent_key(&self, at: &str, key: &str) -> String {
        let own = join(at, key);
        let global = join("global", key);
        if !self.places.has(&own) && self.places.has(&global) {
            global
        } else {
            own
        }
    }

    /// The path of the first of `keys` of the entry at `at` a file sets,
    /// else of the entry (a step's `prompt` or `text`).
    pub(crate) fn first_written(&self, at: &str, keys: &[&str]) -> String {
        keys.iter()
            .map(|key| join(at, key))
            .find(|path| self.places.has(path))
            .unwrap_or_else(|| at.to_string())
    }
}

/// `global` of a resolved document, made a mapping if it was absent.
fn resolved_global(resolved: &mut Value) -> Option<&mut Map<String, Value>> {
    let map = resolved.as_object_mut()?;
    let global = map
        .entry("global")
        .or_insert_with(|| Value::Object(Map::new()));
    if global.is_null() {
        *global = Value::Object(Map::new());
    }
    global.as_object_mut()
}

/// The agent entries of a resolved document.
fn resolved_agents(resolved: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    resolved
        .get_mut("agent_configs")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Resolves the merged document of `path`; problems are returned all
/// together, each with the path of the node it is about (`places` tells
/// where that is written). The resolved tactic, or its problems with what
/// could be resolved despite them (so later phases can still report their
/// own problems: issue 12).
pub(super) fn resolve(
    path: &Path,
    document: Value,
    places: Places,
) -> Result<TacticConfig, (Problems, Option<Box<TacticConfig>>)> {
    let mut problems = Problems::default();
    let mut warnings = Vec::new();
    let Some(raw) = typed::<RawTactic>(document.clone(), &str::to_string, &mut problems) else {
        return Err((problems, None));
    };
    let global = raw.global.clone().unwrap_or_default();
    let entries = raw.agent_configs.clone().unwrap_or_default();
    let agents = resolve_agents(entries, &global, &places, &mut warnings, &mut problems);
    let providers = resolve_providers(
        raw.providers.clone().unwrap_or_default(),
        "providers",
        &mut problems,
    );
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let tools = resolve_tools(raw.tools.clone(), &base_dir, &mut problems);
    let builtin_tools = builtin_tools(&raw);
    let mcp_servers = resolve_mcp_servers(raw.mcp_servers.clone(), &base_dir, &mut problems);
    let flow = FlowParser {
        agent_names: agents.names.iter().map(String::as_str).collect(),
        step_names: BTreeSet::new(),
        steps_seen: 0,
        problems: &mut problems,
    }
    .parse(raw.flow.clone().unwrap_or_default(), "flow");
    super::flow::check_forks(&flow, &mut problems);
    let max_workers = checked_number(
        raw.max_workers.as_ref(),
        &numbers::MAX_WORKERS,
        &mut problems,
    );
    let cache_ttl_s = checked_number(
        raw.cache_ttl_s.as_ref(),
        &numbers::CACHE_TTL_S,
        &mut problems,
    );
    let contract = super::contract::resolve(&raw, &mut problems);
    let output_schema = raw.output_schema.clone().and_then(|schema| {
        json_schema_problem("output_schema", &schema)
            .map_err(|(at, problem)| problems.at(join("output_schema", &at), problem))
            .ok()
            .map(|()| schema)
    });
    let asserts = match &raw.asserts {
        None | Some(Value::Null) => Vec::new(),
        Some(items) => crate::eval::parse_list(items, &base_dir).unwrap_or_else(|found| {
            for (at, problem) in found {
                problems.at(join("asserts", &at), format!("`asserts`: {problem}"));
            }
            Vec::new()
        }),
    };

    let resolved = redacted_document(document, agents.resolved);
    let config = TacticConfig {
        name: raw.tactic_type.unwrap_or_else(|| {
            path.file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_default()
        }),
        description: raw.description,
        path: path.to_path_buf(),
        prompts_dir: PathBuf::from(raw.prompts.unwrap_or_default()),
        agents: agents.configs,
        providers,
        tools,
        builtin_tools,
        mcp_servers,
        flow,
        result: raw.result,
        output_schema,
        input_schema: contract.input_schema,
        examples: contract.examples,
        metadata: contract.metadata,
        pricing: raw.pricing,
        max_workers: max_workers.map(|workers| workers as usize),
        cache: raw.cache,
        cache_ttl_s,
        asserts,
        warnings,
        resolved,
        model_override: None,
        price_overrides: None,
        model_args_override: super::ModelArgs::default(),
        places,
        left_out: LeftOut::default(),
    };
    // The resolved document has every name the file writes.
    let left_out = LeftOut::of(&config.resolved, &config);
    let config = TacticConfig { left_out, ..config };
    if problems.is_empty() {
        Ok(config)
    } else {
        Err((problems, Some(Box::new(config))))
    }
}

/// A top-level number (`max_workers`, `cache_ttl_s`) held to its range; a
/// value out of it is a problem at its key, and no value.
fn checked_number(
    value: Option<&Value>,
    range: &numbers::Range,
    problems: &mut Problems,
) -> Option<f64> {
    value.filter(|value| !value.is_null()).and_then(|value| {
        range
            .check(value)
            .map_err(|problem| problems.at(range.key, problem))
            .ok()
    })
}

/// The agents of `agent_configs`, resolved: what [`resolve_agents`] makes.
struct ResolvedAgents {
    /// The agents that resolved.
    configs: Vec<AgentConfig>,
    /// Each entry as merged over `global`, for the resolved document.
    resolved: Vec<Value>,
    /// Every name written under `agent_configs`: a step naming an agent with
    /// problems of its own is not also told the agent does not exist.
    names: Vec<String>,
}

/// The `agent_configs` entries, each with `global` merged under it, checked
/// one by one and then together (there is one, no name twice); a warning
/// names where it is, as a problem does.
fn resolve_agents(
    entries: Vec<Value>,
    global: &Map<String, Value>,
    places: &Places,
    warnings: &mut Vec<String>,
    problems: &mut Problems,
) -> ResolvedAgents {
    let mut agents = ResolvedAgents {
        configs: Vec::new(),
        resolved: Vec::new(),
        names: Vec::new(),
    };
    let none = entries.is_empty();
    for (index, entry) in entries.into_iter().enumerate() {
        let entry_path = format!("agent_configs[{index}]");
        let Some(entry) = entry_map(entry, &entry_path, "`name`, `model_name`, …", problems)
        else {
            continue;
        };
        if let Some(name) = entry.get("name").and_then(Value::as_str) {
            agents.names.push(name.to_string());
        }
        let own_keys = numeric_keys_set(&entry);
        let own_args = model_args_set(&entry);
        // A key is the entry's when it sets it, else `global`'s.
        let own: BTreeSet<String> = entry.keys().cloned().collect();
        let key_path = |relative: &str| {
            let key = top_key(relative);
            if own.contains(key) || !global.contains_key(key) {
                join(&entry_path, relative)
            } else {
                join("global", relative)
            }
        };
        let merged = merge(Value::Object(global.clone()), Value::Object(entry));
        let Value::Object(merged) = merged else {
            continue;
        };
        let label = merged.get("name").and_then(Value::as_str).map_or_else(
            || format!("agent_configs[{index}]"),
            |name| format!("agent `{name}`"),
        );
        let merged = move_unknown_keys(merged, &label, &mut |key, warning| {
            warnings.push(Places::placed(
                places.at(&key_path(key)).as_deref(),
                &warning,
            ));
        });
        check_model_args(&merged, &own_args, &entry_path, &label, problems);
        agents.resolved.push(Value::Object(merged.clone()));
        let Some(agent) = typed::<RawAgent>(Value::Object(merged), &key_path, problems) else {
            continue;
        };
        if let Some(agent) = agent_config(agent, &entry_path, &key_path, &own_keys, problems) {
            agents.configs.push(agent);
        }
    }
    warn_python_placeholders(&agents.configs, places, warnings);
    if none {
        problems.at(
            "agent_configs",
            "the tactic has no agents; add at least one under `agent_configs`",
        );
    }
    let mut seen = BTreeSet::new();
    for agent in &agents.configs {
        if !seen.insert(agent.name.clone()) {
            problems.at(
                join(&agent.at, "name"),
                format!("agent `{}` is defined twice in `agent_configs`", agent.name),
            );
        }
    }
    agents
}

/// The `builtin_tools:` switched on, each with its `root` when it sets one.
fn builtin_tools(raw: &RawTactic) -> Vec<BuiltinToolConfig> {
    raw.builtin_tools
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, options)| BuiltinToolConfig {
            name,
            root: options.and_then(|options| options.root).map(PathBuf::from),
        })
        .collect()
}

/// Checks the merged `model_args` of the entry at `entry_path`: a problem is
/// named after the agent for what it sets itself (`own_args`), else
/// `global` (once, however many agents have it from there).
fn check_model_args(
    merged: &Map<String, Value>,
    own_args: &BTreeSet<String>,
    entry_path: &str,
    label: &str,
    problems: &mut Problems,
) {
    let Some(Value::Object(args)) = merged.get("model_args") else {
        return;
    };
    for (key, value) in args {
        if let Some(problem) = super::model_args::problem(key, value, "model_args.") {
            let (path, place) = if own_args.contains(key) {
                (join(entry_path, &format!("model_args.{key}")), label)
            } else {
                (format!("global.model_args.{key}"), "`global`")
            };
            if !problems.reported(&path) {
                problems.at(path, format!("{place}: {problem}"));
            }
        }
    }
}

/// Warns of a system prompt ported from the Python framework, where it was
/// rendered with `str.format`: its `{name}` would go out literally.
fn warn_python_placeholders(agents: &[AgentConfig], places: &Places, warnings: &mut Vec<String>) {
    for agent in agents {
        if let SystemPrompt::Inline(text) = &agent.system_prompt
            && let Some((_, name)) = crate::prompt::placeholders::python_placeholder(text)
        {
            let at = places
                .first([
                    join(&agent.at, "system_prompt").as_str(),
                    "global.system_prompt",
                ])
                .or_else(|| places.at(&agent.at));
            warnings.push(Places::placed(
                at.as_deref(),
                &format!(
                    "agent `{}`: `system_prompt` holds `{{{name}}}`, a Python `str.format` \
                     placeholder that Jinja sends literally; write `{{{{ {name} }}}}`, or move \
                     the text to a prompt file with `renderer: format`",
                    agent.name
                ),
            ));
        }
    }
}

/// The `tools:` entries, checked; each problem goes to `problems` and its
/// entry is left out. A tool runs in `base_dir` (the tactic's directory)
/// unless it sets `cwd`.
fn resolve_tools(
    entries: Option<Vec<Value>>,
    base_dir: &Path,
    problems: &mut Problems,
) -> Vec<ToolConfig> {
    let mut tools = Vec::new();
    for (index, tool) in entries.into_iter().flatten().enumerate() {
        let at = format!("tools[{index}]");
        let Some(tool) = entry_map(tool, &at, "`name`, `command`, …", problems) else {
            continue;
        };
        let Some(tool) = typed::<RawTool>(
            Value::Object(tool),
            &|relative| join(&at, relative),
            problems,
        ) else {
            continue;
        };
        let Some(name) = tool.name.filter(|name| !name.trim().is_empty()) else {
            problems.missing(&join(&at, "name"), format!("`{at}` has no `name`"));
            continue;
        };
        if let Some(tactic) = tool.tactic {
            // A tactic as a tool: its contract is its parameters (issue 30).
            let own = [
                ("command", tool.command.is_some()),
                ("parameters", tool.parameters.is_some()),
                ("timeout_s", tool.timeout_s.is_some()),
                ("env", tool.env.is_some()),
            ];
            let mut refused = false;
            for (key, _) in own.iter().filter(|(_, present)| *present) {
                problems.at(
                    join(&at, key),
                    format!(
                        "tool `{name}` runs tactic `{tactic}`, so it takes no `{key}` (its parameters are the tactic's `input_schema`)"
                    ),
                );
                refused = true;
            }
            if tool.token_env.is_some() && !crate::config::is_served_url(&tactic) {
                problems.at(
                    join(&at, "token_env"),
                    format!(
                        "tool `{name}`: `token_env` is for a served tactic (`tactic: http://…`)"
                    ),
                );
                refused = true;
            }
            if refused {
                continue;
            }
            tools.push(ToolConfig {
                description: tool.description.unwrap_or_default(),
                parameters: Value::Null,
                command: Vec::new(),
                timeout_s: 0.0,
                cwd: base_dir.to_path_buf(),
                env: BTreeMap::new(),
                tactic: Some(tactic),
                token_env: tool.token_env,
                name,
            });
            continue;
        }
        if let Some(token_env) = &tool.token_env {
            problems.at(
                join(&at, "token_env"),
                format!("tool `{name}`: `token_env` ({token_env}) is for a tool that runs a served tactic (`tactic: http://…`)"),
            );
            continue;
        }
        let command = tool.command.unwrap_or_default();
        if command.is_empty() {
            problems.missing(
                &join(&at, "command"),
                format!("tool `{name}` has no `command` (a list: program and arguments)"),
            );
            continue;
        }
        let timeout_s = problems.numbers(&join(&at, "timeout_s"), |found| {
            read(
                tool.timeout_s.as_ref(),
                &numbers::TOOL_TIMEOUT_S,
                &format!("tool `{name}`"),
                found,
            )
        });
        let parameters = match tool.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(parameters) => match tool_parameters(&parameters) {
                Ok(()) => parameters,
                Err(problem) => {
                    problems.at(
                        join(&at, "parameters"),
                        format!("tool `{name}`: `parameters` {problem}"),
                    );
                    continue;
                }
            },
        };
        tools.push(ToolConfig {
            description: tool.description.unwrap_or_else(|| name.clone()),
            parameters,
            command,
            timeout_s: timeout_s.unwrap_or(30.0),
            cwd: tool
                .cwd
                .map(PathBuf::from)
                .unwrap_or_else(|| base_dir.to_path_buf()),
            env: tool.env.unwrap_or_default(),
            tactic: None,
            token_env: None,
            name,
        });
    }
    tools
}

/// The `mcp_servers:` entries, checked; each problem goes to `problems` and
/// its entry is left out. A server runs in `base_dir` (the tactic's
/// directory) unless it sets `cwd`.
fn resolve_mcp_servers(
    entries: Option<Vec<Value>>,
    base_dir: &Path,
    problems: &mut Problems,
) -> Vec<McpServerConfig> {
    let mut mcp_servers = Vec::new();
    for (index, server) in entries.into_iter().flatten().enumerate() {
        let at = format!("mcp_servers[{index}]");
        let Some(server) = entry_map(server, &at, "`name`, `command`, …", problems) else {
            continue;
        };
        let Some(server) = typed::<RawMcpServer>(
            Value::Object(server),
            &|relative| join(&at, relative),
            problems,
        ) else {
            continue;
        };
        match (server.name, server.command) {
            (Some(name), Some(command)) if !name.trim().is_empty() && !command.is_empty() => {
                if mcp_servers
                    .iter()
                    .any(|known: &McpServerConfig| known.name == name)
                {
                    problems.at(
                        join(&at, "name"),
                        format!("MCP server `{name}` is defined twice under `mcp_servers:`"),
                    );
                    continue;
                }
                let timeout_s = problems
                    .numbers(&join(&at, "timeout_s"), |found| {
                        read(
                            server.timeout_s.as_ref(),
                            &numbers::TOOL_TIMEOUT_S,
                            &format!("MCP server `{name}`"),
                            found,
                        )
                    })
                    .unwrap_or(60.0);
                mcp_servers.push(McpServerConfig {
                    command,
                    args: server.args.unwrap_or_default(),
                    env: server.env.unwrap_or_default(),
                    cwd: server
                        .cwd
                        .map(PathBuf::from)
                        .unwrap_or_else(|| base_dir.to_path_buf()),
                    timeout_s,
                    name,
                })
            }
            (name, _) => {
                let key = if name.is_some_and(|name| !name.trim().is_empty()) {
                    "command"
                } else {
                    "name"
                };
                problems.missing(
                    &join(&at, key),
                    format!("`{at}` needs a `name` and a non-empty `command`"),
                );
            }
        }
    }
    mcp_servers
}

/// The merged document as records and `--show-config` show it: the agent
/// entries as resolved, and no secret. Header values and a URL's
/// credentials may be keys; so may the environment of a command tool or an
/// MCP server (tokens for the service it wraps).
fn redacted_document(mut document: Value, resolved_agents: Vec<Value>) -> Value {
    let Value::Object(map) = &mut document else {
        return document;
    };
    map.insert("agent_configs".into(), Value::Array(resolved_agents));
    if let Some(Value::Object(providers)) = map.get_mut("providers") {
        for provider in providers.values_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::String(url)) = provider.get_mut("base_url") {
                *url = crate::redact::url(url).into_owned();
            }
            if let Some(Value::Object(headers)) = provider.get_mut("headers") {
                for value in headers.values_mut() {
                    *value = Value::String("***".into());
                }
            }
        }
    }
    for section in ["tools", "mcp_servers"] {
        if let Some(Value::Array(entries)) = map.get_mut(section) {
            for env in entries
                .iter_mut()
                .filter_map(|entry| entry.get_mut("env"))
                .filter_map(Value::as_object_mut)
            {
                for value in env.values_mut() {
                    *value = Value::String("***".into());
                }
            }
        }
    }
    document
}

/// Whether a tool's `parameters` is what every provider takes: a JSON Schema
/// of an object (`{type: object, properties: {…}}`) that compiles. A string,
/// a list, `type: 5` or a schema the model could never be held to went to the
/// provider as written (issue 26); the problem says why, after `parameters`.
/// Whether it compiles is checked with the `jsonschema` feature; without it
/// the shape is, and a schema that does not compile is the provider's to
/// refuse.
fn tool_parameters(parameters: &Value) -> Result<(), String> {
    let Value::Object(schema) = parameters else {
        return Err(format!(
            "is {}, not a JSON Schema object; write `{{type: object, properties: {{…}}}}`",
            describe_value(parameters)
        ));
    };
    match schema.get("type") {
        Some(Value::String(kind)) if kind == "object" => {}
        None => {
            return Err(
                "has no `type`; the arguments of a tool are an object: add `type: object`".into(),
            );
        }
        Some(other) => {
            return Err(format!(
                "has `type: {}`; the arguments of a tool are an object: `type: object`",
                crate::suggest::printable(&other.to_string())
            ));
        }
    }
    #[cfg(not(feature = "jsonschema"))]
    return Ok(());
    #[cfg(feature = "jsonschema")]
    jsonschema::validator_for(parameters)
        .map(|_| ())
        .map_err(|error| {
            // Where in the schema, as a JSON pointer (`/properties/a/type`).
            let at = error.instance_path().to_string();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at `{}`", crate::suggest::printable(&at))
            };
            format!(
                "is not a valid JSON Schema{at}: {}",
                crate::suggest::printable(&error.to_string())
            )
        })
}

/// Whether the schema under `key` (`output_schema`, `input_schema`) is a
/// JSON Schema that compiles (a mapping, or `true`/`false`); else where in
/// it (a path under `key`, empty for the whole) and what is wrong. Without
/// the `jsonschema` feature a schema is refused, naming the feature: it
/// could not be held to.
pub(super) fn json_schema_problem(key: &str, schema: &Value) -> Result<(), (String, String)> {
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        return Err((
            String::new(),
            format!(
                "`{key}` is {}, not a JSON Schema; write a mapping such as \
                 `{{type: object, properties: {{…}}}}`",
                describe_value(schema)
            ),
        ));
    }
    #[cfg(not(feature = "jsonschema"))]
    return Err((
        String::new(),
        crate::features::missing(&format!("`{key}`"), "jsonschema"),
    ));
    #[cfg(feature = "jsonschema")]
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|error| {
            // The pointer into the schema (`/properties/a/type`), as the path
            // of the node it names, so the problem is placed on that line.
            let pointer = error.instance_path().to_string();
            let at = pointer
                .split('/')
                .filter(|segment| !segment.is_empty())
                .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
                .fold(String::new(), |path, segment| {
                    match segment.parse::<usize>() {
                        Ok(index) => crate::yaml::child_index(&path, index),
                        Err(_) => crate::yaml::child_key(&path, &segment),
                    }
                });
            let inside = if pointer.is_empty() {
                String::new()
            } else {
                format!(" at `{}`", suggest::printable(&pointer))
            };
            (
                at,
                format!(
                    "`{key}` is not a valid JSON Schema{inside}: {}",
                    suggest::printable(&error.to_string())
                ),
            )
        })
}

/// A value's kind in a problem: `a string`, `a list`, …
pub(crate) fn describe_value(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// D14: keys that are not agent settings become model arguments, with a
/// warning (given to `warn` with the key), and never replace a key
/// `model_args` already has.
fn move_unknown_keys(
    mut agent: Map<String, Value>,
    label: &str,
    warn: &mut dyn FnMut(&str, String),
) -> Map<String, Value> {
    let unknown: Vec<String> = agent
        .keys()
        .filter(|key| !AGENT_KEYS.contains(&key.as_str()))
        .cloned()
        .collect();
    if unknown.is_empty() {
        return agent;
    }
    let mut model_args = match agent.remove("model_args") {
        Some(Value::Object(args)) => args,
        _ => Map::new(),
    };
    for key in &unknown {
        let value = agent.remove(key).unwrap_or(Value::Null);
        if model_args.contains_key(key) {
            warn(
                key,
                format!(
                    "{label}: unknown key `{shown}` ignored: `model_args.{shown}` is set explicitly{}",
                    suggest::hint(key, AGENT_KEYS.iter().copied()),
                    shown = suggest::printable(key)
                ),
            );
        } else {
            warn(
                key,
                format!(
                    "{label}: unknown key `{shown}` passed to the model as `model_args.{shown}`{}",
                    suggest::hint(key, AGENT_KEYS.iter().copied()),
                    shown = suggest::printable(key)
                ),
            );
            model_args.insert(key.clone(), value);
        }
    }
    agent.insert("model_args".into(), Value::Object(model_args));
    agent
}

/// The model arguments an agent entry sets itself: under `model_args`, and
/// its unknown keys (which become model arguments, D14).
fn model_args_set(entry: &Map<String, Value>) -> BTreeSet<String> {
    let explicit = entry
        .get("model_args")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|args| args.keys());
    let moved = entry
        .keys()
        .filter(|key| !AGENT_KEYS.contains(&key.as_str()));
    explicit.chain(moved).cloned().collect()
}

/// The numeric keys an agent entry sets itself (`context_manager.max_tokens`
/// for the nested one); the others it has from `global`.
fn numeric_keys_set(entry: &Map<String, Value>) -> BTreeSet<&'static str> {
    let mut keys: BTreeSet<&'static str> = [
        numbers::MAX_EXCEPTION_RETRY.key,
        numbers::MAX_INTERRUPT_STEPS.key,
        numbers::MAX_LLM_RECALL.key,
    ]
    .into_iter()
    .filter(|key| entry.contains_key(*key))
    .collect();
    if entry
        .get("context_manager")
        .and_then(|manager| manager.get("max_tokens"))
        .is_some()
    {
        keys.insert(numbers::CONTEXT_MAX_TOKENS.key);
    }
    keys
}

/// Builds the agent at `at` (`agent_configs[0]`); every problem goes to
/// `problems`, at the path `key_path` gives a key (the entry's, or
/// `global`'s when the entry has it from there), and numbers are named after
/// the agent, or `global`. `None` when it has no name or no model.
fn agent_config(
    agent: RawAgent,
    at: &str,
    key_path: &dyn Fn(&str) -> String,
    own_keys: &BTreeSet<&'static str>,
    problems: &mut Problems,
) -> Option<AgentConfig> {
    let Some(name) = agent.name.filter(|name| !name.trim().is_empty()) else {
        problems.missing(&key_path("name"), format!("`{at}` has no `name`"));
        return None;
    };
    let place = |range: &numbers::Range| {
        if own_keys.contains(range.key) {
            format!("agent `{name}`")
        } else {
            "`global`".to_string()
        }
    };
    let mut count = |value: Option<&Value>, range: &numbers::Range| {
        problems
            .numbers(&key_path(range.key), |found| {
                read_whole(value, range, &place(range), found)
            })
            .map(|value| value as u32)
    };
    let max_exception_retry = count(
        agent.max_exception_retry.as_ref(),
        &numbers::MAX_EXCEPTION_RETRY,
    );
    let max_interrupt_steps = count(
        agent.max_interrupt_steps.as_ref(),
        &numbers::MAX_INTERRUPT_STEPS,
    );
    let max_llm_recall = count(agent.max_llm_recall.as_ref(), &numbers::MAX_LLM_RECALL);
    let model_name = agent.model_name.filter(|model| !model.trim().is_empty());
    if model_name.is_none() {
        problems.missing(
            &key_path("model_name"),
            format!("agent `{name}` has no `model_name`; set it under `global` or on the agent"),
        );
    }
    let system_prompt = match (agent.system_prompt, agent.system_prompt_path) {
        (Some(text), _) => SystemPrompt::Inline(text),
        (None, Some(key)) => SystemPrompt::Key(key),
        (None, None) => SystemPrompt::Inline(DEFAULT_SYSTEM_PROMPT.into()),
    };
    let context_manager = context_manager(
        agent.context_manager,
        &name,
        key_path,
        &place(&numbers::CONTEXT_MAX_TOKENS),
        problems,
    );
    // Accepted once and never used; streaming is chosen per run, not per agent.
    if agent.stream.is_some() {
        problems.at(
            key_path("stream"),
            format!(
                "agent `{name}`: `stream` is not an agent setting; hint: streaming is chosen per \
                 run (`lllm run --stream` shows the final turn as it arrives) or per call in \
                 code, so remove it"
            ),
        );
    }
    let api_type = match agent.api_type.as_deref() {
        None | Some("completion") => ApiType::Completion,
        Some("response") => ApiType::Response,
        Some(other) => {
            problems.at(
                key_path("api_type"),
                format!("agent `{name}`: `api_type: {other}` must be `completion` or `response`"),
            );
            ApiType::Completion
        }
    };
    Some(AgentConfig {
        model_name: model_name?,
        system_prompt,
        model_args: agent.model_args.unwrap_or_default(),
        tools: agent.tools.unwrap_or_default(),
        mcp_servers: agent.mcp_servers.unwrap_or_default(),
        max_exception_retry: max_exception_retry.unwrap_or(DEFAULT_MAX_EXCEPTION_RETRY),
        max_interrupt_steps: max_interrupt_steps.unwrap_or(DEFAULT_MAX_INTERRUPT_STEPS),
        max_llm_recall: max_llm_recall.unwrap_or(DEFAULT_MAX_LLM_RECALL),
        context_manager,
        api_type,
        name,
        at: at.to_string(),
    })
}

/// The agent's `context_manager` (a mapping with `type`; none without a
/// `type`); `place` names who sets its `max_tokens` (the agent, or `global`).
fn context_manager(
    settings: Option<Value>,
    name: &str,
    key_path: &dyn Fn(&str) -> String,
    place: &str,
    problems: &mut Problems,
) -> Option<ContextManagerConfig> {
    match settings {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut settings)) => match settings.remove("type") {
            None | Some(Value::Null) => None,
            Some(Value::String(kind)) => {
                let max_tokens =
                    problems.numbers(&key_path(numbers::CONTEXT_MAX_TOKENS.key), |found| {
                        read_whole(
                            settings.remove("max_tokens").as_ref(),
                            &numbers::CONTEXT_MAX_TOKENS,
                            place,
                            found,
                        )
                    });
                Some(ContextManagerConfig {
                    kind,
                    max_tokens,
                    options: settings,
                })
            }
            Some(other) => {
                problems.at(
                    key_path("context_manager.type"),
                    format!("agent `{name}`: `context_manager.type` must be a name, not {other}"),
                );
                None
            }
        },
        Some(other) => {
            problems.at(
                key_path("context_manager"),
                format!(
                    "agent `{name}`: `context_manager` must be a mapping with `type`, not {other}"
                ),
            );
            None
        }
    }
}

/// The `providers:` entries (at `at` in the document), checked; each problem
/// goes to `problems` and its entry is left out.
fn resolve_providers(
    raw: BTreeMap<String, RawProvider>,
    at: &str,
    problems: &mut Problems,
) -> BTreeMap<String, ProviderConfig> {
    let mut providers = BTreeMap::new();
    for (name, provider) in raw {
        let entry = join(at, &name);
        if let Some(config) = resolve_provider(&name, provider, &entry, problems) {
            providers.insert(name, config);
        }
    }
    providers
}

/// The provider `name` of the entry at `entry`, checked; `None` when its
/// `api` is unknown (its other problems go to `problems` too).
fn resolve_provider(
    name: &str,
    provider: RawProvider,
    entry: &str,
    problems: &mut Problems,
) -> Option<ProviderConfig> {
    let key = |key: &str| join(entry, key);
    let api = provider_api(name, provider.api.as_deref(), &key("api"), problems)?;
    let place = format!("provider `{name}`");
    let mut number = |value: &Option<Value>, range: &numbers::Range| {
        problems.numbers(&key(range.key), |found| {
            read_whole(value.as_ref(), range, &place, found)
        })
    };
    let max_concurrency = number(&provider.max_concurrency, &numbers::MAX_CONCURRENCY);
    let rpm = number(&provider.rpm, &numbers::RPM);
    let tpm = number(&provider.tpm, &numbers::TPM);
    let retry_base_ms = number(&provider.retry_base_ms, &numbers::RETRY_BASE_MS);
    let retry_cap_ms = number(&provider.retry_cap_ms, &numbers::RETRY_CAP_MS);
    let mut seconds = |value: &Option<Value>, range: &numbers::Range| {
        problems.numbers(&key(range.key), |found| {
            read(value.as_ref(), range, &place, found)
        })
    };
    let timeout_s = seconds(&provider.timeout_s, &numbers::TIMEOUT_S);
    let connect_timeout_s = seconds(&provider.connect_timeout_s, &numbers::CONNECT_TIMEOUT_S);
    let cache_ttl_s = seconds(&provider.cache_ttl_s, &numbers::CACHE_TTL_S);
    if let Some(base) = retry_base_ms {
        let cap = retry_cap_ms.unwrap_or(numbers::DEFAULT_RETRY_CAP_MS);
        if base > cap {
            let default = if retry_cap_ms.is_none() {
                ", the default"
            } else {
                ""
            };
            problems.at(
                key("retry_base_ms"),
                format!(
                    "{place}: `retry_base_ms: {base}` is above `retry_cap_ms` ({cap}{default}); the first back-off cannot be longer than the longest"
                ),
            );
        }
    }
    if let Some(role) = provider
        .system_role
        .as_deref()
        .filter(|role| !matches!(*role, "system" | "developer"))
    {
        problems.at(
            key("system_role"),
            format!("provider `{name}`: `system_role: {role}` must be `system` or `developer`"),
        );
    }
    let structured_output = provider
        .structured_output
        .as_deref()
        .and_then(|given| structured_output(name, given, api, &key("structured_output"), problems));
    Some(ProviderConfig {
        api,
        base_url: provider.base_url,
        api_key_env: provider.api_key_env,
        // In range, so the casts are exact.
        max_concurrency: max_concurrency.map(|value| value as usize),
        rpm: rpm.map(|value| value as u32),
        tpm,
        timeout_s,
        connect_timeout_s,
        system_role: provider.system_role,
        send_name: provider.send_name,
        structured_output,
        retry_base_ms,
        retry_cap_ms,
        script: provider.script.map(PathBuf::from),
        headers: provider.headers.unwrap_or_default(),
        cache: provider.cache,
        cache_ttl_s,
    })
}

/// The API of the provider `name` as `api` (at `at`) names it; without one,
/// the provider named `anthropic` or `mock` speaks that, any other OpenAI's.
fn provider_api(
    name: &str,
    api: Option<&str>,
    at: &str,
    problems: &mut Problems,
) -> Option<ProviderApi> {
    match api {
        None if name == "anthropic" => Some(ProviderApi::Anthropic),
        None if name == "mock" => Some(ProviderApi::Mock),
        None | Some("openai") => Some(ProviderApi::OpenAi),
        Some("anthropic") => Some(ProviderApi::Anthropic),
        Some("mock") => Some(ProviderApi::Mock),
        Some(other) => {
            problems.at(
                at,
                format!(
                    "provider `{name}`: unknown `api: {other}`; use `openai`, `anthropic` or `mock`{}",
                    suggest::hint(other, ["openai", "anthropic", "mock"])
                ),
            );
            None
        }
    }
}

/// The provider's `structured_output` (at `at`): a known name, on an
/// `api: anthropic` provider (a problem otherwise, the setting still given).
fn structured_output(
    name: &str,
    given: &str,
    api: ProviderApi,
    at: &str,
    problems: &mut Problems,
) -> Option<super::StructuredOutput> {
    use super::StructuredOutput;
    let setting = StructuredOutput::from_name(given);
    if setting.is_none() {
        problems.at(
            at,
            format!(
                "provider `{name}`: unknown `structured_output: {}`; use {}{}",
                suggest::printable(given),
                StructuredOutput::NAMES
                    .map(|name| format!("`{name}`"))
                    .join(", "),
                suggest::hint(given, StructuredOutput::NAMES)
            ),
        );
    } else if api != ProviderApi::Anthropic {
        problems.at(
            at,
            format!(
                "provider `{name}`: `structured_output` is for `api: anthropic` providers; \
                 an OpenAI-compatible server gets a format as `response_format` (chat \
                 completions) or `text.format` (Responses API)"
            ),
        );
    }
    setting
}

/// The problems of `providers:` entries given outside a tactic (a user's
/// config file), as a tactic's would have them, one line each: unknown keys
/// (with a "did you mean"), numbers out of range, unknown `api`s.
pub fn check_providers(providers: &Map<String, Value>) -> Vec<String> {
    check_providers_at(providers, &crate::yaml::Positions::default())
        .into_iter()
        .map(|(_, problem)| problem)
        .collect()
}

/// [`check_providers`] for entries read from a file (under `providers:` in
/// it): each problem with the `line:column` of what it is about, when
/// `positions` (the file's) has one.
pub fn check_providers_at(
    providers: &Map<String, Value>,
    positions: &crate::yaml::Positions,
) -> Vec<(Option<crate::yaml::Location>, String)> {
    let mut problems = Problems::default();
    let mut raw = BTreeMap::new();
    for (name, entry) in providers {
        let at = join("providers", name);
        if let Some(provider) = typed::<RawProvider>(
            entry.clone(),
            &|relative| join(&at, relative),
            &mut problems,
        ) {
            raw.insert(name.clone(), provider);
        }
    }
    resolve_providers(raw, "providers", &mut problems);
    problems
        .into_found()
        .into_iter()
        .map(|problem| {
            let location = problem.at.as_deref().and_then(|path| positions.get(path));
            (location, problem.message)
        })
        .collect()
}
