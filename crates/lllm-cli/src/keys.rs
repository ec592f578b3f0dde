//! `lllm keys set|list|remove|path`: API keys kept in a file only its owner
//! can read (`keys.json` beside the user config file, mode 0600 in a 0700
//! directory), read under the process environment and env files (a key
//! exported in the shell wins; `envfile`).
//!
//! A key is never taken from the command line (it would land in the shell's
//! history and in `ps`): `set` reads it from stdin, with a prompt on stderr
//! when stdin is a terminal. Nothing here prints a value.
//!
//! `set` and `remove` change the file under an exclusive lock
//! (`keys.json.lock` beside it), so that runs at once each keep their key,
//! and write it as every output is written (`lllm::file::atomic`: a fresh
//! private file, then a rename), so that a link planted at its name is
//! replaced, never written through. A directory others can write to is made
//! private first, or refused when it is not the user's (issue 26).

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::envfile::Source;
use crate::settings::Settings;
use lllm::error::{Error, Outcome, Result};

/// `lllm keys`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Store a key: NAME is its environment variable (`OPENAI_API_KEY`) or a
    /// provider (`openai`, `anthropic`, `groq`, …); the value is read from
    /// stdin (a prompt when it is a terminal), never from the command line.
    Set {
        /// The variable, or a provider name.
        name: String,
    },
    /// The stored names and where each is read from now; never a value.
    List,
    /// Remove a stored key.
    Remove {
        /// The variable, or a provider name.
        name: String,
    },
    /// Print the keys file's path.
    Path,
}

/// The note kept at the top of the file (a key starting with `//` is no variable).
const NOTE_KEY: &str = "// note";
const NOTE: &str = "API keys of lllm (`lllm keys`); keep this file private";

/// The largest keys file read.
const KEYS_FILE_CAP: u64 = 1 << 20;

pub fn run(args: KeysArgs, settings: &Settings) -> Result<Outcome> {
    let path = settings.keys_path();
    match args.command {
        KeysCommand::Path => {
            lllm::output::stdout(&format!("{}\n", path.display()))?;
        }
        KeysCommand::Set { name } => {
            let name = variable_name(&name)?;
            let value = read_value(&name)?;
            let _lock = lock(&path)?;
            let mut keys = read_document(&path)?;
            keys.insert(name.clone(), Value::String(value));
            write_document(&path, &keys)?;
            let shadowed = match settings.environment.lookup(&name) {
                Some((_, source @ (Source::Process | Source::File(_)))) => {
                    format!("; {source} sets `{name}` too and wins over this file")
                }
                _ => String::new(),
            };
            lllm::output::stderr_line(&format!(
                "lllm: `{name}` saved in {}{shadowed}",
                path.display()
            ));
        }
        KeysCommand::Remove { name } => {
            let name = variable_name(&name)?;
            let _lock = lock(&path)?;
            let mut keys = read_document(&path)?;
            if keys.remove(&name).is_none() {
                let stored: Vec<&str> = keys
                    .keys()
                    .map(String::as_str)
                    .filter(|key| !key.starts_with("//"))
                    .collect();
                return Err(Error::Usage(format!(
                    "no key `{name}` in {}{}",
                    path.display(),
                    lllm::suggest::hint(&name, stored)
                )));
            }
            write_document(&path, &keys)?;
            lllm::output::stderr_line(&format!("lllm: `{name}` removed from {}", path.display()));
        }
        KeysCommand::List => {
            let keys = read_document(&path)?;
            let mut text = String::new();
            for name in keys.keys().filter(|key| !key.starts_with("//")) {
                let place = match settings.environment.lookup(name) {
                    Some((_, Source::Keys(_))) => "used".to_string(),
                    Some((_, source)) => format!("{source} wins"),
                    None => "empty".to_string(),
                };
                let name = lllm::redact::terminal_line(name);
                text.push_str(&format!("{name}\t{place}\n"));
            }
            lllm::output::stdout(&text)?;
        }
    }
    Ok(Outcome::Success)
}

