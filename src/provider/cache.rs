//! The response cache: a provider's successful replies kept by request, so a
//! re-run of an unchanged call is answered without sending it.
//!
//! The key covers every byte that reaches the wire (issue 26): the provider
//! hashes the URL, every header but the credentials and the exact body it
//! sends ([`Provider::wire_digest`], by the code that builds the body), and
//! the key hashes that with the endpoint's identity (the provider's API, its
//! base URL without credentials, its extra headers) under a version, so a
//! key made another way is never looked up. A key of chosen fields missed
//! `system_role: developer` and `send_name`, and answered requests that
//! differ on the wire with each other's replies. Only replies are kept,
//! never errors; the replies are already scrubbed of every secret lllm knows
//! (`scrub` wraps each provider), and keys are digests.
//!
//! A kept reply passes what a fresh one passes before it is used: it is
//! rebuilt from what a wire parser fills in ([`reply_of`]), then checked by
//! the provider as its own replies are ([`Provider::check_reply`]: size,
//! text or a tool call, secrets scrubbed), and parsed by the prompt (format,
//! schema, repairs) as every reply is. One that fails is a miss: the request
//! is sent, and its fresh reply replaces the entry.
//!
//! Whether an agent's calls use the cache is decided when the tactic is
//! built ([`CacheSource`]): `--cache` / `--no-cache` first, then the
//! provider's `cache`, then the tactic's, else off. A hit is recorded as such
//! (`cached: true` on the invoke), costs $0 and counts no tokens.
//!
//! The cache itself is a [`ResponseCache`]: the session store's
//! (`store::Cache`, an SQLite file beside the index) for the `lllm` binary, or
//! any implementation a program brings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::{Provider, ProviderError};
use crate::dialog::{FunctionCall, Message, Role};
use crate::sha256::Sha256;

/// How long a reply is used when neither the provider nor the tactic sets
/// `cache_ttl_s`: 14 days, as promptfoo's disk cache.
pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

