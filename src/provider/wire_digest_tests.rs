//! The response cache's key covers every byte that reaches the wire (issue
//! 26): two requests have the same wire digest exactly when their URL,
//! headers (credentials aside) and body bytes are the same, for every
//! setting that shapes the body (`system_role`, `send_name`, the API type,
//! an image's type, any model argument) and none that does not (the key,
//! the dialog a message belongs to, streaming).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::anthropic::{self, AnthropicProvider, StructuredOutput};
use super::endpoints::BaseUrl;
use super::limit::{Limiter, Limits};
use super::openai::{OpenAiProvider, WireOptions};
use super::registry::Secret;
use super::{ChatRequest, Provider, ToolSpec};
use crate::dialog::{ApiType, Message, Role};

fn base_url(url: &str) -> BaseUrl {
    BaseUrl {
        url: url.into(),
        source: "test".into(),
        explicit: true,
    }
}

fn openai(options: WireOptions, key: &str, headers: &[(&str, &str)]) -> OpenAiProvider {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    OpenAiProvider::new(
        reqwest::Client::new(),
        base_url("http://127.0.0.1:1/v1"),
        Some(&Secret::new(key.into())),
        &headers,
        options,
        Duration::from_secs(1),
        Arc::new(Limiter::new(Limits::default())),
    )
    .unwrap()
}

/// What a request is built from, owned, so variants are easy to write.
#[derive(Clone)]
struct Parts {
    messages: Vec<Arc<Message>>,
    tools: Vec<ToolSpec>,
    format: Option<Value>,
    model_args: Map<String, Value>,
    api_type: ApiType,
}

impl Parts {
    fn base() -> Parts {
        let mut user = Message::user("Which bird?");
        user.name = "ann".into();
        Parts {
            messages: vec![Arc::new(Message::system("Name birds.")), Arc::new(user)],
            tools: Vec::new(),
            format: None,
            model_args: Map::new(),
            api_type: ApiType::Completion,
        }
    }

    fn request(&self) -> ChatRequest<'_> {
        ChatRequest {
            model: "m",
            messages: &self.messages,
            tools: &self.tools,
            format: self.format.as_ref(),
            model_args: &self.model_args,
            api_type: self.api_type,
            stream: None,
        }
    }
}

/// The body `provider` sends for `parts`, and its wire digest.
fn sent(provider: &dyn Provider, parts: &Parts) -> (Value, String) {
    let request = parts.request();
    (
        provider.wire_request(&request).body,
        provider.wire_digest(&request).unwrap(),
    )
}

#[test]
fn equal_digests_are_equal_bodies_and_nothing_else() {
    let plain = openai(WireOptions::default(), "sk-a", &[]);
    let developer = openai(
        WireOptions {
            developer_role: true,
            ..WireOptions::default()
        },
        "sk-a",
        &[],
    );
    let named = openai(
        WireOptions {
            send_name: true,
            ..WireOptions::default()
        },
        "sk-a",
        &[],
    );
    let base = Parts::base();
    let mut argument = base.clone();
    argument.model_args.insert("temperature".into(), json!(0.5));
    let mut other_argument = base.clone();
    other_argument
        .model_args
        .insert("temperature".into(), json!(0.50001));
    let mut responses = base.clone();
    responses.api_type = ApiType::Response;
    let mut tool = base.clone();
    tool.tools.push(ToolSpec {
        name: "grep".into(),
        description: "Search".into(),
        parameters: json!({"type": "object"}),
    });
    let mut format = base.clone();
    format.format = Some(json!({"type": "object"}));
    let mut image = base.clone();
    let mut picture = Message::new(Role::User, "user", "iVBORw0KGgo=");
    picture.modality = crate::dialog::Modality::Image;
    picture
        .metadata
        .insert("mime_type".into(), json!("image/png"));
    image.messages.push(Arc::new(picture.clone()));
    let mut jpeg = base.clone();
    picture
        .metadata
        .insert("mime_type".into(), json!("image/jpeg"));
    jpeg.messages.push(Arc::new(picture));
    let cases: Vec<(&str, &dyn Provider, &Parts)> = vec![
        ("plain", &plain, &base),
        ("developer role", &developer, &base),
        ("names sent", &named, &base),
        ("an argument", &plain, &argument),
        ("another value", &plain, &other_argument),
        ("responses", &plain, &responses),
        ("a tool", &plain, &tool),
        ("a format", &plain, &format),
        ("a png", &plain, &image),
        ("a jpeg", &plain, &jpeg),
    ];
    let sent: Vec<(&str, Value, String)> = cases
        .iter()
        .map(|(name, provider, parts)| {
            let (body, digest) = sent(*provider, parts);
            (*name, body, digest)
        })
        .collect();
    for (at, (name, body, digest)) in sent.iter().enumerate() {
        for (other, other_body, other_digest) in &sent[at + 1..] {
            assert_ne!(body, other_body, "{name} and {other} send the same body");
            assert_ne!(digest, other_digest, "{name} and {other} share a key");
        }
    }
}