/// The variable a name given to `keys` means: a provider's own
/// (`openai` → `OPENAI_API_KEY`), or the name itself when it is one.
fn variable_name(given: &str) -> Result<String> {
    let lowered = given.to_ascii_lowercase();
    if lowered == "anthropic" {
        return Ok("ANTHROPIC_API_KEY".into());
    }
    if let Some(preset) = lllm::provider::endpoints::PRESETS
        .iter()
        .find(|preset| preset.name == lowered)
    {
        return Ok(preset.key_variable.to_string());
    }
    let valid = given
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && given
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || character == '_');
    if !valid {
        let providers: Vec<&str> = std::iter::once("anthropic")
            .chain(
                lllm::provider::endpoints::PRESETS
                    .iter()
                    .map(|preset| preset.name),
            )
            .collect();
        return Err(Error::Usage(format!(
            "`{}` is neither an environment variable name (`OPENAI_API_KEY`) nor a provider ({}){}",
            lllm::suggest::printable(given),
            providers.join(", "),
            lllm::suggest::hint(&lowered, providers.iter().copied())
        )));
    }
    Ok(given.to_string())
}

/// The value to store: a line typed at a prompt, or all of a piped stdin,
/// without the line break at its end.
fn read_value(name: &str) -> Result<String> {
    let stdin = std::io::stdin();
    let mut value = String::new();
    let read = if stdin.is_terminal() {
        let mut stderr = std::io::stderr();
        let _ = write!(stderr, "{name} (the key is shown as you type it): ");
        let _ = stderr.flush();
        stdin.lock().read_line(&mut value).map(|_| ())
    } else {
        stdin
            .lock()
            .take(KEYS_FILE_CAP)
            .read_to_string(&mut value)
            .map(|_| ())
    };
    read.map_err(|error| Error::Usage(format!("cannot read the key from stdin: {error}")))?;
    let value = value.trim_end_matches(['\n', '\r']).to_string();
    if value.trim().is_empty() {
        return Err(Error::Usage(format!(
            "no value for `{name}` on stdin; hint: `printf %s \"$KEY\" | lllm keys set {name}`, \
             or run it on a terminal to be asked"
        )));
    }
    if value.contains(['\n', '\r']) {
        return Err(Error::Usage(format!(
            "the value for `{name}` has more than one line; a key is one line"
        )));
    }
    Ok(value)
}

/// The keys of the file at `path` (none when it does not exist), warning
/// when others may read it.
pub fn read(path: &Path) -> Result<HashMap<String, String>> {
    let document = read_document(path)?;
    Ok(document
        .into_iter()
        .filter(|(name, _)| !name.starts_with("//"))
        .filter_map(|(name, value)| match value {
            Value::String(value) => Some((name, value)),
            _ => None,
        })
        .collect())
}

fn read_document(path: &Path) -> Result<Map<String, Value>> {
    let text = match lllm::file::read_text(path, KEYS_FILE_CAP) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(error) => {
            return Err(Error::Usage(format!(
                "cannot read keys file `{}`: {error}",
                path.display()
            )));
        }
    };
    warn_if_shared(path);
    let bad = |why: &str| {
        Error::Usage(format!(
            "keys file `{}`: {why}; hint: fix it, or delete it and store the keys again \
             with `lllm keys set NAME`",
            path.display()
        ))
    };
    // serde_json's error names a line and column, never the text there.
    let document: Value = serde_json::from_str(&text).map_err(|error| {
        bad(&format!(
            "not JSON at line {}, column {}",
            error.line(),
            error.column()
        ))
    })?;
    let Value::Object(map) = document else {
        return Err(bad("not a JSON object of `NAME: value`"));
    };
    if let Some((name, _)) = map
        .iter()
        .find(|(name, value)| !name.starts_with("//") && !value.is_string())
    {
        return Err(bad(&format!(
            "the value of `{}` is not a string",
            lllm::suggest::printable(name)
        )));
    }
    Ok(map)
}

/// A keys file others can read is used, with a warning: refusing it would
/// stop every run over a permission bit the user may not know about.
#[cfg(unix)]
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            lllm::report::warn(&format!(
                "keys file `{}` can be read by other users (mode {mode:04o}); hint: `chmod 600 {}`",
                path.display(),
                path.display()
            ));
        }
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &Path) {}

/// The directory of the keys file at `path` (`.` for a bare name).
fn directory_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Takes the keys file's lock (`NAME.lock` beside it, made private in a
/// private directory), waiting while another `lllm keys` holds it; released
/// when the returned file is dropped.
fn lock(path: &Path) -> Result<std::fs::File> {
    let directory = directory_of(path);
    private_directory(&directory)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = directory.join(name);
    let failed = |error: std::io::Error| {
        Error::Usage(format!(
            "cannot lock the keys file with `{}`: {error}",
            lock_path.display()
        ))
    };
    let file = open_lock(&lock_path).map_err(failed)?;
    file.lock().map_err(failed)?;
    Ok(file)
}

