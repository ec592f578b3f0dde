//! Tactic YAML: read as written (`raw`), merged (`merge`, one rule), resolved
//! and validated (`resolve`). `load` is the whole pipeline.
//!
//! Paths a file declares (`prompts`, a tool's or MCP server's `cwd`, a mock
//! provider's `script`) are made absolute against that file before any `base` is merged,
//! so they keep pointing where their author meant.

mod builder;
mod contract;
mod defaults;
mod flow;
mod merge;
pub(crate) mod model_args;
#[doc(hidden)]
pub mod numbers;
mod places;
mod raw;
mod resolve;
mod structured_output;
mod typed;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::redact::terminal_line;
use crate::suggest::printable;
use crate::yaml::Positions;
use places::{Places, show};

pub(crate) use builder::from_recorded;
pub use builder::{AgentEntry, BUILDER_LABEL, TacticBuilder, YAML_LABEL, from_yaml};
pub(crate) use contract::InputSchema;
pub use defaults::Defaults;
pub use flow::{
    FlowItem, ForkConfig, LoopConfig, ParallelConfig, StepConfig, StepInput, SubTacticConfig,
};
pub use merge::merge;
pub use model_args::ModelArgs;
pub use places::MAX_PROBLEMS_SHOWN;
pub(crate) use places::show as show_problems;
pub use structured_output::StructuredOutput;

/// `problem` with `place` (`file:line:column`) in front, or alone without one.
pub(crate) fn placed(place: Option<&str>, problem: impl std::fmt::Display) -> String {
    Places::placed(place, &problem.to_string())
}
pub(crate) use crate::yaml::join_path;
pub use resolve::{
    AgentConfig, BuiltinToolConfig, ContextManagerConfig, McpServerConfig, ProviderApi,
    ProviderConfig, SystemPrompt, TacticConfig, ToolConfig, check_providers, check_providers_at,
};
pub(crate) use resolve::{
    DEFAULT_MAX_EXCEPTION_RETRY, DEFAULT_MAX_INTERRUPT_STEPS, DEFAULT_MAX_LLM_RECALL,
    describe_value,
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
    /// it quotes, and is shown escaped. At most [`MAX_PROBLEMS_SHOWN`] are
    /// shown, and a count of the rest.
    #[error("{}", show(problems))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem, one line each, starting with where it is: the
        /// file, line and column of what it is about
        /// (`t.yaml:12:5: …`), or the file alone (`t.yaml: …`) for the
        /// file as a whole. The file is the one of the `base` chain that
        /// wrote that setting.
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
    #[error("{}", show(problems))]
    Incomplete {
        /// The file.
        path: String,
        /// Every problem, one line each, as `Invalid` has them.
        problems: Vec<String>,
        /// What could be resolved: an entry with problems is left out, or
        /// kept with what it has (a flow step without an agent has an empty
        /// one, so later steps' templates still know its name).
        partial: Box<TacticConfig>,
    },
}

/// A result whose error is a config [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A tactic that cannot be used is bad input: the command's error, exit 2.
impl From<Error> for crate::error::Error {
    fn from(error: Error) -> Self {
        crate::error::Error::Input(Box::new(error))
    }
}

/// Reads, merges and resolves the tactic at `path`.
pub fn load(path: &Path) -> Result<TacticConfig> {
    load_with(path, &Defaults::default())
}

/// [`load`] with a user's `defaults` laid under the tactic's own settings.
pub fn load_with(path: &Path, defaults: &Defaults) -> Result<TacticConfig> {
    let mut chain = Vec::new();
    let mut read = Read::default();
    let mut document = load_document(path, &mut chain, &mut read)?;
    defaults.apply(&mut document);
    let directory = parent_dir(path);
    let prompts = prompts_problem(&document);
    if let Value::Object(map) = &mut document {
        map.entry("prompts")
            .or_insert_with(|| Value::String(directory.join("prompts").display().to_string()));
    }
    resolved(path, document, read, prompts)
}

/// What reading a file and its `base` chain found besides the document:
/// where its settings are, and the problems of its top level (an unknown
/// key, a `base` that is no file name), which do not keep the rest from
/// being checked.
#[derive(Default)]
struct Read {
    places: Places,
    problems: Vec<String>,
}

/// The merged `document` resolved, with the problems found reading it and
/// `prompts` (a problem of `prompts:`) among the problems; the error is
/// shown under `path`.
fn resolved(
    path: &Path,
    document: Value,
    read: Read,
    prompts: Option<String>,
) -> Result<TacticConfig> {
    let file = path.display().to_string();
    let Read {
        places,
        mut problems,
    } = read;
    let prompts = prompts.map(|problem| {
        let place = places.at("prompts");
        Places::placed(Some(place.as_deref().unwrap_or(&file)), &problem)
    });
    let unbuilt = unbuilt_feature(&document).map(|(key, problem)| {
        let place = places.at(key);
        Places::placed(Some(place.as_deref().unwrap_or(&file)), &problem)
    });
    let partial = match resolve::resolve(path, document, places.clone()) {
        Ok(config) => Some(Box::new(config)),
        Err((found, partial)) => {
            problems.extend(found.lines(&places, &file));
            partial
        }
    };
    problems.extend(prompts);
    problems.extend(unbuilt);
    match partial {
        Some(config) if problems.is_empty() => Ok(*config),
        Some(partial) => Err(Error::Incomplete {
            path: file,
            problems,
            partial,
        }),
        None => Err(Error::Invalid {
            path: file,
            problems,
        }),
    }
}

