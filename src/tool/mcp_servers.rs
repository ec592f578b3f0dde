//! The MCP servers of a run (issue 4): every server under `mcp_servers:`
//! started once, concurrently, before the first request; their tools looked up
//! by server (what an agent is offered) and by name (what a call runs); all of
//! them ended by `shutdown`. Talking to one server is `mcp.rs`' business.

use std::collections::HashMap;
use std::sync::Arc;

use super::Tool;
use super::mcp::{McpServer, McpTool};
use crate::config::McpServerConfig;

/// The MCP servers of a run. `start` starts them all (once; later calls get
/// the first outcome), `shutdown` ends them. Before the start no server has
/// tools.
#[derive(Default)]
pub struct McpServers {
    configs: Vec<McpServerConfig>,
    /// Names of the run's other tools (`tools:`, `builtin_tools:`), with where
    /// they come from, for the name-clash check.
    other_tools: Vec<(String, &'static str)>,
    /// Variables the servers do not inherit besides the standard credentials.
    hidden: Vec<String>,
    started: tokio::sync::OnceCell<Result<Started, Vec<String>>>,
}

#[derive(Default)]
struct Started {
    servers: Vec<Arc<McpServer>>,
    /// Tools by server name, in listing order.
    by_server: HashMap<String, Vec<Arc<McpTool>>>,
    by_name: HashMap<String, Arc<dyn Tool>>,
}

impl McpServers {
    /// `other_tools`: the names of the run's other tools and where each is declared.
    pub fn new(configs: Vec<McpServerConfig>, other_tools: Vec<(String, &'static str)>) -> Self {
        McpServers {
            configs,
            other_tools,
            hidden: Vec::new(),
            started: tokio::sync::OnceCell::new(),
        }
    }

    /// Also keeps these variables (the tactic's `api_key_env` names) from the
    /// servers, unless a server's `env` passes them.
    pub fn hide_variables(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.hidden.extend(names);
        self
    }

    /// Starts every server and lists its tools; the servers start concurrently.
    /// Problems (one line each): a server that does not start or list, and a
    /// tool name two sources share. After a problem nothing is left running.
    pub async fn start(&self) -> Result<(), Vec<String>> {
        let started = self.started.get_or_init(|| self.start_all()).await;
        match started {
            Ok(_) => Ok(()),
            Err(problems) => Err(problems.clone()),
        }
    }

    async fn start_all(&self) -> Result<Started, Vec<String>> {
        let outcomes = futures_util::future::join_all(
            self.configs
                .iter()
                .map(|config| McpServer::start(config, &self.hidden)),
        )
        .await;
        let mut started = Started::default();
        let mut problems = Vec::new();
        let mut owners: HashMap<String, String> = self
            .other_tools
            .iter()
            .map(|(name, source)| (name.clone(), format!("tool `{name}` of `{source}`")))
            .collect();
        for outcome in outcomes {
            let (server, tools) = match outcome {
                Ok(started) => started,
                Err(problem) => {
                    problems.push(problem);
                    continue;
                }
            };
            for tool in &tools {
                let name = &tool.spec.name;
                // A name the server spells otherwise is shown both ways.
                let ours = if tool.remote == *name {
                    format!("tool `{name}` of MCP server `{}`", server.name)
                } else {
                    format!(
                        "tool `{}` of MCP server `{}` (offered as `{name}`)",
                        tool.remote, server.name
                    )
                };
                match owners.get(name) {
                    Some(other) => problems.push(format!(
                        "{ours} clashes with {other}; a tool name must be unique in a tactic"
                    )),
                    None => {
                        owners.insert(name.clone(), ours);
                    }
                }
            }
            let tools: Vec<Arc<McpTool>> = tools.into_iter().map(Arc::new).collect();
            for tool in &tools {
                started
                    .by_name
                    .entry(tool.spec.name.clone())
                    .or_insert_with(|| tool.clone() as Arc<dyn Tool>);
            }
            started.by_server.insert(server.name.clone(), tools);
            started.servers.push(server);
        }
        if problems.is_empty() {
            Ok(started)
        } else {
            for server in &started.servers {
                server.shutdown().await;
            }
            Err(problems)
        }
    }

    fn started(&self) -> Option<&Started> {
        self.started.get().and_then(|started| started.as_ref().ok())
    }

    /// The tools of server `name` (none before the start).
    pub fn tools_of(&self, name: &str) -> &[Arc<McpTool>] {
        self.started()
            .and_then(|started| started.by_server.get(name))
            .map_or(&[], Vec::as_slice)
    }

    /// The MCP tool called `name`, whichever server has it.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.started().and_then(|started| started.by_name.get(name))
    }

    /// The running servers (none before the start).
    pub fn servers(&self) -> &[Arc<McpServer>] {
        self.started()
            .map_or(&[], |started| started.servers.as_slice())
    }

    /// Ends every server (concurrently); their tools answer with errors afterwards.
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers().iter().map(|server| server.shutdown())).await;
    }
}

#[cfg(all(test, feature = "mcp"))]
mod tests {
    use super::*;
    use crate::tool::mcp::tests::{assert_gone, config};

    #[tokio::test]
    async fn clashing_names_and_failed_starts_leave_nothing_running() {
        let mut broken = config(&[], 60.0);
        broken.name = "broken".into();
        broken.command = vec!["/nonexistent/mcp-server".into()];
        let dir = tempfile::tempdir().unwrap();
        let mut calc = config(&["--pid-file", "pid.txt"], 60.0);
        calc.cwd = dir.path().to_path_buf();
        let others = vec![
            ("shout".into(), "tools:"),
            ("text_reverse".into(), "builtin_tools:"),
        ];
        let servers = McpServers::new(vec![calc, broken], others);
        let problems = servers.start().await.unwrap_err();
        assert_eq!(
            problems,
            [
                "tool `shout` of MCP server `calc` clashes with tool `shout` of `tools:`; \
                 a tool name must be unique in a tactic",
                "tool `text.reverse` of MCP server `calc` (offered as `text_reverse`) clashes \
                 with tool `text_reverse` of `builtin_tools:`; a tool name must be unique in a tactic",
                "MCP server `broken`: cannot start `/nonexistent/mcp-server`: \
                 No such file or directory (os error 2)",
            ]
        );
        assert_eq!(
            servers.start().await.unwrap_err(),
            problems,
            "the first outcome stays"
        );
        assert!(servers.tool("add").is_none());
        let pid = std::fs::read_to_string(dir.path().join("pid.txt")).unwrap();
        assert_gone(pid.trim().parse().ok());
    }
}
