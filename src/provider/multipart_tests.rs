//! A multipart user message (text and images) on the wire of each API: the
//! parts are sent in the API's own form, in order; a plain message is not
//! changed by them.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{ChatRequest, anthropic, digest, openai, responses};
use crate::dialog::{ContentPart, Message, Role};

fn messages() -> [Arc<Message>; 2] {
    [
        Arc::new(Message::system("Name birds.")),
        Arc::new(Message::with_parts(
            Role::User,
            "user",
            vec![
                ContentPart::text("Which bird?"),
                ContentPart::image_bytes(b"\x89PNG\r\n\x1a\n").unwrap(),
                ContentPart::image_url("https://example.com/owl.jpg"),
            ],
        )),
    ]
}

fn request<'a>(
    messages: &'a [Arc<Message>],
    model_args: &'a Map<String, Value>,
) -> ChatRequest<'a> {
    ChatRequest {
        model: "m",
        messages,
        tools: &[],
        format: None,
        model_args,
        api_type: Default::default(),
        stream: None,
    }
}

const PNG: &str = "iVBORw0KGgo=";

#[test]
fn openai_chat_gets_its_own_content_parts() {
    let (messages, args) = (messages(), Map::new());
    let options = openai::WireOptions {
        developer_role: false,
        send_name: false,
    };
    let body = openai::build_request(&request(&messages, &args), &options);
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "text", "text": "Which bird?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
            {"type": "image_url", "image_url": {"url": "https://example.com/owl.jpg"}},
        ])
    );
    assert_eq!(body["messages"][0]["content"], "Name birds.");
}

#[test]
fn the_responses_api_gets_input_parts() {
    let (messages, args) = (messages(), Map::new());
    let body = responses::build_request(&request(&messages, &args), false);
    assert_eq!(
        body["input"][1]["content"],
        json!([
            {"type": "input_text", "text": "Which bird?"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")},
            {"type": "input_image", "image_url": "https://example.com/owl.jpg"},
        ])
    );
}

#[test]
fn anthropic_gets_text_and_image_blocks() {
    let (messages, args) = (messages(), Map::new());
    let body = anthropic::build_request(&request(&messages, &args));
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "Which bird?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/owl.jpg"}},
        ])
    );
}

#[test]
fn the_digest_sees_the_parts() {
    let (messages, args) = (messages(), Map::new());
    let with_images = digest::request_sha256(&request(&messages, &args));
    let mut other = Message::clone(&messages[1]);
    other.parts[2] = ContentPart::image_url("https://example.com/crow.jpg");
    let changed = [messages[0].clone(), Arc::new(other)];
    assert_ne!(
        digest::request_sha256(&request(&changed, &args)),
        with_images
    );
    let plain = [messages[0].clone(), Arc::new(Message::user("Which bird?"))];
    let text_only = digest::request_sha256(&request(&plain, &args));
    assert_ne!(text_only, with_images);
}
