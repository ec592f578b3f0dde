//! The settings a user brings to every command, outside any tactic: the user
//! config file (`--config`, `$LLLM_CONFIG`, else
//! `$XDG_CONFIG_HOME/lllm/config.yaml`, else `~/.config/lllm/config.yaml`),
//! the env files and the keys file (`envfile`, `keys`). One rule everywhere:
//! a flag, then its `LLLM_*` variable, then the config file, then the
//! built-in default.
//!
//! They are read once, before a command runs (a bad file is exit 2 with
//! nothing done), and installed for the process ([`install`], [`current`]):
//! like the process environment they stand in for, they are the same for
//! every part of one command.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};

use crate::envfile::Environment;
use lllm::error::{Error, Result};

/// The keys a user config file may have.
pub const KEYS: &[&str] = &[
    "model",
    "providers",
    "prices",
    "concurrency",
    "records",
    "store",
    "cache",
    "compress",
];

/// `--config`, `--env-file`, `--no-env-file`: the flags that say where the
/// user's settings are, global to every command.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// The user config file [default: `$XDG_CONFIG_HOME/lllm/config.yaml`,
    /// else `~/.config/lllm/config.yaml`].
    #[arg(long, global = true, env = "LLLM_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read environment variables (keys, base URLs) from this file
    /// (repeatable; a later file wins; `./.env` is then not read). The
    /// process environment wins over every file.
    #[arg(
        long = "env-file",
        global = true,
        env = "LLLM_ENV_FILE",
        value_name = "FILE"
    )]
    pub env_files: Vec<PathBuf>,
    /// Read no env file: neither `./.env` nor those of `--env-file` or
    /// `LLLM_ENV_FILE`.
    #[arg(long, global = true)]
    pub no_env_file: bool,
}

/// The user config file as read: paths absolute, numbers checked.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    pub model: Option<String>,
    pub providers: Map<String, Value>,
    pub prices: Option<PathBuf>,
    pub concurrency: Option<usize>,
    pub records: Option<PathBuf>,
    pub store: Option<PathBuf>,
    pub cache: Option<bool>,
    /// `lllm batch --compress` / `lllm merge --compress` by default.
    pub compress: Option<bool>,
}

/// Everything a command reads outside its flags and its tactic.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Where variables are read (process, env files, keys file).
    pub environment: Environment,
    /// The config file's path (whether or not it exists); `None` without a
    /// home directory.
    pub config_path: Option<PathBuf>,
    /// Its settings (empty when there is no file).
    pub file: ConfigFile,
    /// Whether a config file was read.
    pub file_read: bool,
    /// The env files read.
    pub env_files: Vec<PathBuf>,
}

static CURRENT: RwLock<Option<Arc<Settings>>> = RwLock::new(None);

/// Makes `settings` the ones [`current`] gives.
pub fn install(settings: Settings) {
    let mut current = CURRENT
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *current = Some(Arc::new(settings));
}

/// The settings installed for this command, else the process environment alone.
pub fn current() -> Arc<Settings> {
    CURRENT
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
        .unwrap_or_default()
}

/// A variable as every part of lllm reads it (`envfile`).
pub fn var(name: &str) -> Option<String> {
    current().environment.var(name)
}

/// [`var`] as a batch's tactics take it.
pub fn batch_environment() -> lllm::batch::Environment {
    let settings = current();
    lllm::batch::Environment(Arc::new(move |name: &str| settings.environment.var(name)))
}

/// lllm's own config directory: `$XDG_CONFIG_HOME/lllm`, else
/// `~/.config/lllm`; `None` without either variable.
fn own_directory(environment: &Environment) -> Option<PathBuf> {
    let set = |name: &str| environment.var(name);
    set("XDG_CONFIG_HOME")
        .map(|dir| PathBuf::from(dir).join("lllm"))
        .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".config/lllm")))
}

/// Where a setting's value came from, for `lllm config show`.
pub type Origin = String;

