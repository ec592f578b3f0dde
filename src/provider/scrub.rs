//! Every secret of a run out of everything a provider returns: the registry
//! wraps each provider it builds in a `ScrubbingProvider`, so the reply text,
//! tool calls, error messages and streamed text that reach records, results,
//! stdout and stderr hold `***` where a provider echoed a key, a configured
//! header value or a password from a URL.
//!
//! `http::Endpoint` already scrubs the raw bodies it reads of the secrets it
//! sends itself (before a body is parsed or an error snippet is cut short);
//! this layer adds the run's other secrets, and secrets that a stream spreads
//! over several pieces.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::limit::Limiter;
use super::{ChatRequest, Provider, ProviderError, WireRequest};
use crate::config::ProviderConfig;
use crate::dialog::Message;
use crate::redact::{Scrub, Scrubber, Secrets};

/// The secrets of a run: every value the registry read from the
/// environment, each configured provider header, and the credentials of each
/// URL. A variable named `*_BASE_URL` or `*_HOST` holds a URL and gives its
/// credentials; any other variable the registry reads is a key or a token
/// and is a secret as a whole.
pub fn known_secrets(
    configs: &BTreeMap<String, ProviderConfig>,
    environment: &BTreeMap<String, Option<String>>,
) -> Secrets {
    let mut secrets = Secrets::new();
    for (name, value) in environment {
        let Some(value) = value else { continue };
        if name.ends_with("_BASE_URL") || name.ends_with("_HOST") {
            secrets.add_url(value);
        } else {
            secrets.add(value);
        }
    }
    for config in configs.values() {
        if let Some(url) = &config.base_url {
            secrets.add_url(url);
        }
        for (name, value) in &config.headers {
            secrets.add_header(name, value);
        }
    }
    secrets
}

/// `provider` with its replies and errors scrubbed of `secrets`; `provider`
/// itself when there is nothing to scrub.
pub fn wrap(provider: Arc<dyn Provider>, secrets: &Arc<Secrets>) -> Arc<dyn Provider> {
    if secrets.is_empty() {
        return provider;
    }
    Arc::new(ScrubbingProvider {
        inner: provider,
        secrets: secrets.clone(),
    })
}

/// A provider whose replies, errors and streamed text are scrubbed.
pub struct ScrubbingProvider {
    pub inner: Arc<dyn Provider>,
    pub secrets: Arc<Secrets>,
}

impl Provider for ScrubbingProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(async move {
            let result = match request.stream {
                None => self.inner.invoke(request).await,
                Some(outer) => {
                    let stream = HeldStream {
                        secrets: &self.secrets,
                        outer,
                        pending: Mutex::new(String::new()),
                    };
                    let sink = |text: &str| stream.push(text);
                    let request = ChatRequest {
                        stream: Some(&sink),
                        ..request
                    };
                    let result = self.inner.invoke(request).await;
                    stream.flush();
                    result
                }
            };
            match result {
                Ok(mut message) => {
                    scrub_message(&self.secrets, &mut message);
                    Ok(message)
                }
                Err(mut error) => {
                    scrub_error(&self.secrets, &mut error);
                    Err(error)
                }
            }
        })
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        self.inner.wire_request(request)
    }

    fn limiter(&self) -> Option<&Limiter> {
        self.inner.limiter()
    }

    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        self.inner.wire_digest(request)
    }

    /// The inner provider's checks, then this layer's scrubbing, as a
    /// fresh reply gets them.
    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        let mut reply = self.inner.check_reply(reply)?;
        scrub_message(&self.secrets, &mut reply);
        Ok(reply)
    }
}

/// Takes every secret out of a reply: its text, model name, tool calls and
/// metadata (`Message`'s [`Scrub`], as a record's messages are). The log
/// probabilities of a reply whose text held a secret are dropped: token by
/// token they would spell it out again.
pub fn scrub_message(secrets: &Secrets, message: &mut Message) {
    if secrets.is_empty() {
        return;
    }
    message.scrub(&mut Scrubber::new(secrets));
}

pub fn scrub_error(secrets: &Secrets, error: &mut ProviderError) {
    error.scrub(&mut Scrubber::new(secrets));
}

/// Its message, code and endpoint.
impl Scrub for ProviderError {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        let ProviderError {
            kind: _,
            status: _,
            code,
            message,
            retry_after: _,
            endpoint,
            network: _,
        } = self;
        message.scrub(scrubber) | code.scrub(scrubber) | endpoint.scrub(scrubber)
    }
}

/// A stream sink that passes text on scrubbed. Text that could be the start
/// of a secret is held back until the next piece shows whether it is one
/// (or until the stream ends), so a key streamed a few characters at a time
/// never reaches the terminal.
struct HeldStream<'s> {
    secrets: &'s Secrets,
    outer: super::TextSink<'s>,
    pending: Mutex<String>,
}

