//! `InvokeCost`: tokens and dollars of one invoke or of many added together.
//!
//! A cost is built from a message's normalized usage (see [`InvokeCost::from_usage`]);
//! prices are written into that usage by `provider::pricing`, not here.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Token counts and dollar costs, as the seeds define them.
///
/// `cost` is `None` when no price is known for the model; adding costs keeps the
/// sum of the known parts and clears `cost_known`, so a total is marked partial and
/// never shows a silent $0 (docs/formats.md §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InvokeCost {
    /// Tokens of the request.
    pub prompt_tokens: u64,
    /// Tokens of the reply.
    pub completion_tokens: u64,
    /// Request and reply tokens together.
    pub total_tokens: u64,
    // Zero detail counts and rates are left out of records (read back as 0).
    #[serde(skip_serializing_if = "is_zero")]
    /// Request tokens served from the provider's prompt cache.
    pub cached_prompt_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    /// Reply tokens spent on reasoning (counted in `completion_tokens`).
    pub reasoning_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    /// Audio tokens of the request.
    pub audio_prompt_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    /// Audio tokens of the reply.
    pub audio_completion_tokens: u64,
    #[serde(skip_serializing_if = "is_zero_rate")]
    /// USD per request token (0 in sums: rates do not add).
    pub input_cost_per_token: f64,
    #[serde(skip_serializing_if = "is_zero_rate")]
    /// USD per reply token (0 in sums).
    pub output_cost_per_token: f64,
    #[serde(skip_serializing_if = "is_zero_rate")]
    /// USD per cached request token (0 in sums).
    pub cache_read_input_token_cost: f64,
    /// USD for the request tokens.
    pub prompt_cost: f64,
    /// USD for the reply tokens.
    pub completion_cost: f64,
    /// USD in all; `None` when no price is known.
    pub cost: Option<f64>,
    /// Whether every part of this cost had a known price.
    pub cost_known: bool,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

fn is_zero_rate(rate: &f64) -> bool {
    *rate == 0.0
}

impl Default for InvokeCost {
    fn default() -> Self {
        InvokeCost {
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            cached_prompt_tokens: 0,
            reasoning_tokens: 0,
            audio_prompt_tokens: 0,
            audio_completion_tokens: 0,
            input_cost_per_token: 0.0,
            output_cost_per_token: 0.0,
            cache_read_input_token_cost: 0.0,
            prompt_cost: 0.0,
            completion_cost: 0.0,
            cost: Some(0.0),
            cost_known: true,
        }
    }
}

/// The most tokens any one count of a call's usage may hold: 100 million,
/// far more than any model's context window (1–2 million in 2025), so a true
/// count is never cut, while a server's `18446744073709551615` cannot make a
/// call cost $36 trillion, overflow a sum, or exhaust `--max-cost` at once.
pub const MAX_CALL_TOKENS: u64 = 100_000_000;

/// A token count `name` as a provider reported it, made usable: a whole
/// number from 0 to [`MAX_CALL_TOKENS`]. Larger counts are clamped to the
/// maximum, a fraction (`12.7`, as some servers send counts in floats) is
/// rounded down, and a negative number, `NaN`-like or non-number value is 0;
/// each of these (not an absent count, not `null`) is a `tracing` warning
/// (`lllm -v`) naming the count and the value.
pub fn token_count(name: &str, value: &Value) -> u64 {
    let Value::Number(number) = value else {
        if !value.is_null() {
            tracing::warn!("usage `{name}` is not a number ({value}); counted as 0");
        }
        return 0;
    };
    if let Some(count) = number.as_u64() {
        return clamp_tokens(name, count);
    }
    match number.as_f64() {
        Some(float) if float >= 0.0 => {
            // `as` saturates: 1e300 becomes u64::MAX, then the maximum.
            let count = float.floor() as u64;
            if float.fract() != 0.0 {
                tracing::warn!(
                    "usage `{name}` is not a whole number ({value}); counted as {count}"
                );
            }
            clamp_tokens(name, count)
        }
        _ => {
            tracing::warn!("usage `{name}` is negative ({value}); counted as 0");
            0
        }
    }
}

