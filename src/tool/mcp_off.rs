//! The MCP types in a build without the `mcp` feature: they exist, so the
//! toolbox and the agent loop read the same either way, but nothing can make
//! one (each holds an [`Infallible`]). Loading a tactic refuses
//! `mcp_servers:` with an error naming the feature (`config`), and
//! [`McpServer::start`] refuses a server the same way, for a config built
//! in code.

use std::convert::Infallible;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::Tool;
use crate::config::McpServerConfig;
use crate::provider::ToolSpec;

/// One running MCP server: never, in a build without the `mcp` feature.
pub struct McpServer {
    pub(super) name: String,
    never: Infallible,
}

impl McpServer {
    /// Refuses to start the server of `config`: this build has no MCP
    /// client. The error is one line naming the server and the feature.
    pub async fn start(
        config: &McpServerConfig,
        _hidden: &[String],
    ) -> Result<(Arc<McpServer>, Vec<McpTool>), String> {
        Err(crate::features::missing(
            &format!("MCP server `{}`", config.name),
            "mcp",
        ))
    }

    /// The server's name in the tactic (`mcp_servers:` key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        match self.never {}
    }

    /// Ends the server.
    pub async fn shutdown(&self) {
        match self.never {}
    }
}

/// One tool of an MCP server: never, in a build without the `mcp` feature.
pub struct McpTool {
    pub(super) spec: ToolSpec,
    /// The tool's name on its server.
    pub(super) remote: String,
    never: Infallible,
}

impl McpTool {
    /// The name of the server the tool belongs to.
    pub fn server(&self) -> &str {
        match self.never {}
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        _arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>> {
        match self.never {}
    }
}