impl HeldStream<'_> {
    fn push(&self, text: &str) {
        if text.is_empty() {
            // An empty piece starts a new attempt (`TextSink`): what is held
            // belongs to the attempt being discarded and may be the start of a
            // secret, so it is dropped rather than shown; the marker goes on.
            self.pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clear();
            (self.outer)("");
            return;
        }
        let ready = {
            let mut pending = self
                .pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            pending.push_str(text);
            self.secrets.scrub_string(&mut pending);
            let held = self.secrets.unfinished_from(&pending);
            let rest = pending.split_off(held);
            std::mem::replace(&mut *pending, rest)
        };
        if !ready.is_empty() {
            (self.outer)(&ready);
        }
    }

    fn flush(&self) {
        let rest = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        if !rest.is_empty() {
            (self.outer)(&rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::{FunctionCall, Role, TokenLogprob};
    use crate::provider::ErrorKind;

    const KEY: &str = "sk-run-secret-0123";

    fn secrets() -> Arc<Secrets> {
        let mut secrets = Secrets::new();
        secrets.add(KEY);
        Arc::new(secrets)
    }

    /// Streams `pieces`, then answers with `reply` (or fails with it).
    struct Scripted {
        pieces: Vec<&'static str>,
        reply: Result<Message, ProviderError>,
    }

    impl Provider for Scripted {
        fn invoke<'a>(
            &'a self,
            request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            Box::pin(async move {
                if let Some(sink) = request.stream {
                    for piece in &self.pieces {
                        sink(piece);
                    }
                }
                self.reply.clone()
            })
        }
    }

    fn request<'a>(
        arguments: &'a serde_json::Map<String, serde_json::Value>,
        sink: Option<super::super::TextSink<'a>>,
    ) -> ChatRequest<'a> {
        ChatRequest {
            model: "m",
            messages: &[],
            tools: &[],
            format: None,
            model_args: arguments,
            api_type: crate::dialog::ApiType::Completion,
            stream: sink,
        }
    }

    #[tokio::test]
    async fn streamed_text_and_the_reply_lose_a_key_split_over_pieces() {
        let mut reply = Message::new(Role::Assistant, "assistant", format!("key {KEY}!"));
        reply.logprobs = vec![TokenLogprob {
            token: Some("sk-run".into()),
            logprob: Some(-0.1),
            bytes: None,
            top_logprobs: Vec::new(),
        }];
        reply.function_calls = vec![FunctionCall::from_model(
            "call-1",
            "lookup",
            &format!("{{\"key\": \"{KEY}\"}}"),
        )];
        let provider = wrap(
            Arc::new(Scripted {
                pieces: vec!["key s", "k-run-sec", "ret-0123", "!"],
                reply: Ok(reply),
            }),
            &secrets(),
        );
        let shown = Mutex::new(Vec::<String>::new());
        let sink = |text: &str| shown.lock().unwrap().push(text.to_string());
        let arguments = serde_json::Map::new();
        let message = provider
            .invoke(request(&arguments, Some(&sink)))
            .await
            .unwrap();
        let shown = shown.into_inner().unwrap();
        assert_eq!(shown.concat(), "key ***!");
        assert_eq!(shown[0], "key ", "text that cannot start a key is not held");
        assert_eq!(message.content, "key ***!");
        assert!(message.logprobs.is_empty());
        assert_eq!(message.function_calls[0].arguments["key"], "***");
    }

    #[tokio::test]
    async fn errors_lose_the_key_and_nothing_is_wrapped_without_secrets() {
        let error = ProviderError {
            kind: ErrorKind::Permanent,
            status: Some(401),
            code: Some(format!("bad_{KEY}")),
            message: format!("invalid key {KEY}"),
            retry_after: None,
            endpoint: None,
            network: false,
        };
        let scripted = Arc::new(Scripted {
            pieces: Vec::new(),
            reply: Err(error),
        });
        let arguments = serde_json::Map::new();
        let error = wrap(scripted.clone(), &secrets())
            .invoke(request(&arguments, None))
            .await
            .err()
            .unwrap();
        assert_eq!(error.to_string(), "HTTP 401: invalid key *** (bad_***)");
        let unwrapped = wrap(scripted.clone(), &Arc::new(Secrets::new()));
        let inner: Arc<dyn Provider> = scripted;
        assert!(Arc::ptr_eq(&unwrapped, &inner));
    }

    #[test]
    fn the_runs_secrets_come_from_keys_headers_and_urls() {
        let environment: BTreeMap<String, Option<String>> = [
            ("OPENAI_API_KEY", Some("sk-openai-123456")),
            ("OPENAI_BASE_URL", Some("http://proxy-user:proxy-pass@h/v1")),
            ("OLLAMA_HOST", Some("ollama.internal:11434")),
            ("GROQ_API_KEY", None),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.map(str::to_string)))
        .collect();
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("t.yaml");
        let tactic = "agent_configs: [{name: a, model_name: local/m}]\nproviders:\n  local:\n    \
                      base_url: \"https://token-as-user-0001@h/v1\"\n    \
                      headers: {X-Custom: custom-secret-value, Content-Type: application/json}\n";
        std::fs::write(&path, tactic).unwrap();
        let configs = crate::config::load(&path).unwrap().providers;
        let secrets = known_secrets(&configs, &environment);
        assert_eq!(
            secrets.scrub(
                "sk-openai-123456 proxy-user proxy-pass ollama.internal:11434 \
                 token-as-user-0001 custom-secret-value application/json"
            ),
            "*** *** *** ollama.internal:11434 *** *** application/json"
        );
    }
}