/// A call's total: the reported `total_tokens` read as [`token_count`] does;
/// when it is not a number from 0 up (absent, `null`, negative, text), the
/// `prompt` and `completion` counts added. At most [`MAX_CALL_TOKENS`] too.
pub fn total_count(value: Option<&Value>, prompt: u64, completion: u64) -> u64 {
    match value.filter(|value| value.as_f64().is_some_and(|number| number >= 0.0)) {
        Some(value) => token_count("total_tokens", value),
        None => clamp_tokens("total_tokens", prompt.saturating_add(completion)),
    }
}

/// `count` at most [`MAX_CALL_TOKENS`], with a warning when it was more.
pub fn clamp_tokens(name: &str, count: u64) -> u64 {
    if count > MAX_CALL_TOKENS {
        tracing::warn!(
            "usage `{name}` is {count} tokens, more than one call can use; counted as {MAX_CALL_TOKENS}"
        );
        return MAX_CALL_TOKENS;
    }
    count
}

/// A `*_tokens_details` section with every count made usable
/// ([`token_count`]); other values stay as they are.
pub fn clamp_details(section: &Map<String, Value>) -> Map<String, Value> {
    section
        .iter()
        .map(|(key, value)| {
            let value = match value {
                Value::Number(_) => Value::from(token_count(key, value)),
                other => other.clone(),
            };
            (key.clone(), value)
        })
        .collect()
}

/// The count `key` of a `*_tokens_details` object (0 if absent).
fn detail(details: &Value, key: &str) -> u64 {
    let Value::Object(details) = details else {
        return 0;
    };
    details
        .iter()
        .find(|(name, _)| *name == key)
        .map_or(0, |(_, value)| token_count(key, value))
}

impl InvokeCost {
    /// Reads the OpenAI-shaped usage every provider normalizes to:
    /// `prompt_tokens`, `completion_tokens`, `total_tokens`,
    /// `prompt_tokens_details.{cached_tokens,audio_tokens}`,
    /// `completion_tokens_details.{reasoning_tokens,audio_tokens}`, the per-token
    /// rates and `prompt_cost` / `completion_cost` / `response_cost`.
    ///
    /// An empty usage (a message no model produced) costs nothing. A usage without
    /// `response_cost`, or with `response_cost: null`, has an unknown price.
    pub fn from_usage(usage: &Map<String, Value>) -> InvokeCost {
        if usage.is_empty() {
            return InvokeCost::default();
        }
        // One pass over the entries: a usage holds a dozen at most, and
        // matching names costs less than hashing each name for a lookup.
        let mut read = InvokeCost::default();
        let mut total = None;
        let mut cost = None;
        let dollars = |value: &Value| value.as_f64().unwrap_or(0.0);
        for (key, value) in usage {
            match key.as_str() {
                "prompt_tokens" => read.prompt_tokens = token_count(key, value),
                "completion_tokens" => read.completion_tokens = token_count(key, value),
                "total_tokens" => total = Some(value),
                "prompt_tokens_details" => {
                    read.cached_prompt_tokens = detail(value, "cached_tokens");
                    read.audio_prompt_tokens = detail(value, "audio_tokens");
                }
                "completion_tokens_details" => {
                    read.reasoning_tokens = detail(value, "reasoning_tokens");
                    read.audio_completion_tokens = detail(value, "audio_tokens");
                }
                "input_cost_per_token" => read.input_cost_per_token = dollars(value),
                "output_cost_per_token" => read.output_cost_per_token = dollars(value),
                "cache_read_input_token_cost" => read.cache_read_input_token_cost = dollars(value),
                "prompt_cost" => read.prompt_cost = dollars(value),
                "completion_cost" => read.completion_cost = dollars(value),
                "response_cost" => cost = value.as_f64(),
                _ => {}
            }
        }
        InvokeCost {
            // Counts come from servers: each is at most `MAX_CALL_TOKENS`,
            // and sums saturate rather than overflow.
            total_tokens: total_count(total, read.prompt_tokens, read.completion_tokens),
            cost,
            cost_known: cost.is_some(),
            ..read
        }
    }

