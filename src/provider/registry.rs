//! Model names to providers: `provider/model` (a bare name means `openai/`),
//! built once per run from the tactic's `providers:` and the environment.
//! Keys are read here, held as `Secret`s, and never printed. Where each
//! provider's requests go is `endpoints`' to decide.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::anthropic::AnthropicProvider;
use super::batch_api::BatchApiProvider;
use super::batch_api::service::{Api, Service};
use super::capacity::{self, Probe};
pub use super::endpoints::BaseUrl;
use super::endpoints::{self, PRESETS, preset};
use super::limit::{Limiter, Limits};
use super::mock::MockProvider;
use super::openai::{OpenAiProvider, WireOptions};
use super::retry::RetryPolicy;
use super::{Provider, http};
use crate::config::{ProviderApi, ProviderConfig};
use crate::suggest;

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
    /// A provider's own `api_key_env` names a variable that is not set: the
    /// requests went out without a key, and every one failed (issue 26).
    #[error(
        "{variable} is not set (the `api_key_env` of `providers.{provider}`, needed by model \
         `{model}`); export it, or remove `api_key_env` if the server needs no key"
    )]
    UnsetKeyVariable {
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

/// The variables the providers of `configs` may read (keys, tokens, base
/// URLs), with their values in `env` (an empty value is none).
fn read_variables(
    configs: &BTreeMap<String, ProviderConfig>,
    env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, Option<String>> {
    let mut names: Vec<String> = ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"]
        .into_iter()
        .chain(endpoints::variables())
        .chain(PRESETS.iter().map(|preset| preset.key_variable))
        .map(str::to_string)
        .collect();
    names.extend(
        configs
            .values()
            .filter_map(|config| config.api_key_env.clone()),
    );
    names
        .into_iter()
        .map(|name| (name.clone(), env(&name).filter(|v| !v.is_empty())))
        .collect()
}

/// The secrets that providers built from `configs` and `env` would know
/// ([`Providers::secrets`]), without building them: for what is shown of a
/// tactic that does not run (`lllm run --show-config`).
pub fn known_secrets(
    configs: &BTreeMap<String, ProviderConfig>,
    env: &dyn Fn(&str) -> Option<String>,
) -> crate::redact::Secrets {
    super::scrub::known_secrets(configs, &read_variables(configs, env))
}

/// A model name resolved to the provider that serves it.
#[derive(Clone)]
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    pub provider_name: String,
    /// The provider's own model id.
    pub model: String,
    pub retry: RetryPolicy,
    /// The hosted service this provider's endpoint belongs to (`openai`,
    /// `anthropic`, `groq`, …), whose published prices apply to it; `None`
    /// for a local server, a proxy or any other host (see `pricing`).
    pub service: Option<&'static str>,
    /// The response cache this model's calls use (`cache`), if any: set by
    /// the tactic's builder.
    pub cache: Option<super::cache::Binding>,
    /// How long one attempt may take (the provider's `timeout_s`); `None`
    /// where nothing is sent over the network (offline providers, replays).
    pub timeout: Option<Duration>,
}

impl Resolved {
    /// The call as the retry loop's notices name it.
    pub fn target(&self) -> super::watch::Target<'_> {
        super::watch::Target {
            provider: &self.provider_name,
            model: &self.model,
            timeout: self.timeout,
        }
    }
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
    /// Taken out of everything a provider returns (`scrub`).
    secrets: Arc<crate::redact::Secrets>,
    /// Sends every OpenAI and Anthropic call through the provider's Batch
    /// API (`lllm batch --via batch-api`).
    batch_api: Option<Arc<super::batch_api::BatchApi>>,
}

impl Providers {
    /// Every model is served by `provider`, with no waiting between retries:
    /// `lllm replay --rerun` answers from a record this way.
    pub fn serve_all_with(mut self, provider: Arc<dyn Provider>) -> Providers {
        self.replacement = Some(provider);
        self
    }

    /// Every OpenAI and Anthropic call goes through the provider's Batch
    /// API, collected by `hub` (`lllm batch --via batch-api`); mock
    /// providers answer as usual.
    pub fn via_batch_api(mut self, hub: Arc<super::batch_api::BatchApi>) -> Providers {
        self.batch_api = Some(hub);
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
        let env = read_variables(configs, env);
        let secrets = Arc::new(super::scrub::known_secrets(configs, &env));
        // No trace line shows them either, whichever provider's it is.
        super::trace::remember(&secrets);
        Ok(Providers {
            configs: configs.clone(),
            built: Default::default(),
            client,
            env,
            replacement: None,
            dry_run: None,
            secrets,
            batch_api: None,
        })
    }

