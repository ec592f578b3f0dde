//! The collector's pure parts: endpoints and digests.

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
