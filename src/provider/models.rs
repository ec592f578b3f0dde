//! The model table: prices (USD per 1M tokens), input context windows and
//! tokenizers of current OpenAI, Anthropic and Gemini models, bundled from
//! `models.json` and overridable by a tactic's `pricing:`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    #[serde(default)]
    pub provider: Option<String>,
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Cached input; the input price when not given.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
    /// Input token limit (D13).
    #[serde(default)]
    pub context_window: Option<u64>,
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// `o200k` or `cl100k` for OpenAI models; none elsewhere.
    #[serde(default)]
    pub tokenizer: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    models: BTreeMap<String, ModelInfo>,
}

#[derive(Deserialize)]
struct Bundle {
    models: BTreeMap<String, ModelInfo>,
}

impl ModelTable {
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

    /// `model` as given, then without a date suffix (`-2024-08-06`, `-20250929`)
    /// or `-latest`, then the part after the last `/` (`openrouter/openai/gpt-4o`).
    pub fn lookup(&self, _provider: &str, model: &str) -> Option<&ModelInfo> {
        let base = model.rsplit('/').next().unwrap_or(model);
        [model, base]
            .into_iter()
            .flat_map(|name| [name.to_string(), strip_version(name)])
            .find_map(|name| self.models.get(&name))
    }

    /// This table with `overrides` (`{model: {input_per_million, output_per_million, …}}`) on top.
    pub fn with_overrides(&self, overrides: &Value) -> Result<ModelTable, String> {
        let overrides: BTreeMap<String, ModelInfo> = serde_json::from_value(overrides.clone())
            .map_err(|error| {
                format!("expected `model: {{input_per_million, output_per_million}}`: {error}")
            })?;
        let mut table = self.clone();
        table.models.extend(overrides);
        Ok(table)
    }
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
