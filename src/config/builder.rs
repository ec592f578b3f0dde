//! Tactic configs from code: from a YAML string (`from_yaml`) and from a
//! typed builder (`TacticConfig::builder()`). Both make the document a file
//! would be and send it down the file's pipeline — paths made absolute
//! against a base directory, `base` merged under, `global` merged under each
//! agent entry (D14), every check — so a config from code is the config the
//! same file gives, with the same problems reported the same way.
//!
//! What the keys mean is `raw`'s and `resolve`'s business; this file only
//! assembles documents.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{Read, Result, TacticConfig, load_document, merge, parse_yaml, top_level};
use crate::yaml::Positions;

/// Where a config from a YAML string says it came from (errors, records).
pub const YAML_LABEL: &str = "<yaml>";

/// Where a config from the builder says it came from (errors, records).
pub const BUILDER_LABEL: &str = "<builder>";

/// Reads a tactic from YAML `text` as if it were a file in `base_dir`:
/// `prompts` (default `base_dir/prompts`), tool and server `cwd`s, a mock
/// `script`, sub-tactic paths and `base:` resolve against `base_dir`.
/// Errors name the text as `<yaml>`.
///
/// ```
/// let config = lllm::config::from_yaml(
///     "global: {model_name: mock/echo}\nagent_configs: [{name: writer}]",
///     "/tmp",
/// )
/// .unwrap();
/// assert_eq!(config.agents[0].model_name, "mock/echo");
/// assert_eq!(config.prompts_dir, std::path::Path::new("/tmp/prompts"));
///
/// let error = lllm::config::from_yaml("agent_config: []", ".").unwrap_err();
/// assert!(error.to_string().contains("did you mean `agent_configs`"), "{error}");
/// ```
pub fn from_yaml(text: &str, base_dir: impl AsRef<Path>) -> Result<TacticConfig> {
    let (document, positions) = parse_yaml(text, YAML_LABEL)?;
    from_document(document, positions, YAML_LABEL, Some(base_dir.as_ref()))
}

/// The config a record holds (`tactic.config`: resolved, its paths
/// absolute), built again under `label`, the record's tactic path: what a
/// re-run of a tactic that has no file (`<yaml>`, `<builder>`) runs.
pub(crate) fn from_recorded(document: Value, label: &str) -> Result<TacticConfig> {
    from_document(document, Positions::default(), label, None)
}

/// The file pipeline from a parsed document on: `label` names it in errors
/// and records, `positions` says where its nodes are (none for a document
/// built in code); relative paths resolve against `base_dir` (without one,
/// they stay relative to the working directory and there is no default
/// prompt directory).
fn from_document(
    document: Value,
    positions: Positions,
    label: &str,
    base_dir: Option<&Path>,
) -> Result<TacticConfig> {
    let directory = base_dir.unwrap_or(Path::new("."));
    let mut read = Read::default();
    let (document, base) = top_level(document, label, positions, directory, &mut read)?;
    let mut document = match base {
        Some(base) => merge(load_document(&base, &mut Vec::new(), &mut read)?, document),
        None => document,
    };
    let prompts = super::prompts_problem(&document);
    if let (Some(directory), Value::Object(map)) = (base_dir, &mut document) {
        map.entry("prompts")
            .or_insert_with(|| Value::String(directory.join("prompts").display().to_string()));
    }
    super::resolved(Path::new(label), document, read, prompts)
}

impl TacticConfig {
    /// A tactic config written in code; see [`TacticBuilder`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::config::{AgentEntry, TacticConfig};
    /// use lllm::{Registry, Tactic};
    ///
    /// let config = TacticConfig::builder()
    ///     .name("summarize")
    ///     .global(AgentEntry::defaults().model("mock/echo"))
    ///     .agent(AgentEntry::new("assistant").system("You summarize."))
    ///     .build()?;
    /// let tactic = Tactic::from_config(config, &Registry::new())?;
    /// assert_eq!(tactic.call("Tides turn twice a day.").await?, "Tides turn twice a day.");
    /// # Ok(()) }
    /// ```
    pub fn builder() -> TacticBuilder {
        TacticBuilder::default()
    }
}

