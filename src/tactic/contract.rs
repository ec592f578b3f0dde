//! A tactic's contract (issue 30): what it is and what it takes, in the
//! shape of upstream lllm-core 0.2's `TacticInfo` (`lllm inspect`, a
//! server's `/info`), and the check of a task's input against its
//! `input_schema` before anything is sent (`lllm run`, `lllm batch`, a
//! server's 400). Reading and checking the YAML keys is the config's
//! (`config::contract`); serving the contract is the server's.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Tactic, Task};

/// A tactic's contract as upstream lllm-core 0.2.1's `TacticInfo` has it,
/// field for field: what `lllm inspect --json` prints first and a server's
/// `/info` answers, and what [`Tactic::info`] gives.
///
/// Reading one accepts what upstream serves: a missing field takes
/// upstream's default (`capabilities` `["run", "arun"]`, `runtime_kind`
/// `"python"`, empty `description`, `examples` and `metadata`), and a
/// field it does not know is ignored.
///
/// ```
/// use lllm::TacticInfo;
///
/// let info: TacticInfo = serde_json::from_str(r#"{"name": "triage", "future_field": 1}"#)?;
/// assert_eq!(info.capabilities, ["run", "arun"]);
/// assert_eq!(info.runtime_kind, "python");
/// assert_eq!(info.input_schema, None);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TacticInfo {
    /// The tactic's name: its `tactic_type`, else its file's stem.
    pub name: String,
    /// `description` (empty when the tactic has none).
    #[serde(default)]
    pub description: String,
    /// `input_schema`: the JSON Schema of a task's input ([`Task::input`]).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// `output_schema`: the JSON Schema of the delivery.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// How the tactic can be called; a local lllm tactic's are `arun`,
    /// `events`, `run` and `stream`.
    #[serde(default = "upstream_capabilities")]
    pub capabilities: Vec<String>,
    /// What runs it: `lllm` for ours, `python` for upstream's own.
    #[serde(default = "upstream_runtime_kind")]
    pub runtime_kind: String,
    /// Upstream's package reference of the tactic; `None` for ours.
    #[serde(default)]
    pub package_ref: Option<String>,
    /// The URL of the service that serves the tactic; `None` for a local one.
    #[serde(default)]
    pub service_ref: Option<String>,
    /// `examples`: free-form mappings (an `input`, an `output`, …).
    #[serde(default)]
    pub examples: Vec<Map<String, Value>>,
    /// `metadata`: public notes about the tactic.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// Upstream's default `capabilities`.
fn upstream_capabilities() -> Vec<String> {
    vec!["run".into(), "arun".into()]
}

/// Upstream's default `runtime_kind`.
fn upstream_runtime_kind() -> String {
    "python".into()
}

/// What every local lllm tactic can do, sorted: run and await a task
/// (`run`, `arun`), and stream its text and its events.
const CAPABILITIES: [&str; 4] = ["arun", "events", "run", "stream"];

/// A task whose input does not fit its tactic's `input_schema`: every
/// problem, one per line (`input at /ticket: 7 is not of type "string"`).
/// Nothing was sent.
///
/// ```
/// use lllm::{Registry, Tactic, Task};
///
/// let tactic = Tactic::from_yaml("
/// agent_configs: [{name: a, model_name: mock/echo}]
/// input_schema: {type: object, required: [ticket], properties: {ticket: {type: string}}}
/// ", ".", &Registry::new())?;
/// let error = tactic.check_input(&Task::new("no ticket").arg("ticket", 7)).unwrap_err();
/// assert_eq!(error.problems[0].pointer, "/ticket");
/// assert_eq!(error.to_string(), r#"input at /ticket: 7 is not of type "string""#);
/// assert!(tactic.check_input(&Task::new("").arg("ticket", "Printer on fire")).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// The problems, in the order the schema found them; never empty.
    pub problems: Vec<InputProblem>,
}

/// One way a task's input does not fit the `input_schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    /// The JSON pointer of the value it is about, in the input (`/ticket`,
    /// `/tags/0`); `""` is the whole input.
    pub pointer: String,
    /// What was expected, on one line, a long value cut short:
    /// `"7" is not of type "integer"`, `"ticket" is a required property`.
    pub message: String,
}

