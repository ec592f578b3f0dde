//! Prices usage: writes per-token rates and dollar costs into a message's
//! normalized usage, from the model table. A price belongs to a provider and
//! a model (`ModelTable::price`): an unknown one gets `response_cost: null`
//! (never a silent $0, and never another provider's price) and one warning
//! per session store (per run without one; none in a replay).
//!
//! Also the ranges of every number in a price table (a tactic's `pricing:`,
//! `--prices` in our format or LiteLLM's): a negative price would make
//! `--max-cost` budget a run that spends money as one that earns it, so
//! prices are checked when they are read, every problem named.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use super::models::ModelTable;
use crate::config::numbers::Range;

/// Our format: USD per million tokens, up to a dollar a token.
const PER_MILLION: [Range; 4] = [
    per_million("input_per_million"),
    per_million("output_per_million"),
    per_million("cached_input_per_million"),
    per_million("cache_write_per_million"),
];
/// LiteLLM's: USD per token.
const PER_TOKEN: [Range; 4] = [
    per_token("input_cost_per_token"),
    per_token("output_cost_per_token"),
    per_token("cache_read_input_token_cost"),
    per_token("cache_creation_input_token_cost"),
];
/// Token limits in either format (a model's window, its reply limit).
const LIMITS: [Range; 4] = [
    tokens("context_window"),
    tokens("max_output_tokens"),
    tokens("max_input_tokens"),
    tokens("max_tokens"),
];

const fn per_million(key: &'static str) -> Range {
    Range {
        key,
        min: 0.0,
        max: 1e6,
        whole: false,
        unit: "USD per 1M tokens",
    }
}

const fn per_token(key: &'static str) -> Range {
    Range {
        key,
        min: 0.0,
        max: 1.0,
        whole: false,
        unit: "USD per token",
    }
}

const fn tokens(key: &'static str) -> Range {
    Range {
        key,
        min: 1.0,
        max: 1e8,
        whole: true,
        unit: "tokens",
    }
}

/// Every number of one price entry out of range, as `` `model`: `key: value` must be … ``.
/// Keys other than prices and token limits are not this module's business.
pub fn check_entry(model: &str, entry: &Value) -> Vec<String> {
    let Some(entry) = entry.as_object() else {
        return Vec::new();
    };
    PER_MILLION
        .iter()
        .chain(&PER_TOKEN)
        .chain(&LIMITS)
        .filter_map(|range| {
            let value = entry.get(range.key).filter(|value| !value.is_null())?;
            range
                .check(value)
                .err()
                .map(|problem| format!("`{model}`: {problem}"))
        })
        .collect()
}

/// [`check_entry`] for every entry of a table `{model: {…}}`.
pub fn check_table(table: &Value) -> Vec<String> {
    table
        .as_object()
        .map(|entries| {
            entries
                .iter()
                .flat_map(|(model, entry)| check_entry(model, entry))
                .collect()
        })
        .unwrap_or_default()
}

/// What a Batch API answer costs, as a share of the same call's price: both
/// OpenAI's Batch API and Anthropic's Message Batches charge half (input,
/// output and cached input alike).
pub const BATCH_DISCOUNT: f64 = 0.5;

/// Prices `usage` of `model` on `provider` (whose endpoint is the hosted
/// `service`, if any) in place; returns whether the price was known. Usage
/// marked as answered by a Batch API (`batch_api::BATCH_USAGE_KEY`) is
/// priced at `BATCH_DISCOUNT` of the table's prices.
pub fn apply(
    table: &ModelTable,
    provider: &str,
    service: Option<&str>,
    model: &str,
    usage: &mut Map<String, Value>,
) -> bool {
    let counts = crate::dialog::InvokeCost::from_usage(usage);
    let (prompt, completion) = (counts.prompt_tokens, counts.completion_tokens);
    let cached = counts.cached_prompt_tokens.min(prompt);
    let share = if usage.get(super::batch_api::BATCH_USAGE_KEY) == Some(&Value::Bool(true)) {
        BATCH_DISCOUNT
    } else {
        1.0
    };
    let (input, output, cached_rate) = if provider == "mock" {
        (0.0, 0.0, 0.0)
    } else {
        match table.price(provider, service, model) {
            Some(info) => {
                let input = info.input_per_million / 1e6 * share;
                (
                    input,
                    info.output_per_million / 1e6 * share,
                    info.cached_input_per_million
                        .map_or(input, |rate| rate / 1e6 * share),
                )
            }
            None => {
                usage.insert("response_cost".into(), Value::Null);
                return false;
            }
        }
    };
    let prompt_cost = (prompt - cached) as f64 * input + cached as f64 * cached_rate;
    let completion_cost = completion as f64 * output;
    usage.insert("input_cost_per_token".into(), json!(input));
    usage.insert("output_cost_per_token".into(), json!(output));
    usage.insert("cache_read_input_token_cost".into(), json!(cached_rate));
    usage.insert("prompt_cost".into(), json!(prompt_cost));
    usage.insert("completion_cost".into(), json!(completion_cost));
    usage.insert("response_cost".into(), json!(prompt_cost + completion_cost));
    true
}

