//! The model table: prices (USD per 1M tokens), input context windows and
//! tokenizers of current OpenAI, Anthropic and Gemini models, bundled from
//! `models.json` and overridable by a tactic's `pricing:`.
//!
//! A price belongs to a provider and a model: the bundled entries name the
//! service whose published price they are (`provider: openai`), and apply
//! only to a provider whose endpoint is that service. `local/gpt-4o-mini`
//! on a self-hosted server has no bundled price; `pricing:` gives it one.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What lllm knows of a model: prices (USD per million tokens) and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The provider service the price belongs to (`openai`, `anthropic`, …).
    #[serde(default)]
    pub provider: Option<String>,
    /// Input tokens.
    pub input_per_million: f64,
    /// Output tokens.
    pub output_per_million: f64,
    /// Cached input; the input price when not given.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
    /// Writing the prompt cache (Anthropic's `cache_creation_input_tokens`),
    /// as published; shown by `lllm models`, while a reply's cost still
    /// prices those tokens as input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_million: Option<f64>,
    /// Input token limit (D13).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The longest reply.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// `o200k` or `cl100k` for OpenAI models; none elsewhere.
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Whether the API enforces a JSON schema on the reply through its own
    /// structured-output parameter (Anthropic's `output_config.format`,
    /// Claude 4.5 and later): what `structured_output: auto` sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<bool>,
}

/// Models by name: the bundled table, with a tactic's `pricing` and
/// `--prices` over it.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    models: BTreeMap<String, ModelInfo>,
}

#[derive(Deserialize)]
struct Bundle {
    models: BTreeMap<String, ModelInfo>,
}

impl ModelTable {
    /// The table shipped with lllm.
    pub fn bundled() -> &'static ModelTable {
        static TABLE: OnceLock<ModelTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            let bundle: Result<Bundle, _> = serde_json::from_str(include_str!("models.json"));
            // The file ships with the binary and is tested; an empty table would
            // only make every price unknown.
            ModelTable {
                models: bundle.map(|bundle| bundle.models).unwrap_or_default(),
            }
        })
    }

    /// Every entry by name, sorted.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &ModelInfo)> {
        self.models.iter().map(|(name, info)| (name.as_str(), info))
    }

    /// What is known of a model, whoever serves it (its context window and
    /// tokenizer; not its price, see [`ModelTable::price`]): the entry
    /// `provider/model`, else `model` as given, then without a date suffix
    /// (`-2024-08-06`, `-20250929`) or `-latest`, then the part after the
    /// last `/` (`openrouter/openai/gpt-4o`).
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&ModelInfo> {
        if let Some(info) = self.qualified(provider, model) {
            return Some(info);
        }
        let base = model.rsplit('/').next().unwrap_or(model);
        // The name as given is found without building other names.
        [model, base].into_iter().find_map(|name| self.named(name))
    }

    /// The price of `model` on provider `provider`, whose endpoint is the
    /// hosted `service` (`None`: a local server, a proxy, any other host):
    /// 1. an entry `provider/model` (from `pricing:` or `--prices`): the user
    ///    priced this provider's model;
    /// 2. an entry `model` (as given, then without a date suffix) that names
    ///    no provider (a user's own `pricing: {my-model: …}`, for any
    ///    provider) or names `service` (the bundled prices: OpenAI's apply to
    ///    api.openai.com only);
    /// 3. on a router that charges what the upstream provider does
    ///    (`openrouter/openai/gpt-4o`), the upstream's entry for `gpt-4o`.
    pub fn price(&self, provider: &str, service: Option<&str>, model: &str) -> Option<&ModelInfo> {
        if let Some(info) = self.qualified(provider, model) {
            return Some(info);
        }
        let belongs = |info: &&ModelInfo, service: Option<&str>| match &info.provider {
            None => true,
            Some(owner) => Some(owner.as_str()) == service,
        };
        if let Some(info) = self.named(model).filter(|info| belongs(info, service)) {
            return Some(info);
        }
        match (service, model.split_once('/')) {
            (Some("openrouter"), Some((upstream, name))) => self
                .named(name)
                .filter(|info| info.provider.as_deref() == Some(upstream)),
            _ => None,
        }
    }

    /// The entry `provider/model` (or without the model's date suffix).
    fn qualified(&self, provider: &str, model: &str) -> Option<&ModelInfo> {
        if self.models.is_empty() {
            return None;
        }
        let key = format!("{provider}/{model}");
        self.models
            .get(&key)
            .or_else(|| self.models.get(&strip_version(&key)))
    }

    /// The entry named `name`, or `name` without a date suffix.
    fn named(&self, name: &str) -> Option<&ModelInfo> {
        self.models
            .get(name)
            .or_else(|| self.models.get(&strip_version(name)))
    }

    /// This table with `overrides` (`{model: {input_per_million, output_per_million, …}}`) on top.
    pub fn with_overrides(&self, overrides: &Value) -> Result<ModelTable, String> {
        let problems = super::pricing::check_table(overrides);
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let overrides: BTreeMap<String, ModelInfo> = serde_json::from_value(overrides.clone())
            .map_err(|error| {
                format!("expected `model: {{input_per_million, output_per_million}}`: {error}")
            })?;
        let mut table = self.clone();
        for (name, info) in overrides {
            // `local/my-model` prices that provider's model only: it is not
            // also `my-model`, which would price every provider's.
            table.models.insert(name, info);
        }
        Ok(table)
    }
}

