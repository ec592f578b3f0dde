//! Tools the model can call: the `Tool` trait, the `Toolbox` of a run, and the
//! text a result becomes in the dialog (D12).
//!
//! `command` runs external programs, `builtin` the tools we ship, `mcp` the
//! tools of MCP servers; all plug in through the same trait. Which tools a turn
//! offers is the agent loop's business (D1), not the toolbox's.

mod builtin;
mod command;
mod function;
mod mcp;
mod mcp_servers;
mod process;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::provider::ToolSpec;

pub use builtin::BuiltinTool;
pub use command::CommandTool;
pub use function::{FunctionTool, ToolFunction};
pub use mcp::{McpServer, McpTool};
pub use mcp_servers::McpServers;

/// A callable tool. `Ok` is the result text the model sees; `Err` is an error
/// message the model sees (a failed tool is an outcome, not an abort).
///
/// Implement it for a stateful tool and register it with
/// `lllm::Registry::tool_impl`; a plain async function needs no impl
/// (`lllm::Registry::tool`).
pub trait Tool: Send + Sync {
    /// The name, description and parameter schema the model is offered.
    fn spec(&self) -> &ToolSpec;
    /// Runs the tool with the model's arguments (a JSON object).
    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// Runs `tool`, telling a `tracing` subscriber at `debug` what it was given
/// and what came back (scrubbed of every secret the run knows, cut short),
/// and how long it took.
pub async fn traced_call(
    tool: &dyn Tool,
    arguments: &Map<String, Value>,
) -> Result<String, String> {
    use crate::provider::trace;
    let name = &tool.spec().name;
    let enabled = tracing::enabled!(tracing::Level::DEBUG);
    if enabled {
        let arguments = Value::Object(arguments.clone()).to_string();
        let none = crate::redact::Secrets::new();
        tracing::debug!(
            "tool `{name}` runs with {}",
            trace::shown(&arguments, &none, trace::BODY_BYTES)
        );
    }
    let started = std::time::Instant::now();
    let result = tool.call(arguments).await;
    if enabled {
        let none = crate::redact::Secrets::new();
        let milliseconds = started.elapsed().as_millis();
        match &result {
            Ok(text) => tracing::debug!(
                "tool `{name}` returned in {milliseconds} ms: {}",
                trace::shown(text, &none, trace::BODY_BYTES)
            ),
            Err(error) => tracing::debug!(
                "tool `{name}` failed in {milliseconds} ms: {}",
                trace::shown(error, &none, trace::BODY_BYTES)
            ),
        }
    }
    result
}

/// Every tool a run can offer, by name, in declaration order.
#[derive(Default, Clone)]
pub struct Toolbox {
    tools: IndexMap<String, Arc<dyn Tool>>,
}

impl Toolbox {
    /// Adds `tool` under its spec's name (replacing one of that name).
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name.clone(), tool);
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Whether a tool is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The names, in the order the tools were added.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

/// The tool-result text the model reads (D12: JSON arguments, not a Python repr).
pub fn result_text(name: &str, arguments: &Map<String, Value>, result: &str) -> String {
    let arguments = Value::Object(arguments.clone());
    format!("Return of calling function {name} with arguments {arguments}:\n---\n{result}\n---\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn result_text_shows_json_arguments() {
        let arguments = json!({"text": "a b"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            result_text("word_count", &arguments, "2"),
            "Return of calling function word_count with arguments {\"text\":\"a b\"}:\n---\n2\n---\n"
        );
    }
}