/// A tactic config written in code, key by key as the YAML has them; `build`
/// merges and checks it as a file's (`global` under each agent, every
/// problem listed).
///
/// ```
/// use lllm::config::{AgentEntry, TacticConfig};
///
/// let config = TacticConfig::builder()
///     .name("summarize")
///     .global(AgentEntry::defaults().model("mock/echo").arg("temperature", 0.2))
///     .agent(AgentEntry::new("writer").system("You are terse."))
///     .agent(AgentEntry::new("critic").model("mock/script").arg("temperature", 0.0))
///     .build()
///     .unwrap();
/// assert_eq!(config.name, "summarize");
/// assert_eq!(config.agents[0].model_name, "mock/echo");
/// assert_eq!(config.agents[0].model_args["temperature"], 0.2);
/// assert_eq!(config.agents[1].model_args["temperature"], 0.0);
///
/// // The checks of a file: an agent without a model is reported by name.
/// let error = TacticConfig::builder().agent(AgentEntry::new("lost")).build().unwrap_err();
/// assert!(error.to_string().contains("agent `lost`"), "{error}");
/// ```
#[derive(Clone, Default)]
pub struct TacticBuilder {
    document: Map<String, Value>,
    agents: Vec<Value>,
    base_dir: Option<PathBuf>,
    /// Settings that were not a JSON object, one problem line each,
    /// reported by `build` with the document's own.
    misuse: Vec<String>,
}

/// The keys set and the agents' names only: provider settings may hold a
/// key (`headers`), which must not reach a log.
impl std::fmt::Debug for TacticBuilder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let agents: Vec<&str> = self
            .agents
            .iter()
            .filter_map(|agent| agent.get("name").and_then(Value::as_str))
            .collect();
        formatter
            .debug_struct("TacticBuilder")
            .field("keys", &self.document.keys().collect::<Vec<_>>())
            .field("agents", &agents)
            .field("base_dir", &self.base_dir)
            .finish()
    }
}

impl TacticBuilder {
    /// `tactic_type`: the tactic's name (default `tactic`).
    pub fn name(self, name: impl Into<String>) -> TacticBuilder {
        self.set("tactic_type", name.into())
    }

    /// `description`.
    pub fn description(self, description: impl Into<String>) -> TacticBuilder {
        self.set("description", description.into())
    }

    /// The directory relative paths resolve against, as a file's own
    /// directory does (`prompts`, default `DIR/prompts`; tools' `cwd`; `base`).
    /// Without it, relative paths are relative to the working directory and
    /// there is no prompt directory unless `prompts` names one.
    pub fn base_dir(mut self, directory: impl Into<PathBuf>) -> TacticBuilder {
        self.base_dir = Some(directory.into());
        self
    }

    /// `prompts`: the prompt registry's directory.
    pub fn prompts(self, directory: impl AsRef<Path>) -> TacticBuilder {
        self.set("prompts", directory.as_ref().display().to_string())
    }

    /// `global`: merged under every agent entry (an entry's own keys win).
    /// Calling it again merges the new defaults over the earlier ones.
    pub fn global(mut self, defaults: AgentEntry) -> TacticBuilder {
        let earlier = self.document.remove("global").unwrap_or(Value::Null);
        let merged = merge(earlier, Value::Object(defaults.entry));
        self.document.insert("global".into(), merged);
        self
    }

    /// Adds an `agent_configs` entry; the first answers a task when there is
    /// no `flow`.
    pub fn agent(mut self, agent: AgentEntry) -> TacticBuilder {
        self.agents.push(Value::Object(agent.entry));
        self
    }

    /// `providers.NAME`: a provider's settings as the YAML writes them
    /// (`{api: openai, base_url: …, max_concurrency: 8}`), as a `json!`, a
    /// struct or a map. Not a JSON object: a problem `build` reports.
    ///
    /// ```
    /// use lllm::config::{AgentEntry, TacticConfig};
    /// use serde_json::json;
    ///
    /// let agent = || AgentEntry::new("writer").model("mock/script");
    /// let config = TacticConfig::builder()
    ///     .agent(agent())
    ///     .provider("mock", json!({"script": "script.yaml"}))
    ///     .build()?;
    /// assert!(config.resolved["providers"]["mock"]["script"].is_string());
    ///
    /// let error = TacticConfig::builder().agent(agent()).provider("mock", "script.yaml").build().unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "<builder>: providers.mock: provider settings must be a JSON object (a `json!({..})`, a struct or a map), found a string",
    /// );
    /// # Ok::<(), lllm::config::Error>(())
    /// ```
    pub fn provider(
        mut self,
        name: impl Into<String>,
        settings: impl serde::Serialize,
    ) -> TacticBuilder {
        let name = name.into();
        let settings = match crate::args::object(settings, "provider settings") {
            Ok(settings) => settings,
            Err(error) => {
                self.misuse
                    .push(format!("{BUILDER_LABEL}: providers.{name}: {error}"));
                return self;
            }
        };
        let providers = self
            .document
            .entry("providers")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(providers) = providers {
            providers.insert(name, Value::Object(settings));
        }
        self
    }

    /// `result`: the template of the delivery.
    pub fn result(self, template: impl Into<String>) -> TacticBuilder {
        self.set("result", template.into())
    }

