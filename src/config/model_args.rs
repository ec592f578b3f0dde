//! Model arguments (`model_args`), checked by one rule wherever they come
//! from: an agent entry or `global` of a tactic, a batch task line, or the
//! command line's `-O KEY=VALUE` ([`ModelArgs`], issue 27). The keys lllm
//! sets itself are refused, and the numbers every chat API bounds are
//! checked against their range (docs/limits.md, "Numbers and their ranges"); any
//! other key goes to the provider as written, since each server has its own.
//!
//! Which agents a [`ModelArgs`] reaches, and how it wins over a tactic's and
//! a task's own arguments, is `TacticConfig::override_model_args`' and
//! `Tactic::agents_for`'s business.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::numbers::{Range, shown};
use crate::suggest::printable;

/// The model arguments whose range every API agrees on (the widest of them:
/// OpenAI's `temperature` goes to 2, Anthropic's to 1).
const RANGES: [Range; 10] = [
    range("max_tokens", 1.0, 100_000_000.0, true, "tokens"),
    range("max_completion_tokens", 1.0, 100_000_000.0, true, "tokens"),
    range("max_output_tokens", 1.0, 100_000_000.0, true, "tokens"),
    range("temperature", 0.0, 2.0, false, "sampling temperature"),
    range("top_p", 0.0, 1.0, false, "probability mass"),
    range("top_k", 0.0, 1_000_000.0, true, "tokens"),
    range("frequency_penalty", -2.0, 2.0, false, "penalty"),
    range("presence_penalty", -2.0, 2.0, false, "penalty"),
    range("n", 1.0, 128.0, true, "choices"),
    range("top_logprobs", 0.0, 20.0, true, "alternatives per token"),
];

const fn range(key: &'static str, min: f64, max: f64, whole: bool, unit: &'static str) -> Range {
    Range {
        key,
        min,
        max,
        whole,
        unit,
    }
}

/// Keys lllm writes itself in every request, with what to do instead.
const RESERVED: [(&str, &str); 3] = [
    (
        "model",
        "the model is the agent's `model_name` (or `--model` for every agent)",
    ),
    (
        "messages",
        "the messages are the dialog's (a task line's own `messages` start it)",
    ),
    (
        "stream",
        "streaming is chosen per run (`lllm run --stream`), not per request",
    ),
];

/// The problem with model argument `key` set to `value`, if there is one:
/// `` `{prefix}temperature: 5` must be a number from 0 to 2 (sampling temperature) ``.
/// `null` is no problem: it is the key left out.
pub(crate) fn problem(key: &str, value: &Value, prefix: &str) -> Option<String> {
    if let Some((_, instead)) = RESERVED.iter().find(|(reserved, _)| *reserved == key) {
        return Some(format!(
            "`{prefix}{key}` is not a model argument: {instead}"
        ));
    }
    if value.is_null() {
        return None;
    }
    let range = RANGES.iter().find(|range| range.key == key)?;
    range.check(value).err().map(|_| {
        format!(
            "`{prefix}{key}: {}` must be {}",
            printable(&shown(value)),
            range.describe()
        )
    })
}

/// Every problem of `args` (see [`problem`]), each after `place` (`agent
/// `writer``) when it is not empty.
pub(crate) fn check(args: &Map<String, Value>, place: &str, prefix: &str) -> Vec<String> {
    args.iter()
        .filter_map(|(key, value)| problem(key, value, prefix))
        .map(|problem| {
            if place.is_empty() {
                problem
            } else {
                format!("{place}: {problem}")
            }
        })
        .collect()
}

/// Model arguments given on the command line (`lllm run` and `lllm batch`
/// `-O KEY=VALUE`, or `--model-arg`), over the tactic's: `KEY=VALUE` for
/// every agent, `AGENT.KEY=VALUE` for the agent of that name (in the tactic
/// and in the tactics its steps run). The value is read as YAML, so
/// `max_tokens=256` is a number, `stop=["\n"]` a list, `user=alice` a
/// string; `KEY=null` (or `KEY=`) takes the tactic's `KEY` away.
///
/// ```
/// use lllm::config::ModelArgs;
///
/// let args = ModelArgs::parse(&["max_tokens=256", "critic.temperature=0", "stop=[\"END\"]"])?;
/// assert_eq!(args.all["max_tokens"], 256);
/// assert_eq!(args.all["stop"], serde_json::json!(["END"]));
/// assert_eq!(args.agents["critic"]["temperature"], 0);
/// assert!(ModelArgs::parse(&["temperature=9"]).is_err());
/// # Ok::<(), Vec<String>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelArgs {
    /// For every agent; a `null` value removes the key.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub all: Map<String, Value>,
    /// For the agent of each name, over `all`; a `null` value removes the key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, Map<String, Value>>,
}

