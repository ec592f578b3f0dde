//! Where `lllm` reads environment variables: the process environment, over
//! `.env` files (`--env-file`, else `./.env`), over the keys file (`lllm
//! keys`). One lookup, [`Environment::var`], is handed to everything that
//! reads a variable (providers' keys and base URLs, `LLLM_HOME`,
//! `LLLM_MODEL`, Slurm's array variables), so the process environment is
//! never written (`std::env::set_var` is unsafe in edition 2024 and races
//! with every thread reading it).
//!
//! Because nothing is written into the process environment, a tool or MCP
//! server started by a tactic inherits none of the variables read from
//! files: its environment is lllm's own process environment, stripped of
//! credentials (`lllm::tool`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lllm::error::{Error, Result};

/// Where a variable's value comes from, strongest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process environment.
    Process,
    /// An env file.
    File(PathBuf),
    /// The keys file of `lllm keys`.
    Keys(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Process => formatter.write_str("the environment"),
            Source::File(path) => write!(formatter, "env file `{}`", path.display()),
            Source::Keys(path) => write!(formatter, "keys file `{}`", path.display()),
        }
    }
}

/// The layered lookup: process environment, then env files (a later file
/// over an earlier one), then the keys file. An empty value counts as unset
/// in every layer, so `OPENAI_API_KEY=` exported in a shell does not hide
/// the key in a file.
#[derive(Debug, Default, Clone)]
pub struct Environment {
    /// Each variable of the env files with the file it came from.
    files: HashMap<String, (String, PathBuf)>,
    /// The keys file's variables, and the file.
    keys: HashMap<String, String>,
    keys_path: Option<PathBuf>,
    /// Reads the process environment (tests give their own).
    process: Option<fn(&str) -> Option<String>>,
}

fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Environment {
    /// The process environment alone.
    pub fn process() -> Environment {
        Environment::default()
    }

    /// The value of `name` and where it came from.
    pub fn lookup(&self, name: &str) -> Option<(String, Source)> {
        let process = self.process.unwrap_or(process_var);
        if let Some(value) = process(name).filter(|value| !value.is_empty()) {
            return Some((value, Source::Process));
        }
        if let Some((value, path)) = self.files.get(name).filter(|(value, _)| !value.is_empty()) {
            return Some((value.clone(), Source::File(path.clone())));
        }
        let value = self.keys.get(name).filter(|value| !value.is_empty())?;
        let path = self.keys_path.clone().unwrap_or_default();
        Some((value.clone(), Source::Keys(path)))
    }

    /// The value of `name`.
    pub fn var(&self, name: &str) -> Option<String> {
        self.lookup(name).map(|(value, _)| value)
    }

    /// Adds the variables of the env file at `path`, over those of files
    /// added before. A file that cannot be read or parsed is one error
    /// naming it (and the line), never its content: a value may be a key.
    pub fn add_file(&mut self, path: &Path) -> Result<()> {
        for (name, value) in read_env_file(path)? {
            self.files.insert(name, (value, path.to_path_buf()));
        }
        Ok(())
    }

    /// Adds the keys of `lllm keys`, under everything else.
    pub fn set_keys(&mut self, path: PathBuf, keys: HashMap<String, String>) {
        self.keys = keys;
        self.keys_path = Some(path);
    }
}

/// The largest env file read: far beyond any real one.
const ENV_FILE_CAP: u64 = 1 << 20;

/// The variables of one env file, in order (a later one of a name wins).
fn read_env_file(path: &Path) -> Result<Vec<(String, String)>> {
    let text = lllm::file::read_text(path, ENV_FILE_CAP).map_err(|error| {
        Error::Usage(format!(
            "cannot read env file `{}`: {error}",
            path.display()
        ))
    })?;
    let mut variables = Vec::new();
    for item in dotenvy::from_read_iter(text.as_bytes()) {
        match item {
            Ok(pair) => variables.push(pair),
            Err(dotenvy::Error::LineParse(line, index)) => {
                // The line itself is not shown: it may hold a key.
                let number = line_number(&text, &line, index);
                return Err(Error::Usage(format!(
                    "{}:{number}: not a `NAME=value` line; hint: quote a value with spaces \
                     or special characters (`NAME=\"a value\"`)",
                    path.display()
                )));
            }
            Err(error) => {
                return Err(Error::Usage(format!(
                    "cannot read env file `{}`: {error}",
                    path.display()
                )));
            }
        }
    }
    Ok(variables)
}