/// The lock file, created if missing; a link in its place is an error
/// (`O_NOFOLLOW`), not a file elsewhere to create or lock.
#[cfg(unix)]
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(not(unix))]
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Makes sure no one else can write to the keys file's directory: a missing
/// one is created 0700; one that others may write to (group or world
/// write bit) is made 0700 when it is the user's, and refused when it is not
/// (another user could swap the file, or plant a link at its name).
#[cfg(unix)]
fn private_directory(directory: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let failed = |error: std::io::Error| Error::Write {
        path: directory.display().to_string(),
        source: error,
    };
    if !directory.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(directory)
            .map_err(failed)?;
    }
    let metadata = std::fs::metadata(directory).map_err(failed)?;
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 == 0 {
        return Ok(());
    }
    if metadata.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Error::Usage(format!(
            "the keys file's directory `{}` can be written by other users (mode {mode:04o}) \
             and is not yours: no key is stored there; hint: point `--config` or \
             `XDG_CONFIG_HOME` at a directory of your own",
            directory.display()
        )));
    }
    std::fs::set_permissions(directory, std::fs::Permissions::from_mode(0o700)).map_err(failed)?;
    lllm::report::warn(&format!(
        "the keys file's directory `{}` could be written by other users (mode {mode:04o}); \
         it is now 0700",
        directory.display()
    ));
    Ok(())
}

#[cfg(not(unix))]
fn private_directory(directory: &Path) -> Result<()> {
    std::fs::create_dir_all(directory).map_err(|source| Error::Write {
        path: directory.display().to_string(),
        source,
    })
}

/// Writes the keys as every output is written (`lllm::file::atomic`): a
/// fresh temporary file beside `path`, private (0600) from its first byte
/// and opened without following links, then renamed over `path`. Call it
/// holding the [`lock`] (which also made the directory private).
fn write_document(path: &Path, keys: &Map<String, Value>) -> Result<()> {
    let failed = |error: std::io::Error| Error::Write {
        path: path.display().to_string(),
        source: error,
    };
    let mut document = Map::new();
    document.insert(NOTE_KEY.into(), Value::String(NOTE.into()));
    let mut names: Vec<&String> = keys.keys().filter(|key| !key.starts_with("//")).collect();
    names.sort();
    for name in names {
        document.insert(name.clone(), keys[name].clone());
    }
    let mut text = serde_json::to_vec_pretty(&Value::Object(document)).unwrap_or_default();
    text.push(b'\n');
    let mut file = lllm::file::atomic::AtomicFile::create_private(path).map_err(failed)?;
    file.write_all(&text).map_err(failed)?;
    file.commit().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_variables_or_providers() {
        assert_eq!(variable_name("openai").unwrap(), "OPENAI_API_KEY");
        assert_eq!(variable_name("Anthropic").unwrap(), "ANTHROPIC_API_KEY");
        assert_eq!(variable_name("groq").unwrap(), "GROQ_API_KEY");
        assert_eq!(variable_name("MY_KEY_2").unwrap(), "MY_KEY_2");
        let error = variable_name("opena-i").unwrap_err().to_string();
        assert!(error.contains("did you mean `openai`?"), "{error}");
        assert!(variable_name("2KEY").is_err());
        assert!(variable_name("").is_err());
    }

    #[cfg(unix)]
    #[test]
    fn written_files_are_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lllm/keys.json");
        let mut keys = Map::new();
        keys.insert("B_KEY".into(), Value::String("b".into()));
        keys.insert("A_KEY".into(), Value::String("a".into()));
        let lock = lock(&path).unwrap();
        write_document(&path, &keys).unwrap();
        drop(lock);
        std::fs::remove_file(dir.path().join("lllm/keys.json.lock")).unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let read_back = read(&path).unwrap();
        assert_eq!(read_back.len(), 2);
        assert_eq!(read_back["A_KEY"], "a");
        // No temporary file is left.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
        std::fs::write(&path, "{\"A\": 1}").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(
            error.contains("the value of `A` is not a string"),
            "{error}"
        );
        std::fs::write(&path, "{\"A\": \"sk-secret\"").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(error.contains("not JSON at line 1"), "{error}");
        assert!(!error.contains("sk-secret"), "{error}");
    }
}