impl ModelArgs {
    /// Reads `KEY=VALUE` or `AGENT.KEY=VALUE` pairs, a later one over an
    /// earlier one. Every problem at once, one line each, naming the pair
    /// (`` `-O temperature=9`: `temperature: 9` must be … ``).
    pub fn parse<S: AsRef<str>>(pairs: &[S]) -> Result<ModelArgs, Vec<String>> {
        let mut args = ModelArgs::default();
        let mut problems = Vec::new();
        for pair in pairs {
            let pair = pair.as_ref();
            match read_pair(pair) {
                Ok((agent, key, value)) => {
                    let target = match agent {
                        Some(agent) => args.agents.entry(agent).or_default(),
                        None => &mut args.all,
                    };
                    target.insert(key, value);
                }
                Err(problem) => problems.push(format!("`-O {}`: {problem}", printable(pair))),
            }
        }
        if problems.is_empty() {
            Ok(args)
        } else {
            Err(problems)
        }
    }

    /// Nothing given.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.agents.is_empty()
    }

    /// What agent `agent` gets: every agent's arguments, then its own.
    pub fn for_agent<'a>(&'a self, agent: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.all
            .iter()
            .chain(self.agents.get(agent).into_iter().flatten())
    }

    /// `model_args` with these over it, key by key (a `null` removes the key).
    pub fn apply(&self, agent: &str, model_args: &mut Map<String, Value>) {
        for (key, value) in self.for_agent(agent) {
            if value.is_null() {
                model_args.remove(key);
            } else {
                model_args.insert(key.clone(), value.clone());
            }
        }
    }

    /// One problem per agent named here that is none of `agents` (with a
    /// "did you mean").
    pub fn unknown_agents<'a>(
        &self,
        agents: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(name, _)| {
                !agents
                    .clone()
                    .into_iter()
                    .any(|agent| agent == name.as_str())
            })
            .map(|(name, args)| {
                let key = args.keys().next().map_or("KEY", String::as_str);
                format!(
                    "`-O {}.{}=…`: the tactic has no agent `{}`{} (`-O KEY=VALUE` sets KEY for \
                     every agent; a nested value is written as YAML: `-O 'KEY={{a: 1}}'`)",
                    printable(name),
                    printable(key),
                    printable(name),
                    crate::suggest::hint(name, agents.clone())
                )
            })
            .collect()
    }
}