/// Reads a price file: our format (`{model: {input_per_million, …}}`) or
/// LiteLLM's `model_prices_and_context_window.json` (`{model:
/// {input_cost_per_token, output_cost_per_token, cache_read_input_token_cost,
/// max_input_tokens, max_output_tokens}}`), returned in our format, ready for
/// `with_overrides`. Entries without prices (image models) and LiteLLM's
/// `sample_spec` (its documentation of the format) are skipped. A price or
/// token limit out of range in any entry is an error naming the file, the
/// model and the key, all of them listed at once.
pub fn read_price_file(path: &std::path::Path) -> Result<Value, String> {
    let text = crate::file::read_text(path, crate::file::CONFIG_CAP)
        .map_err(|error| format!("cannot read `{}`: {error}", path.display()))?;
    let document: Value = serde_json::from_str(&text)
        .or_else(|_| crate::yaml::parse(&text))
        .map_err(|error| format!("`{}` is not JSON or YAML: {error}", path.display()))?;
    let Value::Object(entries) = document else {
        return Err(format!(
            "`{}` must map model names to prices",
            path.display()
        ));
    };
    let problems: Vec<(&String, String)> = entries
        .iter()
        .filter(|(model, _)| model.as_str() != "sample_spec")
        .flat_map(|(model, entry)| {
            super::pricing::check_entry(model, entry)
                .into_iter()
                .map(move |problem| (model, problem))
        })
        .collect();
    if !problems.is_empty() {
        // Each at its model's line and column: the file read again, with
        // where its nodes are (JSON is YAML), only now that it has problems.
        let positions = crate::yaml::parse_located(&text)
            .map(|(_, positions)| positions)
            .unwrap_or_default();
        let lines: Vec<String> = problems
            .into_iter()
            .map(|(model, problem)| match positions.get(model) {
                Some(at) => format!("{}:{}:{}: {problem}", path.display(), at.line, at.column),
                None => format!("`{}`: {problem}", path.display()),
            })
            .collect();
        return Err(lines.join("\n"));
    }
    let mut prices = serde_json::Map::new();
    for (model, entry) in entries {
        let number = |key: &str| entry.get(key).and_then(Value::as_f64);
        let converted = if let (Some(input), Some(output)) = (
            number("input_cost_per_token"),
            number("output_cost_per_token"),
        ) {
            let mut info = serde_json::json!({"input_per_million": input * 1e6, "output_per_million": output * 1e6});
            // Whose price it is: LiteLLM's provider names, ours where they differ.
            if let Some(provider) = entry.get("litellm_provider").and_then(Value::as_str) {
                let provider = match provider {
                    "together_ai" => "together",
                    "text-completion-openai" => "openai",
                    other => other,
                };
                info["provider"] = serde_json::json!(provider);
            }
            if let Some(cached) = number("cache_read_input_token_cost") {
                info["cached_input_per_million"] = serde_json::json!(cached * 1e6);
            }
            if let Some(written) = number("cache_creation_input_token_cost") {
                info["cache_write_per_million"] = serde_json::json!(written * 1e6);
            }
            for (from, to) in [
                ("max_input_tokens", "context_window"),
                ("max_output_tokens", "max_output_tokens"),
            ] {
                if let Some(limit) = entry.get(from).and_then(Value::as_u64) {
                    info[to] = serde_json::json!(limit);
                }
            }
            info
        } else if number("input_per_million").is_some() && number("output_per_million").is_some() {
            entry
        } else {
            continue;
        };
        prices.insert(model, converted);
    }
    Ok(Value::Object(prices))
}

