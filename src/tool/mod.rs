//! Tools the model can call: the `Tool` trait, the `Toolbox` of a run, and the
//! text a result becomes in the dialog (D12).
//!
//! `command` runs external programs, `builtin` the tools we ship, `mcp` the
//! tools of MCP servers (`mcp_off` without the `mcp` feature: the same
//! types, none ever made); all plug in through the same trait. Which tools a turn
//! offers is the agent loop's business (D1), not the toolbox's.

mod builtin;
mod command;
mod function;
#[doc(hidden)]
pub mod macro_support;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(not(feature = "mcp"))]
#[path = "mcp_off.rs"]
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
/// `lllm::Registry::tool_impl`; a function needs no impl: mark it
/// `#[lllm::tool]` (any arguments, sync or async), or give an
/// `async fn(Args)` to `lllm::Registry::tool`.
pub trait Tool: Send + Sync {
    /// The name, description and parameter schema the model is offered.
    fn spec(&self) -> &ToolSpec;
    /// Runs the tool with the model's arguments (a JSON object).
    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// The most of one tool result the dialog receives, in bytes: what a
/// command tool's output is cut at (about 64k tokens). A tool's result past
/// it, whatever the tool (an MCP server's, a registered function's), is cut
/// with [`CUT_NOTE`]: a 5 MB MCP result went whole into the dialog, 1.25M
/// tokens (issue 26).
pub const MAX_RESULT_BYTES: usize = 256 * 1024;

/// What ends a result cut at [`MAX_RESULT_BYTES`], so the model knows.
pub const CUT_NOTE: &str = "\n[output cut at 256 KiB]";

/// Room past [`MAX_RESULT_BYTES`] for a note a tool that cut its own output
/// adds (`read_file` names the file's size): such a result is not cut again.
const NOTE_ROOM: usize = 1024;

/// `text` cut to [`MAX_RESULT_BYTES`] (on a character boundary) and ended
/// with [`CUT_NOTE`] when it is longer, or when `cut` says its reader
/// already left something out.
pub(crate) fn cut_result(mut text: String, cut: bool) -> String {
    let over = text.len() > MAX_RESULT_BYTES;
    if over {
        let mut end = MAX_RESULT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    if over || cut {
        text.push_str(CUT_NOTE);
    }
    text
}

/// A tool's result (or its error) as the dialog receives it: whole within
/// [`MAX_RESULT_BYTES`] and a tool's own note, else cut ([`cut_result`]).
pub(crate) fn bounded_result(text: String) -> String {
    if text.len() <= MAX_RESULT_BYTES + NOTE_ROOM {
        text
    } else {
        cut_result(text, false)
    }
}

/// Runs `tool`, telling a `tracing` subscriber at `debug` what it was given
/// and what came back (scrubbed of every secret the run knows, cut short),
/// and how long it took. The result, or the error, is what the dialog
/// receives: past [`MAX_RESULT_BYTES`] it is cut with [`CUT_NOTE`], whatever
/// the tool.
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
    let result = tool
        .call(arguments)
        .await
        .map(bounded_result)
        .map_err(bounded_result);
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
    fn results_past_the_cap_are_cut_with_a_note_once() {
        let within = "r".repeat(MAX_RESULT_BYTES);
        assert_eq!(bounded_result(within.clone()), within);
        // A tool's own note past the cap is kept as the tool wrote it.
        let noted = format!("{within}\n[cut: the file has 9000000 bytes]");
        assert_eq!(bounded_result(noted.clone()), noted);
        let cut = bounded_result("r".repeat(5_000_000));
        assert_eq!(cut, format!("{within}{CUT_NOTE}"));
        assert_eq!(bounded_result(cut.clone()), cut, "cut once");
        // On a character boundary: `é` is two bytes.
        let wide = bounded_result("é".repeat(MAX_RESULT_BYTES));
        assert!(wide.ends_with(CUT_NOTE));
        assert_eq!(wide.len(), MAX_RESULT_BYTES + CUT_NOTE.len());
        let odd = format!("x{}", "é".repeat(MAX_RESULT_BYTES));
        assert_eq!(
            bounded_result(odd).len(),
            MAX_RESULT_BYTES - 1 + CUT_NOTE.len()
        );
        assert_eq!(cut_result("short".into(), true), format!("short{CUT_NOTE}"));
    }

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
