//! Command tools: an external program per call, JSON arguments on stdin, the
//! result on stdout. No shell is involved; a non-zero exit, a timeout or a
//! program that cannot start is a tool error the model sees.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::Tool;
use crate::provider::ToolSpec;

/// Output past this many bytes is cut, so a chatty program cannot flood a dialog.
const MAX_OUTPUT_BYTES: usize = 256 * 1024;

pub struct CommandTool {
    spec: ToolSpec,
    command: Vec<String>,
    timeout: Duration,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
}

impl CommandTool {
    /// `command` must be non-empty (the config layer checks it).
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
        }
    }

    async fn run(&self, arguments: &Map<String, Value>) -> Result<String, String> {
        let Some((program, args)) = self.command.split_first() else {
            return Err("the tool has an empty `command`".into());
        };
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&self.cwd)
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot start `{program}`: {error}"))?;
        let input = Value::Object(arguments.clone()).to_string();
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let work = async {
            // Feed stdin and drain both pipes together: a program that writes
            // much before reading all its input must not deadlock us.
            let feed = async {
                if let Some(mut stdin) = stdin.take() {
                    // A program that exits without reading its input is fine.
                    let _ = stdin.write_all(input.as_bytes()).await;
                }
            };
            let (_, out, err) =
                tokio::join!(feed, read_capped(stdout.take()), read_capped(stderr.take()));
            let status = child
                .wait()
                .await
                .map_err(|error| format!("waiting for `{program}`: {error}"))?;
            Ok::<_, String>((status, out, err))
        };
        let (status, out, err) = match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(format!(
                    "`{program}` timed out after {:.1} s",
                    self.timeout.as_secs_f64()
                ));
            }
        };
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

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(reader: Option<R>) -> String {
    let Some(mut reader) = reader else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    let mut cut = false;
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..read.min(room)]);
                cut |= read > room;
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if cut {
        text.push_str("\n[output cut at 256 KiB]");
    }
    text
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
}