impl std::fmt::Display for InputProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "input: {}", self.message)
        } else {
            write!(
                f,
                "input at {}: {}",
                crate::suggest::printable(&self.pointer),
                self.message
            )
        }
    }
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InputError {}

/// An input that does not fit is bad input: the command's error, exit 2.
impl From<InputError> for crate::error::Error {
    fn from(error: InputError) -> Self {
        crate::error::Error::Input(Box::new(error))
    }
}

impl Tactic {
    /// The tactic's contract, as upstream's `TacticInfo` has it: its name,
    /// `description`, `input_schema`, `output_schema`, `examples` and
    /// `metadata`, the capabilities of a local lllm tactic and
    /// `runtime_kind` `lllm`.
    ///
    /// ```
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml("
    /// tactic_type: triage
    /// description: Sort a support ticket.
    /// agent_configs: [{name: a, model_name: mock/echo}]
    /// input_schema: {type: object, required: [ticket]}
    /// examples: [{input: {ticket: The printer is on fire.}}]
    /// metadata: {owner: support}
    /// ", ".", &Registry::new())?;
    /// let info = tactic.info();
    /// assert_eq!((info.name.as_str(), info.description.as_str()), ("triage", "Sort a support ticket."));
    /// assert_eq!(info.capabilities, ["arun", "events", "run", "stream"]);
    /// assert_eq!(info.runtime_kind, "lllm");
    /// assert_eq!(info.examples[0]["input"]["ticket"], "The printer is on fire.");
    /// assert_eq!(info.metadata["owner"], "support");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn info(&self) -> TacticInfo {
        let config = &self.config;
        TacticInfo {
            name: config.name.clone(),
            description: config.description.clone().unwrap_or_default(),
            input_schema: config.input_schema.clone(),
            output_schema: config.output_schema.clone(),
            capabilities: CAPABILITIES.iter().map(|name| name.to_string()).collect(),
            runtime_kind: "lllm".into(),
            package_ref: None,
            service_ref: None,
            examples: config.examples.clone(),
            metadata: config.metadata.clone(),
        }
    }

    /// The tools this tactic's agents are offered, each once, in
    /// declaration order, as a model sees them (name, description, JSON
    /// Schema of the arguments): `tools:`, `builtin_tools:` and a
    /// program's registered tools; an MCP server's once it started
    /// ([`Tactic::start`]). What `lllm inspect` lists.
    ///
    /// ```
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml("
    /// agent_configs: [{name: a, model_name: mock/echo, tools: [wc]}]
    /// tools:
    ///   - {name: wc, description: Count words., parameters: {type: object}, command: [wc, -w]}
    /// ", ".", &Registry::new())?;
    /// let tools = tactic.tool_specs();
    /// assert_eq!((tools[0].name.as_str(), tools[0].description.as_str()), ("wc", "Count words."));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tool_specs(&self) -> Vec<crate::provider::ToolSpec> {
        let offered: std::collections::BTreeSet<&str> = self
            .agents
            .values()
            .flat_map(|agent| agent.tools.iter().map(String::as_str))
            .collect();
        let mut specs: Vec<crate::provider::ToolSpec> = self
            .runtime
            .toolbox
            .names()
            .filter(|name| offered.contains(name))
            .filter_map(|name| self.runtime.toolbox.get(name))
            .map(|tool| tool.spec().clone())
            .collect();
        let servers: std::collections::BTreeSet<&str> = self
            .agents
            .values()
            .flat_map(|agent| agent.mcp_servers.iter().map(String::as_str))
            .collect();
        for server in servers {
            for tool in self.runtime.mcp.tools_of(server) {
                specs.push(crate::tool::Tool::spec(tool.as_ref()).clone());
            }
        }
        specs
    }

