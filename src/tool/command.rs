//! Command tools: an external program per call, JSON arguments on stdin, the
//! result on stdout. No shell is involved; a non-zero exit, a timeout or a
//! program that cannot start is a tool error the model sees.
//!
//! The program runs in its own process group (issue 12), without lllm's
//! credentials in its environment (`process.rs`). Its group ends with the
//! call: on a timeout (SIGTERM, then SIGKILL), when the call is dropped
//! (Ctrl-C, `--fail-fast`: SIGKILL at once), and when the program exits
//! (SIGKILL for whatever it left running). Its result is what it wrote before
//! it exited: a leftover that holds stdout open cannot keep the call waiting.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::Tool;
use super::process::{ProcessGroup, Signal, set_environment};
use crate::provider::ToolSpec;

/// Output past this many bytes is cut, so a chatty program cannot flood a
/// dialog: the cap of every tool's result, applied as the output is read.
const MAX_OUTPUT_BYTES: usize = super::MAX_RESULT_BYTES;
/// After a timeout's SIGTERM, how long the program has to exit before its
/// group is killed.
const TERMINATE_GRACE: Duration = Duration::from_secs(2);
/// After the program exited and its leftovers were killed, how long to wait
/// for the pipes to close. Only a process that left the group (`setsid`) can
/// hold them that long; the call then returns what was read.
const PIPE_CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// A tool that runs an external program per call (a tactic's `tools:` entry
/// with a `command`): arguments as JSON on stdin, the result from stdout.
pub struct CommandTool {
    spec: ToolSpec,
    command: Vec<String>,
    timeout: Duration,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    /// Variables the program does not inherit besides the standard
    /// credentials (the tactic's `api_key_env` names).
    hidden: Vec<String>,
}

impl CommandTool {
    /// `command` must be non-empty (the config layer checks it). `env` is
    /// added to lllm's environment, which the program inherits without the
    /// credentials lllm reads (every `*_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, a
    /// base URL with a password) unless `env` passes them; a value written
    /// `${NAME}` is NAME's value in lllm's environment.
    pub fn new(
        spec: ToolSpec,
        command: Vec<String>,
        timeout: Duration,
        cwd: PathBuf,
        env: BTreeMap<String, String>,
    ) -> CommandTool {
        CommandTool {
            spec,
            command,
            timeout,
            cwd,
            env,
            hidden: Vec::new(),
        }
    }

    /// Also keeps these variables (the tactic's `api_key_env` names) from the
    /// program, unless its `env` passes them.
    pub fn hide_variables(mut self, names: impl IntoIterator<Item = String>) -> CommandTool {
        self.hidden.extend(names);
        self
    }

    async fn run(&self, arguments: &Map<String, Value>) -> Result<String, String> {
        let Some((program, args)) = self.command.split_first() else {
            return Err("the tool has an empty `command`".into());
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        set_environment(&mut command, &self.env, &self.hidden);
        let mut child = command.spawn().map_err(|error| {
            format!("cannot start `{program}`: {}", crate::fds::describe(&error))
        })?;
        // Killed as a whole when this call ends, however it ends.
        let group = ProcessGroup::led_by(child.id());
        let input = Value::Object(arguments.clone()).to_string();
        // Stdin is fed and both pipes drained by tasks of their own: a program
        // that writes much before reading all its input must not deadlock us,
        // and a leftover holding a pipe must not hold the call. The tasks end
        // when the group does (the pipes close); dropping the call aborts them.
        let stdin = child.stdin.take();
        let feed = AbortOnDrop(tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A program that exits without reading its input is fine.
                let _ = stdin.write_all(input.as_bytes()).await;
            }
        }));
        let out = Captured::default();
        let err = Captured::default();
        let mut readers = AbortOnDrop(tokio::spawn({
            let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
            let (out, err) = (out.clone(), err.clone());
            async move {
                tokio::join!(out.read_from(stdout), err.read_from(stderr));
            }
        }));
        let status = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(status) => status.map_err(|error| format!("waiting for `{program}`: {error}"))?,
            Err(_) => {
                group.signal(Signal::SIGTERM);
                let _ = tokio::time::timeout(TERMINATE_GRACE, child.wait()).await;
                group.kill();
                return Err(format!(
                    "`{program}` timed out after {:.1} s",
                    self.timeout.as_secs_f64()
                ));
            }
        };
        drop(feed);
        // The program is done; what it wrote is in the pipes. Whatever it left
        // running is not part of the result.
        group.kill();
        let _ = tokio::time::timeout(PIPE_CLOSE_LIMIT, &mut readers.0).await;
        let (out, err) = (out.text(), err.text());
        if status.success() {
            Ok(out.trim_end().to_string())
        } else {
            let detail = err.trim();
            let code = status
                .code()
                .map_or("a signal".to_string(), |code| code.to_string());
            if detail.is_empty() {
                Err(format!("`{program}` exited with status {code}"))
            } else {
                Err(format!("`{program}` exited with status {code}: {detail}"))
            }
        }
    }
}

