//! Tactic YAML: read as written (`raw`), merged (`merge`, one rule), resolved
//! and validated (`resolve`). `load` is the whole pipeline.
//!
//! Paths a file declares (`prompts`, a tool's or MCP server's `cwd`, a mock
//! provider's `script`) are made absolute against that file before any `base` is merged,
//! so they keep pointing where their author meant.

mod builder;
mod defaults;
mod flow;
mod merge;
pub(crate) mod model_args;
#[doc(hidden)]
pub mod numbers;
mod raw;
mod resolve;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::redact::terminal_line;
use crate::suggest::printable;

pub use builder::{AgentEntry, BUILDER_LABEL, TacticBuilder, YAML_LABEL, from_yaml};
pub use defaults::Defaults;
pub use flow::{
    FlowItem, ForkConfig, LoopConfig, ParallelConfig, StepConfig, StepInput, SubTacticConfig,
};
pub use merge::merge;
pub use model_args::ModelArgs;
pub use resolve::{
    AgentConfig, BuiltinToolConfig, ContextManagerConfig, McpServerConfig, ProviderApi,
    ProviderConfig, SystemPrompt, TacticConfig, ToolConfig, check_providers,
};
pub(crate) use resolve::{
    DEFAULT_MAX_EXCEPTION_RETRY, DEFAULT_MAX_INTERRUPT_STEPS, DEFAULT_MAX_LLM_RECALL,
};

/// A tactic that cannot be used; always bad input (exit 2). One problem per line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not there.
    #[error("tactic file `{path}` not found")]
    NotFound {
        /// The file.
        path: String,
    },
    /// The file is there but cannot be read (a directory, too big, …).
    #[error("cannot read `{path}`: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The YAML does not parse.
    #[error("{path}:{line}:{column}: {}", terminal_line(message))]
    Syntax {
        /// The file.
        path: String,
        /// Where, from 1.
        line: usize,
        /// Where on the line, from 1.
        column: usize,
        /// What the YAML parser says.
        message: String,
    },
    /// One problem per line: a problem is one line by construction, so a line
    /// break (or any control character) in one came from the file, in a name
    /// it quotes, and is shown escaped.
    #[error("{}", problems.iter().map(|problem| format!("{path}: {}", terminal_line(problem))).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem, one line each.
        problems: Vec<String>,
    },
    /// A file's `base` leads back to it.
    #[error("`base` files form a cycle: {chain}")]
    Cycle {
        /// The files in order, `a.yaml → b.yaml → a.yaml`.
        chain: String,
    },
    /// `Invalid`, with what could be resolved despite the problems: a caller
    /// can still look for problems of later phases (prompts, templates) in
    /// `partial` and list them all at once. Shown as `Invalid` is.
    #[error("{}", problems.iter().map(|problem| format!("{path}: {}", terminal_line(problem))).collect::<Vec<_>>().join("\n"))]
    Incomplete {
        /// The file.
        path: String,
        /// Every problem, one line each.
        problems: Vec<String>,
        /// What could be resolved.
        partial: Box<TacticConfig>,
    },
}

/// A result whose error is a config [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reads, merges and resolves the tactic at `path`.
pub fn load(path: &Path) -> Result<TacticConfig> {
    load_with(path, &Defaults::default())
}

/// [`load`] with a user's `defaults` laid under the tactic's own settings.
pub fn load_with(path: &Path, defaults: &Defaults) -> Result<TacticConfig> {
    let mut chain = Vec::new();
    let mut document = load_document(path, &mut chain)?;
    defaults.apply(&mut document);
    let directory = parent_dir(path);
    let prompts = prompts_problem(&document);
    if let Value::Object(map) = &mut document {
        map.entry("prompts")
            .or_insert_with(|| Value::String(directory.join("prompts").display().to_string()));
    }
    resolved(path, document, prompts)
}

/// The merged `document` resolved, with `also` (a problem found before)
/// among the problems; the error is shown under `path`.
fn resolved(path: &Path, document: Value, also: Option<String>) -> Result<TacticConfig> {
    let (problems, partial) = match (resolve::resolve(path, document), also) {
        (Ok(config), None) => return Ok(config),
        (Ok(config), Some(problem)) => (vec![problem], Some(Box::new(config))),
        (Err((mut problems, partial)), also) => {
            problems.extend(also);
            (problems, partial)
        }
    };
    let path = path.display().to_string();
    Err(match partial {
        Some(partial) => Error::Incomplete {
            path,
            problems,
            partial,
        },
        None => Error::Invalid { path, problems },
    })
}

