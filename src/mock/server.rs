//! `lllm-mock`: an OpenAI-compatible chat-completions server on loopback whose
//! replies come from a script, with fault injection and a request log. Tests,
//! benchmarks and users point `lllm` at it instead of a real provider.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::script::{Fault, Reply, Script, ScriptMessage, ScriptRequest};

pub struct ServerOptions {
    pub script: PathBuf,
    pub host: String,
    pub port: u16,
    pub latency_ms: Option<f64>,
    pub log: Option<PathBuf>,
    pub allow_remote: bool,
}

struct Shared {
    script: Script,
    log: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
}

/// Binds, prints `listening on http://HOST:PORT`, serves until Ctrl-C or SIGTERM.
pub async fn run(options: ServerOptions) -> Result<(), String> {
    let loopback = matches!(options.host.as_str(), "127.0.0.1" | "localhost" | "::1");
    if !loopback && !options.allow_remote {
        return Err(format!(
            "refusing to listen on `{}`: lllm-mock is a test tool; pass --allow-remote",
            options.host
        ));
    }
    let mut script = Script::load(&options.script).map_err(|error| error.to_string())?;
    if let Some(latency) = options.latency_ms {
        script.set_latency_ms(latency);
    }
    let log = match &options.log {
        Some(path) => Some(Mutex::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| format!("cannot open the log `{}`: {error}", path.display()))?,
        ))),
        None => None,
    };
    let shared = Arc::new(Shared { script, log });
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(models))
        .with_state(shared);
    let host = if options.host == "localhost" {
        "127.0.0.1"
    } else {
        options.host.as_str()
    };
    let listener = tokio::net::TcpListener::bind((host, options.port))
        .await
        .map_err(|error| format!("cannot listen on {host}:{}: {error}", options.port))?;
    let address: SocketAddr = listener.local_addr().map_err(|error| error.to_string())?;
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "listening on http://{address}");
    let _ = stdout.flush();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|error| format!("server error: {error}"))
}

async fn shutdown() {
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "lllm-mock"}]}))
        .into_response()
}

fn auth_fingerprint(headers: &HeaderMap) -> Value {
    let value = headers
        .get("authorization")
        .or_else(|| headers.get("x-api-key"));
    match value {
        Some(value) => {
            let digest = Sha256::digest(value.as_bytes());
            let hex: String = digest
                .iter()
                .take(6)
                .map(|byte| format!("{byte:02x}"))
                .collect();
            json!(format!("sha256:{hex}"))
        }
        None => Value::Null,
    }
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The wire format a request came in (and its reply goes out) in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Responses,
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, headers, body, Api::Chat).await
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(shared, headers, body, Api::Messages).await
}

async fn responses(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(shared, headers, body, Api::Responses).await
}

/// A Responses API input item as a chat message: role and text.
fn response_item_as_message(item: &Value) -> Value {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call_output") => {
            json!({"role": "tool", "content": item.get("output").cloned().unwrap_or_default()})
        }
        Some("function_call") => json!({"role": "assistant", "content": ""}),
        _ => {
            json!({"role": item.get("role").cloned().unwrap_or(json!("user")), "content": item.get("content").cloned().unwrap_or_default()})
        }
    }
}

async fn serve(shared: Arc<Shared>, headers: HeaderMap, body: Bytes, api: Api) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(error) => {
            return error_response(
                api,
                400,
                "invalid_request_error",
                &format!("body is not JSON: {error}"),
                None,
            );
        }
    };
    // The Responses API sends `input` (a string or items); the others `messages`.
    let messages = match (api, request.get("input")) {
        (Api::Responses, Some(Value::String(text))) => {
            vec![json!({"role": "user", "content": text})]
        }
        (Api::Responses, Some(Value::Array(items))) => {
            items.iter().map(response_item_as_message).collect()
        }
        _ => request
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let last = messages.last();
    let last_text = last
        .and_then(|message| message.get("content"))
        .map(text_of)
        .unwrap_or_default();
    let carries_tool_results = last
        .and_then(|message| message.get("content"))
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        });
    let last_role = if carries_tool_results {
        "tool"
    } else {
        last.and_then(|message| message.get("role"))
            .and_then(Value::as_str)
            .unwrap_or("user")
    };
    let served = shared.script.next(&ScriptRequest {
        model: &model,
        last_text: &last_text,
        last_role,
        message_count: messages.len(),
    });
    let prompt_chars: usize = messages
        .iter()
        .filter_map(|m| m.get("content"))
        .map(|c| text_of(c).len())
        .sum();
    let served_fault = match &served.reply {
        Reply::Fault(fault) => Some(fault.clone()),
        _ => None,
    };
    let (status, response) = match served.reply {
        Reply::Message(message) => {
            if !served.delay.is_zero() {
                tokio::time::sleep(served.delay).await;
            }
            let response = match (api, stream) {
                (Api::Chat, false) => {
                    axum::Json(completion(&model, served.index, &message, prompt_chars))
                        .into_response()
                }
                (Api::Chat, true) => sse(
                    &completion(&model, served.index, &message, prompt_chars),
                    true,
                ),
                (Api::Messages, false) => axum::Json(anthropic_message(
                    &model,
                    served.index,
                    &message,
                    prompt_chars,
                ))
                .into_response(),
                (Api::Messages, true) => anthropic_sse(
                    &anthropic_message(&model, served.index, &message, prompt_chars),
                    true,
                ),
                (Api::Responses, false) => axum::Json(response_object(
                    &model,
                    served.index,
                    &message,
                    prompt_chars,
                ))
                .into_response(),
                (Api::Responses, true) => responses_sse(
                    &response_object(&model, served.index, &message, prompt_chars),
                    true,
                ),
            };
            (200, response)
        }
        Reply::Fault(fault) => {
            if !served.delay.is_zero() {
                tokio::time::sleep(served.delay).await;
            }
            fault_response(api, fault, &model, served.index)
        }
        Reply::Exhausted { served } => (
            400,
            error_response(
                api,
                400,
                "invalid_request_error",
                &format!("lllm-mock: script exhausted after {served} replies"),
                None,
            ),
        ),
    };
    let hold = matches!(&served_fault, Some(Fault::Timeout));
    if let Some(log) = &shared.log {
        let line = json!({
            "n": served.index,
            "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "method": "POST",
            "path": match api {
                Api::Chat => "/v1/chat/completions",
                Api::Messages => "/v1/messages",
                Api::Responses => "/v1/responses",
            },
            "model": model,
            "stream": stream,
            "auth": auth_fingerprint(&headers),
            "body": request,
            "status": status,
        });
        let mut log = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(log, "{line}");
        let _ = log.flush();
    }
    if hold {
        // A timeout fault holds the request until the client gives up.
        std::future::pending::<()>().await;
    }
    response
}