impl Settings {
    /// Reads the env files, the keys file and the config file the flags
    /// (and the environment) point to.
    pub fn load(args: &SettingsArgs) -> Result<Settings> {
        let mut environment = Environment::process();
        let mut env_files = Vec::new();
        // Like docker compose and promptfoo: a `.env` where one stands,
        // unless files are named (they replace it) or none is wanted.
        let paths = if args.no_env_file {
            Vec::new()
        } else if !args.env_files.is_empty() {
            args.env_files.clone()
        } else {
            let path = PathBuf::from(".env");
            if path.is_file() {
                vec![path]
            } else {
                Vec::new()
            }
        };
        for path in paths {
            environment.add_file(&path)?;
            env_files.push(path);
        }
        let explicit = args.config.is_some();
        let config_path = args
            .config
            .clone()
            .or_else(|| own_directory(&environment).map(|dir| dir.join("config.yaml")));
        let mut settings = Settings {
            environment,
            config_path: config_path.clone(),
            env_files,
            ..Settings::default()
        };
        if let Some(path) = &config_path {
            let home = settings.environment.var("HOME");
            match read_config(path, home.as_deref()) {
                Ok(Some(file)) => {
                    settings.file = file;
                    settings.file_read = true;
                }
                Ok(None) if explicit => {
                    return Err(Error::Usage(format!(
                        "config file `{}` not found; hint: unset `LLLM_CONFIG` or pass an existing `--config FILE`",
                        path.display()
                    )));
                }
                Ok(None) => {}
                Err(error) => return Err(error),
            }
        }
        let keys_path = settings.keys_path();
        let keys = crate::keys::read(&keys_path)?;
        settings.environment.set_keys(keys_path, keys);
        Ok(settings)
    }

    /// `keys.json` beside the config file.
    pub fn keys_path(&self) -> PathBuf {
        match self.config_path.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.join("keys.json"),
            _ => PathBuf::from("keys.json"),
        }
    }

    /// `scope` refusing lllm's own secrets as attachments, from a task line
    /// or `--attach` alike (issue 26): the keys file, the config file, the
    /// env files read, and everything in lllm's own config directory
    /// (`$XDG_CONFIG_HOME/lllm`, `~/.config/lllm`), whichever config file
    /// is in use. A `.env` anywhere is refused by its name too.
    pub fn refuse_secrets(
        &self,
        scope: lllm::dialog::AttachmentScope,
    ) -> lllm::dialog::AttachmentScope {
        let mut scope = scope.refuse_file(&self.keys_path(), "lllm's keys file");
        if let Some(path) = &self.config_path {
            scope = scope.refuse_file(path, "lllm's config file");
        }
        if let Some(directory) = own_directory(&self.environment) {
            scope = scope.refuse_directory(&directory, "inside lllm's config directory");
        }
        for path in &self.env_files {
            scope = scope.refuse_file(path, "an env file lllm reads keys from");
        }
        scope
    }

    /// The default model of agents whose tactic names none: `LLLM_MODEL`
    /// (as the library's `quick` reads it), else the config file's `model`.
    pub fn default_model(&self) -> Option<(String, Origin)> {
        if let Some(model) = self.environment.var(lllm::quick::MODEL_VARIABLE) {
            return Some((model, lllm::quick::MODEL_VARIABLE.to_string()));
        }
        self.file
            .model
            .clone()
            .map(|model| (model, self.file_origin("model")))
    }

    /// What goes under every tactic: the default model and the config
    /// file's providers.
    pub fn defaults(&self) -> lllm::config::Defaults {
        lllm::config::Defaults {
            model: self.default_model().map(|(model, _)| model),
            providers: self.file.providers.clone(),
        }
    }

    /// `--prices` (or `LLLM_PRICES`, both in `flag`), else the file's.
    pub fn prices(&self, flag: Option<&Path>) -> Option<PathBuf> {
        flag.map(Path::to_path_buf)
            .or_else(|| self.file.prices.clone())
    }

    /// Whether records are written compressed: `--compress[=BOOL]` (or
    /// `LLLM_COMPRESS`, both in `flag`), else the file's `compress`, else no.
    pub fn compress(&self, flag: Option<bool>) -> bool {
        flag.or(self.file.compress).unwrap_or(false)
    }

    /// The store directory: `--store`, else `LLLM_HOME`, else the file's
    /// `store`, else `$XDG_DATA_HOME/lllm`, else `~/.local/share/lllm`.
    pub fn store_dir(&self, flag: Option<&Path>) -> Option<PathBuf> {
        self.store_dir_with_origin(flag).map(|(dir, _)| dir)
    }

    /// [`Settings::store_dir`] and where it came from.
    pub fn store_dir_with_origin(&self, flag: Option<&Path>) -> Option<(PathBuf, Origin)> {
        if let Some(dir) = flag {
            return Some((dir.to_path_buf(), "--store".into()));
        }
        let set = |name: &str| self.environment.var(name);
        if let Some(home) = set("LLLM_HOME") {
            return Some((PathBuf::from(home), "LLLM_HOME".into()));
        }
        if let Some(store) = &self.file.store {
            return Some((store.clone(), self.file_origin("store")));
        }
        lllm::store::Store::default_dir(&set).map(|dir| (dir, "default".into()))
    }

    /// Where `lllm run` writes records not given `--record`: the file's
    /// `records`, else `sessions/` in the store directory, so that a run
    /// is found again from anywhere (`lllm logs`), else `./sessions`.
    pub fn records_dir(&self, store_flag: Option<&Path>) -> PathBuf {
        self.records_dir_with_origin(store_flag).0
    }

    /// [`Settings::records_dir`] and where it came from.
    pub fn records_dir_with_origin(&self, store_flag: Option<&Path>) -> (PathBuf, Origin) {
        if let Some(records) = &self.file.records {
            return (records.clone(), self.file_origin("records"));
        }
        match self.store_dir_with_origin(store_flag) {
            Some((dir, origin)) => (dir.join("sessions"), format!("the store ({origin})")),
            None => (PathBuf::from("sessions"), "default".into()),
        }
    }

    fn file_origin(&self, key: &str) -> Origin {
        match &self.config_path {
            Some(path) => format!("{} ({key})", path.display()),
            None => "config file".into(),
        }
    }
}