/// What keys are made of, named in each: keys of version 1 (the record's
/// request digest and the API type) are never looked up by this version.
const KEY_VERSION: &str = "lllm.cache/2";

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
    /// Whether a kept reply failed its checks yet (said once a run).
    refused: AtomicBool,
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
            refused: AtomicBool::new(false),
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
            refused: AtomicBool::new(false),
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

    /// Says once a run that a kept reply failed the checks of a fresh one.
    fn refuse(&self, error: &ProviderError, warn: &dyn Fn(&str)) {
        if !self.refused.swap(true, Ordering::Relaxed) {
            warn(&format!(
                "response cache: a kept reply fails the checks a fresh reply passes ({error}); \
                 its request is sent again (as is any other such request of this run)"
            ));
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
    /// The reply kept under `key`, if it is younger than the time to live
    /// and passes what a fresh reply of `provider` passes ([`reply_of`],
    /// then [`Provider::check_reply`]); one that does not is a miss.
    pub fn get(&self, key: &str, provider: &dyn Provider) -> Option<Message> {
        let warn = crate::report::warn;
        let kept = self.source.cache(&warn)?.get(key, self.ttl)?;
        match provider.check_reply(reply_of(kept)) {
            Ok(reply) => Some(reply),
            Err(error) => {
                self.source.refuse(&error, &warn);
                None
            }
        }
    }

    /// Keeps `entry` under `key`.
    pub fn put(&self, key: &str, entry: &Entry<'_>) {
        if let Some(cache) = self.source.cache(&crate::report::warn) {
            cache.put(key, entry);
        }
    }

    /// The key of a request whose wire digest is `wire_digest`
    /// ([`Provider::wire_digest`]), sent to this binding's endpoint.
    pub fn key(&self, wire_digest: &str) -> String {
        let mut hasher = Sha256::new();
        for part in [KEY_VERSION, &self.scope, wire_digest] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        super::digest::hex(&hasher.finalize())
    }
}

/// A kept reply rebuilt from what a provider's wire parser fills in: an
/// assistant message's text, tool calls (read again from their argument
/// text, as the parsers read them), model, log probabilities, finish reason
/// and refusal, API type and usage. Anything else an entry holds (a parsed
/// value, a tool call's result, parts, an image, other metadata: none of
/// which a provider's reply carries) is left behind, so an edited entry
/// cannot put it in a dialog.
pub fn reply_of(kept: Message) -> Message {
    let mut reply = Message::new(Role::Assistant, "assistant", kept.content);
    reply.function_calls = kept
        .function_calls
        .iter()
        .map(|call| FunctionCall::from_model(&call.id, &call.name, &call.arguments_text()))
        .collect();
    reply.model = kept.model;
    reply.logprobs = kept.logprobs;
    reply.api_type = kept.api_type;
    reply.usage = kept.usage;
    for key in ["finish_reason", "refusal"] {
        if let Some(Value::String(text)) = kept.metadata.get(key) {
            reply
                .metadata
                .insert(key.into(), Value::String(text.clone()));
        }
    }
    reply
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
    fn keys_depend_on_endpoint_and_wire_digest() {
        let binding = |scope: String| Binding {
            source: Arc::new(CacheSource::with(None, Arc::new(Nothing))),
            scope,
            ttl: DEFAULT_TTL,
        };
        let here = binding(scope("openai", "http://127.0.0.1:1/v1", &[]));
        let key = here.key("abc");
        assert_eq!(key.len(), 64);
        assert_eq!(key, here.key("abc"));
        assert_ne!(key, here.key("abd"));
        let other = binding(scope("openai", "http://127.0.0.1:2/v1", &[]));
        assert_ne!(key, other.key("abc"));
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

    /// A cache holding one reply, under any key.
    struct Holding(Message);

    impl ResponseCache for Holding {
        fn get(&self, _: &str, _: Duration) -> Option<Message> {
            Some(self.0.clone())
        }

        fn put(&self, _: &str, _: &Entry<'_>) {}
    }

    /// A provider that sends nothing: its checks are the defaults.
    struct Offline;

    impl Provider for Offline {
        fn invoke<'a>(
            &'a self,
            _: super::super::ChatRequest<'a>,
        ) -> futures_util::future::BoxFuture<'a, Result<Message, ProviderError>> {
            Box::pin(async { Err(ProviderError::permanent("offline")) })
        }
    }

    #[test]
    fn a_kept_reply_is_what_a_wire_parser_makes_of_it() {
        let mut kept = Message::new(Role::System, "someone", "the answer");
        kept.parsed
            .insert("raw".into(), serde_json::json!("forged"));
        kept.metadata
            .insert("finish_reason".into(), serde_json::json!("stop"));
        kept.metadata
            .insert("tool_call_id".into(), serde_json::json!("call_9"));
        kept.metadata
            .insert("refusal".into(), serde_json::json!({"not": "text"}));
        kept.parts.push(crate::dialog::ContentPart::Text {
            text: "a part".into(),
        });
        kept.vectors.push(1.0);
        let mut call = FunctionCall::from_model("c1", "grep", r#"{"q": "owl"}"#);
        call.result_str = Some("already ran".into());
        call.raw_arguments = Some("{\"q\": \"wolf\"}".into());
        kept.function_calls.push(call);
        let reply = reply_of(kept);
        let mut expected = Message::new(Role::Assistant, "assistant", "the answer");
        expected
            .metadata
            .insert("finish_reason".into(), serde_json::json!("stop"));
        // The calls are read again from their text, as a parser reads them.
        expected
            .function_calls
            .push(FunctionCall::from_model("c1", "grep", r#"{"q": "wolf"}"#));
        assert_eq!(reply, expected);
    }

    #[test]
    fn a_kept_reply_that_fails_the_checks_of_a_fresh_one_is_a_miss() {
        let binding = |kept: Message| Binding {
            source: Arc::new(CacheSource::with(Some(true), Arc::new(Holding(kept)))),
            scope: scope("openai", "http://127.0.0.1:1/v1", &[]),
            ttl: DEFAULT_TTL,
        };
        // Neither text nor a tool call: a fresh reply like it is an error.
        let empty = binding(Message::assistant("model", ""));
        assert!(empty.get("k", &Offline).is_none());
        let warnings = std::sync::Mutex::new(Vec::new());
        let warn = |text: &str| warnings.lock().unwrap().push(text.to_string());
        let error = ProviderError::transient("no text");
        empty.source.refuse(&error, &warn);
        assert!(warnings.lock().unwrap().is_empty(), "said once a run");
        let fresh = CacheSource::new(None, || Err("unused".into()));
        fresh.refuse(&error, &warn);
        fresh.refuse(&error, &warn);
        assert_eq!(warnings.lock().unwrap().len(), 1);
        // A secret the run knows is scrubbed as a fresh reply's is.
        let mut secrets = crate::redact::Secrets::new();
        secrets.add("sk-very-secret-key-123");
        let scrubbing = super::super::scrub::ScrubbingProvider {
            inner: Arc::new(Offline),
            secrets: Arc::new(secrets),
        };
        let leaky = binding(Message::assistant(
            "model",
            "the key is sk-very-secret-key-123",
        ));
        let reply = leaky.get("k", &scrubbing).unwrap();
        assert_eq!(reply.content, "the key is ***");
        assert_eq!(
            leaky.get("k", &Offline).unwrap().content,
            "the key is sk-very-secret-key-123"
        );
    }
}
