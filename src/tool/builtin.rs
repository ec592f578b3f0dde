//! Built-in tools users enable in YAML without writing code: `read_file` and
//! `list_dir` (confined to one directory) and `current_time`. Each is off
//! unless a tactic lists it under `builtin_tools:`.
//!
//! Every call is bounded (issue 12): `read_file` reads regular files only (a
//! named pipe or a device is a tool error, never a wait), at most
//! `MAX_READ_BYTES` of them; `list_dir` shows at most `MAX_LISTED` entries;
//! and any call taking longer than `CALL_TIMEOUT` (a hung network file
//! system) is a tool error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::Tool;
use crate::provider::ToolSpec;

/// Files past this size are cut (with a note saying so), so one read cannot
/// flood a dialog; the model still sees the beginning.
const MAX_READ_BYTES: u64 = 256 * 1024;
/// A directory listing shows at most this many entries (sorted), then a note.
const MAX_LISTED: usize = 1000;
/// A listing reads at most this many entries; a directory with more is named
/// as such rather than read to its end.
const MAX_SCANNED: usize = 100_000;
/// The longest a built-in call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub const NAMES: &[&str] = &["read_file", "list_dir", "current_time"];

enum Kind {
    ReadFile,
    ListDir,
    CurrentTime,
}

/// One built-in tool (`read_file`, `list_dir` or `current_time`), as a
/// tactic's `builtin_tools:` enables it.
pub struct BuiltinTool {
    spec: ToolSpec,
    kind: Kind,
    /// The directory `read_file` / `list_dir` may see (canonical).
    root: PathBuf,
}