/// One warning per unknown model, however many calls or tasks hit it, and
/// once per session store rather than once per run (`report::first_in_store`;
/// issue 27: the same warning on every run of a local model). `lllm models
/// --check` lists such models at any time.
#[derive(Default)]
pub struct UnknownPriceWarnings {
    warned: Mutex<BTreeSet<String>>,
    silent: bool,
}

impl UnknownPriceWarnings {
    /// Warnings never said: a replay's (`lllm replay --rerun`), whose costs
    /// were told when the run was made.
    pub fn silent() -> UnknownPriceWarnings {
        UnknownPriceWarnings {
            silent: true,
            ..UnknownPriceWarnings::default()
        }
    }

    /// The warning to say about `provider/model` having no price, the first
    /// time it is asked for here and in the session store.
    pub fn warn_once(&self, provider: &str, model: &str) -> Option<String> {
        if self.silent {
            return None;
        }
        let name = format!("{provider}/{model}");
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !warned.insert(name.clone())
            || !crate::report::first_in_store(&format!("no-price {name}"))
        {
            return None;
        }
        Some(format!(
            "no price known for `{name}`; its cost is reported as unknown (add `{name}` under \
             `pricing:`); said once per session store: `lllm models --check TACTIC` lists such models"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn prices_cached_and_uncached_input() {
        let mut usage = usage(
            json!({"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 400}}),
        );
        assert!(apply(
            ModelTable::bundled(),
            "openai",
            Some("openai"),
            "gpt-4o-mini",
            &mut usage
        ));
        let cost = crate::dialog::InvokeCost::from_usage(&usage);
        let expected_prompt = 600.0 * 0.15e-6 + 400.0 * 0.075e-6;
        assert!((cost.prompt_cost - expected_prompt).abs() < 1e-12);
        assert!((cost.completion_cost - 100.0 * 0.6e-6).abs() < 1e-12);
        assert!(cost.cost_known);
    }

    #[test]
    fn a_batch_api_answer_costs_half_of_every_rate() {
        let price = |batched: bool| {
            let mut usage = usage(json!({"prompt_tokens": 1000, "completion_tokens": 100,
                "prompt_tokens_details": {"cached_tokens": 400}}));
            if batched {
                usage.insert(
                    crate::provider::batch_api::BATCH_USAGE_KEY.into(),
                    json!(true),
                );
            }
            let table = ModelTable::bundled();
            assert!(apply(
                table,
                "openai",
                Some("openai"),
                "gpt-4o-mini",
                &mut usage
            ));
            crate::dialog::InvokeCost::from_usage(&usage)
        };
        let (full, batched) = (price(false), price(true));
        assert!((batched.prompt_cost - full.prompt_cost * BATCH_DISCOUNT).abs() < 1e-15);
        assert!((batched.completion_cost - full.completion_cost * BATCH_DISCOUNT).abs() < 1e-15);
        assert!(batched.prompt_cost > 0.0 && batched.cost_known);
    }

    #[test]
    fn every_price_and_limit_out_of_range_is_named() {
        let table = json!({
            "ours": {"input_per_million": -1, "output_per_million": ".inf",
                     "cached_input_per_million": 2e6, "context_window": 0},
            "litellm": {"input_cost_per_token": -1e-6, "output_cost_per_token": 2,
                        "cache_read_input_token_cost": "free", "max_input_tokens": 1.5,
                        "max_output_tokens": -3, "litellm_provider": "openai"},
            "fine": {"input_per_million": 0, "output_per_million": 1e6, "max_tokens": 100000000,
                     "tokenizer": "o200k"},
        });
        assert_eq!(
            check_table(&table),
            [
                "`ours`: `input_per_million: -1` must be a number from 0 to 1000000 (USD per 1M tokens)",
                "`ours`: `output_per_million: .inf` must be a number from 0 to 1000000 (USD per 1M tokens)",
                "`ours`: `cached_input_per_million: 2000000.0` must be a number from 0 to 1000000 (USD per 1M tokens)",
                "`ours`: `context_window: 0` must be a whole number from 1 to 100000000 (tokens)",
                "`litellm`: `input_cost_per_token: -1e-6` must be a number from 0 to 1 (USD per token)",
                "`litellm`: `output_cost_per_token: 2` must be a number from 0 to 1 (USD per token)",
                "`litellm`: `cache_read_input_token_cost: free` must be a number from 0 to 1 (USD per token)",
                "`litellm`: `max_output_tokens: -3` must be a whole number from 1 to 100000000 (tokens)",
                "`litellm`: `max_input_tokens: 1.5` must be a whole number from 1 to 100000000 (tokens)",
            ]
        );
    }

    #[test]
    fn unknown_models_are_null_and_warned_once_and_mock_is_free() {
        let mut unknown = usage(json!({"prompt_tokens": 5}));
        assert!(!apply(
            ModelTable::bundled(),
            "local",
            None,
            "my-model",
            &mut unknown
        ));
        assert_eq!(unknown["response_cost"], Value::Null);
        let warnings = UnknownPriceWarnings::default();
        assert!(warnings.warn_once("local", "my-model").is_some());
        assert!(warnings.warn_once("local", "my-model").is_none());
        assert!(
            UnknownPriceWarnings::silent()
                .warn_once("local", "other-model")
                .is_none()
        );
        let mut free = usage(json!({"prompt_tokens": 5}));
        assert!(apply(
            ModelTable::bundled(),
            "mock",
            None,
            "echo",
            &mut free
        ));
        assert_eq!(free["response_cost"], json!(0.0));
    }

    #[track_caller]
    fn priced(
        table: &ModelTable,
        provider: &str,
        service: Option<&str>,
        model: &str,
    ) -> Option<f64> {
        let mut counted = usage(json!({"prompt_tokens": 1_000_000, "completion_tokens": 0}));
        apply(table, provider, service, model, &mut counted)
            .then(|| counted["response_cost"].as_f64().unwrap_or_default())
    }

    #[test]
    fn prices_belong_to_a_provider_and_a_model() {
        let bundled = ModelTable::bundled();
        // OpenAI's price applies to api.openai.com, whatever the provider is called.
        assert_eq!(
            priced(bundled, "openai", Some("openai"), "gpt-4o-mini"),
            Some(0.15)
        );
        assert_eq!(
            priced(bundled, "myopenai", Some("openai"), "gpt-4o-mini"),
            Some(0.15)
        );
        // A self-hosted server (or OPENAI_BASE_URL moved elsewhere) is not OpenAI.
        assert_eq!(priced(bundled, "local", None, "gpt-4o-mini"), None);
        assert_eq!(priced(bundled, "openai", None, "gpt-4o-mini"), None);
        assert_eq!(priced(bundled, "groq", Some("groq"), "gpt-4o-mini"), None);
        // Anthropic's and Gemini's where they are served.
        assert_eq!(
            priced(bundled, "anthropic", Some("anthropic"), "claude-haiku-4-5"),
            priced(
                bundled,
                "claude",
                Some("anthropic"),
                "claude-haiku-4-5-20251001"
            )
        );
        assert!(priced(bundled, "anthropic", Some("anthropic"), "claude-haiku-4-5").is_some());
        assert!(priced(bundled, "proxy", None, "claude-haiku-4-5").is_none());
        assert!(priced(bundled, "gemini", Some("gemini"), "gemini-2.5-flash").is_some());
        // A router charges the upstream's price.
        assert_eq!(
            priced(
                bundled,
                "openrouter",
                Some("openrouter"),
                "openai/gpt-4o-mini"
            ),
            Some(0.15)
        );
        assert_eq!(
            priced(bundled, "openrouter", Some("openrouter"), "gpt-4o-mini"),
            None
        );
        // The user's prices: `provider/model` for that provider only, a bare
        // name for any provider.
        let own = bundled
            .with_overrides(&json!({
                "local/gpt-4o-mini": {"input_per_million": 0.01, "output_per_million": 0.02},
                "my-finetune": {"input_per_million": 2.0, "output_per_million": 4.0}
            }))
            .unwrap();
        assert_eq!(priced(&own, "local", None, "gpt-4o-mini"), Some(0.01));
        assert_eq!(priced(&own, "other", None, "gpt-4o-mini"), None);
        assert_eq!(
            priced(&own, "openai", Some("openai"), "gpt-4o-mini"),
            Some(0.15)
        );
        assert_eq!(priced(&own, "vllm", None, "my-finetune"), Some(2.0));
        assert_eq!(
            priced(&own, "openai", Some("openai"), "my-finetune"),
            Some(2.0)
        );
    }
}