fn completion(model: &str, index: usize, message: &ScriptMessage, prompt_chars: usize) -> Value {
    let text = message.text.clone();
    let tool_calls: Vec<Value> = message
        .tool_calls
        .iter()
        .map(|call| json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}))
        .collect();
    let (prompt, completion) = match message.usage {
        Some(usage) => (usage.prompt_tokens, usage.completion_tokens),
        None => (
            prompt_chars.div_ceil(4).max(1) as u64,
            text.as_deref().unwrap_or_default().len().div_ceil(4).max(1) as u64,
        ),
    };
    let finish = message.finish_reason.clone().unwrap_or_else(|| {
        if tool_calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        }
    });
    let mut wire = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        wire["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": format!("chatcmpl-mock-{index}"),
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{"index": 0, "message": wire, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
}

/// The completion as SSE chunks; `complete: false` stops before the end.
fn sse(completion: &Value, complete: bool) -> Response {
    let id = completion["id"].clone();
    let model = completion["model"].clone();
    let message = &completion["choices"][0]["message"];
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let text = message["content"].as_str().unwrap_or_default();
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_string).collect();
    for piece in pieces {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]}),
            Value::Null,
        ));
        let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
        let middle = arguments
            .char_indices()
            .nth(arguments.chars().count() / 2)
            .map_or(0, |(at, _)| at);
        for part in [&arguments[..middle], &arguments[middle..]] {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    if !complete {
        events.truncate(2);
    } else {
        events.push(chunk(
            json!({}),
            completion["choices"][0]["finish_reason"].clone(),
        ));
        let mut usage = chunk(json!({}), Value::Null);
        usage["choices"] = json!([]);
        usage["usage"] = completion["usage"].clone();
        events.push(usage);
    }
    let mut body = String::new();
    for event in events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    if complete {
        body.push_str("data: [DONE]\n\n");
    }
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn error_response(
    api: Api,
    status: u16,
    kind: &str,
    message: &str,
    code: Option<&str>,
) -> Response {
    let body = match api {
        Api::Chat | Api::Responses => {
            json!({"error": {"message": message, "type": kind, "code": code}})
        }
        Api::Messages => {
            json!({"type": "error", "error": {"type": code.unwrap_or(kind), "message": message}})
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

fn fault_response(api: Api, fault: Fault, model: &str, index: usize) -> (u16, Response) {
    match fault {
        Fault::Http {
            status,
            retry_after_s,
            retry_after_ms,
            code,
            message,
        } => {
            let kind = match status {
                429 => "rate_limit_error",
                529 => "overloaded_error",
                500..=599 if api == Api::Messages => "api_error",
                500..=599 => "server_error",
                _ => "invalid_request_error",
            };
            let text = message.unwrap_or_else(|| format!("lllm-mock fault {status}"));
            let mut response = error_response(api, status, kind, &text, code.as_deref());
            let headers = response.headers_mut();
            if let Some(seconds) = retry_after_s {
                if let Ok(value) = format!("{seconds}").parse() {
                    headers.insert("retry-after", value);
                }
            }
            if let Some(millis) = retry_after_ms {
                if let Ok(value) = format!("{millis}").parse() {
                    headers.insert("retry-after-ms", value);
                }
            }
            (status, response)
        }
        // Answered by `chat_completions`, which never replies.
        Fault::Timeout => (0, StatusCode::GATEWAY_TIMEOUT.into_response()),
        Fault::Malformed => (
            200,
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from("{not json"))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        ),
        Fault::Reset => {
            // A body that fails makes hyper abort the connection mid-reply.
            let response = Response::builder()
                .status(200)
                .header("content-length", "1000")
                .body(Body::from_stream(futures_util::stream::once(async {
                    Err::<Bytes, _>(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "lllm-mock reset",
                    ))
                })))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
            (0, response)
        }
        Fault::CutStream => {
            let message = ScriptMessage {
                text: Some("this stream is cut off".into()),
                tool_calls: Vec::new(),
                usage: None,
                finish_reason: None,
            };
            let response = match api {
                Api::Chat => sse(&completion(model, index, &message, 1), false),
                Api::Messages => {
                    anthropic_sse(&anthropic_message(model, index, &message, 1), false)
                }
                Api::Responses => responses_sse(&response_object(model, index, &message, 1), false),
            };
            (200, response)
        }
    }
}

/// A Messages API reply for a scripted message.
fn anthropic_message(
    model: &str,
    index: usize,
    message: &ScriptMessage,
    prompt_chars: usize,
) -> Value {
    let mut content = Vec::new();
    if let Some(text) = &message.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &message.tool_calls {
        let input: Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| json!({"_raw_arguments": call.arguments}));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    let (input, output) = match message.usage {
        Some(usage) => (usage.prompt_tokens, usage.completion_tokens),
        None => (
            prompt_chars.div_ceil(4).max(1) as u64,
            message
                .text
                .as_deref()
                .unwrap_or_default()
                .len()
                .div_ceil(4)
                .max(1) as u64,
        ),
    };
    let stop = if message.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    json!({
        "id": format!("msg_mock_{index}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": message.finish_reason.clone().unwrap_or_else(|| stop.to_string()),
        "usage": {"input_tokens": input, "output_tokens": output},
    })
}

/// The reply as Messages API stream events; `complete: false` stops early.
fn anthropic_sse(message: &Value, complete: bool) -> Response {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": start}),
    )];
    for (index, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if block["type"] == "text" {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in block["text"]
                .as_str()
                .unwrap_or_default()
                .split_inclusive(' ')
            {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
        } else {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
            ));
            let input = block["input"].to_string();
            let middle = input
                .char_indices()
                .nth(input.chars().count() / 2)
                .map_or(0, |(at, _)| at);
            for part in [&input[..middle], &input[middle..]] {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": part}}),
                ));
            }
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if complete {
        events.push((
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"]},
                   "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
    } else {
        events.truncate(3);
    }
    let body: String = events
        .into_iter()
        .map(|(name, event)| format!("event: {name}\ndata: {event}\n\n"))
        .collect();
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A Responses API `response` object for a scripted message.
fn response_object(
    model: &str,
    index: usize,
    message: &ScriptMessage,
    prompt_chars: usize,
) -> Value {
    let mut output = Vec::new();
    if let Some(text) = &message.text {
        output.push(json!({"type": "message", "id": format!("msg_{index}"), "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}));
    }
    for call in &message.tool_calls {
        output.push(
            json!({"type": "function_call", "id": format!("fc_{}", call.id), "call_id": call.id,
                           "name": call.name, "arguments": call.arguments, "status": "completed"}),
        );
    }
    let (input, generated) = match message.usage {
        Some(usage) => (usage.prompt_tokens, usage.completion_tokens),
        None => (
            prompt_chars.div_ceil(4).max(1) as u64,
            message
                .text
                .as_deref()
                .unwrap_or_default()
                .len()
                .div_ceil(4)
                .max(1) as u64,
        ),
    };
    json!({
        "id": format!("resp_mock_{index}"),
        "object": "response",
        "created_at": chrono::Utc::now().timestamp(),
        "status": "completed",
        "model": model,
        "output": output,
        "usage": {"input_tokens": input, "output_tokens": generated, "total_tokens": input + generated},
    })
}

/// The response as Responses API stream events; `complete: false` stops early.
fn responses_sse(response: &Value, complete: bool) -> Response {
    let mut created = response.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    let mut events = vec![(
        "response.created",
        json!({"type": "response.created", "response": created}),
    )];
    for item in response["output"].as_array().into_iter().flatten() {
        for part in item["content"].as_array().into_iter().flatten() {
            for piece in part["text"]
                .as_str()
                .unwrap_or_default()
                .split_inclusive(' ')
            {
                events.push((
                    "response.output_text.delta",
                    json!({"type": "response.output_text.delta", "delta": piece}),
                ));
            }
        }
        events.push((
            "response.output_item.done",
            json!({"type": "response.output_item.done", "item": item}),
        ));
    }
    if complete {
        events.push((
            "response.completed",
            json!({"type": "response.completed", "response": response}),
        ));
    } else {
        events.truncate(2);
    }
    let body: String = events
        .into_iter()
        .map(|(name, event)| format!("event: {name}\ndata: {event}\n\n"))
        .collect();
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
