//! Built-in tools users enable in YAML without writing code: `read_file` and
//! `list_dir` (confined to one directory) and `current_time`. Each is off
//! unless a tactic lists it under `builtin_tools:`.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::Tool;
use crate::provider::ToolSpec;

/// Files past this size are cut, so one read cannot flood a dialog.
const MAX_READ_BYTES: u64 = 256 * 1024;

pub const NAMES: &[&str] = &["read_file", "list_dir", "current_time"];

enum Kind {
    ReadFile,
    ListDir,
    CurrentTime,
}

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
        match self.kind {
            Kind::CurrentTime => {
                Ok(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            }
            Kind::ReadFile => {
                let path = self.confined(arguments)?;
                let file = tokio::fs::File::open(&path)
                    .await
                    .map_err(|error| error.to_string())?;
                let length = file
                    .metadata()
                    .await
                    .map_err(|error| error.to_string())?
                    .len();
                let mut bytes = Vec::new();
                use tokio::io::AsyncReadExt;
                file.take(MAX_READ_BYTES)
                    .read_to_end(&mut bytes)
                    .await
                    .map_err(|error| error.to_string())?;
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                if length > MAX_READ_BYTES {
                    text.push_str(&format!(
                        "\n[cut: the file has {length} bytes; shown: the first {MAX_READ_BYTES}]"
                    ));
                }
                Ok(text)
            }
            Kind::ListDir => {
                let path = self.confined(arguments)?;
                let mut entries = tokio::fs::read_dir(&path)
                    .await
                    .map_err(|error| error.to_string())?;
                let mut names = Vec::new();
                while let Some(entry) = entries
                    .next_entry()
                    .await
                    .map_err(|error| error.to_string())?
                {
                    let mut name = entry.file_name().to_string_lossy().into_owned();
                    if entry.file_type().await.is_ok_and(|kind| kind.is_dir()) {
                        name.push('/');
                    }
                    names.push(name);
                }
                names.sort();
                Ok(names.join("\n"))
            }
        }
    }
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
