//! Streaming through the OpenAI provider against `lllm-mock` over real HTTP:
//! the text arrives through the sink and the message equals the non-streamed one.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::MockServer;
use lllm::dialog::Message;
use lllm::provider::openai::{OpenAiProvider, WireOptions};
use lllm::provider::{ChatRequest, ErrorKind, Provider};
use serde_json::Map;

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(
        lllm::provider::http::client(Duration::from_secs(5)).unwrap(),
        lllm::provider::registry::BaseUrl {
            url: server.base_url(),
            source: "the test".into(),
            explicit: true,
        },
        None,
        &[],
        WireOptions::default(),
        Duration::from_secs(5),
        Arc::new(lllm::provider::limit::Limiter::new(Default::default())),
    )
    .unwrap()
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = "replies:\n  - text: \"streams arrive in pieces\"\n  - text: \"streams arrive in pieces\"\n  - fault: cut_stream\n";
    let server = MockServer::start(dir.path(), script);
    let provider = provider(&server);
    let messages = [Arc::new(Message::user("go"))];
    let model_args = Map::new();
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: None,
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    let whole = provider.invoke(request).await.unwrap();
    let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
    let collected = pieces.clone();
    let sink = move |text: &str| collected.lock().unwrap().push(text.to_string());
    let streamed = provider
        .invoke(ChatRequest {
            stream: Some(&sink),
            ..request
        })
        .await
        .unwrap();
    assert_eq!(streamed.content, whole.content);
    assert_eq!(streamed.function_calls, whole.function_calls);
    let pieces = pieces.lock().unwrap().clone();
    assert!(
        pieces.len() > 1,
        "text arrived in several deltas: {pieces:?}"
    );
    assert_eq!(pieces.concat(), "streams arrive in pieces");
    assert_eq!(server.requests()[1]["stream"], true);
    let cut = provider
        .invoke(ChatRequest {
            stream: Some(&sink),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(cut.kind, ErrorKind::Transient);
}