/// `KEY=VALUE` or `AGENT.KEY=VALUE` as the agent, the key and the value.
fn read_pair(pair: &str) -> Result<(Option<String>, String, Value), String> {
    let Some((name, text)) = pair.split_once('=') else {
        return Err("is not `KEY=VALUE`".into());
    };
    let name = name.trim();
    // A model argument's name has no dot; an agent's name may.
    let (agent, key) = match name.rsplit_once('.') {
        Some((agent, key)) => (Some(agent.trim()), key.trim()),
        None => (None, name),
    };
    if key.is_empty() || agent.is_some_and(str::is_empty) {
        return Err("the key is `KEY` or `AGENT.KEY`, and neither part may be empty".into());
    }
    let value = if text.trim().is_empty() {
        Value::Null
    } else {
        crate::yaml::parse(text)
            .map_err(|error| format!("the value is not YAML: {}", printable(&error.message)))?
    };
    if let Some(problem) = problem(key, &value, "") {
        return Err(problem);
    }
    Ok((agent.map(str::to_string), key.to_string(), value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn parsed(pairs: &[&str]) -> ModelArgs {
        ModelArgs::parse(pairs).unwrap_or_else(|problems| panic!("{problems:?}"))
    }

    #[track_caller]
    fn refused(pair: &str, expected: &str) {
        let problems = ModelArgs::parse(&[pair]).expect_err(pair);
        assert_eq!(problems, [expected.to_string()], "{pair}");
    }

    #[test]
    fn values_are_yaml_and_a_dotted_key_names_an_agent() {
        let args = parsed(&[
            "max_tokens=256",
            "temperature=0.5",
            "stop=[\"\\n\", END]",
            "user=alice",
            "logprobs=true",
            "response_format={type: json_object}",
            "critic.temperature=0",
            "writer.v2.top_p=0.9",
            "max_tokens=128",
            "seed=",
        ]);
        assert_eq!(args.all["max_tokens"], 128, "a later pair wins");
        assert_eq!(args.all["temperature"], 0.5);
        assert_eq!(args.all["stop"], json!(["\n", "END"]));
        assert_eq!(args.all["user"], "alice");
        assert_eq!(args.all["logprobs"], true);
        assert_eq!(args.all["response_format"], json!({"type": "json_object"}));
        assert_eq!(args.all["seed"], Value::Null);
        assert_eq!(args.agents["critic"]["temperature"], 0);
        assert_eq!(args.agents["writer.v2"]["top_p"], 0.9);
        // What an agent gets: every agent's, then its own; null removes.
        let mut own = json!({"temperature": 0.2, "seed": 7, "top_k": 40})
            .as_object()
            .cloned()
            .unwrap();
        args.apply("critic", &mut own);
        assert_eq!(
            Value::Object(own),
            json!({"temperature": 0, "top_k": 40, "max_tokens": 128, "stop": ["\n", "END"],
                   "user": "alice", "logprobs": true, "response_format": {"type": "json_object"}})
        );
    }

    #[test]
    fn bad_pairs_are_named_with_the_yaml_wording() {
        refused("temperature", "`-O temperature`: is not `KEY=VALUE`");
        refused(
            "=1",
            "`-O =1`: the key is `KEY` or `AGENT.KEY`, and neither part may be empty",
        );
        refused(
            "critic.=1",
            "`-O critic.=1`: the key is `KEY` or `AGENT.KEY`, and neither part may be empty",
        );
        refused(
            "temperature=9",
            "`-O temperature=9`: `temperature: 9` must be a number from 0 to 2 (sampling temperature)",
        );
        refused(
            "max_tokens=0",
            "`-O max_tokens=0`: `max_tokens: 0` must be a whole number from 1 to 100000000 (tokens)",
        );
        refused(
            "max_tokens=1.5",
            "`-O max_tokens=1.5`: `max_tokens: 1.5` must be a whole number from 1 to 100000000 (tokens)",
        );
        refused(
            "top_p=lots",
            "`-O top_p=lots`: `top_p: lots` must be a number from 0 to 1 (probability mass)",
        );
        refused(
            "top_p=.nan",
            "`-O top_p=.nan`: `top_p: .nan` must be a number from 0 to 1 (probability mass)",
        );
        refused(
            "model=gpt-4o",
            "`-O model=gpt-4o`: `model` is not a model argument: the model is the agent's \
             `model_name` (or `--model` for every agent)",
        );
        refused(
            "stop=[a",
            "`-O stop=[a`: the value is not YAML: unclosed bracket '['",
        );
        // All at once.
        let problems = ModelArgs::parse(&["n=0", "ok=1", "stream=true"]).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn tactic_arguments_get_the_same_wording_with_their_place() {
        let args = json!({"temperature": 3, "max_tokens": 100, "messages": [], "seed": null})
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(
            check(&args, "agent `writer`", "model_args."),
            [
                "agent `writer`: `model_args.temperature: 3` must be a number from 0 to 2 \
                 (sampling temperature)",
                "agent `writer`: `model_args.messages` is not a model argument: the messages \
                 are the dialog's (a task line's own `messages` start it)",
            ]
        );
    }

    #[test]
    fn agents_named_must_exist() {
        let args = parsed(&["critc.temperature=0", "writer.top_p=1"]);
        let problems = args.unknown_agents(["writer", "critic"]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "`-O critc.temperature=…`: the tactic has no agent `critc`; did you mean `critic`?"
            ),
            "{problems:?}"
        );
    }
}