#[test]
fn what_does_not_reach_the_wire_does_not_change_the_digest() {
    let base = Parts::base();
    let digest = |provider: &dyn Provider, parts: &Parts| sent(provider, parts).1;
    let first = digest(&openai(WireOptions::default(), "sk-a", &[]), &base);
    // Another key: the same server answers whoever asks.
    assert_eq!(
        first,
        digest(&openai(WireOptions::default(), "sk-b", &[]), &base)
    );
    // The dialog a message belongs to is not sent.
    let mut stamped = base.clone();
    let mut user = (*stamped.messages[1]).clone();
    user.metadata.insert("dialog_id".into(), json!("d-42"));
    stamped.messages[1] = Arc::new(user);
    let plain = openai(WireOptions::default(), "sk-a", &[]);
    assert_eq!(first, digest(&plain, &stamped));
    // Streaming changes how the reply comes, not what it says.
    let sink = |_: &str| {};
    let streamed = ChatRequest {
        stream: Some(&sink),
        ..base.request()
    };
    assert_eq!(Some(first.clone()), plain.wire_digest(&streamed));
    // A header that is not a credential is part of the request.
    let versioned = openai(WireOptions::default(), "sk-a", &[("x-version", "2")]);
    assert_ne!(first, digest(&versioned, &base));
    let keyed = openai(WireOptions::default(), "sk-a", &[("api-key", "other")]);
    assert_eq!(first, digest(&keyed, &base));
}

fn anthropic(key: &str, structured_output: StructuredOutput) -> AnthropicProvider {
    AnthropicProvider::new(
        reqwest::Client::new(),
        base_url("http://127.0.0.1:1"),
        Some(&Secret::new(key.into())),
        None,
        &[],
        anthropic::WireOptions { structured_output },
        Duration::from_secs(1),
        Arc::new(Limiter::new(Limits::default())),
    )
    .unwrap()
}

#[test]
fn anthropic_digests_its_own_body_and_version() {
    let provider = |key: &str| anthropic(key, StructuredOutput::Auto);
    let base = Parts::base();
    let mut longer = base.clone();
    longer.model_args.insert("max_tokens".into(), json!(77));
    let (body, digest) = sent(&provider("k1"), &base);
    let (other_body, other_digest) = sent(&provider("k1"), &longer);
    assert_ne!(body, other_body);
    assert_ne!(digest, other_digest);
    assert_eq!(digest, sent(&provider("k2"), &base).1);
    // The OpenAI body of the same request is another request.
    assert_ne!(
        digest,
        sent(&openai(WireOptions::default(), "k1", &[]), &base).1
    );
}

#[test]
fn each_way_of_sending_a_format_is_its_own_request() {
    // Issue 27: the format goes as `output_config`, an answer tool or a
    // sentence; a reply cached for one way is not the reply to another.
    let mut parts = Parts::base();
    parts.format = Some(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
    let digests: Vec<String> = [
        StructuredOutput::OutputConfig,
        StructuredOutput::Tool,
        StructuredOutput::Prompt,
    ]
    .into_iter()
    .map(|setting| sent(&anthropic("k", setting), &parts).1)
    .collect();
    assert_ne!(digests[0], digests[1]);
    assert_ne!(digests[1], digests[2]);
    assert_ne!(digests[0], digests[2]);
    // `auto` for a model the table does not mark is the tool.
    assert_eq!(
        sent(&anthropic("k", StructuredOutput::Auto), &parts).1,
        digests[1]
    );
    let mut other = parts.clone();
    other.format = Some(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
    assert_ne!(
        sent(&anthropic("k", StructuredOutput::Tool), &other).1,
        digests[1]
    );
}