/// The 1-based line of `text` where the parser stopped: `index` bytes into
/// `line`, the (possibly multi-line) statement it was reading.
fn line_number(text: &str, line: &str, index: usize) -> usize {
    let start = if line.is_empty() {
        None
    } else {
        text.find(line)
    };
    match start {
        Some(start) => {
            let at = (start + index).min(text.len());
            let at = (0..=at)
                .rev()
                .find(|at| text.is_char_boundary(*at))
                .unwrap_or(0);
            text[..at].matches('\n').count() + 1
        }
        None => text.lines().count().max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_process(_: &str) -> Option<String> {
        None
    }

    fn process_with_key(name: &str) -> Option<String> {
        (name == "OPENAI_API_KEY").then(|| "from-process".to_string())
    }

    #[track_caller]
    fn parsed(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        std::fs::write(&path, text).unwrap();
        read_env_file(&path).map_err(|error| {
            let message = error.to_string();
            message.replace(&path.display().to_string(), ".env")
        })
    }

    #[test]
    fn env_files_parse_as_dotenv_does() {
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            parsed("# comment\nexport A=1\nB=\"two words\"\nC='x y' # note\n\nD=\n").unwrap(),
            pairs(&[("A", "1"), ("B", "two words"), ("C", "x y"), ("D", "")])
        );
        assert_eq!(
            parsed("A=\"line one\nline two\"\nB=2\n").unwrap(),
            pairs(&[("A", "line one\nline two"), ("B", "2")])
        );
    }

    #[test]
    fn a_bad_env_file_names_its_line_and_not_its_content() {
        let error = parsed("A=1\nB=2\nnot a pair sk-secret\n").unwrap_err();
        assert!(
            error.starts_with(".env:3: not a `NAME=value` line"),
            "{error}"
        );
        assert!(!error.contains("sk-secret"), "{error}");
        let error = parsed("A=1\nB=\"unclosed sk-secret\nC=3\n").unwrap_err();
        assert!(error.starts_with(".env:"), "{error}");
        assert!(!error.contains("sk-secret"), "{error}");
    }

    #[test]
    fn the_process_wins_over_files_and_files_over_keys() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.env");
        let second = dir.path().join("second.env");
        std::fs::write(&first, "OPENAI_API_KEY=from-first\nA=first\nB=first\n").unwrap();
        std::fs::write(&second, "A=second\nB=\n").unwrap();
        let mut environment = Environment {
            process: Some(empty_process),
            ..Environment::default()
        };
        environment.add_file(&first).unwrap();
        environment.add_file(&second).unwrap();
        let keys_path = dir.path().join("keys.json");
        environment.set_keys(
            keys_path.clone(),
            HashMap::from([
                ("OPENAI_API_KEY".to_string(), "from-keys".to_string()),
                ("C".to_string(), "keys".to_string()),
                ("B".to_string(), "keys".to_string()),
            ]),
        );
        assert_eq!(
            environment.lookup("A"),
            Some(("second".into(), Source::File(second.clone())))
        );
        // An empty value is unset: the keys file's shows.
        assert_eq!(
            environment.lookup("B"),
            Some(("keys".into(), Source::Keys(keys_path.clone())))
        );
        assert_eq!(environment.var("C").as_deref(), Some("keys"));
        assert_eq!(
            environment.lookup("OPENAI_API_KEY"),
            Some(("from-first".into(), Source::File(first)))
        );
        environment.process = Some(process_with_key);
        assert_eq!(
            environment.lookup("OPENAI_API_KEY"),
            Some(("from-process".into(), Source::Process))
        );
        assert_eq!(environment.var("D"), None);
    }
}
