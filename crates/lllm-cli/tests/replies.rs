//! Provider replies that are not plain successes, over real HTTP from a
//! server on 127.0.0.1 that answers each request with a canned reply: content
//! as a list of parts, null or non-string content, error objects in a 200
//! reply or a stream (chat completions and Anthropic), Responses `failed` and
//! `incomplete`. None may pass as an empty answer; each error is classified
//! for the retry loop. Chat completions, Responses and Anthropic, whole and
//! streamed.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lllm::dialog::Message;
use lllm::provider::anthropic::AnthropicProvider;
use lllm::provider::openai::{OpenAiProvider, WireOptions};
use lllm::provider::registry::BaseUrl;
use lllm::provider::{ChatRequest, ErrorKind, Provider, ProviderError};
use serde_json::{Map, Value, json};

/// Answers the requests it gets, in order, with `replies` (status, content
/// type, body), one connection each; records each request's path.
struct Canned {
    url: String,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Canned {
    fn serve(replies: Vec<(u16, &'static str, String)>) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            loop {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                // lllm asks a local server for llama.cpp's `/props` once a
                // run; this one has none (a 404, as Ollama answers it).
                if line.starts_with("GET /props ") {
                    let _ = reader.get_mut().write_all(
                        b"HTTP/1.1 404 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                }
                let Some((status, content_type, body)) = replies.next() else {
                    return;
                };
                let path = line.split_whitespace().nth(1).unwrap_or_default();
                seen.lock().unwrap().push(path.to_string());
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut request = vec![0; length];
                let _ = reader.read_exact(&mut request);
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.flush();
            }
        });
        Canned { url, paths }
    }
}

fn json_reply(body: Value) -> (u16, &'static str, String) {
    (200, "application/json", body.to_string())
}

/// Server-sent events: `(event name, data)` each.
fn events(events: &[(Option<&str>, Value)]) -> (u16, &'static str, String) {
    let text: String = events
        .iter()
        .map(|(name, data)| match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        })
        .collect();
    (200, "text/event-stream", text)
}

fn base(url: &str) -> BaseUrl {
    BaseUrl {
        url: url.to_string(),
        source: "the test".into(),
        explicit: true,
    }
}

fn client() -> reqwest::Client {
    lllm::provider::http::client(Duration::from_secs(30)).unwrap()
}

fn limiter() -> Arc<lllm::provider::limit::Limiter> {
    Arc::new(lllm::provider::limit::Limiter::new(Default::default()))
}

fn openai(server: &Canned) -> OpenAiProvider {
    OpenAiProvider::new(
        client(),
        base(&format!("{}/v1", server.url)),
        None,
        &[],
        WireOptions::default(),
        Duration::from_secs(30),
        limiter(),
    )
    .unwrap()
}

fn anthropic(server: &Canned) -> AnthropicProvider {
    let key = lllm::provider::registry::Secret::new("k".into());
    AnthropicProvider::new(
        client(),
        base(&server.url),
        Some(&key),
        None,
        &[],
        Default::default(),
        Duration::from_secs(30),
        limiter(),
    )
    .unwrap()
}

/// Sends one request (`responses`: the Responses API; `stream`: streamed)
/// and returns the outcome and the text the sink got.
async fn ask(
    provider: &dyn Provider,
    responses: bool,
    stream: bool,
) -> (Result<Message, ProviderError>, String) {
    let messages = [Arc::new(Message::user("hi"))];
    let model_args = Map::new();
    let streamed = Mutex::new(String::new());
    let sink = |text: &str| streamed.lock().unwrap().push_str(text);
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: None,
        model_args: &model_args,
        api_type: if responses {
            lllm::dialog::ApiType::Response
        } else {
            Default::default()
        },
        stream: stream.then_some(&sink as &(dyn Fn(&str) + Send + Sync)),
    };
    let outcome = provider.invoke(request).await;
    let text = streamed.lock().unwrap().clone();
    (outcome, text)
}