    /// Whether no tokens were spent.
    pub fn is_zero(&self) -> bool {
        self.total_tokens == 0 && self.prompt_tokens == 0 && self.completion_tokens == 0
    }

    /// No tokens and a known $0: what a sum starts from.
    fn is_empty(&self) -> bool {
        self.is_zero() && self.cost_known && self.cost == Some(0.0)
    }
}

/// Sums counts and dollars; rates are per invoke and make no sense in a sum, so
/// they become zero (as the seeds' `Dialog.cost` does).
impl Add for InvokeCost {
    type Output = InvokeCost;

    fn add(self, other: InvokeCost) -> InvokeCost {
        // Nothing spent is the identity: a sum of unknown prices stays unknown
        // (`null`), it does not become a known $0.
        if self.is_empty() || other.is_empty() {
            let mut sum = if self.is_empty() { other } else { self };
            sum.input_cost_per_token = 0.0;
            sum.output_cost_per_token = 0.0;
            sum.cache_read_input_token_cost = 0.0;
            return sum;
        }
        let cost = match (self.cost, other.cost) {
            (Some(a), Some(b)) => Some(a + b),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        };
        // Token counts come from servers: a sum saturates, it never wraps or panics.
        InvokeCost {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            cached_prompt_tokens: self
                .cached_prompt_tokens
                .saturating_add(other.cached_prompt_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(other.reasoning_tokens),
            audio_prompt_tokens: self
                .audio_prompt_tokens
                .saturating_add(other.audio_prompt_tokens),
            audio_completion_tokens: self
                .audio_completion_tokens
                .saturating_add(other.audio_completion_tokens),
            input_cost_per_token: 0.0,
            output_cost_per_token: 0.0,
            cache_read_input_token_cost: 0.0,
            prompt_cost: self.prompt_cost + other.prompt_cost,
            completion_cost: self.completion_cost + other.completion_cost,
            cost,
            cost_known: self.cost_known && other.cost_known,
        }
    }
}

impl AddAssign for InvokeCost {
    fn add_assign(&mut self, other: InvokeCost) {
        *self = std::mem::take(self) + other;
    }
}

impl std::iter::Sum for InvokeCost {
    fn sum<I: Iterator<Item = InvokeCost>>(iter: I) -> InvokeCost {
        iter.fold(InvokeCost::default(), Add::add)
    }
}

impl std::fmt::Display for InvokeCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tokens ({} in, {} out), ",
            self.total_tokens, self.prompt_tokens, self.completion_tokens
        )?;
        match (self.cost, self.cost_known) {
            (Some(cost), true) => write!(f, "${cost:.6}"),
            (Some(cost), false) => write!(f, "${cost:.6} (partial: some prices unknown)"),
            (None, _) => write!(f, "cost unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn reads_openai_shaped_usage() {
        let cost = InvokeCost::from_usage(&usage(json!({
            "prompt_tokens": 100, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 40},
            "completion_tokens_details": {"reasoning_tokens": 5},
            "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
            "prompt_cost": 1e-4, "completion_cost": 4e-5, "response_cost": 1.4e-4
        })));
        assert_eq!(cost.total_tokens, 120);
        assert_eq!(cost.cached_prompt_tokens, 40);
        assert_eq!(cost.reasoning_tokens, 5);
        assert_eq!(cost.cost, Some(1.4e-4));
        assert!(cost.cost_known);
    }

    #[test]
    fn unknown_price_is_null_not_zero() {
        let cost =
            InvokeCost::from_usage(&usage(json!({"prompt_tokens": 3, "response_cost": null})));
        assert_eq!(cost.cost, None);
        assert!(!cost.cost_known);
        assert_eq!(InvokeCost::from_usage(&Map::new()), InvokeCost::default());
    }

    #[test]
    fn adding_zeroes_rates_and_marks_partial_totals() {
        let known = InvokeCost {
            prompt_tokens: 10,
            total_tokens: 10,
            input_cost_per_token: 1e-6,
            cost: Some(0.5),
            ..InvokeCost::default()
        };
        let unknown = InvokeCost {
            completion_tokens: 4,
            total_tokens: 4,
            cost: None,
            cost_known: false,
            ..InvokeCost::default()
        };
        let sum = known.clone() + unknown.clone();
        assert_eq!(sum.total_tokens, 14);
        assert_eq!(sum.input_cost_per_token, 0.0);
        assert_eq!(sum.cost, Some(0.5));
        assert!(!sum.cost_known);
        assert_eq!((unknown.clone() + unknown.clone()).cost, None);
        let total: InvokeCost = vec![unknown.clone(), unknown].into_iter().sum();
        assert_eq!(total.cost, None, "a sum of unknown prices stays unknown");
        assert_eq!(total.completion_tokens, 8);
        let total: InvokeCost = vec![known.clone(), known].into_iter().sum();
        assert_eq!(total.cost, Some(1.0));
        assert!(total.cost_known);
    }

    #[track_caller]
    fn count_case(value: Value, expected: u64) {
        assert_eq!(token_count("prompt_tokens", &value), expected, "{value}");
    }

    #[test]
    fn token_counts_from_the_wire_are_clamped_whole_numbers() {
        count_case(json!(12), 12);
        count_case(json!(0), 0);
        count_case(json!(MAX_CALL_TOKENS), MAX_CALL_TOKENS);
        count_case(json!(MAX_CALL_TOKENS + 1), MAX_CALL_TOKENS);
        count_case(json!(u64::MAX), MAX_CALL_TOKENS);
        count_case(json!(12.0), 12);
        count_case(json!(12.7), 12);
        count_case(json!(1e300), MAX_CALL_TOKENS);
        count_case(json!(-5), 0);
        count_case(json!(-0.5), 0);
        count_case(json!(i64::MIN), 0);
        count_case(json!("12"), 0);
        count_case(json!(null), 0);
        count_case(json!({"n": 1}), 0);
    }

    #[test]
    fn token_counts_from_the_wire_are_clamped_and_sums_saturate() {
        let huge = InvokeCost::from_usage(&usage(json!({
            "prompt_tokens": u64::MAX, "completion_tokens": 5, "total_tokens": u64::MAX,
            "prompt_tokens_details": {"cached_tokens": u64::MAX, "audio_tokens": -1},
            "completion_tokens_details": {"reasoning_tokens": 2.0, "audio_tokens": 1e30},
        })));
        assert_eq!(
            (
                huge.prompt_tokens,
                huge.completion_tokens,
                huge.total_tokens
            ),
            (MAX_CALL_TOKENS, 5, MAX_CALL_TOKENS)
        );
        assert_eq!(huge.cached_prompt_tokens, MAX_CALL_TOKENS);
        assert_eq!(huge.audio_prompt_tokens, 0);
        assert_eq!(huge.reasoning_tokens, 2);
        assert_eq!(huge.audio_completion_tokens, MAX_CALL_TOKENS);
        let unsummed = InvokeCost::from_usage(&usage(
            json!({"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX}),
        ));
        assert_eq!(unsummed.total_tokens, MAX_CALL_TOKENS, "the total too");
        let total = InvokeCost::from_usage(&usage(
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": -1}),
        ));
        assert_eq!(total.total_tokens, 5, "a negative total is no total");
        // Sums of counts read back from old records (not clamped) saturate.
        let old = InvokeCost {
            prompt_tokens: u64::MAX,
            total_tokens: u64::MAX,
            ..InvokeCost::default()
        };
        let sum = old.clone() + old;
        assert_eq!(sum.prompt_tokens, u64::MAX);
        assert_eq!(sum.total_tokens, u64::MAX);
        let section = clamp_details(
            json!({"cached_tokens": u64::MAX, "audio_tokens": 3, "note": "x"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            Value::Object(section),
            json!({"cached_tokens": MAX_CALL_TOKENS, "audio_tokens": 3, "note": "x"})
        );
    }
}
