//! Model names to providers: `provider/model` (a bare name means `openai/`),
//! built once per run from the tactic's `providers:` and the environment.
//! Keys are read here, held as `Secret`s, and never printed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::anthropic::AnthropicProvider;
use super::limit::{Limiter, Limits};
use super::mock::MockProvider;
use super::openai::{OpenAiProvider, WireOptions};
use super::retry::RetryPolicy;
use super::{Provider, http};
use crate::config::{ProviderApi, ProviderConfig};
use crate::suggest;

/// An OpenAI-compatible service users name directly (`groq/llama-3.3-70b`).
pub struct Preset {
    pub name: &'static str,
    pub base_url: &'static str,
    pub key_variable: &'static str,
    /// Local servers run without a key; hosted services need one.
    pub key_required: bool,
}

/// Built-in OpenAI-compatible providers; each default is overridable under
/// `providers:`, and `<NAME>_BASE_URL` in the environment moves the endpoint.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        key_variable: "OPENAI_API_KEY",
        key_required: true,
    },
    Preset {
        name: "ollama",
        base_url: "http://localhost:11434/v1",
        key_variable: "OLLAMA_API_KEY",
        key_required: false,
    },
    Preset {
        name: "vllm",
        base_url: "http://localhost:8000/v1",
        key_variable: "VLLM_API_KEY",
        key_required: false,
    },
    Preset {
        name: "llamacpp",
        base_url: "http://localhost:8080/v1",
        key_variable: "LLAMACPP_API_KEY",
        key_required: false,
    },
    Preset {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        key_variable: "OPENROUTER_API_KEY",
        key_required: true,
    },
    Preset {
        name: "groq",
        base_url: "https://api.groq.com/openai/v1",
        key_variable: "GROQ_API_KEY",
        key_required: true,
    },
    Preset {
        name: "deepseek",
        base_url: "https://api.deepseek.com/v1",
        key_variable: "DEEPSEEK_API_KEY",
        key_required: true,
    },
    Preset {
        name: "together",
        base_url: "https://api.together.xyz/v1",
        key_variable: "TOGETHER_API_KEY",
        key_required: true,
    },
    Preset {
        name: "mistral",
        base_url: "https://api.mistral.ai/v1",
        key_variable: "MISTRAL_API_KEY",
        key_required: true,
    },
    Preset {
        name: "gemini",
        base_url: "https://generativelanguage.googleapis.com/v1beta/openai",
        key_variable: "GEMINI_API_KEY",
        key_required: true,
    },
];

const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
const DEFAULT_CONNECT_TIMEOUT: f64 = 10.0;

fn limits(config: Option<&ProviderConfig>) -> Limits {
    Limits {
        max_concurrency: config.and_then(|c| c.max_concurrency),
        rpm: config.and_then(|c| c.rpm),
        tpm: config.and_then(|c| c.tpm),
        // No server pauses a provider longer than its requests wait to retry.
        max_pause: retry_policy(config).cap,
    }
}

fn retry_policy(config: Option<&ProviderConfig>) -> RetryPolicy {
    RetryPolicy {
        base: config
            .and_then(|c| c.retry_base_ms)
            .map_or(RetryPolicy::default().base, Duration::from_millis),
        cap: config
            .and_then(|c| c.retry_cap_ms)
            .map_or(RetryPolicy::default().cap, Duration::from_millis),
        ..RetryPolicy::default()
    }
}

fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

fn base_url_variable(name: &str) -> String {
    format!("{}_BASE_URL", name.to_ascii_uppercase())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown provider `{provider}` in model `{model}`{hint}; define it under `providers:`")]
    UnknownProvider {
        provider: String,
        model: String,
        hint: String,
    },
    #[error(
        "{variable} is not set (needed by model `{model}`); export it or set `api_key_env` under `providers.{provider}`"
    )]
    MissingKey {
        variable: String,
        model: String,
        provider: String,
    },
    #[error("model `{model}`: {message}")]
    Unavailable { model: String, message: String },
    #[error("provider `{provider}`: {message}")]
    Invalid { provider: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A key: Debug and Display print `***`.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The key itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A model name resolved to the provider that serves it.
#[derive(Clone)]
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    pub provider_name: String,
    /// The provider's own model id.
    pub model: String,
    pub retry: RetryPolicy,
}

