//! The provider that stands in for an OpenAI or Anthropic one under
//! `--via batch-api`: the body is the inner provider's, the answer comes
//! from `BatchApi`, the reply is read by the inner provider's API.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::BatchApi;
use super::service::{Api, Service};
use crate::dialog::{ApiType, Message};
use crate::provider::{ChatRequest, Provider, ProviderError, WireRequest};
use crate::sha256::Sha256;

/// The wire endpoint a request goes to in a batch.
fn endpoint_of(api: Api, api_type: ApiType) -> &'static str {
    match (api, api_type) {
        (Api::Anthropic, _) => "/v1/messages",
        (Api::OpenAi, ApiType::Response) => "/v1/responses",
        (Api::OpenAi, _) => "/v1/chat/completions",
    }
}

/// SHA-256 of the service (`Service::key`), the endpoint and the exact
/// body: equal requests to one provider, equal digests. The journal matches
/// calls to submitted requests by it.
pub fn digest(service: &str, endpoint: &str, body: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(service.as_bytes());
    hasher.update([0]);
    hasher.update(endpoint.as_bytes());
    hasher.update([0]);
    hasher.update(body.to_string().as_bytes());
    crate::sha256::hex(&hasher.finalize())
}

/// The key marking a reply's usage as answered by a Batch API, priced at
/// the batch discount (`pricing::BATCH_DISCOUNT`).
pub const BATCH_USAGE_KEY: &str = "batch_api";

/// A provider whose calls go through its Batch API: `inner` builds each
/// request's body (`wire_request`), `BatchApi` submits it, and the reply is
/// read as `inner`'s API reads it.
pub struct BatchApiProvider {
    /// The OpenAI or Anthropic provider the bodies are built by.
    pub inner: Arc<dyn Provider>,
    /// Its Batch API.
    pub service: Arc<Service>,
    /// The run's collector.
    pub hub: Arc<BatchApi>,
}

impl BatchApiProvider {
    async fn send(&self, request: ChatRequest<'_>) -> Result<Message, ProviderError> {
        // A batch answers whole; a stream, if asked for, gets the whole text.
        let sink = request.stream;
        let request = ChatRequest {
            stream: None,
            ..request
        };
        let endpoint = endpoint_of(self.service.api, request.api_type);
        let body = self.inner.wire_request(&request).body;
        let digest = digest(&self.service.key, endpoint, &body);
        let reply = self
            .hub
            .call(&self.service, endpoint, request.model, body, digest)
            .await?;
        let message = match endpoint {
            // The answer tool's call is the reply, as `inner` reads it.
            "/v1/messages" => crate::provider::anthropic::parse_response(&reply).map(|message| {
                crate::provider::anthropic::structured::lift_answer(message, &request)
            }),
            "/v1/responses" => crate::provider::responses::parse_response(&reply),
            _ => crate::provider::openai::parse_response(&reply),
        };
        let mut message = crate::provider::exchange::accept(message?)?;
        message
            .usage
            .insert(BATCH_USAGE_KEY.into(), Value::Bool(true));
        if let Some(sink) = sink {
            sink(&message.content);
        }
        Ok(message)
    }
}

impl Provider for BatchApiProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(self.send(request))
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        self.inner.wire_request(request)
    }

    /// The inner provider's: a request answered through a batch is the
    /// request sent on its own, with the same reply.
    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        self.inner.wire_digest(request)
    }

    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        self.inner.check_reply(reply)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_requests_have_equal_digests_and_the_service_and_endpoint_count() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let chat = digest("a", "/v1/chat/completions", &body);
        assert_eq!(chat, digest("a", "/v1/chat/completions", &body.clone()));
        assert_ne!(chat, digest("a", "/v1/responses", &body));
        assert_ne!(chat, digest("b", "/v1/chat/completions", &body));
        let other = json!({"model": "m", "messages": [{"role": "user", "content": "hi!"}]});
        assert_ne!(chat, digest("a", "/v1/chat/completions", &other));
    }

    #[test]
    fn each_api_type_goes_to_its_endpoint() {
        assert_eq!(
            endpoint_of(Api::OpenAi, ApiType::Completion),
            "/v1/chat/completions"
        );
        assert_eq!(endpoint_of(Api::OpenAi, ApiType::Response), "/v1/responses");
        assert_eq!(
            endpoint_of(Api::Anthropic, ApiType::Response),
            "/v1/messages"
        );
    }
}
