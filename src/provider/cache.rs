//! The response cache: a provider's successful replies kept by request, so a
//! re-run of an unchanged call is answered without sending it.
//!
//! The key is the request digest the record already holds (model, messages,
//! tools, format, model arguments: `digest::request_sha256`) hashed with the
//! call's endpoint: the provider's API, its base URL (without credentials),
//! its extra headers and the API type (chat completions or Responses). Only
//! replies are kept, never errors; the replies are already scrubbed of every
//! secret lllm knows (`scrub` wraps each provider), and keys are digests.
//!
//! Whether an agent's calls use the cache is decided when the tactic is
//! built ([`CacheSource`]): `--cache` / `--no-cache` first, then the
//! provider's `cache`, then the tactic's, else off. A hit is recorded as such
//! (`cached: true` on the invoke), costs $0 and counts no tokens.
//!
//! The cache itself is a [`ResponseCache`]: the session store's
//! (`store::Cache`, an SQLite file beside the index) for the `lllm` binary, or
//! any implementation a program brings.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::dialog::{ApiType, Message};

/// How long a reply is used when neither the provider nor the tactic sets
/// `cache_ttl_s`: 14 days, as promptfoo's disk cache.
pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

/// Where replies are kept. Implementations never fail a call: a cache that
/// cannot be read is a miss, one that cannot be written keeps nothing (and
/// says so once, as the store's does).
pub trait ResponseCache: Send + Sync {
    /// The reply stored under `key`, if it was stored less than `max_age` ago.
    fn get(&self, key: &str, max_age: Duration) -> Option<Message>;

    /// Keeps `entry.reply` under `key`, replacing what was there. It may
    /// be written later ([`flush`](ResponseCache::flush)).
    fn put(&self, key: &str, entry: &Entry<'_>);

    /// Returns once every reply put so far is written (a run calls it before
    /// it ends). Nothing to do for a cache that writes at once.
    fn flush(&self) {}
}

/// A reply to keep, with what `lllm cache stats` shows of it.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The provider's reply, as it came (usage with its own token counts).
    pub reply: &'a Message,
    /// The provider's name in the tactic (`openai`, `local`, …).
    pub provider: &'a str,
    /// The model as the provider was asked for it.
    pub model: &'a str,
    /// What the reply cost when it was sent (`None` when no price was known):
    /// what each later hit saves.
    pub cost: Option<f64>,
    /// How long the reply may be used; `clear --expired` removes it after.
    pub ttl: Duration,
}

/// What a run's tactics may cache with: the `--cache` / `--no-cache` choice
/// and the cache, opened the first time an agent turns out to use it (so a
/// run that caches nothing never creates the file). Shared by a tactic and
/// its sub-tactics.
pub struct CacheSource {
    flag: Option<bool>,
    open: Box<dyn Fn() -> Result<Arc<dyn ResponseCache>, String> + Send + Sync>,
    opened: OnceLock<Option<Arc<dyn ResponseCache>>>,
}

impl std::fmt::Debug for CacheSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CacheSource")
            .field("flag", &self.flag)
            .finish_non_exhaustive()
    }
}

impl CacheSource {
    /// `flag` is `--cache` (`Some(true)`), `--no-cache` (`Some(false)`) or
    /// neither; `open` opens the cache when an agent first needs it. A cache
    /// that fails to open is reported once through `warn` and the run goes
    /// on uncached.
    pub fn new(
        flag: Option<bool>,
        open: impl Fn() -> Result<Arc<dyn ResponseCache>, String> + Send + Sync + 'static,
    ) -> CacheSource {
        CacheSource {
            flag,
            open: Box::new(open),
            opened: OnceLock::new(),
        }
    }

    /// A source that uses `cache` (already open). A program passes it to
    /// `tactic::load`; the session store's cache is `store::Cache`:
    ///
    /// ```
    /// # fn main() -> Result<(), lllm::BoxError> {
    /// use std::sync::Arc;
    /// use lllm::provider::cache::CacheSource;
    /// use lllm::{Registry, store};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let tactic = dir.path().join("t.yaml");
    /// std::fs::write(&tactic, "
    /// tactic_type: ask
    /// cache: true                                 # or --cache: Some(true) below
    /// agent_configs: [{name: a, model_name: local/llama3, system_prompt: Be brief.}]
    /// providers: {local: {api: openai, base_url: 'http://127.0.0.1:11434/v1'}}
    /// ")?;
    /// let cache = Arc::new(store::Cache::open(&dir.path().join("store"))?);
    /// let registry = Registry::new();
    /// let options = lllm::tactic::LoadOptions {
    ///     cache: Some(Arc::new(CacheSource::with(None, cache))),
    ///     ..lllm::tactic::LoadOptions::new(&registry)
    /// };
    /// let tactic = lllm::tactic::load(&tactic, &options, None)?;
    /// // Every call of `tactic` now answers from the cache what it answered before.
    /// # let _ = tactic;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with(flag: Option<bool>, cache: Arc<dyn ResponseCache>) -> CacheSource {
        let opened = OnceLock::new();
        let _ = opened.set(Some(cache));
        CacheSource {
            flag,
            open: Box::new(|| Err("already open".into())),
            opened,
        }
    }

    /// Whether calls with these settings use the cache: the flag, else the
    /// provider's `cache`, else the tactic's, else not.
    pub fn enabled(&self, provider: Option<bool>, tactic: Option<bool>) -> bool {
        self.flag.or(provider).or(tactic).unwrap_or(false)
    }

    /// Writes what the cache holds back, if it was opened (see
    /// [`ResponseCache::flush`]).
    pub fn flush(&self) {
        if let Some(Some(cache)) = self.opened.get() {
            cache.flush();
        }
    }

    /// The cache, opening it on first use; `None` when it could not be opened.
    pub fn cache(&self, warn: &dyn Fn(&str)) -> Option<Arc<dyn ResponseCache>> {
        self.opened
            .get_or_init(|| match (self.open)() {
                Ok(cache) => Some(cache),
                Err(error) => {
                    warn(&format!(
                        "{error}; the run goes on without the response cache"
                    ));
                    None
                }
            })
            .clone()
    }
}