/// The largest config file read.
const CONFIG_FILE_CAP: u64 = 1 << 20;

/// The config file at `path`, `None` when there is none; every problem of
/// it, one line each naming the file.
fn read_config(path: &Path, home: Option<&str>) -> Result<Option<ConfigFile>> {
    let text = match lllm::file::read_text(path, CONFIG_FILE_CAP) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(Error::Usage(format!(
                "cannot read config file `{}`: {error}",
                path.display()
            )));
        }
    };
    let place = path.display().to_string();
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parse_config(&text, &place, &directory, home)
        .map(Some)
        .map_err(|problems| {
            Error::Usage(
                problems
                    .iter()
                    .map(|problem| lllm::redact::terminal_line(problem).into_owned())
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        })
}

fn parse_config(
    text: &str,
    place: &str,
    directory: &Path,
    home: Option<&str>,
) -> std::result::Result<ConfigFile, Vec<String>> {
    let (document, positions) = lllm::yaml::parse_located(text).map_err(|error| {
        vec![match error.location {
            Some(at) => format!("{place}:{}:{}: {}", at.line, at.column, error.message),
            None => format!("{place}: {}", error.message),
        }]
    })?;
    // `file:line:column` of the setting at `path` (the file alone when it
    // has no place).
    let at = |path: &str| match positions.get(path) {
        Some(at) => format!("{place}:{}:{}", at.line, at.column),
        None => place.to_string(),
    };
    let map = match document {
        Value::Null => return Ok(ConfigFile::default()),
        Value::Object(map) => map,
        _ => {
            return Err(vec![format!(
                "{place}: not a mapping of settings; known keys: {}",
                KEYS.join(", ")
            )]);
        }
    };
    let mut problems = Vec::new();
    for name in map.keys().filter(|name| !KEYS.contains(&name.as_str())) {
        problems.push(format!(
            "{}: unknown key `{}`; known keys: {}{}",
            at(name),
            lllm::suggest::printable(name),
            KEYS.join(", "),
            lllm::suggest::hint(name, KEYS.iter().copied())
        ));
    }
    let mut file = ConfigFile::default();
    let absolute = |value: &str| expand(value, directory, home);
    let text_of = |key: &str, problems: &mut Vec<String>| -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if !text.trim().is_empty() => Some(text.clone()),
            Some(_) => {
                problems.push(format!("{}: `{key}` must be a non-empty string", at(key)));
                None
            }
        }
    };
    file.model = text_of("model", &mut problems);
    file.prices = text_of("prices", &mut problems).map(|path| absolute(&path));
    file.records = text_of("records", &mut problems).map(|path| absolute(&path));
    file.store = text_of("store", &mut problems).map(|path| absolute(&path));
    let switch = |key: &str, problems: &mut Vec<String>| match map.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(*on),
        Some(_) => {
            problems.push(format!("{}: `{key}` must be `true` or `false`", at(key)));
            None
        }
    };
    file.cache = switch("cache", &mut problems);
    file.compress = switch("compress", &mut problems);
    file.concurrency = lllm::config::numbers::read_whole(
        map.get("concurrency"),
        &lllm::config::numbers::Range {
            key: "concurrency",
            ..crate::numbers::CONCURRENCY
        },
        &at("concurrency"),
        &mut problems,
    )
    .map(|count| count as usize);
    match map.get("providers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(providers)) => {
            let mut checked = Map::new();
            for (name, entry) in providers {
                let mut entry = entry.clone();
                if let Value::Object(fields) = &mut entry {
                    if fields.contains_key("api_key") {
                        problems.push(format!(
                            "{}: `providers.{name}.api_key`: a key is not written in the config file; \
                             hint: `lllm keys set VARIABLE`, an env file or the environment holds it, \
                             and `api_key_env: VARIABLE` names it",
                            at(&format!("providers.{name}.api_key"))
                        ));
                        continue;
                    }
                    warn_about_literal_headers(place, name, fields);
                    if let Some(Value::String(script)) = fields.get_mut("script") {
                        *script = absolute(script).display().to_string();
                    }
                }
                checked.insert(name.clone(), entry);
            }
            problems.extend(
                lllm::config::check_providers_at(&checked, &positions)
                    .into_iter()
                    .map(|(location, problem)| match location {
                        Some(at) => format!("{place}:{}:{}: {problem}", at.line, at.column),
                        None => format!("{place}: {problem}"),
                    }),
            );
            file.providers = checked;
        }
        Some(_) => problems.push(format!(
            "{}: `providers` must be a mapping of provider names to entries",
            at("providers")
        )),
    }
    if problems.is_empty() {
        Ok(file)
    } else {
        Err(problems)
    }
}