    /// Every secret these providers know (`scrub::known_secrets`): what is
    /// taken out of their replies, and out of what a record keeps of a request.
    pub fn secrets(&self) -> &Arc<crate::redact::Secrets> {
        &self.secrets
    }

    /// Resolves `model_name`, checking that its provider can be used (keys
    /// present) before anything is sent.
    pub fn resolve(&self, model_name: &str) -> Result<Resolved> {
        let (provider_name, model) = split_model(model_name);
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
            // Priced as the provider the run used would be.
            let service = self.service(provider_name);
            let (provider_name, model) = (provider_name.to_string(), model.to_string());
            return Ok(Resolved {
                provider: provider.clone(),
                provider_name,
                model,
                retry,
                service,
                cache: None,
                timeout: None,
            });
        }
        let mut retry = retry_policy(self.configs.get(provider_name));
        if self.batch_api.is_some() && self.api(provider_name) != Some(ProviderApi::Mock) {
            // A failed call is tried again in the next round of batches: a
            // wait before it would only hold the round back.
            retry = RetryPolicy {
                base: Duration::ZERO,
                cap: Duration::ZERO,
                jitter: 0.0,
            };
        }
        let mut provider = self.provider(provider_name, model_name, model)?;
        if let Some(log) = &self.dry_run {
            provider = Arc::new(super::dry_run::DryRunProvider {
                inner: provider,
                log: log.clone(),
                secrets: self.secrets.clone(),
            });
        }
        let timeout = match self.api(provider_name) {
            Some(ProviderApi::Mock) | None => None,
            Some(_) => Some(timeout(self.configs.get(provider_name))),
        };
        Ok(Resolved {
            provider,
            provider_name: provider_name.to_string(),
            model: model.to_string(),
            retry,
            service: self.service(provider_name),
            cache: None,
            timeout,
        })
    }

    /// What identifies provider `name`'s endpoint in response-cache keys
    /// (`cache::scope`); `None` where nothing is sent (offline providers,
    /// replays, dry runs), which are never cached.
    pub fn cache_scope(&self, name: &str) -> Option<String> {
        if self.replacement.is_some() || self.dry_run.is_some() {
            return None;
        }
        let api = match self.api(name)? {
            ProviderApi::Mock => return None,
            ProviderApi::OpenAi => "openai",
            ProviderApi::Anthropic => "anthropic",
        };
        let base_url = self.base_url(name).ok().flatten()?;
        let headers = extra_headers(self.configs.get(name));
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        Some(super::cache::scope(api, &base_url.url, &headers))
    }

    /// What a run would use of provider `name` beyond its `providers:`
    /// entry, for `lllm run --show-config`: `api`, `base_url` (without
    /// credentials or query values) with `base_url_from` (the setting or
    /// variable it came from, or the preset's default), and `api_key_env`,
    /// the variable the key is read from (never the key). `None` for a name
    /// that no entry, preset or built-in provider has.
    pub fn effective(&self, name: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
        use serde_json::Value;
        let api = self.api(name)?;
        let mut shown = serde_json::Map::new();
        let api_name = match api {
            ProviderApi::OpenAi => "openai",
            ProviderApi::Anthropic => "anthropic",
            ProviderApi::Mock => "mock",
        };
        shown.insert("api".into(), Value::from(api_name));
        if let Ok(Some(base_url)) = self.base_url(name) {
            shown.insert(
                "base_url".into(),
                Value::from(crate::redact::url(&base_url.url).into_owned()),
            );
            shown.insert("base_url_from".into(), Value::from(base_url.source));
        }
        let own_key = self
            .configs
            .get(name)
            .and_then(|config| config.api_key_env.clone());
        let key_variable = match api {
            ProviderApi::OpenAi => {
                own_key.or_else(|| preset(name).map(|preset| preset.key_variable.to_string()))
            }
            ProviderApi::Anthropic => own_key.or_else(|| Some("ANTHROPIC_API_KEY".into())),
            ProviderApi::Mock => None,
        };
        if let Some(variable) = key_variable {
            shown.insert("api_key_env".into(), Value::from(variable));
        }
        Some(shown)
    }

    /// The API provider `name` speaks, if it is known.
    fn api(&self, name: &str) -> Option<ProviderApi> {
        match (self.configs.get(name), name) {
            (Some(config), _) => Some(config.api),
            (None, "mock") => Some(ProviderApi::Mock),
            (None, "anthropic") => Some(ProviderApi::Anthropic),
            (None, name) if preset(name).is_some() => Some(ProviderApi::OpenAi),
            (None, _) => None,
        }
    }

    /// Where provider `name` sends its requests (`None` for offline ones).
    fn base_url(&self, name: &str) -> Result<Option<BaseUrl>> {
        let configured = self
            .configs
            .get(name)
            .and_then(|config| config.base_url.as_deref());
        let variable = |key: &str| self.env.get(key).cloned().flatten();
        let found = match self.api(name) {
            Some(ProviderApi::Anthropic) => endpoints::resolve(
                name,
                configured,
                endpoints::ANTHROPIC_VARIABLES,
                Some(endpoints::ANTHROPIC_BASE_URL),
                "",
                &variable,
            ),
            Some(ProviderApi::OpenAi) => {
                let preset = preset(name);
                let default = preset.map(|preset| preset.base_url);
                endpoints::resolve(
                    name,
                    configured,
                    preset.map_or(&[], |preset| preset.variables),
                    default,
                    &default.map(endpoints::default_path).unwrap_or_default(),
                    &variable,
                )
            }
            Some(ProviderApi::Mock) | None => Ok(None),
        };
        found.map_err(|message| Error::Invalid {
            provider: name.into(),
            message,
        })
    }

    /// The hosted service behind provider `name` (see `Resolved::service`).
    fn service(&self, name: &str) -> Option<&'static str> {
        let base_url = self.base_url(name).ok().flatten()?;
        endpoints::service(&base_url.url)
    }

    fn provider(&self, name: &str, model_name: &str, model: &str) -> Result<Arc<dyn Provider>> {
        let api = match self.api(name) {
            Some(api) => api,
            None => {
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
            ProviderApi::OpenAi => {
                let provider = self.openai(name, model_name)?;
                let service = self.batch_service(name, Api::OpenAi, provider.chat_endpoint())?;
                self.through_batches(Arc::new(provider), service)
            }
            ProviderApi::Anthropic => {
                let provider = self.anthropic(name, model_name)?;
                let endpoint = provider.messages_endpoint();
                let service = self.batch_service(name, Api::Anthropic, endpoint)?;
                self.through_batches(Arc::new(provider), service)
            }
        };
        let provider = super::scrub::wrap(provider, &self.secrets);
        built.insert(key, provider.clone());
        Ok(provider)
    }

    /// Provider `name`'s Batch API, registered with the run's collector,
    /// when calls go through Batch APIs.
    fn batch_service(
        &self,
        name: &str,
        api: Api,
        endpoint: &http::Endpoint,
    ) -> Result<Option<Arc<Service>>> {
        let Some(hub) = &self.batch_api else {
            return Ok(None);
        };
        let config = self.configs.get(name);
        let service = Service::new(name, api, self.client_for(name, config)?, endpoint).map_err(
            |message| Error::Invalid {
                provider: name.into(),
                message,
            },
        )?;
        Ok(Some(hub.register(service)))
    }

    /// `provider`, or the provider sending its calls through `service`.
    fn through_batches(
        &self,
        provider: Arc<dyn Provider>,
        service: Option<Arc<Service>>,
    ) -> Arc<dyn Provider> {
        match (service, &self.batch_api) {
            (Some(service), Some(hub)) => Arc::new(BatchApiProvider {
                inner: provider,
                service,
                hub: hub.clone(),
            }),
            _ => provider,
        }
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
        let Some(base_url) = self.base_url(name)? else {
            return Err(Error::Invalid {
                provider: name.into(),
                message: "an Anthropic provider needs a `base_url`".into(),
            });
        };
        // Anthropic's SDKs read both: the key (`x-api-key`) and an auth token
        // (`Authorization: Bearer`, for gateways). A provider that names its
        // own `api_key_env` gets that variable only, never the user's
        // Anthropic credentials.
        let own_key = config.and_then(|config| config.api_key_env.clone());
        let key_variable = own_key
            .clone()
            .unwrap_or_else(|| "ANTHROPIC_API_KEY".into());
        let api_key = variable(&key_variable).map(Secret::new);
        if own_key.is_some() && api_key.is_none() {
            return Err(Error::UnsetKeyVariable {
                variable: key_variable,
                model: model_name.into(),
                provider: name.into(),
            });
        }
        let auth_token = match own_key {
            Some(_) => None,
            None => variable("ANTHROPIC_AUTH_TOKEN").map(Secret::new),
        };
        if api_key.is_none() && auth_token.is_none() && !base_url.explicit {
            return Err(Error::MissingKey {
                variable: key_variable,
                model: model_name.into(),
                provider: name.into(),
            });
        }
        let source = base_url.source.clone();
        let local = self.probes(&base_url);
        let limiter = Arc::new(Limiter::new(limits(config)));
        let client = self.client_for(name, config)?;
        let provider = AnthropicProvider::new(
            client.clone(),
            base_url,
            api_key.as_ref(),
            auth_token.as_ref(),
            &extra_headers(config),
            super::anthropic::WireOptions {
                structured_output: config
                    .and_then(|config| config.structured_output)
                    .unwrap_or_default(),
            },
            timeout(config),
            limiter.clone(),
        )
        .map_err(|message| Error::Invalid {
            provider: name.into(),
            message: naming_source(message, &source),
        })?;
        if local {
            let endpoint = provider.messages_endpoint();
            limiter.set_probe(Probe::new(name, client, endpoint, "/v1/messages"));
        }
        Ok(provider)
    }

    /// Whether the provider at `base_url` asks its server for its capacity
    /// and gets the adaptive limit (`capacity`): a server on this machine
    /// or the user's network, when requests are sent one by one for real.
    fn probes(&self, base_url: &BaseUrl) -> bool {
        self.dry_run.is_none() && self.batch_api.is_none() && capacity::is_local(&base_url.url)
    }

    fn openai(&self, name: &str, model_name: &str) -> Result<OpenAiProvider> {
        let config = self.configs.get(name);
        let variable = |key: &str| self.env.get(key).cloned().flatten();
        let preset = preset(name);
        let own_key = config.and_then(|config| config.api_key_env.clone());
        let key_variable = own_key
            .clone()
            .or_else(|| preset.map(|preset| preset.key_variable.to_string()));
        let api_key = key_variable.as_deref().and_then(variable).map(Secret::new);
        // A variable the tactic names is meant to be set, wherever the server is.
        if let (Some(variable), None) = (own_key, &api_key) {
            return Err(Error::UnsetKeyVariable {
                variable,
                model: model_name.into(),
                provider: name.into(),
            });
        }
        let Some(base_url) = self.base_url(name)? else {
            return Err(Error::Invalid {
                provider: name.into(),
                message: "an OpenAI-compatible provider needs a `base_url`".into(),
            });
        };
        // Hosted services need a key; catch its absence before sending
        // anything. A base URL set explicitly may point at a local stand-in
        // that needs none.
        if api_key.is_none()
            && preset.is_some_and(|preset| preset.key_required)
            && !base_url.explicit
        {
            return Err(Error::MissingKey {
                variable: key_variable.unwrap_or_default(),
                model: model_name.into(),
                provider: name.into(),
            });
        }
        let service = endpoints::service(&base_url.url);
        let options = WireOptions {
            developer_role: config.and_then(|c| c.system_role.as_deref()) == Some("developer"),
            // `name` is documented by OpenAI; other servers ignore it at best
            // and refuse the request at worst (Mistral, xAI, vLLM in Mistral
            // mode), so it goes only to api.openai.com unless configured.
            send_name: config
                .and_then(|config| config.send_name)
                .unwrap_or(service == Some("openai")),
        };
        let source = base_url.source.clone();
        let local = self.probes(&base_url);
        let limiter = Arc::new(Limiter::new(limits(config)));
        let client = self.client_for(name, config)?;
        let provider = OpenAiProvider::new(
            client.clone(),
            base_url,
            api_key.as_ref(),
            &extra_headers(config),
            options,
            timeout(config),
            limiter.clone(),
        )
        .map_err(|message| Error::Invalid {
            provider: name.into(),
            message: naming_source(message, &source),
        })?;
        if local {
            let endpoint = provider.chat_endpoint();
            limiter.set_probe(Probe::new(name, client, endpoint, "/chat/completions"));
        }
        Ok(provider)
    }
}

