//! Tactics as tools (issue 30): a `tools:` entry `{name, tactic:
//! PATH_OR_URL, description?}` is a tool the model can call whose
//! parameters are that tactic's `input_schema` and whose result is its
//! delivery. A tactic file is built with the tactic that names it (its run
//! nests in the caller's record as a sub-session); a served tactic's
//! contract is read from its `/info` when the tactic loads, before anything
//! is sent, and each call is on record (`remote::exchange`), so a re-run
//! needs neither the server nor the network.
//!
//! This is the tactic layer's: the tool layer does not know tactics
//! (STYLE 19), it only runs what implements `Tool`.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::build::{Builder, Problems};
use super::{Tactic, Task, load};
use crate::config::{TacticConfig, ToolConfig, join_path};
use crate::provider::ToolSpec;
use crate::tactic::remote::{RemoteCall, RemoteTactic, TacticInfo};
use crate::tool::{Tool, Toolbox};

/// How the model's arguments become the tactic's input.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// The arguments are the input (an object `input_schema`).
    Object,
    /// `{"input": …}` holds it (an `input_schema` of another type).
    Wrapped,
    /// `{"task": "…"}`: a tactic without an `input_schema` takes a text.
    Text,
}

enum Target {
    Local(Arc<Tactic>),
    Remote(Arc<RemoteTactic>),
}

/// A tactic the model can call.
pub(crate) struct TacticTool {
    spec: ToolSpec,
    shape: Shape,
    target: Target,
}

/// The tool's parameters and how its arguments are read, from the
/// tactic's `input_schema`.
fn parameters(input_schema: Option<&Value>) -> (Value, Shape) {
    match input_schema {
        None => (
            json!({
                "type": "object",
                "properties": {"task": {"type": "string", "description": "What the tactic is to do"}},
                "required": ["task"],
            }),
            Shape::Text,
        ),
        Some(schema)
            if schema.get("type").and_then(Value::as_str) == Some("object")
                || (schema.get("type").is_none() && schema.get("properties").is_some()) =>
        {
            (schema.clone(), Shape::Object)
        }
        Some(schema) => (
            json!({"type": "object", "properties": {"input": schema}, "required": ["input"]}),
            Shape::Wrapped,
        ),
    }
}

impl TacticTool {
    fn new(config: &ToolConfig, info: &TacticInfo, target: Target) -> TacticTool {
        let (parameters, shape) = parameters(info.input_schema.as_ref());
        let description = if !config.description.is_empty() {
            config.description.clone()
        } else if !info.description.is_empty() {
            info.description.clone()
        } else {
            format!("Runs the tactic `{}`", info.name)
        };
        TacticTool {
            spec: ToolSpec {
                name: config.name.clone(),
                description,
                parameters,
            },
            shape,
            target,
        }
    }

    /// The task the model's `arguments` make.
    fn task(&self, arguments: &Map<String, Value>) -> Result<Task, String> {
        match self.shape {
            Shape::Object => Ok(Task {
                task: Value::Object(arguments.clone()),
                args: arguments.clone(),
                ..Task::default()
            }),
            Shape::Wrapped => match arguments.get("input") {
                Some(Value::Object(args)) => Ok(Task {
                    task: Value::Object(args.clone()),
                    args: args.clone(),
                    ..Task::default()
                }),
                Some(input) => Ok(Task::from(input.clone())),
                None => Err("the call has no `input`".into()),
            },
            Shape::Text => match arguments.get("task") {
                Some(Value::String(text)) => Ok(Task::from(text.as_str())),
                Some(other) => Ok(Task::from(other.to_string())),
                None => Err("the call has no `task` (a text)".into()),
            },
        }
    }
}

impl Tool for TacticTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let task = self.task(arguments)?;
            match &self.target {
                Target::Remote(remote) => {
                    let by = format!("tool `{}`", self.spec.name);
                    crate::tactic::remote::exchange::run(remote, &by, &task)
                        .await
                        .map(|answer| answer.delivery())
                }
                Target::Local(tactic) => {
                    if let Err(error) = tactic.check_input(&task) {
                        return Err(error.to_string());
                    }
                    let record = Box::pin(super::flow::run(
                        tactic,
                        Box::new(task),
                        None,
                        std::future::pending(),
                    ))
                    .await;
                    let outcome = match (&record.delivery, &record.error) {
                        (Some(delivery), _) if record.is_success() => Ok(delivery.clone()),
                        (_, error) => Err(format!(
                            "tactic `{}` failed: {}",
                            record.tactic.name,
                            error.as_deref().unwrap_or("no delivery")
                        )),
                    };
                    crate::tactic::remote::exchange::log_session(record);
                    outcome
                }
            }
        })
    }
}

