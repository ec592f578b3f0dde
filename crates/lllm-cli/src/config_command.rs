//! `lllm config path|show`: where the user config file is, and every
//! setting in effect with where it came from (flag defaults, `LLLM_*`
//! variables, the config file, built-in defaults). A provider entry is
//! shown by name and base URL only (`redact::url`), never a header value.

use crate::settings::Settings;
use lllm::error::{Outcome, Result};

/// `lllm config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print the config file's path (whether or not it exists).
    Path,
    /// The settings in effect and where each comes from; never a secret.
    Show,
}

pub fn run(args: ConfigArgs, settings: &Settings) -> Result<Outcome> {
    let text = match args.command {
        ConfigCommand::Path => match &settings.config_path {
            Some(path) => format!("{}\n", path.display()),
            None => "no config file: none of `LLLM_CONFIG`, `XDG_CONFIG_HOME` and `HOME` is set\n"
                .to_string(),
        },
        ConfigCommand::Show => show(settings),
    };
    lllm::output::stdout(&lllm::redact::terminal_text(&text))?;
    Ok(Outcome::Success)
}

fn show(settings: &Settings) -> String {
    let mut lines: Vec<(String, String, String)> = Vec::new();
    let mut add = |key: &str, value: String, origin: String| {
        lines.push((key.to_string(), value, origin));
    };
    let config = match (&settings.config_path, settings.file_read) {
        (Some(path), true) => path.display().to_string(),
        (Some(path), false) => format!("{} (not there)", path.display()),
        (None, _) => "none".to_string(),
    };
    add("config", config, "--config, LLLM_CONFIG or default".into());
    let env_files = if settings.env_files.is_empty() {
        "none".to_string()
    } else {
        settings
            .env_files
            .iter()
            .map(|path| path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    add(
        "env files",
        env_files,
        "--env-file, LLLM_ENV_FILE or ./.env".into(),
    );
    add(
        "keys file",
        settings.keys_path().display().to_string(),
        "beside the config file".into(),
    );
    match settings.default_model() {
        Some((model, origin)) => add("model", model, origin),
        None => add("model", "none".into(), "each tactic names its own".into()),
    }
    let file = &settings.file;
    let from_file = |key: &str| match &settings.config_path {
        Some(path) => format!("{} ({key})", path.display()),
        None => "config file".into(),
    };
    for (name, entry) in &file.providers {
        let base_url = entry
            .get("base_url")
            .and_then(serde_json::Value::as_str)
            .map(|url| lllm::redact::url(url).into_owned())
            .unwrap_or_else(|| "(preset)".into());
        add(
            &format!("provider {name}"),
            base_url,
            from_file("providers"),
        );
    }
    match std::env::var("LLLM_PRICES")
        .ok()
        .filter(|value| !value.is_empty())
    {
        Some(path) => add("prices", path, "LLLM_PRICES".into()),
        None => match &file.prices {
            Some(path) => add("prices", path.display().to_string(), from_file("prices")),
            None => add("prices", "bundled".into(), "default".into()),
        },
    }
    match std::env::var("LLLM_CONCURRENCY")
        .ok()
        .filter(|value| !value.is_empty())
    {
        Some(count) => add("concurrency", count, "LLLM_CONCURRENCY".into()),
        None => match file.concurrency {
            Some(count) => add("concurrency", count.to_string(), from_file("concurrency")),
            None => add("concurrency", "16".into(), "default".into()),
        },
    }
    match std::env::var("LLLM_CACHE")
        .ok()
        .filter(|value| !value.is_empty())
    {
        Some(value) => add("cache", value, "LLLM_CACHE".into()),
        None => match file.cache {
            Some(on) => add("cache", on.to_string(), from_file("cache")),
            None => add("cache", "per tactic".into(), "default".into()),
        },
    }
    match std::env::var("LLLM_COMPRESS")
        .ok()
        .filter(|value| !value.is_empty())
    {
        Some(value) => add("compress", value, "LLLM_COMPRESS".into()),
        None => match file.compress {
            Some(on) => add("compress", on.to_string(), from_file("compress")),
            None => add("compress", "false".into(), "default".into()),
        },
    }
    match settings.store_dir_with_origin(None) {
        Some((dir, origin)) => add("store", dir.display().to_string(), origin),
        None => add("store", "none".into(), "no home directory".into()),
    }
    let (records, origin) = settings.records_dir_with_origin(None);
    add("records", records.display().to_string(), origin);
    let width = lines.iter().map(|(key, ..)| key.len()).max().unwrap_or(0);
    lines
        .iter()
        .map(|(key, value, origin)| format!("{key:width$}  {value}  ({origin})\n"))
        .collect()
}
