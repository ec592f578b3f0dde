//! MCP servers over stdio (issue 4): a server is started with its `command`,
//! `args` and `env` (no shell), initialized, its tools listed (following
//! `nextCursor`), and each tool becomes an `McpTool` whose calls go to
//! `tools/call`. The protocol itself is the `rmcp` client's.
//!
//! A server runs in its own process group, so stopping it stops the children
//! it started too, and without lllm's credentials in its environment unless
//! its `env` passes them (`process.rs`).
//!
//! A failure to start is an error for the caller (`McpServers`, in
//! `mcp_servers.rs`, decides when servers start and stop); a failure after the
//! start — the server crashed, a call timed out, the tool said `isError` — is a
//! tool error the model sees, never an abort.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, Implementation, InitializeRequestParams,
    ProtocolVersion, ResourceContents,
};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

use super::Tool;
use super::process::{ProcessGroup, set_environment};
use crate::config::McpServerConfig;
use crate::dialog::sanitize_name;
use crate::provider::ToolSpec;

type Client = RunningService<RoleClient, InitializeRequestParams>;

/// rmcp's shutdown closes the server's stdin, waits 3 s, sends SIGTERM, waits
/// 3 s and kills; this bounds the whole of it.
pub(super) const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);
/// How long to wait for the rest of a dead server's stderr before quoting it.
const STDERR_DRAIN: Duration = Duration::from_millis(500);
/// The end of a server's stderr kept for error messages.
const STDERR_TAIL_BYTES: usize = 4096;
/// A quoted stderr line is cut here, so an error stays one readable line.
const STDERR_QUOTE_CHARS: usize = 300;

/// One running MCP server.
pub struct McpServer {
    pub(super) name: String,
    peer: Peer<RoleClient>,
    client: tokio::sync::Mutex<Option<Client>>,
    stderr: Arc<StderrTail>,
    pid: Option<u32>,
    /// The server's process group: what is left of it after `shutdown` (or
    /// when the server is dropped) is killed.
    group: ProcessGroup,
}

/// The end of a server's stderr. The server's log is not mixed into our output;
/// its last line explains a failed start or a crash.
#[derive(Default)]
struct StderrTail {
    text: Mutex<String>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl StderrTail {
    fn collect(self: &Arc<Self>, stderr: tokio::process::ChildStderr) {
        let tail = self.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = tail
                    .text
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                text.push_str(&line);
                text.push('\n');
                if text.len() > STDERR_TAIL_BYTES {
                    let mut cut = text.len() - STDERR_TAIL_BYTES;
                    while !text.is_char_boundary(cut) {
                        cut += 1;
                    }
                    text.drain(..cut);
                }
            }
        });
        *self
            .reader
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(reader);
    }

    /// ` (stderr: LAST LINE)` once the stream ended or a short wait passed; or nothing.
    async fn last_line(&self) -> String {
        let reader = self
            .reader
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
        let text = self
            .text
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match text
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| !line.is_empty())
        {
            Some(line) => {
                let mut quoted: String = line.chars().take(STDERR_QUOTE_CHARS).collect();
                if quoted.len() < line.len() {
                    quoted.push('…');
                }
                format!(" (stderr: {quoted})")
            }
            None => String::new(),
        }
    }
}

/// What we tell a server about ourselves. The newest protocol revision that
/// still has the `initialize` handshake; a server may answer with an older one.
fn client_info() -> InitializeRequestParams {
    let mut info = InitializeRequestParams::default();
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info.client_info = Implementation::new("lllm", env!("CARGO_PKG_VERSION"));
    info
}