/// A URL problem names the setting the URL came from; others stay as they are.
fn naming_source(message: String, source: &str) -> String {
    if message.starts_with("invalid URL") {
        format!("{message} (base URL from {source})")
    } else {
        message
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

/// `provider/model` → (`provider`, `model`); a bare name is an OpenAI model.
pub fn split_model(model_name: &str) -> (&str, &str) {
    model_name.split_once('/').unwrap_or(("openai", model_name))
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
            send_name: None,
            structured_output: None,
            retry_base_ms: Some(5),
            retry_cap_ms: None,
            script: None,
            cache: None,
            cache_ttl_s: None,
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

    #[test]
    fn anthropic_credentials_follow_the_sdk() {
        let token_only = providers(&[], &[("ANTHROPIC_AUTH_TOKEN", "t")]);
        assert!(
            token_only.resolve("anthropic/claude-haiku-4-5").is_ok(),
            "an auth token is a credential"
        );
        // A provider with its own `api_key_env` never takes the user's
        // Anthropic token: it is asked for its own key.
        let mut own = local(None);
        own.api = ProviderApi::Anthropic;
        own.api_key_env = Some("PROXY_KEY".into());
        let proxy = providers(&[("proxy", own)], &[("ANTHROPIC_AUTH_TOKEN", "t")]);
        assert!(error(&proxy, "proxy/claude").starts_with("PROXY_KEY is not set"));
        let moved = providers(&[], &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")]);
        assert!(
            moved.resolve("anthropic/claude").is_ok(),
            "an explicit endpoint may need no key"
        );
    }

    #[test]
    fn a_key_variable_the_tactic_names_must_be_set() {
        for api in [ProviderApi::OpenAi, ProviderApi::Anthropic] {
            // At an explicit (local) address too: the tactic said a key is needed.
            let mut own = local(Some("http://127.0.0.1:9/v1"));
            own.api = api;
            own.api_key_env = Some("LOCAL_KEY".into());
            let unset = providers(&[("local", own.clone())], &[]);
            assert_eq!(
                error(&unset, "local/m"),
                "LOCAL_KEY is not set (the `api_key_env` of `providers.local`, needed by model \
                 `local/m`); export it, or remove `api_key_env` if the server needs no key"
            );
            let empty = providers(&[("local", own.clone())], &[("LOCAL_KEY", "")]);
            assert!(error(&empty, "local/m").starts_with("LOCAL_KEY is not set"));
            let set = providers(&[("local", own)], &[("LOCAL_KEY", "sk-local-key")]);
            assert!(set.resolve("local/m").is_ok());
        }
        // Without `api_key_env`, a local server may need no key.
        let keyless = providers(&[("local", local(Some("http://127.0.0.1:9/v1")))], &[]);
        assert!(keyless.resolve("local/m").is_ok());
        // A mock provider takes no key, whatever it names.
        let mut mock = local(None);
        mock.api = ProviderApi::Mock;
        mock.api_key_env = Some("LOCAL_KEY".into());
        assert!(
            providers(&[("offline", mock)], &[])
                .resolve("offline/echo")
                .is_ok()
        );
    }

    #[test]
    fn bad_base_url_variables_are_named() {
        let bad = providers(&[], &[("OLLAMA_HOST", "myhost:port")]);
        assert_eq!(
            error(&bad, "ollama/llama3"),
            "provider `ollama`: OLLAMA_HOST: `myhost:port` has an invalid port `port`"
        );
    }

    #[test]
    fn services_come_from_where_requests_go() {
        let keyed = providers(
            &[("local", local(Some("http://127.0.0.1:1/v1")))],
            &[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")],
        );
        let service = |model: &str| keyed.resolve(model).ok().unwrap().service;
        assert_eq!(service("openai/gpt-4o"), Some("openai"));
        assert_eq!(service("anthropic/claude-haiku-4-5"), Some("anthropic"));
        assert_eq!(service("local/gpt-4o"), None);
        assert_eq!(service("ollama/llama3"), None);
        let moved = providers(
            &[],
            &[
                ("OPENAI_API_KEY", "k"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ],
        );
        assert_eq!(moved.resolve("openai/gpt-4o").ok().unwrap().service, None);
    }
}