/// A header that carries a credential, written in the file in plain text:
/// allowed (some gateways want one), with a warning.
fn warn_about_literal_headers(place: &str, name: &str, fields: &Map<String, Value>) {
    let Some(Value::Object(headers)) = fields.get("headers") else {
        return;
    };
    for header in headers.keys() {
        let lowered = header.to_ascii_lowercase();
        if matches!(
            lowered.as_str(),
            "authorization" | "x-api-key" | "api-key" | "proxy-authorization"
        ) {
            lllm::report::warn(&format!(
                "{place}: `providers.{name}.headers.{header}` holds a credential in plain text; \
                 hint: keep keys in the environment, an env file or `lllm keys`, and name them with `api_key_env`"
            ));
        }
    }
}

/// A path the config file gives: `~/` is the home directory, a relative
/// path is taken from the config file's directory.
fn expand(value: &str, directory: &Path, home: Option<&str>) -> PathBuf {
    if let (Some(rest), Some(home)) = (value.strip_prefix("~/"), home) {
        return PathBuf::from(home).join(rest);
    }
    directory.join(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn parsed(text: &str) -> std::result::Result<ConfigFile, String> {
        parse_config(text, "config.yaml", Path::new("/conf"), Some("/home/u"))
            .map_err(|problems| problems.join("\n"))
    }

    #[test]
    fn a_config_file_reads_with_paths_from_its_directory() {
        let file = parsed(
            "model: openai/local\nprices: prices.json\nrecords: ~/runs\nstore: /data/lllm\n\
             concurrency: 4\ncache: true\nproviders:\n  local: {base_url: \"http://127.0.0.1:1/v1\", api_key_env: LOCAL_KEY}\n",
        )
        .unwrap();
        assert_eq!(file.model.as_deref(), Some("openai/local"));
        assert_eq!(file.prices, Some(PathBuf::from("/conf/prices.json")));
        assert_eq!(file.records, Some(PathBuf::from("/home/u/runs")));
        assert_eq!(file.store, Some(PathBuf::from("/data/lllm")));
        assert_eq!(file.concurrency, Some(4));
        assert_eq!(file.cache, Some(true));
        assert_eq!(file.providers["local"]["api_key_env"], "LOCAL_KEY");
        assert!(parsed("").unwrap().model.is_none());
        assert!(parsed("# nothing\n").unwrap().providers.is_empty());
    }

    #[test]
    fn every_problem_names_the_file_and_the_key() {
        let cases: &[(&str, &str)] = &[
            (
                "model: a\nmodle: b\n",
                "config.yaml:2:1: unknown key `modle`; known keys: model, providers, prices, concurrency, records, store, cache, compress; did you mean `model`?",
            ),
            ("model: [a\n", "config.yaml:1:8: unclosed bracket '['"),
            ("- a\n", "config.yaml: not a mapping of settings"),
            (
                "concurrency: 0\n",
                "config.yaml:1:1: `concurrency: 0` must be a whole number from 1 to 100000",
            ),
            (
                "concurrency: .inf\n",
                "config.yaml:1:1: `concurrency: .inf`",
            ),
            (
                "cache: maybe\n",
                "config.yaml:1:1: `cache` must be `true` or `false`",
            ),
            (
                "model: 3\n",
                "config.yaml:1:1: `model` must be a non-empty string",
            ),
            (
                "providers:\n  local: {api_key: sk-literal}\n",
                "config.yaml:2:11: `providers.local.api_key`: a key is not written in the config file",
            ),
            (
                "providers:\n  local: {base_ur: x}\n",
                "config.yaml:2:11: `providers.local.base_ur`: unknown field `base_ur`, expected one of `api`, `base_url`",
            ),
            (
                "providers:\n  local: {max_concurrency: 0}\n",
                "config.yaml:2:11: provider `local`: `max_concurrency: 0` must be",
            ),
            (
                "providers: [a]\n",
                "config.yaml:1:1: `providers` must be a mapping",
            ),
        ];
        for (text, expected) in cases {
            let error = parsed(text).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
            assert!(!error.contains("sk-literal"), "{error}");
        }
    }
}