impl McpServer {
    /// Starts the server of `config` and lists its tools. The error is one line
    /// naming the server and the reason; `env` values never appear in it.
    /// `hidden`: variables the server does not inherit besides the standard
    /// credentials (the tactic's `api_key_env` names), unless its `env` passes them.
    pub async fn start(
        config: &McpServerConfig,
        hidden: &[String],
    ) -> Result<(Arc<McpServer>, Vec<McpTool>), String> {
        let name = &config.name;
        let Some((program, command_args)) = config.command.split_first() else {
            return Err(format!("MCP server `{name}` has an empty `command`"));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(command_args)
            .args(&config.args)
            .current_dir(&config.cwd)
            // The last resort against orphans: a server still running when we
            // drop it is killed (the normal way out is `shutdown`).
            .kill_on_drop(true);
        set_environment(&mut command, &config.env, hidden);
        let mut command = process_wrap::tokio::CommandWrap::from(command);
        #[cfg(unix)]
        command.wrap(process_wrap::tokio::ProcessGroup::leader());
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| {
                format!(
                    "MCP server `{name}`: cannot start `{program}`: {}",
                    crate::fds::describe(&error)
                )
            })?;
        let pid = transport.id();
        let group = ProcessGroup::led_by(pid);
        let tail = Arc::new(StderrTail::default());
        if let Some(stderr) = stderr {
            tail.collect(stderr);
        }
        let timeout = crate::config::numbers::seconds(config.timeout_s);
        let client = match tokio::time::timeout(timeout, client_info().serve(transport)).await {
            Ok(Ok(client)) => client,
            // `group` is dropped on these ways out: the server and its
            // children are killed.
            Ok(Err(error)) => {
                return Err(format!(
                    "MCP server `{name}` did not start: {error}{}",
                    tail.last_line().await
                ));
            }
            Err(_) => {
                return Err(format!(
                    "MCP server `{name}` did not answer `initialize` within {:.1} s{}",
                    config.timeout_s,
                    tail.last_line().await
                ));
            }
        };
        let server = Arc::new(McpServer {
            name: name.clone(),
            peer: client.peer().clone(),
            client: tokio::sync::Mutex::new(Some(client)),
            stderr: tail,
            pid,
            group,
        });
        let listed = tokio::time::timeout(timeout, server.peer.list_all_tools()).await;
        let listed = match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(error)) => Err(format!(
                "MCP server `{name}`: listing its tools failed: {}",
                server.reason(error).await
            )),
            Err(_) => Err(format!(
                "MCP server `{name}` did not answer `tools/list` within {:.1} s",
                config.timeout_s
            )),
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                server.shutdown().await;
                return Err(error);
            }
        };
        let tools = listed
            .into_iter()
            .map(|tool| McpTool {
                spec: ToolSpec {
                    name: sanitize_name(&tool.name),
                    description: tool
                        .description
                        .map(|text| text.to_string())
                        .unwrap_or_default(),
                    parameters: Value::Object(tool.input_schema.as_ref().clone()),
                },
                remote: tool.name.to_string(),
                server: server.clone(),
                timeout,
            })
            .collect();
        Ok((server, tools))
    }

    /// The server's name in the tactic (`mcp_servers:` key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Ends the server: its stdin is closed, then (if it lingers) SIGTERM to
    /// its process group, then SIGKILL; what the server leaves running in its
    /// group is killed. Calls made afterwards are tool errors. Idempotent.
    pub async fn shutdown(&self) {
        let client = self.client.lock().await.take();
        if let Some(mut client) = client
            && client.close_with_timeout(SHUTDOWN_LIMIT).await.is_err()
        {
            crate::report::warn(&format!(
                "MCP server `{}` did not shut down cleanly",
                self.name
            ));
        }
        self.group.kill();
    }

    /// Why a request failed, in words for the model and the record. Only a
    /// dead connection quotes the server's stderr: a live server's log says
    /// nothing about one request.
    async fn reason(&self, error: rmcp::ServiceError) -> String {
        match error {
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => format!(
                "the server is not running (its connection closed){}",
                self.stderr.last_line().await
            ),
            rmcp::ServiceError::McpError(error) => error.message.into_owned(),
            other => other.to_string(),
        }
    }
}

/// One tool of an MCP server, called through `tools/call`. Models are offered
/// it under a name chat APIs accept (`spec.name`: characters outside
/// `[A-Za-z0-9_-]` become `_`, at most 64 of them); the server is called with
/// its own name.
pub struct McpTool {
    pub(super) spec: ToolSpec,
    /// The tool's name on its server.
    pub(super) remote: String,
    server: Arc<McpServer>,
    timeout: Duration,
}

impl McpTool {
    /// The name of the server the tool belongs to.
    pub fn server(&self) -> &str {
        &self.server.name
    }

    async fn run(&self, arguments: &Map<String, Value>) -> Result<String, String> {
        let params =
            CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments.clone());
        let result =
            match tokio::time::timeout(self.timeout, self.server.peer.call_tool(params)).await {
                Ok(Ok(result)) => result,
                Ok(Err(error)) => {
                    return Err(format!(
                        "MCP server `{}`: {}",
                        self.server.name,
                        self.server.reason(error).await
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "MCP server `{}`: `{}` timed out after {:.1} s",
                        self.server.name,
                        self.remote,
                        self.timeout.as_secs_f64()
                    ));
                }
            };
        // Cut like a command tool's output (the whole reply is in memory
        // already: rmcp reads a message whole).
        let text = super::bounded_result(result_text(&result));
        if result.is_error == Some(true) {
            Err(text)
        } else {
            Ok(text)
        }
    }
}

