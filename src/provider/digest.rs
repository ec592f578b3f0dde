//! The request digest: what decides a model's answer, hashed. Dry runs, the
//! replay provider and the agent's invoke traces all compare requests by it,
//! so it lives here, below all of them.

use serde_json::Value;

use super::ChatRequest;
use crate::redact::{HoldsSecret, Scrub, Scrubber, Secrets};
use crate::sha256::Sha256;

/// SHA-256 over what decides the model's answer: model, messages (role, name,
/// content, tool calls, tool-call id), tools, format and model arguments.
/// Metadata such as dialog ids is left out so a re-run of the same tactic
/// produces the same digests.
pub fn request_sha256(request: &ChatRequest<'_>) -> String {
    let mut hasher = Sha256::new();
    let mut feed = |part: &str| {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    };
    feed(request.model);
    for message in request.messages {
        feed(message.role.as_str());
        feed(&message.name);
        feed(&message.content);
        // Only multipart messages feed more, so older records' digests hold.
        for part in &message.parts {
            match part {
                crate::dialog::ContentPart::Text { text } => feed(text),
                crate::dialog::ContentPart::ImageUrl { image_url } => {
                    feed(&image_url.url);
                    feed(image_url.detail.as_deref().unwrap_or(""));
                }
            }
        }
        feed(message.tool_call_id().unwrap_or(""));
        for call in &message.function_calls {
            feed(&call.id);
            feed(&call.name);
            feed(&call.arguments_text());
        }
    }
    for tool in request.tools {
        feed(&tool.name);
        feed(&tool.description);
        feed(&tool.parameters.to_string());
    }
    feed(&request.format.map(Value::to_string).unwrap_or_default());
    feed(&serde_json::to_string(request.model_args).unwrap_or_default());
    hex(&hasher.finalize())
}

/// The digest a session record keeps of `request`: [`request_sha256`] of
/// the request as the record holds it, each secret of `secrets` in its
/// messages and model arguments written `***` (`redact::Scrub`). A re-run
/// of the record (`lllm replay --rerun`) sends what the record holds, and
/// matches it. `None` when the request holds no secret: the record's digest
/// is then the request's own. Response-cache keys stay over the request as
/// sent.
pub fn scrubbed_sha256(request: &ChatRequest<'_>, secrets: &Secrets) -> Option<String> {
    if secrets.is_empty()
        || !(request.messages.holds_secret(secrets) || request.model_args.holds_secret(secrets))
    {
        return None;
    }
    let mut scrubber = Scrubber::new(secrets);
    let mut messages = request.messages.to_vec();
    messages.scrub(&mut scrubber);
    let mut model_args = request.model_args.clone();
    model_args.scrub(&mut scrubber);
    Some(request_sha256(&ChatRequest {
        messages: &messages,
        model_args: &model_args,
        ..*request
    }))
}

pub(crate) use crate::sha256::hex;
