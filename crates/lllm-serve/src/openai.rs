//! The OpenAI-compatible face (docs/serve.md, "The OpenAI-compatible face"):
//! `GET /v1/models` lists the served tactics as models, and
//! `POST /v1/chat/completions` runs the tactic its `model` names, the last
//! user message being the task and the earlier ones its conversation. The
//! answer is a `chat.completion`, or with `stream: true` a stream of
//! `chat.completion.chunk`s ending in `data: [DONE]`. Only the delivery is
//! streamed, in one chunk once the run delivers: a reply that a repair or a
//! retry would replace is never sent to a client that cannot take it back.
//! The other request keys (`temperature`, `max_tokens`, …) are taken and
//! left alone: the tactic's own models and arguments answer.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State as Extract};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use lllm::dialog::Role;
use lllm::{EventKind, Tactic, Task};
use serde_json::{Value, json};

use crate::body::{self, Call};
use crate::call;
use crate::error::ApiError;
use crate::routes::{self, State};
use crate::session;

const ENDPOINT: &str = "chat.completions";

/// `GET /v1/models`: each served tactic as a model.
pub async fn models(Extract(state): Extract<Arc<State>>) -> Response {
    let data: Vec<Value> = state
        .tactics
        .iter()
        .map(|(name, tactic)| {
            json!({
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "lllm",
                "description": tactic.config.description,
            })
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// What a chat request asks besides its task.
struct Asked {
    stream: bool,
    include_usage: bool,
}

/// `POST /v1/chat/completions`.
pub async fn completions(Extract(state): Extract<Arc<State>>, request: Request) -> Response {
    let created = now();
    let mut asked = Asked {
        stream: false,
        include_usage: false,
    };
    // The served tactic `model` named, once known: `/metrics` counts the
    // request as that tactic's (its path does not say).
    let mut named = None;
    let prepared = call::prepare_named(&state, ENDPOINT, request, |bytes, state| {
        let (name, call, chat) = chat_call(bytes, state)?;
        asked = chat;
        named = Some(name.clone());
        Ok((name, call))
    })
    .await;
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            let response = error.into_response();
            return match &named {
                Some(name) => crate::metrics::served(response, name),
                None => response,
            };
        }
    };
    let response = answer_chat(&state, prepared, asked, created).await;
    crate::metrics::served(response, &named.unwrap_or_default())
}

/// The answer to a chat request `prepared` to run.
async fn answer_chat(
    state: &Arc<State>,
    prepared: call::Prepared,
    asked: Asked,
    created: u64,
) -> Response {
    let name = prepared.name.clone();
    let request_id = prepared.call.request_id.clone();
    let id = format!("chatcmpl-{request_id}");
    let started = session::start(
        state.clone(),
        prepared.tactic.clone(),
        prepared.call.task,
        prepared.permit,
        asked.stream,
        prepared.trace,
    );
    if !asked.stream {
        let _cancel = started.cancel;
        let Ok(finished) = started.done.await else {
            return internal(&name, &request_id);
        };
        return match call::answer(state, &prepared.tactic, &finished, &request_id, false) {
            Ok(answer) => {
                let usage = usage(answer.usage());
                let content = answer.output();
                let body = json!({
                    "id": id,
                    "object": "chat.completion",
                    "created": created,
                    "model": name,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": null},
                        "logprobs": null,
                        "finish_reason": "stop",
                    }],
                    "usage": usage,
                    "lllm": answer,
                });
                routes::with_request_id(axum::Json(body).into_response(), &request_id)
            }
            Err(error) => error
                .at(&name, ENDPOINT)
                .request(&request_id)
                .into_response(),
        };
    }
    let Some(mut events) = started.events else {
        return internal(&name, &request_id);
    };
    let cancel = started.cancel;
    let chunk = move |delta: Value, finish: Option<&str>| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let include_usage = asked.include_usage;
    let secrets = prepared.tactic.secrets().clone();
    let body = async_stream(move |sender| async move {
        let _cancel = cancel;
        let first = chunk(json!({"role": "assistant", "content": ""}), None);
        if sender.send(data(&first)).await.is_err() {
            return;
        }
        while let Some(event) = events.recv().await {
            match event.kind {
                EventKind::Result {
                    delivery, usage, ..
                } => {
                    let mut content = chunk(json!({"content": delivery}), None);
                    secrets.scrub_value(&mut content);
                    let _ = sender.send(data(&content)).await;
                    let _ = sender.send(data(&chunk(json!({}), Some("stop")))).await;
                    if include_usage {
                        let mut last = chunk(json!({}), None);
                        last["choices"] = json!([]);
                        last["usage"] = json!({
                            "prompt_tokens": usage.prompt_tokens,
                            "completion_tokens": usage.completion_tokens,
                            "total_tokens": usage.total_tokens,
                        });
                        let _ = sender.send(data(&last)).await;
                    }
                    let _ = sender.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                    return;
                }
                EventKind::Error { message, .. } => {
                    let error = json!({"error": {
                        "type": "RunFailed", "message": message, "code": null, "param": null,
                    }});
                    let _ = sender.send(data(&error)).await;
                    return;
                }
                _ => {}
            }
        }
    });
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    routes::with_request_id(response, &request_id)
}