/// A tool result as text: text blocks joined by newlines, other blocks named;
/// structured content when there is nothing else.
fn result_text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image: {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio: {}]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[resource: {uri}]")
                }
                #[allow(unreachable_patterns)]
                _ => "[resource]".to_string(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
            #[allow(unreachable_patterns)]
            _ => "[content]".to_string(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        return structured.to_string();
    }
    parts.join("\n")
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.run(arguments))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::tool::McpServers;
    use crate::tool::process::tests::assert_ends;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    /// The test server `tests/fixtures/mcp_server.py` as `calc`.
    pub(in crate::tool) fn config(options: &[&str], timeout_s: f64) -> McpServerConfig {
        let fixture =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py");
        McpServerConfig {
            name: "calc".into(),
            command: vec!["python3".into(), fixture.display().to_string()],
            args: options.iter().map(|option| option.to_string()).collect(),
            env: BTreeMap::from([("GREETING".to_string(), "Ahoy".to_string())]),
            cwd: std::env::temp_dir(),
            timeout_s,
        }
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[track_caller]
    pub(in crate::tool) fn assert_gone(pid: Option<u32>) {
        let pid = pid.expect("a pid");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still there"
        );
    }

    #[test]
    fn results_become_text() {
        #[track_caller]
        fn case(result: Value, expected: &str) {
            let result: CallToolResult = serde_json::from_value(result).unwrap();
            assert_eq!(result_text(&result), expected);
        }
        case(json!({"content": [{"type": "text", "text": "5"}]}), "5");
        case(
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            "a\nb",
        );
        case(
            json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
            "[image: image/png]",
        );
        case(
            json!({"content": [{"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}}]}),
            "inside",
        );
        case(
            json!({"content": [], "structuredContent": {"sum": 5}}),
            "{\"sum\":5}",
        );
        case(json!({"content": []}), "");
    }

    #[tokio::test]
    async fn a_server_starts_answers_and_shuts_down() {
        let servers = McpServers::new(vec![config(&[], 60.0)], Vec::new());
        assert!(
            servers.tools_of("calc").is_empty(),
            "nothing before the start"
        );
        servers.start().await.unwrap();
        let names: Vec<&str> = servers
            .tools_of("calc")
            .iter()
            .map(|tool| tool.spec().name.as_str())
            .collect();
        assert_eq!(
            names,
            ["add", "shout", "greet", "fail", "crash", "text_reverse"],
            "both pages; a name chat APIs refuse is offered in a form they take"
        );
        // Called under the server's own name, `text.reverse`.
        let reverse = servers.tool("text_reverse").unwrap();
        assert_eq!(
            reverse.call(&args(json!({"text": "abc"}))).await,
            Ok("cba".into())
        );
        let add = servers.tool("add").unwrap();
        assert_eq!(
            add.call(&args(json!({"a": 2, "b": 40}))).await,
            Ok("42".into())
        );
        let greet = servers.tool("greet").unwrap();
        assert_eq!(
            greet.call(&args(json!({"name": "Bo"}))).await,
            Ok("Ahoy, Bo".into())
        );
        let fail = servers.tool("fail").unwrap();
        assert_eq!(
            fail.call(&Map::new()).await,
            Err("the disk is on fire".into())
        );
        let pid = servers.servers()[0].pid();
        servers.shutdown().await;
        assert_gone(pid);
        let error = add.call(&args(json!({"a": 1, "b": 1}))).await.unwrap_err();
        assert!(
            error.starts_with("MCP server `calc`: the server is not running"),
            "{error}"
        );
        servers.shutdown().await; // idempotent
    }

    #[tokio::test]
    async fn a_server_that_ignores_eof_is_terminated() {
        let servers = McpServers::new(vec![config(&["--ignore-eof"], 60.0)], Vec::new());
        servers.start().await.unwrap();
        let pid = servers.servers()[0].pid();
        let started = std::time::Instant::now();
        servers.shutdown().await;
        assert_gone(pid);
        // Bounded (about 3 s: stdin closed, then SIGTERM), never a hang; the
        // bound is generous so that a busy machine does not fail it.
        assert!(started.elapsed() < Duration::from_secs(60));
    }

    /// The pid the test server's child wrote to `path` (there once the server
    /// answered `initialize`: it is written first).
    fn child_pid(path: &std::path::Path) -> u32 {
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[tokio::test]
    async fn stopping_a_server_stops_the_children_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child");
        let option = pid_file.display().to_string();
        let servers = McpServers::new(
            vec![config(&["--child-pid-file", &option], 60.0)],
            Vec::new(),
        );
        servers.start().await.unwrap();
        let child = child_pid(&pid_file);
        servers.shutdown().await;
        assert_ends(child, "987655").await;

        // A server dropped without `shutdown` (an early return, a panic)
        // takes its children along too.
        std::fs::remove_file(&pid_file).unwrap();
        let servers = McpServers::new(
            vec![config(&["--child-pid-file", &option], 60.0)],
            Vec::new(),
        );
        servers.start().await.unwrap();
        let child = child_pid(&pid_file);
        let server = servers.servers()[0].pid();
        drop(servers);
        assert_ends(child, "987655").await;
        assert_ends(server.unwrap(), "mcp_server.py").await;
    }

    #[tokio::test]
    async fn a_slow_call_times_out_as_a_tool_error() {
        // The server starts with a generous limit (a busy machine may take
        // seconds to start Python); the call under test never gets an answer
        // (the server sleeps for an hour), so it times out however fast the
        // machine is, and its limit only sets how long the test takes.
        let servers = McpServers::new(vec![config(&["--slow-calls", "3600"], 60.0)], Vec::new());
        servers.start().await.unwrap();
        let server = servers.servers()[0].clone();
        let add = McpTool {
            spec: ToolSpec {
                name: "add".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            },
            remote: "add".into(),
            server: server.clone(),
            timeout: Duration::from_millis(300),
        };
        let error = add.call(&args(json!({"a": 1, "b": 2}))).await.unwrap_err();
        assert_eq!(error, "MCP server `calc`: `add` timed out after 0.3 s");
        let pid = server.pid();
        servers.shutdown().await;
        assert_gone(pid);
    }
}
