//! The built-in offline provider: `mock/echo` answers with the last user
//! message, `mock/script` serves the replies of a script file. No key, no
//! network; faults in a script become the errors the HTTP path would give.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{ChatRequest, ErrorKind, Provider, ProviderError, http};
use crate::dialog::{FunctionCall, Message, Role};
use crate::mock::script::{Fault, Reply, Script, ScriptRequest};

pub struct MockProvider {
    script: Option<Arc<Script>>,
}

impl MockProvider {
    /// `echo`, or `script` with the script file from the provider config.
    pub fn new(model: &str, script: Option<&Path>) -> Result<MockProvider, String> {
        match (model, script) {
            ("echo", _) => Ok(MockProvider { script: None }),
            ("script", Some(path)) => {
                let script = Script::load(path).map_err(|error| error.to_string())?;
                Ok(MockProvider {
                    script: Some(Arc::new(script)),
                })
            }
            ("script", None) => {
                Err("`mock/script` needs a script: set `providers: {mock: {script: FILE}}`".into())
            }
            (other, _) => Err(format!(
                "unknown mock model `{other}`; use `mock/echo` or `mock/script`"
            )),
        }
    }

    async fn answer(&self, request: ChatRequest<'_>) -> Result<Message, ProviderError> {
        let last = request.messages.last();
        let last_text = last.map_or("", |message| message.content.as_str());
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|message| message.role == Role::User)
            .map_or("", |message| message.content.as_str());
        let prompt_chars: usize = request
            .messages
            .iter()
            .map(|message| message.content.len())
            .sum();
        if let Some(sink) = request.stream {
            // A new attempt starts (see `TextSink`).
            sink("");
        }
        let Some(script) = &self.script else {
            if let (Some(sink), false) = (request.stream, last_user.is_empty()) {
                sink(last_user);
            }
            return Ok(reply(
                last_user.to_string(),
                Vec::new(),
                estimate(prompt_chars),
                None,
            ));
        };
        let served = script.next(&ScriptRequest {
            model: request.model,
            last_text,
            last_role: last.map_or("user", |message| message.role.as_str()),
            message_count: request.messages.len(),
        });
        if !served.delay.is_zero() {
            tokio::time::sleep(served.delay).await;
        }
        match served.reply {
            Reply::Message(message) => {
                let calls = message
                    .tool_calls
                    .iter()
                    .map(|call| FunctionCall::from_model(&call.id, &call.name, &call.arguments))
                    .collect();
                let usage = message
                    .usage
                    .map(|usage| (usage.prompt_tokens, usage.completion_tokens));
                // Offline replies arrive whole: one piece for a streaming caller.
                if let (Some(sink), Some(text)) = (request.stream, message.text.as_deref())
                    && !text.is_empty()
                {
                    sink(text);
                }
                Ok(reply(
                    message.text.unwrap_or_default(),
                    calls,
                    estimate(prompt_chars),
                    usage,
                ))
            }
            Reply::Fault(Fault::Http {
                status,
                retry_after_s,
                retry_after_ms,
                code,
                message,
            }) => {
                let kind = match (http::classify_status(status), code.as_deref()) {
                    (_, Some("insufficient_quota")) => ErrorKind::Permanent,
                    (kind, _) => kind,
                };
                Err(ProviderError {
                    kind,
                    status: Some(status),
                    code,
                    message: message.unwrap_or_else(|| format!("mock fault {status}")),
                    // A script's seconds are finite and non-negative, but may be huge.
                    retry_after: retry_after_ms.map(std::time::Duration::from_millis).or(
                        retry_after_s.map(|seconds| {
                            std::time::Duration::try_from_secs_f64(seconds)
                                .unwrap_or(super::rate_headers::LONGEST)
                                .min(super::rate_headers::LONGEST)
                        }),
                    ),
                    endpoint: None,
                    network: false,
                })
            }
            Reply::Fault(fault) => Err(ProviderError {
                // What a reset or a held request is over HTTP (`lllm-mock`).
                network: matches!(fault, Fault::Reset | Fault::Timeout),
                ..ProviderError::transient(format!("mock fault: {fault:?}").to_lowercase())
            }),
            Reply::Exhausted { served } => Err(ProviderError::permanent(format!(
                "mock script exhausted after {served} replies"
            ))),
        }
    }
}

/// Tokens estimated at four characters each, at least one.
fn estimate(chars: usize) -> u64 {
    chars.div_ceil(4).max(1) as u64
}

fn reply(
    text: String,
    calls: Vec<FunctionCall>,
    prompt_tokens: u64,
    usage: Option<(u64, u64)>,
) -> Message {
    let (prompt, completion) = usage.unwrap_or((prompt_tokens, estimate(text.len())));
    // A script may report any count (to test what a server's absurd count
    // does): clamped as a wire provider's, and summed without overflow.
    let prompt = crate::dialog::clamp_tokens("prompt_tokens", prompt);
    let completion = crate::dialog::clamp_tokens("completion_tokens", completion);
    let total = crate::dialog::total_count(None, prompt, completion);
    let mut message = Message::new(Role::Assistant, "assistant", text);
    message.function_calls = calls;
    message.usage =
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total})
            .as_object()
            .cloned()
            .unwrap_or_default();
    message
}

impl Provider for MockProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(self.answer(request))
    }
}