    /// `output_schema`: the JSON Schema the tactic's delivery must fit,
    /// checked as a file's (a schema that does not compile is an error at
    /// `build`).
    ///
    /// ```
    /// use lllm::config::{AgentEntry, TacticConfig};
    /// use serde_json::json;
    ///
    /// let schema = json!({"type": "object", "required": ["city"]});
    /// let config = TacticConfig::builder()
    ///     .agent(AgentEntry::new("a").model("mock/echo"))
    ///     .output_schema(schema.clone())
    ///     .build()?;
    /// assert_eq!(config.output_schema, Some(schema));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn output_schema(self, schema: Value) -> TacticBuilder {
        self.set("output_schema", schema)
    }

    /// `input_schema`: the JSON Schema of a task's input (its `args` as an
    /// object, else its task value), checked as a file's (it must compile,
    /// and every example's `input` must fit it). Tasks are checked against
    /// it with [`Tactic::check_input`](crate::Tactic::check_input).
    ///
    /// ```
    /// use lllm::config::{AgentEntry, TacticConfig};
    /// use serde_json::json;
    ///
    /// let schema = json!({"type": "object", "required": ["ticket"]});
    /// let config = TacticConfig::builder()
    ///     .agent(AgentEntry::new("a").model("mock/echo"))
    ///     .input_schema(schema.clone())
    ///     .examples(vec![json!({"input": {"ticket": "The printer is on fire."}})])
    ///     .build()?;
    /// assert_eq!(config.input_schema, Some(schema));
    ///
    /// let error = TacticConfig::builder()
    ///     .agent(AgentEntry::new("a").model("mock/echo"))
    ///     .input_schema(json!({"type": "object", "required": ["ticket"]}))
    ///     .examples(vec![json!({"input": {}})])
    ///     .build()
    ///     .unwrap_err();
    /// assert!(error.to_string().contains("\"ticket\" is a required property"), "{error}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn input_schema(self, schema: Value) -> TacticBuilder {
        self.set("input_schema", schema)
    }

    /// `examples`: free-form mappings, as upstream's `TacticInfo.examples`
    /// (an `input`, an `output`, a `description`…); each must be a mapping.
    pub fn examples(self, examples: Vec<Value>) -> TacticBuilder {
        self.set("examples", Value::Array(examples))
    }

    /// `metadata`: public notes about the tactic (served and shown as they
    /// are: no secrets here).
    pub fn metadata(self, metadata: Map<String, Value>) -> TacticBuilder {
        self.set("metadata", Value::Object(metadata))
    }

    /// Any top-level key as the YAML writes it (`flow`, `tools`,
    /// `mcp_servers`, `builtin_tools`, `pricing`, `max_workers`, …); checked
    /// like a file's keys, so an unknown one is an error at `build`.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> TacticBuilder {
        self.document.insert(key.into(), value.into());
        self
    }

    /// The document this builder stands for, as a YAML file would hold it.
    pub fn to_document(&self) -> Value {
        let mut document = self.document.clone();
        if !self.agents.is_empty() {
            document.insert("agent_configs".into(), Value::Array(self.agents.clone()));
        }
        Value::Object(document)
    }

    /// Merges and checks the config as a file's; errors name it `<builder>`.
    pub fn build(self) -> Result<TacticConfig> {
        if !self.misuse.is_empty() {
            return Err(super::Error::Invalid {
                path: BUILDER_LABEL.to_string(),
                problems: self.misuse,
            });
        }
        from_document(
            self.to_document(),
            Positions::default(),
            BUILDER_LABEL,
            self.base_dir.as_deref(),
        )
    }
}

/// An `agent_configs` entry (or, from [`AgentEntry::defaults`], `global`) as
/// written: only the keys set are in it, so `global` fills the rest.
///
/// ```
/// use lllm::config::AgentEntry;
///
/// let writer = AgentEntry::new("writer")
///     .model("openai/gpt-4o-mini")
///     .system("You write.")
///     .tools(["word_count"])
///     .arg("temperature", 0.3);
/// assert_eq!(writer.to_value()["model_args"]["temperature"], 0.3);
/// ```
#[derive(Debug, Clone, Default)]
pub struct AgentEntry {
    entry: Map<String, Value>,
}

impl AgentEntry {
    /// The entry of agent `name`.
    pub fn new(name: impl Into<String>) -> AgentEntry {
        AgentEntry::default().set("name", name.into())
    }

    /// Settings without a name, for [`TacticBuilder::global`].
    pub fn defaults() -> AgentEntry {
        AgentEntry::default()
    }

    /// `model_name`: `provider/model` (a bare name is an OpenAI model).
    pub fn model(self, model: impl Into<String>) -> AgentEntry {
        self.set("model_name", model.into())
    }