/// `prompts:` as a file wrote it (the default `./prompts` is not checked: a
/// tactic without prompt files never names it) is a directory, or nothing
/// yet. A file there was taken for an empty prompt directory, silently
/// (issue 26).
fn prompts_problem(document: &Value) -> Option<String> {
    let prompts = document.get("prompts")?.as_str()?;
    let metadata = std::fs::metadata(prompts).ok()?;
    (!metadata.is_dir()).then(|| {
        format!(
            "`prompts`: `{}` is {}, not a directory; `prompts` names the directory of the \
             prompt files",
            printable(prompts),
            crate::file::describe(&metadata.file_type())
        )
    })
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// One file with its `base` chain merged under it.
fn load_document(path: &Path, chain: &mut Vec<PathBuf>) -> Result<Value> {
    let canonical = std::fs::canonicalize(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound {
            path: path.display().to_string(),
        },
        _ => Error::Read {
            path: path.display().to_string(),
            message: error.to_string(),
        },
    })?;
    if chain.contains(&canonical) {
        let mut names: Vec<String> = chain
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        names.push(canonical.display().to_string());
        return Err(Error::Cycle {
            chain: names.join(" → "),
        });
    }
    chain.push(canonical);
    let label = path.display().to_string();
    // A regular file only: `base: /dev/zero` or a named pipe must not hang
    // or fill memory (issue 12).
    let text =
        crate::file::read_text(path, crate::file::CONFIG_CAP).map_err(|error| Error::Read {
            path: label.clone(),
            message: error.to_string(),
        })?;
    let mut document = parse_yaml(&text, &label)?;
    let Value::Object(map) = &mut document else {
        return Err(Error::Invalid {
            path: label,
            problems: vec!["a tactic must be a YAML mapping".into()],
        });
    };
    check_top_level_keys(map, &label)?;
    let directory = parent_dir(path);
    resolve_paths(map, &directory);
    let base = match map.remove("base") {
        None | Some(Value::Null) => None,
        Some(Value::String(base)) => Some(directory.join(base)),
        Some(other) => {
            return Err(Error::Invalid {
                path: label,
                problems: vec![format!("`base` must be a file name, not {other}")],
            });
        }
    };
    let document = match base {
        Some(base) => merge(load_document(&base, chain)?, document),
        None => document,
    };
    chain.pop();
    Ok(document)
}

fn parse_yaml(text: &str, path: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    crate::yaml::parse(text).map_err(|error| {
        let (line, column) = error
            .location
            .map_or((1, 1), |location| (location.line, location.column));
        Error::Syntax {
            path: path.to_string(),
            line,
            column,
            message: error.message,
        }
    })
}

fn check_top_level_keys(map: &Map<String, Value>, path: &str) -> Result<()> {
    let problems: Vec<String> = map
        .keys()
        .filter(|key| !raw::TOP_LEVEL_KEYS.contains(&key.as_str()))
        .map(|key| {
            format!(
                "unknown key `{}`{}",
                crate::suggest::printable(key),
                crate::suggest::hint(key, raw::TOP_LEVEL_KEYS.iter().copied())
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid {
            path: path.to_string(),
            problems,
        })
    }
}

/// Makes the paths this file declares absolute against its directory.
fn resolve_paths(map: &mut Map<String, Value>, directory: &Path) {
    let absolute = |value: &str| directory.join(value).display().to_string();
    if let Some(Value::String(prompts)) = map.get_mut("prompts") {
        *prompts = absolute(prompts);
    }
    if let Some(Value::Array(tools)) = map.get_mut("tools") {
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            let cwd = match tool.get("cwd").and_then(Value::as_str) {
                Some(cwd) => absolute(cwd),
                None => directory.display().to_string(),
            };
            tool.insert("cwd".into(), Value::String(cwd));
        }
    }
    if let Some(Value::Array(servers)) = map.get_mut("mcp_servers") {
        for server in servers.iter_mut().filter_map(Value::as_object_mut) {
            let cwd = match server.get("cwd").and_then(Value::as_str) {
                Some(cwd) => absolute(cwd),
                None => directory.display().to_string(),
            };
            server.insert("cwd".into(), Value::String(cwd));
        }
    }
    if let Some(Value::Object(builtins)) = map.get_mut("builtin_tools") {
        for options in builtins.values_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::String(root)) = options.get_mut("root") {
                *root = absolute(root);
            }
        }
    }
    if let Some(Value::Object(providers)) = map.get_mut("providers") {
        for provider in providers.values_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::String(script)) = provider.get_mut("script") {
                *script = absolute(script);
            }
        }
    }
    if let Some(Value::Array(flow)) = map.get_mut("flow") {
        resolve_flow_paths(flow, directory);
    }
}

/// Sub-tactic paths (`tactic:` on a step, at any depth of the flow).
fn resolve_flow_paths(items: &mut [Value], directory: &Path) {
    for item in items.iter_mut().filter_map(Value::as_object_mut) {
        if let Some(Value::String(path)) = item.get_mut("tactic") {
            *path = directory.join(&*path).display().to_string();
        }
        if let Some(Value::Array(steps)) = item.get_mut("steps") {
            resolve_flow_paths(steps, directory);
        }
    }
}

#[cfg(test)]
mod tests;