    /// The keys of the prompts the tactic uses (its agents' system prompts
    /// and its steps' prompts, sub-tactics' not), sorted, as its records
    /// name them: a prompt file's key (`summarize/draft`), or `STEP
    /// (inline)` and `AGENT/system (inline)` for text written in the YAML.
    pub fn prompt_keys(&self) -> Vec<String> {
        match self.recorded_prompts.value() {
            Value::Object(prompts) => prompts.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Checks the task's input ([`Task::input`]: its arguments, else its
    /// task value) against the tactic's `input_schema`: `Ok` without one,
    /// else every problem at once. Nothing is sent either way; `lllm run`,
    /// `lllm batch` and a server call it before anything is.
    pub fn check_input(&self, task: &Task) -> Result<(), InputError> {
        let Some(schema) = &self.input else {
            return Ok(());
        };
        let problems: Vec<InputProblem> = schema
            .problems(&task.input())
            .into_iter()
            .map(|(pointer, message)| InputProblem { pointer, message })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InputError { problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Registry;

    const TRIAGE: &str = "
tactic_type: triage
agent_configs: [{name: a, model_name: mock/echo}]
input_schema:
  type: object
  required: [ticket]
  properties:
    ticket: {type: string}
    tags: {type: array, items: {type: string}}
";

    fn tactic(yaml: &str) -> Tactic {
        Tactic::from_yaml(yaml, ".", &Registry::new()).unwrap()
    }

    #[track_caller]
    fn case(task: Task, expected: &[(&str, &str)]) {
        let got = match tactic(TRIAGE).check_input(&task) {
            Ok(()) => Vec::new(),
            Err(error) => error
                .problems
                .into_iter()
                .map(|problem| (problem.pointer, problem.message))
                .collect(),
        };
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(pointer, message)| (pointer.to_string(), message.to_string()))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_task_is_checked_by_its_args_else_its_task_value() {
        case(Task::new("").arg("ticket", "Printer on fire"), &[]);
        case(
            Task::from_input(json!({"ticket": "Printer on fire", "tags": ["it"]})).unwrap(),
            &[],
        );
        case(
            Task::new("text")
                .arg("ticket", 7)
                .arg("tags", json!(["a", 2])),
            &[
                ("/ticket", r#"7 is not of type "string""#),
                ("/tags/1", r#"2 is not of type "string""#),
            ],
        );
        case(
            Task::new("Printer on fire"),
            &[("", r#""Printer on fire" is not of type "object""#)],
        );
        case(
            Task::new(json!({"other": 1})),
            &[("", r#""ticket" is a required property"#)],
        );
    }

    #[test]
    fn without_input_schema_every_task_passes() {
        let plain = tactic("agent_configs: [{name: a, model_name: mock/echo}]");
        assert_eq!(plain.check_input(&Task::new(json!(7))), Ok(()));
        assert_eq!(plain.info().input_schema, None);
    }

    #[test]
    fn errors_are_one_line_per_problem() {
        let error = tactic(TRIAGE)
            .check_input(&Task::new(json!({"tags": "x"})))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "input: \"ticket\" is a required property\ninput at /tags: \"x\" is not of type \"array\""
        );
    }

    #[test]
    fn info_has_upstreams_shape_and_reads_back() {
        let info = tactic(TRIAGE).info();
        let value = serde_json::to_value(&info).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "name",
                "description",
                "input_schema",
                "output_schema",
                "capabilities",
                "runtime_kind",
                "package_ref",
                "service_ref",
                "examples",
                "metadata"
            ]
        );
        assert_eq!(value["output_schema"], Value::Null);
        assert_eq!(value["input_schema"]["required"], json!(["ticket"]));
        let back: TacticInfo = serde_json::from_value(value).unwrap();
        assert_eq!(back, info);
    }

    #[test]
    fn upstream_info_reads_with_its_defaults() {
        // What upstream's `/info` answers for a Python tactic.
        let served = json!({
            "name": "echo", "description": "Echo.", "input_schema": {"type": "object"},
            "output_schema": null, "capabilities": ["run", "arun", "stream"],
            "runtime_kind": "python", "package_ref": null,
            "service_ref": "http://127.0.0.1:8000/tactics/echo",
            "examples": [], "metadata": {"team": "x"}, "unknown": true,
        });
        let info: TacticInfo = serde_json::from_value(served).unwrap();
        assert_eq!(info.capabilities, ["run", "arun", "stream"]);
        assert_eq!(
            info.service_ref.as_deref(),
            Some("http://127.0.0.1:8000/tactics/echo")
        );
        let minimal: TacticInfo = serde_json::from_value(json!({"name": "x"})).unwrap();
        assert_eq!(minimal.description, "");
        assert_eq!(minimal.capabilities, ["run", "arun"]);
        assert_eq!(minimal.runtime_kind, "python");
        assert!(minimal.examples.is_empty() && minimal.metadata.is_empty());
        assert!(serde_json::from_value::<TacticInfo>(json!({"description": "no name"})).is_err());
    }
}