/// A spawned task that is cancelled when the call holding it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a program wrote on one pipe, up to `MAX_OUTPUT_BYTES`, readable while
/// the reader still runs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<(Vec<u8>, bool)>>);

impl Captured {
    async fn read_from<R: tokio::io::AsyncRead + Unpin>(self, reader: Option<R>) {
        let Some(mut reader) = reader else { return };
        let mut buffer = [0u8; 8192];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    let mut kept = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
                    let (bytes, cut) = &mut *kept;
                    let room = MAX_OUTPUT_BYTES.saturating_sub(bytes.len());
                    bytes.extend_from_slice(&buffer[..read.min(room)]);
                    *cut |= read > room;
                }
            }
        }
    }

    fn text(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        let (bytes, cut) = &*kept;
        super::cut_result(String::from_utf8_lossy(bytes).into_owned(), *cut)
    }
}

impl Tool for CommandTool {
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
mod tests {
    use super::*;
    use crate::tool::process::tests::assert_ends;
    use serde_json::json;

    fn tool(script: &str, timeout_ms: u64) -> CommandTool {
        let spec = ToolSpec {
            name: "t".into(),
            description: "test".into(),
            parameters: json!({"type": "object"}),
        };
        CommandTool::new(
            spec,
            vec!["sh".into(), "-c".into(), script.into()],
            Duration::from_millis(timeout_ms),
            std::env::temp_dir(),
            BTreeMap::from([("GREETING".to_string(), "hi".to_string())]),
        )
    }

    fn arguments() -> Map<String, Value> {
        json!({"text": "a b c"})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn arguments_arrive_on_stdin_and_stdout_is_the_result() {
        let result = tool("cat; echo; echo $GREETING", 5000)
            .call(&arguments())
            .await;
        assert_eq!(result, Ok("{\"text\":\"a b c\"}\nhi".to_string()));
    }

    #[tokio::test]
    async fn failures_are_errors_the_model_sees() {
        let error = tool("echo broken >&2; exit 3", 5000)
            .call(&arguments())
            .await
            .unwrap_err();
        assert_eq!(error, "`sh` exited with status 3: broken");
        let error = tool("sleep 5", 100).call(&arguments()).await.unwrap_err();
        assert!(error.contains("timed out after 0.1 s"), "{error}");
        let mut missing = tool("", 100);
        missing.command = vec!["/nonexistent/program".into()];
        let error = missing.call(&arguments()).await.unwrap_err();
        assert!(
            error.starts_with("cannot start `/nonexistent/program`"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn huge_output_is_cut() {
        let result = tool("head -c 400000 /dev/zero | tr '\\0' x", 5000)
            .call(&arguments())
            .await
            .unwrap();
        assert!(result.len() < 300_000 && result.ends_with("[output cut at 256 KiB]"));
    }

    /// The pid a tool's script wrote to `path`, once it is there.
    async fn pid_in(path: &std::path::Path) -> u32 {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            assert!(std::time::Instant::now() < deadline, "no pid in {path:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_finished_tool_returns_although_a_grandchild_holds_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The background `sleep` inherits stdout and would keep it open for
        // days; the tool itself is done at once. The limit is generous: the
        // call must end because the program did, not because time ran out.
        let script = format!(
            "sleep 987651 & echo $! > '{}.tmp' && mv '{0}.tmp' '{0}'; echo done",
            pid_file.display()
        );
        let result = tool(&script, 120_000).call(&arguments()).await;
        assert_eq!(result, Ok("done".to_string()));
        assert_ends(pid_in(&pid_file).await, "987651").await;
    }

    #[tokio::test]
    async fn a_timeout_ends_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The grandchild ignores SIGTERM, so only the SIGKILL that follows
        // ends it. The limit leaves the shell ample time to start it.
        let script = format!(
            "sh -c 'trap \"\" TERM; exec sleep 987652' & echo $! > '{}.tmp' && mv '{0}.tmp' '{0}'; wait",
            pid_file.display()
        );
        let error = tool(&script, 15_000).call(&arguments()).await.unwrap_err();
        assert_eq!(error, "`sh` timed out after 15.0 s");
        assert_ends(pid_in(&pid_file).await, "987652").await;
    }

    #[tokio::test]
    async fn a_cancelled_call_ends_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "sleep 987653 & echo \"$$ $!\" > '{}.tmp' && mv '{0}.tmp' '{0}'; wait",
            pid_file.display()
        );
        let call = tokio::spawn(async move { tool(&script, 3_600_000).call(&arguments()).await });
        // Ctrl-C and `--fail-fast` drop the call the same way.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let pids = loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file) {
                break text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the tool did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        call.abort();
        let _ = call.await;
        let (shell, sleeper) = pids.trim().split_once(' ').unwrap();
        assert_ends(shell.parse().unwrap(), "sh").await;
        assert_ends(sleeper.parse().unwrap(), "987653").await;
    }
}
