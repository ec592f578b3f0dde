//! What a user brings to every tactic from outside it (the `lllm` user
//! config file, `LLLM_MODEL`): a default model and provider entries. They
//! are laid under a tactic's document before it is resolved, so a tactic's
//! own choices always win and everything downstream sees one ordinary
//! config. Reading the user's file is the CLI's business (`lllm_cli`), not
//! this module's.

use serde_json::{Map, Value};

/// Defaults under every tactic (and sub-tactic) loaded with them.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("t.yaml");
/// std::fs::write(&path, "agent_configs: [{name: a}, {name: b, model_name: mock/echo}]").unwrap();
/// let defaults = lllm::config::Defaults {
///     model: Some("mock/script".into()),
///     ..Default::default()
/// };
/// let config = lllm::config::load_with(&path, &defaults).unwrap();
/// assert_eq!(config.agents[0].model_name, "mock/script");
/// assert_eq!(config.agents[1].model_name, "mock/echo", "the tactic's own model wins");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// The model (`provider/model`) of every agent whose tactic names none,
    /// neither on the agent nor under `global`.
    pub model: Option<String>,
    /// Provider entries, as a tactic's `providers:` writes them (paths in
    /// them already absolute). A tactic's own entry of the same name replaces
    /// one of these whole: merging them key by key could send this entry's
    /// key (`api_key_env`) to the tactic's `base_url`.
    pub providers: Map<String, Value>,
}

impl Defaults {
    /// Lays the defaults under a tactic's merged document.
    pub(super) fn apply(&self, document: &mut Value) {
        let Value::Object(map) = document else {
            return;
        };
        if let Some(model) = self
            .model
            .as_deref()
            .filter(|model| !model.trim().is_empty())
        {
            let global = map
                .entry("global")
                .or_insert_with(|| Value::Object(Map::new()));
            if global.is_null() {
                *global = Value::Object(Map::new());
            }
            if let Value::Object(global) = global
                && global.get("model_name").is_none_or(Value::is_null)
            {
                global.insert("model_name".into(), Value::String(model.to_string()));
            }
        }
        if !self.providers.is_empty() {
            let providers = map
                .entry("providers")
                .or_insert_with(|| Value::Object(Map::new()));
            if providers.is_null() {
                *providers = Value::Object(Map::new());
            }
            if let Value::Object(providers) = providers {
                for (name, entry) in &self.providers {
                    providers
                        .entry(name.clone())
                        .or_insert_with(|| entry.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn case(defaults: &Defaults, document: Value, expected: Value) {
        let mut document = document;
        defaults.apply(&mut document);
        assert_eq!(document, expected);
    }

    #[test]
    fn defaults_go_under_what_the_tactic_says() {
        let defaults = Defaults {
            model: Some("openai/local".into()),
            providers:
                json!({"local": {"base_url": "http://127.0.0.1:1/v1"}, "openai": {"rpm": 5}})
                    .as_object()
                    .cloned()
                    .unwrap(),
        };
        // Nothing named: both land.
        case(
            &defaults,
            json!({"agent_configs": [{"name": "a"}]}),
            json!({"agent_configs": [{"name": "a"}], "global": {"model_name": "openai/local"},
                   "providers": {"local": {"base_url": "http://127.0.0.1:1/v1"}, "openai": {"rpm": 5}}}),
        );
        // The tactic's global model and its own `openai` entry win, whole.
        case(
            &defaults,
            json!({"global": {"model_name": "mock/echo"}, "providers": {"openai": {"max_concurrency": 2}}}),
            json!({"global": {"model_name": "mock/echo"},
                   "providers": {"openai": {"max_concurrency": 2}, "local": {"base_url": "http://127.0.0.1:1/v1"}}}),
        );
        // `global: null` and `providers: null` are empty.
        case(
            &defaults,
            json!({"global": null, "providers": null}),
            json!({"global": {"model_name": "openai/local"},
                   "providers": {"local": {"base_url": "http://127.0.0.1:1/v1"}, "openai": {"rpm": 5}}}),
        );
        // No defaults: untouched.
        case(
            &Defaults::default(),
            json!({"agent_configs": []}),
            json!({"agent_configs": []}),
        );
    }
}