    /// `system_prompt`: the system prompt's template, inline.
    pub fn system(self, text: impl Into<String>) -> AgentEntry {
        self.set("system_prompt", text.into())
    }

    /// `system_prompt_path`: the system prompt by registry key.
    pub fn system_path(self, key: impl Into<String>) -> AgentEntry {
        self.set("system_prompt_path", key.into())
    }

    /// `tools`: the names of the tools the agent is offered.
    pub fn tools<S: Into<String>>(self, names: impl IntoIterator<Item = S>) -> AgentEntry {
        let names: Vec<Value> = names
            .into_iter()
            .map(|name| Value::String(name.into()))
            .collect();
        self.set("tools", names)
    }

    /// `model_args.NAME`: one model argument (`temperature`, `max_tokens`, …).
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> AgentEntry {
        let args = self
            .entry
            .entry("model_args")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(args) = args {
            args.insert(name.into(), value.into());
        }
        self
    }

    /// Any key of an agent entry as the YAML writes it (`max_llm_recall`,
    /// `context_manager`, `mcp_servers`, `api_type`, …); checked like a file's.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> AgentEntry {
        self.entry.insert(key.into(), value.into());
        self
    }

    /// The entry as a YAML file would hold it.
    pub fn to_value(&self) -> Value {
        Value::Object(self.entry.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resolved documents of `yaml` (as a file in a temporary directory,
    /// and as text with that directory) and of `builder` are equal.
    #[track_caller]
    fn same(yaml: &str, builder: TacticBuilder) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, yaml).unwrap();
        let file = crate::config::load(&path).unwrap();
        let text = from_yaml(yaml, dir.path()).unwrap();
        let built = builder.base_dir(dir.path()).build().unwrap();
        assert_eq!(text.resolved, file.resolved);
        assert_eq!(built.resolved, file.resolved);
        assert_eq!(text.prompts_dir, file.prompts_dir);
        assert_eq!(built.prompts_dir, file.prompts_dir);
        assert_eq!(
            format!("{:?}", built.agents),
            format!("{:?}", file.agents),
            "agents"
        );
    }

    #[test]
    fn yaml_text_and_builder_equal_the_file() {
        same(
            "global: {model_name: mock/echo, model_args: {temperature: 0.2}}\n\
             agent_configs:\n  - {name: writer, system_prompt: Be terse.}\n  - {name: critic, model_args: {temperature: 0}}\n",
            TacticConfig::builder()
                .global(
                    AgentEntry::defaults()
                        .model("mock/echo")
                        .arg("temperature", 0.2),
                )
                .agent(AgentEntry::new("writer").system("Be terse."))
                .agent(AgentEntry::new("critic").arg("temperature", 0)),
        );
        same(
            "tactic_type: t\nprompts: p\nglobal: {model_name: mock/echo, max_llm_recall: 1}\n\
             agent_configs: [{name: a, tools: [wc]}]\n\
             tools: [{name: wc, description: count, parameters: {type: object}, command: [wc]}]\n",
            TacticConfig::builder()
                .name("t")
                .prompts("p")
                .global(
                    AgentEntry::defaults()
                        .model("mock/echo")
                        .set("max_llm_recall", 1),
                )
                .agent(AgentEntry::new("a").tools(["wc"]))
                .set(
                    "tools",
                    serde_json::json!([{"name": "wc", "description": "count",
                        "parameters": {"type": "object"}, "command": ["wc"]}]),
                ),
        );
    }

    #[test]
    fn base_resolves_against_the_base_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("base.yaml"),
            "global: {model_name: mock/echo}\n",
        )
        .unwrap();
        let config = from_yaml("base: base.yaml\nagent_configs: [{name: a}]", dir.path()).unwrap();
        assert_eq!(config.agents[0].model_name, "mock/echo");
        let error = from_yaml("base: missing.yaml\nagent_configs: [{name: a}]", dir.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing.yaml"), "{error}");
    }

    #[test]
    fn problems_name_the_text() {
        let error = from_yaml("agent_configs: [{name: a}]", ".")
            .unwrap_err()
            .to_string();
        // At the entry that lacks the key.
        assert!(error.starts_with("<yaml>:1:17: "), "{error}");
        let error = from_yaml("[1, 2]", ".").unwrap_err().to_string();
        assert_eq!(error, "<yaml>: a tactic must be a YAML mapping");
        let error = from_yaml("a: [", ".").unwrap_err().to_string();
        assert!(error.starts_with("<yaml>:1:4: "), "{error}");
        let error = TacticConfig::builder()
            .set("flw", Value::Null)
            .build()
            .unwrap_err()
            .to_string();
        assert!(error.contains("<builder>: unknown key `flw`"), "{error}");
    }
}