impl BuiltinTool {
    /// `name` is one of `NAMES`; `root` is required for the file tools.
    pub fn new(name: &str, root: Option<&Path>) -> Result<BuiltinTool, String> {
        let root_of = |root: Option<&Path>| -> Result<PathBuf, String> {
            let root = root.ok_or_else(|| {
                format!("built-in tool `{name}` needs `root:` (the directory it may read)")
            })?;
            std::fs::canonicalize(root).map_err(|error| {
                format!(
                    "built-in tool `{name}`: `root` `{}`: {error}",
                    root.display()
                )
            })
        };
        let (kind, root, description, parameters) = match name {
            "read_file" => (
                Kind::ReadFile,
                root_of(root)?,
                "Read a text file. `path` is relative to the allowed directory.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            ),
            "list_dir" => (
                Kind::ListDir,
                root_of(root)?,
                "List a directory. `path` is relative to the allowed directory (default: its top).",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            ),
            "current_time" => (
                Kind::CurrentTime,
                PathBuf::new(),
                "The current date and time (UTC, RFC 3339).",
                json!({"type": "object", "properties": {}}),
            ),
            other => {
                return Err(format!(
                    "unknown built-in tool `{other}`{} (built-ins: {})",
                    crate::suggest::hint(other, NAMES.iter().copied()),
                    NAMES.join(", ")
                ));
            }
        };
        let spec = ToolSpec {
            name: name.to_string(),
            description: description.to_string(),
            parameters,
        };
        Ok(BuiltinTool { spec, kind, root })
    }

    /// `path` inside the root, or an error; `..` and symlinks cannot lead out.
    fn confined(&self, arguments: &Map<String, Value>) -> Result<PathBuf, String> {
        let relative = arguments.get("path").and_then(Value::as_str).unwrap_or(".");
        let joined = self.root.join(relative.trim_start_matches('/'));
        let resolved =
            std::fs::canonicalize(&joined).map_err(|error| format!("`{relative}`: {error}"))?;
        if !resolved.starts_with(&self.root) {
            return Err(format!("`{relative}` is outside the allowed directory"));
        }
        Ok(resolved)
    }

    async fn run(&self, arguments: &Map<String, Value>) -> Result<String, String> {
        let work = match self.kind {
            Kind::CurrentTime => {
                return Ok(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            }
            Kind::ReadFile => {
                let (path, relative) = (self.confined(arguments)?, relative(arguments));
                tokio::task::spawn_blocking(move || read_file(&path, &relative))
            }
            Kind::ListDir => {
                let path = self.confined(arguments)?;
                tokio::task::spawn_blocking(move || list_dir(&path))
            }
        };
        // The blocking read goes on in its thread after a timeout; the call
        // does not wait for it.
        match tokio::time::timeout(CALL_TIMEOUT, work).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(format!("`{}` failed: {error}", self.spec.name)),
            Err(_) => Err(format!(
                "`{}` timed out after {} s",
                self.spec.name,
                CALL_TIMEOUT.as_secs()
            )),
        }
    }
}

/// The `path` argument as the model wrote it, for messages.
fn relative(arguments: &Map<String, Value>) -> String {
    arguments
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or(".")
        .to_string()
}

/// The file's text (lossy UTF-8), cut at `MAX_READ_BYTES` with a note.
fn read_file(path: &Path, relative: &str) -> Result<String, String> {
    let (bytes, size) = crate::file::read_regular(path, MAX_READ_BYTES)
        .map_err(|error| format!("`{relative}`: {error}"))?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if size > MAX_READ_BYTES {
        text.push_str(&format!(
            "\n[cut: the file has {size} bytes; shown: the first {MAX_READ_BYTES}]"
        ));
    }
    Ok(text)
}

/// The directory's entries, sorted, directories marked with `/`; at most
/// `MAX_LISTED`, then a note.
fn list_dir(path: &Path) -> Result<String, String> {
    let entries = std::fs::read_dir(path).map_err(|error| error.to_string())?;
    let mut names = Vec::new();
    let mut complete = true;
    for entry in entries {
        if names.len() == MAX_SCANNED {
            complete = false;
            break;
        }
        let entry = entry.map_err(|error| error.to_string())?;
        let mut name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    let total = names.len();
    names.truncate(MAX_LISTED);
    let mut text = names.join("\n");
    if total > MAX_LISTED || !complete {
        let more = if complete {
            format!("{} more", total - MAX_LISTED)
        } else {
            format!("more than {} more", MAX_SCANNED - MAX_LISTED)
        };
        text.push_str(&format!(
            "\n[cut: {more} entries not shown; list a subdirectory]"
        ));
    }
    Ok(text)
}

impl Tool for BuiltinTool {
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

    fn args(path: &str) -> Map<String, Value> {
        json!({"path": path})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn file_tools_stay_inside_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.txt"), "hello").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "no").unwrap();
        let read = BuiltinTool::new("read_file", Some(&root)).unwrap();
        assert_eq!(read.call(&args("a.txt")).await, Ok("hello".into()));
        assert!(
            read.call(&args("../secret.txt"))
                .await
                .unwrap_err()
                .contains("outside the allowed directory")
        );
        assert!(read.call(&args("missing.txt")).await.is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link")).unwrap();
            assert!(
                read.call(&args("link")).await.is_err(),
                "a symlink cannot lead out"
            );
        }
        let list = BuiltinTool::new("list_dir", Some(&root)).unwrap();
        let listing = list.call(&Map::new()).await.unwrap();
        assert!(
            listing.starts_with("a.txt\n") && listing.contains("sub/"),
            "{listing}"
        );
        let time = BuiltinTool::new("current_time", None).unwrap();
        assert!(time.call(&Map::new()).await.unwrap().ends_with('Z'));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_named_pipe_is_a_tool_error_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink(dir.path().join("pipe"), dir.path().join("link")).unwrap();
        let read = BuiltinTool::new("read_file", Some(dir.path())).unwrap();
        // No writer ever comes: before the fix this call never returned.
        for path in ["pipe", "link"] {
            assert_eq!(
                read.call(&args(path)).await,
                Err(format!("`{path}`: a named pipe, not a regular file"))
            );
        }
        assert_eq!(
            read.call(&args(".")).await,
            Err("`.`: a directory, not a regular file".into())
        );
    }

    #[tokio::test]
    async fn big_files_and_directories_are_cut_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.txt"), "x".repeat(300 * 1024)).unwrap();
        let read = BuiltinTool::new("read_file", Some(dir.path())).unwrap();
        let text = read.call(&args("big.txt")).await.unwrap();
        assert!(
            text.ends_with("\n[cut: the file has 307200 bytes; shown: the first 262144]"),
            "{}",
            &text[text.len() - 80..]
        );
        let many = dir.path().join("many");
        std::fs::create_dir(&many).unwrap();
        for index in 0..(MAX_LISTED + 5) {
            std::fs::write(many.join(format!("f{index:05}")), "").unwrap();
        }
        let list = BuiltinTool::new("list_dir", Some(dir.path())).unwrap();
        let listing = list.call(&args("many")).await.unwrap();
        let lines: Vec<&str> = listing.lines().collect();
        assert_eq!(lines.len(), MAX_LISTED + 1);
        assert_eq!(lines[0], "f00000");
        assert_eq!(
            lines[MAX_LISTED],
            "[cut: 5 more entries not shown; list a subdirectory]"
        );
    }

    #[test]
    fn bad_declarations_are_explained() {
        assert!(
            BuiltinTool::new("read_file", None)
                .err()
                .unwrap()
                .contains("needs `root:`")
        );
        assert!(
            BuiltinTool::new("read_fil", None)
                .err()
                .unwrap()
                .contains("did you mean `read_file`?")
        );
        assert!(BuiltinTool::new("list_dir", Some(Path::new("/nonexistent/x"))).is_err());
    }
}