/// Every provider of a run. Providers are made once per name, so limits
/// (`max_concurrency`) are shared by all agents and tasks using them.
pub struct Providers {
    configs: BTreeMap<String, ProviderConfig>,
    built: std::sync::Mutex<BTreeMap<String, Arc<dyn Provider>>>,
    client: reqwest::Client,
    env: BTreeMap<String, Option<String>>,
    /// Serves every model instead of its own provider (replays).
    replacement: Option<Arc<dyn Provider>>,
    /// Captures requests instead of sending them (`--dry-run`).
    dry_run: Option<Arc<super::dry_run::DryRun>>,
}

impl Providers {
    /// Every model is served by `provider`, with no waiting between retries:
    /// `lllm replay --rerun` answers from a record this way.
    pub fn serve_all_with(mut self, provider: Arc<dyn Provider>) -> Providers {
        self.replacement = Some(provider);
        self
    }

    /// Every provider shows its requests to `log` instead of sending them.
    pub fn dry_run(mut self, log: Arc<super::dry_run::DryRun>) -> Providers {
        self.dry_run = Some(log);
        self
    }

    pub fn new(
        configs: &BTreeMap<String, ProviderConfig>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Providers> {
        let connect = DEFAULT_CONNECT_TIMEOUT;
        let client =
            http::client(Duration::from_secs_f64(connect)).map_err(|message| Error::Invalid {
                provider: "http".into(),
                message,
            })?;
        // Read the variables a provider may need now, so later lookups are pure.
        let mut names: Vec<String> = [
            "ANTHROPIC_API_KEY".to_string(),
            "ANTHROPIC_BASE_URL".to_string(),
        ]
        .into_iter()
        .chain(PRESETS.iter().flat_map(|preset| {
            [
                preset.key_variable.to_string(),
                base_url_variable(preset.name),
            ]
        }))
        .collect();
        names.extend(
            configs
                .values()
                .filter_map(|config| config.api_key_env.clone()),
        );
        let env = names
            .into_iter()
            .map(|name| (name.clone(), env(&name).filter(|v| !v.is_empty())))
            .collect();
        Ok(Providers {
            configs: configs.clone(),
            built: Default::default(),
            client,
            env,
            replacement: None,
            dry_run: None,
        })
    }

    /// Resolves `model_name`, checking that its provider can be used (keys
    /// present) before anything is sent.
    pub fn resolve(&self, model_name: &str) -> Result<Resolved> {
        let (provider_name, model) = crate::tactic::split_model(model_name);
        if model.is_empty() {
            return Err(Error::Unavailable {
                model: model_name.into(),
                message: "the model id is empty".into(),
            });
        }
        if let Some(provider) = &self.replacement {
            let retry = RetryPolicy {
                base: Duration::ZERO,
                cap: Duration::ZERO,
                jitter: 0.0,
            };
            let (provider_name, model) = (provider_name.to_string(), model.to_string());
            return Ok(Resolved {
                provider: provider.clone(),
                provider_name,
                model,
                retry,
            });
        }
        let retry = retry_policy(self.configs.get(provider_name));
        let mut provider = self.provider(provider_name, model_name, model)?;
        if let Some(log) = &self.dry_run {
            provider = Arc::new(super::dry_run::DryRunProvider {
                inner: provider,
                log: log.clone(),
            });
        }
        Ok(Resolved {
            provider,
            provider_name: provider_name.to_string(),
            model: model.to_string(),
            retry,
        })
    }

    fn provider(&self, name: &str, model_name: &str, model: &str) -> Result<Arc<dyn Provider>> {
        let api = match (self.configs.get(name), name) {
            (Some(config), _) => config.api,
            (None, "mock") => ProviderApi::Mock,
            (None, "anthropic") => ProviderApi::Anthropic,
            (None, name) if preset(name).is_some() => ProviderApi::OpenAi,
            (None, _) => {
                let known: Vec<&str> = ["mock", "anthropic"]
                    .into_iter()
                    .chain(PRESETS.iter().map(|preset| preset.name))
                    .chain(self.configs.keys().map(String::as_str))
                    .collect();
                return Err(Error::UnknownProvider {
                    provider: name.into(),
                    model: model_name.into(),
                    hint: suggest::hint(name, known),
                });
            }
        };
        // A mock provider keeps state per model (a script's position, shared
        // by every agent of the run); an HTTP provider is one per name (its limits).
        let key = if api == ProviderApi::Mock {
            format!("{name}/{model}")
        } else {
            name.to_string()
        };
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(provider) = built.get(&key) {
            return Ok(provider.clone());
        }
        let provider: Arc<dyn Provider> = match api {
            ProviderApi::Mock => {
                let script = self
                    .configs
                    .get(name)
                    .and_then(|config| config.script.as_deref());
                let mock =
                    MockProvider::new(model, script).map_err(|message| Error::Unavailable {
                        model: model_name.into(),
                        message,
                    })?;
                Arc::new(mock)
            }
            ProviderApi::OpenAi => Arc::new(self.openai(name, model_name)?),
            ProviderApi::Anthropic => Arc::new(self.anthropic(name, model_name)?),
        };
        built.insert(key, provider.clone());
        Ok(provider)
    }

    /// The run's shared client, or one of its own for a provider with its own
    /// `connect_timeout_s` (a connect timeout belongs to a client).
    fn client_for(&self, name: &str, config: Option<&ProviderConfig>) -> Result<reqwest::Client> {
        match config.and_then(|config| config.connect_timeout_s) {
            Some(seconds) => {
                http::client(crate::config::numbers::seconds(seconds)).map_err(|message| {
                    Error::Invalid {
                        provider: name.into(),
                        message,
                    }
                })
            }
            None => Ok(self.client.clone()),
        }
    }

    fn anthropic(&self, name: &str, model_name: &str) -> Result<AnthropicProvider> {
        let config = self.configs.get(name);
        let variable = |key: &str| self.env.get(key).cloned().flatten();
        let explicit = config
            .and_then(|config| config.base_url.clone())
            .or_else(|| variable("ANTHROPIC_BASE_URL"));
        let key_variable = config
            .and_then(|config| config.api_key_env.clone())
            .unwrap_or_else(|| "ANTHROPIC_API_KEY".into());
        let api_key = variable(&key_variable).map(Secret::new);
        if api_key.is_none() && explicit.is_none() {
            return Err(Error::MissingKey {
                variable: key_variable,
                model: model_name.into(),
                provider: name.into(),
            });
        }
        AnthropicProvider::new(
            self.client_for(name, config)?,
            explicit.unwrap_or_else(|| ANTHROPIC_BASE_URL.into()),
            api_key.as_ref(),
            &extra_headers(config),
            timeout(config),
            Arc::new(Limiter::new(limits(config))),
        )
        .map_err(|message| Error::Invalid {
            provider: name.into(),
            message,
        })
    }

    fn openai(&self, name: &str, model_name: &str) -> Result<OpenAiProvider> {
        let config = self.configs.get(name);
        let variable = |key: &str| self.env.get(key).cloned().flatten();
        let preset = preset(name);
        let base_url = config
            .and_then(|config| config.base_url.clone())
            .or_else(|| variable(&base_url_variable(name)))
            .or_else(|| preset.map(|preset| preset.base_url.to_string()));
        let key_variable = config
            .and_then(|config| config.api_key_env.clone())
            .or_else(|| preset.map(|preset| preset.key_variable.to_string()));
        let api_key = key_variable.as_deref().and_then(variable).map(Secret::new);
        let Some(base_url) = base_url else {
            return Err(Error::Invalid {
                provider: name.into(),
                message: "an OpenAI-compatible provider needs a `base_url`".into(),
            });
        };
        if api_key.is_none() && preset.is_some_and(|preset| preset.key_required) {
            // Hosted services need a key; catch its absence before sending anything.
            // A `base_url` set explicitly may point at a local stand-in that needs none.
            let explicit = config.and_then(|config| config.base_url.as_ref()).is_some()
                || variable(&base_url_variable(name)).is_some();
            if !explicit {
                return Err(Error::MissingKey {
                    variable: key_variable.unwrap_or_default(),
                    model: model_name.into(),
                    provider: name.into(),
                });
            }
        }
        let options = WireOptions {
            developer_role: config.and_then(|c| c.system_role.as_deref()) == Some("developer"),
        };
        OpenAiProvider::new(
            self.client_for(name, config)?,
            base_url,
            api_key.as_ref(),
            &extra_headers(config),
            options,
            timeout(config),
            Arc::new(Limiter::new(limits(config))),
        )
        .map_err(|message| Error::Invalid {
            provider: name.into(),
            message,
        })
    }
}

fn extra_headers(config: Option<&ProviderConfig>) -> Vec<(String, String)> {
    config
        .map(|config| config.headers.clone().into_iter().collect())
        .unwrap_or_default()
}

fn timeout(config: Option<&ProviderConfig>) -> Duration {
    crate::config::numbers::seconds(config.and_then(|config| config.timeout_s).unwrap_or(600.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn providers(configs: &[(&str, ProviderConfig)], env: &[(&str, &str)]) -> Providers {
        let configs = configs
            .iter()
            .map(|(name, config)| (name.to_string(), config.clone()))
            .collect();
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Providers::new(&configs, &|name| env.get(name).cloned()).unwrap()
    }

    fn local(base_url: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            api: ProviderApi::OpenAi,
            base_url: base_url.map(str::to_string),
            api_key_env: None,
            max_concurrency: Some(2),
            rpm: None,
            tpm: None,
            timeout_s: None,
            connect_timeout_s: None,
            system_role: None,
            retry_base_ms: Some(5),
            retry_cap_ms: None,
            script: None,
            headers: BTreeMap::new(),
        }
    }

    fn error(providers: &Providers, model: &str) -> String {
        providers
            .resolve(model)
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn model_names_split_at_the_first_slash() {
        let providers = providers(
            &[("local", local(Some("http://127.0.0.1:1/v1")))],
            &[("OPENAI_API_KEY", "sk-x")],
        );
        let resolved = providers.resolve("local/org/model").ok().unwrap();
        assert_eq!(
            (resolved.provider_name.as_str(), resolved.model.as_str()),
            ("local", "org/model")
        );
        assert_eq!(resolved.retry.base, Duration::from_millis(5));
        let bare = providers.resolve("gpt-4o").ok().unwrap();
        assert_eq!(
            (bare.provider_name.as_str(), bare.model.as_str()),
            ("openai", "gpt-4o")
        );
        assert!(providers.resolve("mock/echo").is_ok());
    }

    #[test]
    fn problems_are_found_before_sending() {
        let providers = providers(&[("local", local(Some("http://127.0.0.1:1/v1")))], &[]);
        assert_eq!(
            error(&providers, "openai/gpt-4o-mini"),
            "OPENAI_API_KEY is not set (needed by model `openai/gpt-4o-mini`); export it or set `api_key_env` under `providers.openai`"
        );
        assert!(error(&providers, "locl/x").contains("unknown provider `locl`"));
        assert!(error(&providers, "locl/x").contains("did you mean `local`?"));
        assert!(error(&providers, "mock/nope").contains("mock/echo"));
        assert!(
            providers.resolve("local/x").is_ok(),
            "a local server needs no key"
        );
    }

    #[test]
    fn presets_know_their_endpoints_and_keys() {
        let none = providers(&[], &[]);
        assert!(
            none.resolve("ollama/llama3.2").is_ok(),
            "local servers need no key"
        );
        assert!(none.resolve("vllm/Qwen/Qwen2.5-7B").is_ok());
        assert!(error(&none, "groq/llama-3.3-70b").starts_with("GROQ_API_KEY is not set"));
        assert!(error(&none, "gemini/gemini-2.5-flash").starts_with("GEMINI_API_KEY is not set"));
        let keyed = providers(&[], &[("OPENROUTER_API_KEY", "k")]);
        assert!(keyed.resolve("openrouter/openai/gpt-4o").is_ok());
        let moved = providers(&[], &[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]);
        assert!(
            moved.resolve("openai/gpt-4o").is_ok(),
            "an explicit endpoint may need no key"
        );
        assert!(error(&none, "olama/x").contains("did you mean `ollama`?"));
    }

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("sk-very-secret".into());
        assert_eq!(format!("{secret} {secret:?}"), "*** ***");
    }
}