/// A body of the chunks `produce` sends, each as it is sent.
fn async_stream<F, Fut>(produce: F) -> Body
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    // The producer lives as long as the body: dropping the body drops the
    // receiver, the producer's next send fails and it returns, dropping the
    // run's `Cancel`.
    let producer = produce(sender);
    let stream = futures_util::stream::unfold(
        (receiver, Some(Box::pin(producer))),
        |(mut receiver, mut producer)| async move {
            loop {
                let Some(running) = producer.as_mut() else {
                    let chunk = receiver.recv().await?;
                    return Some((Ok::<_, Infallible>(chunk), (receiver, producer)));
                };
                tokio::select! {
                    biased;
                    chunk = receiver.recv() => {
                        let chunk = chunk?;
                        return Some((Ok(chunk), (receiver, producer)));
                    }
                    () = running => producer = None,
                }
            }
        },
    );
    Body::from_stream(stream.boxed())
}

fn data(value: &Value) -> Bytes {
    Bytes::from(format!(
        "data: {}\n\n",
        serde_json::to_string(value).unwrap_or_default()
    ))
}

fn internal(name: &str, request_id: &str) -> Response {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        "the run stopped without an answer",
    )
    .at(name, ENDPOINT)
    .request(request_id)
    .into_response()
}

/// OpenAI's `usage` from an answer's result fields.
fn usage(usage: &lllm::batch::output::Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    })
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A chat request's tactic name, task and what else it asks.
fn chat_call(bytes: &[u8], state: &State) -> Result<(String, Call, Asked), ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|error| ApiError::bad_input(format!("the body is not JSON: {error}")))?;
    let Value::Object(mut object) = value else {
        return Err(ApiError::bad_input(format!(
            "a chat completion request is a JSON object, not {}",
            crate::kind(&value)
        )));
    };
    let name = match object.remove("model") {
        Some(Value::String(name)) => name,
        _ => {
            return Err(ApiError::bad_input(
                "`model` names the served tactic to run (a string; `GET /v1/models` lists them)",
            ));
        }
    };
    let Some(tactic) = state.tactic(&name) else {
        let names: Vec<&str> = state
            .tactics
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        return Err(ApiError::no_tactic(&name, &names));
    };
    let stream = match object.remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => stream,
        Some(other) => {
            return Err(ApiError::bad_input(format!(
                "`stream` is a boolean, not {}",
                crate::kind(&other)
            )));
        }
    };
    let include_usage = object
        .get("stream_options")
        .and_then(|options| options.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let messages = object.remove("messages").unwrap_or(Value::Null);
    let mut messages =
        lllm::dialog::import::openai_messages(&messages).map_err(ApiError::bad_input)?;
    let last = match messages.pop() {
        Some(last) if last.role == Role::User => last,
        Some(last) => {
            return Err(ApiError::bad_input(format!(
                "the last message is the task, so it is a `user` message, not `{}`",
                last.role
            )));
        }
        None => {
            return Err(ApiError::bad_input(
                "`messages` is empty; the last user message is the task",
            ));
        }
    };
    let mut task = task_of(tactic, &last.content)?;
    task.attachments = last
        .parts
        .into_iter()
        .filter(|part| part.image_ref().is_some())
        .collect();
    task.messages = messages;
    let call = body::called(task);
    Ok((
        name,
        call,
        Asked {
            stream,
            include_usage,
        },
    ))
}

/// The task of a user message: with an `input_schema`, a message that is a
/// JSON object is the input itself; otherwise its text is the task.
fn task_of(tactic: &Tactic, text: &str) -> Result<Task, ApiError> {
    if tactic.info().input_schema.is_some()
        && let Ok(Value::Object(input)) = serde_json::from_str::<Value>(text)
    {
        return body::input_task(Value::Object(input));
    }
    Ok(Task::new(text))
}