/// One agent's use of the cache: where, under which endpoint, for how long.
#[derive(Clone)]
pub struct Binding {
    /// The cache, opened at the first call (a tactic that fails to load
    /// never creates it).
    pub source: Arc<CacheSource>,
    /// Hex SHA-256 of the endpoint (`scope`).
    pub scope: String,
    /// Replies older than this are not used.
    pub ttl: Duration,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Binding")
            .field("scope", &self.scope)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Binding {
    /// The reply kept under `key`, if it is younger than the time to live.
    pub fn get(&self, key: &str) -> Option<Message> {
        self.source.cache(&crate::report::warn)?.get(key, self.ttl)
    }

    /// Keeps `entry` under `key`.
    pub fn put(&self, key: &str, entry: &Entry<'_>) {
        if let Some(cache) = self.source.cache(&crate::report::warn) {
            cache.put(key, entry);
        }
    }

    /// The key of a request with digest `request_sha256`, sent to this
    /// binding's endpoint through API `api_type`.
    pub fn key(&self, request_sha256: &str, api_type: ApiType) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.scope.as_bytes());
        hasher.update([0]);
        hasher.update(format!("{api_type:?}").as_bytes());
        hasher.update([0]);
        hasher.update(request_sha256.as_bytes());
        super::digest::hex(&hasher.finalize())
    }
}

/// Hex SHA-256 of an endpoint's identity: its API, base URL (credentials
/// taken out: the same server answers whoever asks) and extra headers
/// (names and values, sorted; a header may select a model version).
pub fn scope(api: &str, base_url: &str, headers: &[(&str, &str)]) -> String {
    let mut hasher = Sha256::new();
    let mut feed = |part: &str| {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    };
    feed(api);
    feed(&crate::redact::without_credentials(base_url));
    let mut headers = headers.to_vec();
    headers.sort_unstable();
    for (name, value) in headers {
        feed(&name.to_ascii_lowercase());
        feed(value);
    }
    super::digest::hex(&hasher.finalize())
}

/// A hit as the agent loop records it: the stored reply with no usage but a
/// known cost of $0 (nothing was sent, nothing was spent).
pub fn as_hit(mut reply: Message) -> Message {
    reply.usage = serde_json::Map::new();
    reply
        .usage
        .insert("response_cost".into(), serde_json::json!(0.0));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_endpoint_api_type_and_request() {
        let binding = |scope: String| Binding {
            source: Arc::new(CacheSource::with(None, Arc::new(Nothing))),
            scope,
            ttl: DEFAULT_TTL,
        };
        let here = binding(scope("openai", "http://127.0.0.1:1/v1", &[]));
        let key = here.key("abc", ApiType::Completion);
        assert_eq!(key.len(), 64);
        assert_eq!(key, here.key("abc", ApiType::Completion));
        assert_ne!(key, here.key("abd", ApiType::Completion));
        assert_ne!(key, here.key("abc", ApiType::Response));
        let other = binding(scope("openai", "http://127.0.0.1:2/v1", &[]));
        assert_ne!(key, other.key("abc", ApiType::Completion));
        // Credentials in the URL do not change the endpoint; headers do.
        assert_eq!(
            scope("openai", "http://user:secret@127.0.0.1:1/v1", &[]),
            scope("openai", "http://127.0.0.1:1/v1", &[])
        );
        assert_ne!(
            scope("openai", "http://127.0.0.1:1/v1", &[("x-version", "2")]),
            scope("openai", "http://127.0.0.1:1/v1", &[])
        );
        assert_eq!(
            scope("openai", "u", &[("a", "1"), ("b", "2")]),
            scope("openai", "u", &[("b", "2"), ("a", "1")])
        );
    }

    #[test]
    fn precedence_is_flag_then_provider_then_tactic() {
        let source = |flag| CacheSource::new(flag, || Err("unused".into()));
        assert!(!source(None).enabled(None, None));
        assert!(source(None).enabled(None, Some(true)));
        assert!(!source(None).enabled(Some(false), Some(true)));
        assert!(source(None).enabled(Some(true), Some(false)));
        assert!(source(Some(true)).enabled(Some(false), None));
        assert!(!source(Some(false)).enabled(Some(true), Some(true)));
    }

    #[test]
    fn a_cache_that_does_not_open_warns_once() {
        let source = CacheSource::new(Some(true), || Err("cannot open `x`".into()));
        let warnings = std::sync::Mutex::new(Vec::new());
        let warn = |text: &str| warnings.lock().unwrap().push(text.to_string());
        assert!(source.cache(&warn).is_none());
        assert!(source.cache(&warn).is_none());
        assert_eq!(
            *warnings.lock().unwrap(),
            ["cannot open `x`; the run goes on without the response cache"]
        );
    }

    struct Nothing;

    impl ResponseCache for Nothing {
        fn get(&self, _: &str, _: Duration) -> Option<Message> {
            None
        }

        fn put(&self, _: &str, _: &Entry<'_>) {}
    }
}