fn chat_body(message: Value, finish_reason: &str) -> Value {
    json!({"id": "c", "object": "chat.completion", "model": "m",
           "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
}

#[track_caller]
fn failed(outcome: Result<Message, ProviderError>, kind: ErrorKind, text: &str) -> ProviderError {
    let error = outcome.expect_err("an error, not an empty answer");
    assert_eq!(error.kind, kind, "{error}");
    assert!(error.to_string().contains(text), "{error}");
    error
}

#[tokio::test]
async fn chat_completions_read_content_parts_and_refuse_empty_or_odd_content() {
    let server = Canned::serve(vec![
        json_reply(chat_body(
            json!({"role": "assistant", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]}),
            "stop",
        )),
        json_reply(chat_body(
            json!({"role": "assistant", "content": null}),
            "stop",
        )),
        json_reply(chat_body(
            json!({"role": "assistant", "content": 42}),
            "stop",
        )),
        json_reply(chat_body(
            json!({"role": "assistant", "content": null}),
            "length",
        )),
        json_reply(chat_body(
            json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
            "stop",
        )),
        json_reply(json!({"error": {"message": "upstream busy", "code": 429}})),
        json_reply(chat_body(
            json!({"role": "assistant", "content": ""}),
            "stop",
        )),
    ]);
    let provider = openai(&server);
    let (parts, _) = ask(&provider, false, false).await;
    assert_eq!(parts.unwrap().content, "Hello world");
    let (null, _) = ask(&provider, false, false).await;
    failed(null, ErrorKind::Transient, "no text and no tool call");
    let (number, _) = ask(&provider, false, false).await;
    failed(number, ErrorKind::Transient, "`content` is neither text");
    let (cut, _) = ask(&provider, false, false).await;
    failed(cut, ErrorKind::Permanent, "raise `max_tokens`");
    let (refused, _) = ask(&provider, false, false).await;
    failed(
        refused,
        ErrorKind::Permanent,
        "the model refused: I can't help",
    );
    let (busy, _) = ask(&provider, false, false).await;
    failed(busy, ErrorKind::RateLimit, "upstream busy");
    let (empty, _) = ask(&provider, false, false).await;
    failed(empty, ErrorKind::Transient, "no text and no tool call");
    assert!(
        server
            .paths
            .lock()
            .unwrap()
            .iter()
            .all(|path| path == "/v1/chat/completions")
    );
}

fn chunk(delta: Value, finish: Option<&str>) -> (Option<&'static str>, Value) {
    (
        None,
        json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

#[tokio::test]
async fn streamed_chat_completions_turn_error_chunks_into_errors() {
    let done = (None, json!("[DONE]"));
    let with_done = |mut list: Vec<(Option<&'static str>, Value)>| {
        list.push(done.clone());
        let (status, kind, text) = events(&list);
        // `[DONE]` is not JSON: written as the bare marker.
        (status, kind, text.replace("\"[DONE]\"", "[DONE]"))
    };
    let server = Canned::serve(vec![
        with_done(vec![
            chunk(json!({"role": "assistant", "content": "partial "}), None),
            (
                None,
                json!({"error": {"object": "error", "message": "the engine died", "type": "InternalServerError", "code": 500}}),
            ),
        ]),
        with_done(vec![
            chunk(
                json!({"content": [{"type": "text", "text": "in parts"}]}),
                None,
            ),
            chunk(json!({}), Some("stop")),
        ]),
        with_done(vec![chunk(json!({"content": null}), Some("stop"))]),
        with_done(vec![(
            None,
            json!({"error": {"message": "context too long", "type": "invalid_request_error", "code": 400}}),
        )]),
    ]);
    let provider = openai(&server);
    let (died, streamed) = ask(&provider, false, true).await;
    failed(died, ErrorKind::Transient, "the engine died");
    assert_eq!(streamed, "partial ");
    let (parts, streamed) = ask(&provider, false, true).await;
    assert_eq!(parts.unwrap().content, "in parts");
    assert_eq!(streamed, "in parts");
    let (empty, _) = ask(&provider, false, true).await;
    failed(empty, ErrorKind::Transient, "no text and no tool call");
    let (bad, _) = ask(&provider, false, true).await;
    failed(bad, ErrorKind::Permanent, "context too long");
}

fn response(status: &str, output: Value, extra: Value) -> Value {
    let mut body = json!({"id": "r", "object": "response", "model": "m", "status": status,
                          "output": output,
                          "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

fn text_item(text: &str) -> Value {
    json!([{"type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}])
}

#[tokio::test]
async fn responses_that_failed_or_came_back_incomplete() {
    let server = Canned::serve(vec![
        json_reply(response(
            "failed",
            json!([]),
            json!({"error": {"code": "server_error", "message": "The model crashed."}}),
        )),
        json_reply(response(
            "failed",
            json!([]),
            json!({"error": {"code": "invalid_prompt", "message": "Not allowed."}}),
        )),
        json_reply(response(
            "incomplete",
            text_item("Half an ans"),
            json!({"incomplete_details": {"reason": "max_output_tokens"}}),
        )),
        json_reply(response(
            "incomplete",
            json!([]),
            json!({"incomplete_details": {"reason": "max_output_tokens"}}),
        )),
        events(&[
            (
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "delta": "So far"}),
            ),
            (
                Some("response.failed"),
                json!({"type": "response.failed", "response": response("failed", json!([]),
                        json!({"error": {"code": "rate_limit_exceeded", "message": "Slow down."}}))}),
            ),
        ]),
        events(&[(
            Some("error"),
            json!({"type": "error", "code": "server_error", "message": "Stream broke.", "param": null}),
        )]),
        events(&[
            (
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "delta": "Cut"}),
            ),
            (
                Some("response.incomplete"),
                json!({"type": "response.incomplete", "response": response("incomplete", text_item("Cut"),
                        json!({"incomplete_details": {"reason": "max_output_tokens"}}))}),
            ),
        ]),
    ]);
    let provider = openai(&server);
    let (crashed, _) = ask(&provider, true, false).await;
    failed(
        crashed,
        ErrorKind::Transient,
        "the response failed: The model crashed.",
    );
    let (refused, _) = ask(&provider, true, false).await;
    failed(refused, ErrorKind::Permanent, "Not allowed.");
    let (half, _) = ask(&provider, true, false).await;
    let half = half.unwrap();
    assert_eq!(half.content, "Half an ans");
    assert_eq!(half.metadata["finish_reason"], "length");
    let (nothing, _) = ask(&provider, true, false).await;
    failed(nothing, ErrorKind::Permanent, "raise `max_tokens`");
    let (slow, streamed) = ask(&provider, true, true).await;
    failed(slow, ErrorKind::RateLimit, "Slow down.");
    assert_eq!(streamed, "So far");
    let (broke, _) = ask(&provider, true, true).await;
    failed(broke, ErrorKind::Transient, "Stream broke.");
    let (cut, _) = ask(&provider, true, true).await;
    assert_eq!(cut.unwrap().metadata["finish_reason"], "length");
    assert!(
        server
            .paths
            .lock()
            .unwrap()
            .iter()
            .all(|path| path == "/v1/responses")
    );
}

fn message(content: Value, stop_reason: &str) -> Value {
    json!({"id": "msg", "type": "message", "role": "assistant", "model": "claude",
           "content": content, "stop_reason": stop_reason,
           "usage": {"input_tokens": 3, "output_tokens": 2}})
}

#[tokio::test]
async fn anthropic_replies_and_stream_errors() {
    let start = (
        Some("message_start"),
        json!({"type": "message_start", "message": message(json!([]), "end_turn")}),
    );
    let error = |kind: &str, text: &str| {
        (
            Some("error"),
            json!({"type": "error", "error": {"type": kind, "message": text}}),
        )
    };
    let server = Canned::serve(vec![
        json_reply(message(json!([]), "end_turn")),
        json_reply(message(json!([]), "max_tokens")),
        json_reply(message(json!([{"type": "text", "text": null}]), "end_turn")),
        json_reply(message(
            json!([{"type": "text", "text": "Fine."}]),
            "end_turn",
        )),
        events(&[start.clone(), error("overloaded_error", "Overloaded")]),
        events(&[start.clone(), error("api_error", "Internal error")]),
        events(&[start.clone(), error("invalid_request_error", "Bad input")]),
        events(&[start, error("rate_limit_error", "Too many")]),
    ]);
    let provider = anthropic(&server);
    let (empty, _) = ask(&provider, false, false).await;
    failed(empty, ErrorKind::Transient, "no text and no tool call");
    let (cut, _) = ask(&provider, false, false).await;
    failed(cut, ErrorKind::Permanent, "finish reason `max_tokens`");
    let (null, _) = ask(&provider, false, false).await;
    failed(null, ErrorKind::Transient, "a `text` block without text");
    let (fine, _) = ask(&provider, false, false).await;
    assert_eq!(fine.unwrap().content, "Fine.");
    let (overloaded, _) = ask(&provider, false, true).await;
    failed(overloaded, ErrorKind::Transient, "Overloaded");
    let (internal, _) = ask(&provider, false, true).await;
    failed(internal, ErrorKind::Transient, "Internal error");
    let (bad, _) = ask(&provider, false, true).await;
    failed(bad, ErrorKind::Permanent, "Bad input");
    let (limited, _) = ask(&provider, false, true).await;
    failed(limited, ErrorKind::RateLimit, "Too many");
    assert!(
        server
            .paths
            .lock()
            .unwrap()
            .iter()
            .all(|path| path == "/v1/messages")
    );
}

#[test]
fn an_empty_reply_is_retried_and_the_run_succeeds_with_the_next() {
    // The retry loop sees the empty reply as a transient error: the run
    // retries and delivers the real answer, and the record keeps the error.
    let server = Canned::serve(vec![
        json_reply(chat_body(
            json!({"role": "assistant", "content": null}),
            "stop",
        )),
        json_reply(chat_body(
            json!({"role": "assistant", "content": [{"type": "text", "text": "The answer."}]}),
            "stop",
        )),
    ]);
    let test = common::Test::new().file(
        "t.yaml",
        &format!(
            "global: {{model_name: local/m}}\nagent_configs:\n  - name: a\nproviders:\n  local: {{base_url: \"{}/v1\", retry_base_ms: 1}}\n",
            server.url
        ),
    );
    let output = test.run(&["run", "t.yaml", "--task", "q", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "The answer.\n");
    let record = test.read_json("r.json");
    let recall = &record["agent_calls"][0]["llm_recalls"][0]["error"];
    assert_eq!(recall["kind"], "transient");
    assert_eq!(recall["code"], "empty_reply");
}