fn strip_version(name: &str) -> String {
    let name = name.strip_suffix("-latest").unwrap_or(name);
    let bytes = name.as_bytes();
    let is_digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
    // -YYYY-MM-DD
    if bytes.len() > 11 && bytes[bytes.len() - 11] == b'-' {
        let tail = &bytes[bytes.len() - 10..];
        if tail[4] == b'-'
            && tail[7] == b'-'
            && is_digits(&tail[..4])
            && is_digits(&tail[5..7])
            && is_digits(&tail[8..])
        {
            return name[..name.len() - 11].to_string();
        }
    }
    // -YYYYMMDD
    if bytes.len() > 9 && bytes[bytes.len() - 9] == b'-' && is_digits(&bytes[bytes.len() - 8..]) {
        return name[..name.len() - 9].to_string();
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn case(model: &str, expected: Option<f64>) {
        let found = ModelTable::bundled()
            .lookup("openai", model)
            .map(|info| info.input_per_million);
        assert_eq!(found, expected, "{model}");
    }

    #[test]
    fn lookup_finds_snapshots_and_prefixed_names() {
        case("gpt-4o", Some(2.5));
        case("gpt-4o-2024-08-06", Some(2.5));
        case("claude-sonnet-4-5-20250929", Some(3.0));
        case("claude-3-5-haiku-latest", Some(0.8));
        case("openai/gpt-4o-mini", Some(0.15));
        case("my-local-model", None);
        assert_eq!(
            ModelTable::bundled()
                .lookup("openai", "gpt-4o")
                .unwrap()
                .context_window,
            Some(128000)
        );
    }

    #[test]
    fn bundled_entries_name_a_known_service_and_tokenizer() {
        let services: Vec<&str> = crate::provider::endpoints::PRESETS
            .iter()
            .filter(|preset| preset.key_required)
            .map(|preset| preset.name)
            .chain(["anthropic"])
            .collect();
        let table = ModelTable::bundled();
        assert!(table.entries().count() > 100);
        for (name, info) in table.entries() {
            let service = info.provider.as_deref().unwrap_or_default();
            assert!(services.contains(&service), "{name}: {service}");
            assert!(
                matches!(info.tokenizer.as_deref(), None | Some("o200k" | "cl100k")),
                "{name}"
            );
            assert!(info.input_per_million >= 0.0 && info.output_per_million >= 0.0);
        }
        // Undated names of dated snapshots, and retired models kept by hand.
        for name in ["claude-opus-4-5", "claude-3-5-haiku", "gpt-4o-mini"] {
            assert!(
                table.price("anthropic", Some("anthropic"), name).is_some()
                    || table.price("openai", Some("openai"), name).is_some(),
                "{name}"
            );
        }
    }

    #[test]
    fn price_files_in_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        let litellm = dir.path().join("litellm.json");
        std::fs::write(
            &litellm,
            r#"{"sample_spec": {"max_tokens": "set to max"},
                "openai/my-model": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6,
                                    "cache_read_input_token_cost": 5e-7, "cache_creation_input_token_cost": 2.5e-6, "max_input_tokens": 1000, "litellm_provider": "openai"},
                "dall-e-3": {"output_cost_per_image": 0.04}}"#,
        )
        .unwrap();
        let prices = read_price_file(&litellm).unwrap();
        assert_eq!(prices.as_object().unwrap().len(), 1);
        let table = ModelTable::bundled().with_overrides(&prices).unwrap();
        // LiteLLM's `openai/my-model` is OpenAI's price: not another provider's.
        assert!(table.price("local", None, "my-model").is_none());
        let info = table.price("openai", Some("openai"), "my-model").unwrap();
        assert_eq!(info.provider.as_deref(), Some("openai"));
        assert!(
            (info.input_per_million - 2.0).abs() < 1e-9
                && (info.output_per_million - 8.0).abs() < 1e-9
        );
        assert_eq!(info.context_window, Some(1000));
        assert!((info.cache_write_per_million.unwrap_or_default() - 2.5).abs() < 1e-9);
        let ours = dir.path().join("ours.yaml");
        std::fs::write(&ours, "m: {input_per_million: 1, output_per_million: 2}\n").unwrap();
        assert_eq!(
            read_price_file(&ours).unwrap()["m"]["output_per_million"],
            2
        );
        assert!(read_price_file(&dir.path().join("missing.json")).is_err());
    }

    #[test]
    fn overrides_add_and_replace() {
        let table = ModelTable::bundled()
            .with_overrides(&json!({"my-model": {"input_per_million": 1.0, "output_per_million": 2.0}, "gpt-4o": {"input_per_million": 9.0, "output_per_million": 9.0}}))
            .unwrap();
        assert_eq!(
            table
                .lookup("local", "my-model")
                .unwrap()
                .output_per_million,
            2.0
        );
        assert_eq!(
            table.lookup("openai", "gpt-4o").unwrap().input_per_million,
            9.0
        );
        assert!(
            ModelTable::bundled()
                .with_overrides(&json!({"x": {"input": 1}}))
                .is_err()
        );
    }
}
