//! The flags every command that runs tasks shares for the session store
//! (`--store DIR`, `--no-store`, `--tag k=v`, `--meta k=v`) and where the
//! store is by default. The store itself is `lllm::store`.

use std::path::PathBuf;

use serde_json::{Map, Value};

use lllm::error::{Error, Result};

/// `lllm run` and `lllm batch`: where their sessions are registered and the
/// labels they carry.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// A tag recorded with the session(s), `key=value` (repeatable):
    /// `lllm logs --tag key=value` finds them. A batch's task lines' own
    /// `tags` win over it.
    #[arg(long = "tag", value_name = "KEY=VALUE")]
    pub tags: Vec<String>,
    /// A metadata entry recorded with the session(s), `key=value` (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,
    /// The session store to register the session(s) in (default: `$LLLM_HOME`,
    /// else the config file's `store`, else `$XDG_DATA_HOME/lllm`, else
    /// `~/.local/share/lllm`).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Do not register the session(s) in the session store.
    #[arg(long, conflicts_with = "store")]
    pub no_store: bool,
    /// Answer each model call from the response cache when the same request
    /// (model, messages, tools, format, model arguments, endpoint) succeeded
    /// before, and keep new replies there: a hit is not sent and costs $0.
    /// Over the tactic's and providers' `cache` settings. The cache is
    /// `cache.sqlite` in the store's directory (`--no-store` does not move it).
    /// `--cache=false` (or `LLLM_CACHE=0`) is `--no-cache`; without either,
    /// the config file's `cache` decides, and without that the tactics'.
    #[arg(
        long,
        env = "LLLM_CACHE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        overrides_with = "no_cache"
    )]
    pub cache: Option<bool>,
    /// Send every call, whatever the tactic's and providers' `cache` say.
    #[arg(long, overrides_with = "cache")]
    pub no_cache: bool,
}

impl StoreArgs {
    /// The store directory these flags ask for, `None` with `--no-store` (or
    /// when no home directory is known, with a warning).
    pub fn dir(&self) -> Option<PathBuf> {
        if self.no_store {
            return None;
        }
        let dir = crate::settings::current().store_dir(self.store.as_deref());
        if dir.is_none() {
            lllm::report::warn(&format!("no session store: {NO_STORE_DIR}"));
        }
        dir
    }
}

impl StoreArgs {
    /// `--cache` / `--no-cache` and the store's response cache, opened when a
    /// tactic's settings first turn it on.
    pub fn cache_source(&self) -> std::sync::Arc<lllm::provider::cache::CacheSource> {
        let settings = crate::settings::current();
        // `--no-cache`, then `--cache` (or `LLLM_CACHE`), then the config file.
        let flag = match (self.cache, self.no_cache) {
            (_, true) => Some(false),
            (Some(true), _) => Some(true),
            (Some(false), _) => Some(false),
            (None, _) => settings.file.cache,
        };
        let dir = settings.store_dir(self.store.as_deref());
        std::sync::Arc::new(lllm::provider::cache::CacheSource::new(flag, move || {
            let Some(dir) = &dir else {
                return Err(format!("no response cache: {NO_STORE_DIR}"));
            };
            lllm::store::Cache::open(dir)
                .map(|cache| {
                    std::sync::Arc::new(cache)
                        as std::sync::Arc<dyn lllm::provider::cache::ResponseCache>
                })
                .map_err(|error| error.to_string())
        }))
    }
}

/// Why no store directory is known, and the way out (after `no session
/// store: ` or `no response cache: `).
pub const NO_STORE_DIR: &str = "none of `LLLM_HOME`, `XDG_DATA_HOME` and `HOME` is set \
     and the config file names no `store`; hint: pass `--store DIR`";

/// The default store directory: `LLLM_HOME`, the config file's `store`,
/// the XDG data directory (`settings`).
pub fn default_dir() -> Option<PathBuf> {
    crate::settings::current().store_dir(None)
}

/// `key=value` flags (`flag` names them in errors) into a map of strings.
pub fn pairs(flag: &str, given: &[String]) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for pair in given {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(Error::Usage(format!(
                "`{flag} {}` is not `key=value`",
                lllm::redact::echo(pair)
            )));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(Error::Usage(format!(
                "`{flag} {}`: the key is empty",
                lllm::redact::echo(pair)
            )));
        }
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(map)
}