/// Adds a tool for each `tools:` entry of `config` that runs a tactic;
/// returns the contracts read from served tactics (every record keeps them).
pub(super) fn add_tactic_tools(
    config: &TacticConfig,
    mut toolbox: Toolbox,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> (Toolbox, Vec<RemoteCall>) {
    let mut contracts = Vec::new();
    for (index, tool) in config.tools.iter().enumerate() {
        let Some(tactic) = &tool.tactic else {
            continue;
        };
        let at = format!("tools[{index}]");
        let who = format!("tool `{}`", tool.name);
        if crate::tactic::remote::is_url(tactic) {
            let Some(remote) = super::nodes::remote_at(
                config,
                (&at, &who),
                tactic,
                tool.token_env.as_deref(),
                builder,
                problems,
            ) else {
                continue;
            };
            match crate::tactic::remote::exchange::info_now(&remote, &who) {
                Ok((info, call)) => {
                    contracts.push(call);
                    toolbox.insert(Arc::new(TacticTool::new(
                        tool,
                        &info,
                        Target::Remote(Arc::new(remote)),
                    )));
                }
                Err(problem) => {
                    problems.push(config.placed(&join_path(&at, "tactic"), problem));
                }
            }
            continue;
        }
        let path = std::path::Path::new(tactic);
        let canonical = super::nodes::canonical(path);
        if builder.stack.contains(&canonical) {
            problems.push(config.placed(
                &join_path(&at, "tactic"),
                format!("{who}: tactic `{tactic}` calls itself (a tactic tool cannot run its own tactic, at any depth)"),
            ));
            continue;
        }
        match load::load_config(path, |_| {}, builder, None) {
            Ok(built) => {
                let info = built.info();
                toolbox.insert(Arc::new(TacticTool::new(
                    tool,
                    &info,
                    Target::Local(Arc::new(built)),
                )));
            }
            Err(error) => {
                let place = config.placed(&join_path(&at, "tactic"), &who);
                for problem in error.problems {
                    problems.push(format!("{place}: {problem}"));
                }
            }
        }
    }
    (toolbox, contracts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_input_schema() {
        let (text, shape) = parameters(None);
        assert_eq!(shape, Shape::Text);
        assert_eq!(text["required"], json!(["task"]));
        let object = json!({"type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]});
        assert_eq!(parameters(Some(&object)), (object.clone(), Shape::Object));
        let (wrapped, shape) = parameters(Some(&json!({"type": "string"})));
        assert_eq!(shape, Shape::Wrapped);
        assert_eq!(wrapped["properties"]["input"], json!({"type": "string"}));
    }

    #[test]
    fn arguments_become_the_task_each_shape_needs() {
        let info = TacticInfo {
            name: "t".into(),
            description: String::new(),
            input_schema: None,
            output_schema: None,
            capabilities: Vec::new(),
            runtime_kind: "lllm".into(),
            package_ref: None,
            service_ref: None,
            examples: Vec::new(),
            metadata: Map::new(),
        };
        let config = ToolConfig {
            name: "ask".into(),
            description: String::new(),
            parameters: Value::Null,
            command: Vec::new(),
            timeout_s: 0.0,
            cwd: ".".into(),
            env: Default::default(),
            tactic: Some("http://h/tactics/t".into()),
            token_env: None,
        };
        let remote = RemoteTactic::new("http://h/tactics/t").map_err(|error| error.to_string());
        let Ok(remote) = remote else {
            panic!("{remote:?}")
        };
        let tool = TacticTool::new(&config, &info, Target::Remote(Arc::new(remote)));
        assert_eq!(tool.spec.description, "Runs the tactic `t`");
        let arguments = |value: Value| value.as_object().cloned().unwrap_or_default();
        let task = tool.task(&arguments(json!({"task": "sum this"})));
        assert_eq!(task.map(|task| task.input()), Ok(json!("sum this")));
        assert!(tool.task(&arguments(json!({}))).is_err());
    }
}