/// A key of the document that asks for a part of the library this build
/// lacks, with the problem: `mcp_servers:` needs the `mcp` feature. (A
/// prompt's `format:` or a json parser's `schema` without `jsonschema` is
/// refused where prompts are read.)
fn unbuilt_feature(document: &Value) -> Option<(&'static str, String)> {
    let servers = document.get("mcp_servers")?;
    let asked = servers.as_array().is_none_or(|servers| !servers.is_empty());
    (asked && !cfg!(feature = "mcp")).then(|| {
        let problem = crate::features::missing("`mcp_servers`", "mcp");
        ("mcp_servers", problem)
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
fn load_document(path: &Path, chain: &mut Vec<PathBuf>, read: &mut Read) -> Result<Value> {
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
    let (document, positions) = parse_yaml(&text, &label)?;
    let directory = parent_dir(path);
    let (document, base) = top_level(document, &label, positions, &directory, read)?;
    let document = match base {
        Some(base) => merge(load_document(&base, chain, read)?, document),
        None => document,
    };
    chain.pop();
    Ok(document)
}

/// The top level of one file of the chain (`label`, where `positions` says
/// each node is), read: its unknown keys and a `base` that is no file name
/// are problems of `read` (and left out), its paths are made absolute
/// against `directory`, and its places join `read`'s. The document without
/// `base`, and the `base` file it names.
fn top_level(
    document: Value,
    label: &str,
    positions: Positions,
    directory: &Path,
    read: &mut Read,
) -> Result<(Value, Option<PathBuf>)> {
    let Value::Object(mut map) = document else {
        return Err(Error::Invalid {
            path: label.to_string(),
            problems: vec![format!("{label}: a tactic must be a YAML mapping")],
        });
    };
    let place = |key: &str| match positions.get(key) {
        Some(at) => format!("{label}:{}:{}", at.line, at.column),
        None => label.to_string(),
    };
    let unknown: Vec<String> = map
        .keys()
        .filter(|key| !raw::TOP_LEVEL_KEYS.contains(&key.as_str()))
        .cloned()
        .collect();
    for key in unknown {
        map.shift_remove(&key);
        read.problems.push(format!(
            "{}: unknown key `{}`{}",
            place(&key),
            printable(&key),
            crate::suggest::hint(&key, raw::TOP_LEVEL_KEYS.iter().copied())
        ));
    }
    resolve_paths(&mut map, directory);
    // `remove`, as ever: the order of the keys left is what records keep.
    let base = match map.remove("base") {
        None | Some(Value::Null) => None,
        Some(Value::String(base)) => Some(directory.join(base)),
        Some(other) => {
            read.problems.push(format!(
                "{}: `base` must be a file name, not {other}",
                place("base")
            ));
            None
        }
    };
    read.places.add(label, positions);
    Ok((Value::Object(map), base))
}

/// The document of `text` (an empty file is an empty mapping), with where
/// its nodes are.
fn parse_yaml(text: &str, path: &str) -> Result<(Value, Positions)> {
    if text.trim().is_empty() {
        return Ok((Value::Object(Map::new()), Positions::default()));
    }
    crate::yaml::parse_located(text).map_err(|error| {
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

/// Whether a `tactic:` value names a served tactic (`http://…`,
/// `https://…`) rather than a file (issue 30).
pub(crate) fn is_served_url(text: &str) -> bool {
    text.starts_with("http://") || text.starts_with("https://")
}

/// Makes the paths this file declares absolute against its directory.
fn resolve_paths(map: &mut Map<String, Value>, directory: &Path) {
    let absolute = |value: &str| directory.join(value).display().to_string();
    if let Some(Value::String(prompts)) = map.get_mut("prompts") {
        *prompts = absolute(prompts);
    }
    // A `cwd` that is not text is left for the check to name (it was
    // replaced by the directory, silently).
    let cwd = |entry: &mut Map<String, Value>| {
        let cwd = match entry.get("cwd") {
            Some(Value::String(cwd)) => absolute(cwd),
            None | Some(Value::Null) => directory.display().to_string(),
            Some(_) => return,
        };
        entry.insert("cwd".into(), Value::String(cwd));
    };
    for section in ["tools", "mcp_servers"] {
        if let Some(Value::Array(entries)) = map.get_mut(section) {
            entries
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .for_each(cwd);
        }
    }
    // A tool that runs a tactic file (`tools: [{tactic: PATH}]`); a URL stays.
    if let Some(Value::Array(entries)) = map.get_mut("tools") {
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::String(path)) = entry.get_mut("tactic")
                && !crate::config::is_served_url(path)
            {
                *path = absolute(path);
            }
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
        // A served tactic's URL is not a path.
        if let Some(Value::String(path)) = item.get_mut("tactic")
            && !crate::config::is_served_url(path)
        {
            *path = directory.join(&*path).display().to_string();
        }
        if let Some(Value::Array(steps)) = item.get_mut("steps") {
            resolve_flow_paths(steps, directory);
        }
    }
}

#[cfg(test)]
mod tests;
