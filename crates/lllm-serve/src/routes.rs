//! The routes (docs/serve.md, "Routes"), the state they share and the
//! `run` and `stream` handlers; what a call goes through before and after
//! its run is `call`'s, the run itself `session`'s.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::StreamExt;
use lllm::tactic::SessionRecord;
use lllm::{Event, Tactic};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use crate::call::{answer, prepare};
use crate::error::ApiError;
use crate::session;
use crate::{Limits, Options};

/// What every handler shares.
pub struct State {
    /// The served tactics by name, in the order given.
    pub tactics: Vec<(String, Tactic)>,
    pub token: Option<String>,
    pub limits: Limits,
    /// One permit per call being prepared or run.
    pub(crate) slots: Arc<Semaphore>,
    /// Runs started and not yet recorded (`/health`'s `running`).
    pub running: std::sync::atomic::AtomicUsize,
    /// Where the sessions' records go.
    recorder: crate::records::Recorder,
    pub(crate) budget: Option<Arc<lllm::provider::budget::CostBudget>>,
    pub tags: Map<String, Value>,
    pub metadata: Map<String, Value>,
    /// `GET /metrics`'s counters.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// Whether `/metrics` needs no token.
    pub(crate) metrics_public: bool,
}

impl State {
    pub fn new(options: Options) -> State {
        let limits = options.limits.clamped();
        let names: Vec<String> = options
            .tactics
            .iter()
            .map(|tactic| tactic.config.name.clone())
            .collect();
        State {
            tactics: options
                .tactics
                .into_iter()
                .map(|tactic| (tactic.config.name.clone(), tactic))
                .collect(),
            token: options.token.filter(|token| !token.is_empty()),
            slots: Arc::new(Semaphore::new(limits.concurrency)),
            running: std::sync::atomic::AtomicUsize::new(0),
            limits,
            recorder: crate::records::Recorder::new(options.records, options.store),
            budget: options.budget,
            tags: options.tags,
            metadata: options.metadata,
            metrics: Arc::new(crate::metrics::Metrics::new(&names)),
            metrics_public: options.metrics_public,
        }
    }

    /// The tactic served as `name`.
    pub fn tactic(&self, name: &str) -> Option<&Tactic> {
        self.tactics
            .iter()
            .find(|(served, _)| served == name)
            .map(|(_, tactic)| tactic)
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        self.tactics.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// The only tactic, when one is served.
    fn only(&self) -> Option<&str> {
        match self.tactics.as_slice() {
            [(name, _)] => Some(name),
            _ => None,
        }
    }

    /// Writes `record` and indexes it in the store (`records`).
    pub async fn write_record(&self, record: &SessionRecord) {
        self.recorder.write(record).await;
    }

    /// Waits until every run has ended and its record is written, then
    /// until every record is on disk.
    pub async fn drain(&self) {
        let all = u32::try_from(self.limits.concurrency).unwrap_or(u32::MAX);
        let _all = self.slots.acquire_many(all).await;
        self.recorder.sync().await;
    }
}

/// Every route, behind the token check.
pub fn router(state: Arc<State>) -> Router {
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/tactics", get(list))
        .route("/tactics/{name}/info", get(info))
        .route("/tactics/{name}/run", post(run))
        .route("/tactics/{name}/stream", post(stream))
        .route("/v1/models", get(crate::openai::models))
        .route("/v1/chat/completions", post(crate::openai::completions))
        .route("/metrics", get(crate::metrics::handler));
    if state.only().is_some() {
        router = router
            .route("/info", get(only_info))
            .route("/run", post(only_run))
            .route("/stream", post(only_stream));
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::check,
        ))
        // Outside the token check, so that a 401 is counted too.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::track,
        ))
        .with_state(state)
}

type Shared = Extract<Arc<State>>;

/// Upstream's `{"ok", "tactics"}`, how many runs are under way (`running`:
/// started, record not yet written) and how many may be (`concurrency`):
/// a readiness probe's answer, and a load balancer's.
async fn health(Extract(state): Shared) -> Response {
    let mut names = state.names();
    names.sort_unstable();
    let concurrency = state.limits.concurrency;
    let running = state.running.load(std::sync::atomic::Ordering::SeqCst);
    axum::Json(json!({
        "ok": true,
        "tactics": names,
        "running": running,
        "concurrency": concurrency,
    }))
    .into_response()
}

async fn list(Extract(state): Shared) -> Response {
    let infos: Vec<Value> = state
        .tactics
        .iter()
        .map(|(_, tactic)| info_value(tactic))
        .collect();
    axum::Json(infos).into_response()
}

/// A tactic's contract, as upstream's `TacticInfo`.
pub fn info_value(tactic: &Tactic) -> Value {
    serde_json::to_value(tactic.info()).unwrap_or(Value::Null)
}

async fn info(Extract(state): Shared, Path(name): Path<String>) -> Response {
    match state.tactic(&name) {
        Some(tactic) => axum::Json(info_value(tactic)).into_response(),
        None => ApiError::no_tactic(&name, &state.names())
            .at_endpoint("info")
            .into_response(),
    }
}

async fn only_info(state: Shared) -> Response {
    let name = state.0.only().unwrap_or_default().to_string();
    info(state, Path(name)).await
}

async fn only_run(state: Shared, request: Request) -> Response {
    let name = state.0.only().unwrap_or_default().to_string();
    run(state, Path(name), request).await
}

async fn only_stream(state: Shared, request: Request) -> Response {
    let name = state.0.only().unwrap_or_default().to_string();
    stream(state, Path(name), request).await
}

async fn not_found(request: Request) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "no route `{}` (docs/serve.md lists them)",
            lllm::suggest::printable(request.uri().path())
        ),
    )
    .into_response()
}

async fn not_allowed(request: Request) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!(
            "`{} {}` is not a route; see docs/serve.md",
            request.method(),
            lllm::suggest::printable(request.uri().path())
        ),
    )
    .into_response()
}

async fn run(Extract(state): Shared, Path(name): Path<String>, request: Request) -> Response {
    let prepared = match prepare(&state, &name, "run", request).await {
        Ok(prepared) => prepared,
        Err(error) => return error.into_response(),
    };
    let request_id = prepared.call.request_id.clone();
    let output_schema = prepared.tactic.config.output_schema.is_some();
    let started = session::start(
        state.clone(),
        prepared.tactic.clone(),
        prepared.call.task,
        prepared.permit,
        false,
        prepared.trace,
    );
    // Held until the answer: dropped with this future if the client goes.
    let _cancel = started.cancel;
    let Ok(finished) = started.done.await else {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            "the run stopped without an answer",
        )
        .at(&name, "run")
        .request(&request_id)
        .into_response();
    };
    match answer(
        &state,
        &prepared.tactic,
        &finished,
        &request_id,
        output_schema,
    ) {
        Ok(answer) => with_request_id(axum::Json(answer).into_response(), &request_id),
        Err(error) => error.at(&name, "run").request(&request_id).into_response(),
    }
}

/// `response` with the request's id in `X-Request-Id`.
pub fn with_request_id(mut response: Response, request_id: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

async fn stream(Extract(state): Shared, Path(name): Path<String>, request: Request) -> Response {
    let prepared = match prepare(&state, &name, "stream", request).await {
        Ok(prepared) => prepared,
        Err(error) => return error.into_response(),
    };
    let request_id = prepared.call.request_id.clone();
    let started = session::start(
        state.clone(),
        prepared.tactic,
        prepared.call.task,
        prepared.permit,
        true,
        prepared.trace,
    );
    let Some(events) = started.events else {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal", "no events")
            .into_response();
    };
    let cancel = started.cancel;
    // Each frame holds every event ready when it is made, each written
    // straight into the frame's buffer (no copy of its own). Events share a
    // frame only when they are already waiting; a stream's events mostly
    // come one at a time, so this saves copies, not socket writes.
    let body = futures_util::stream::unfold((events, cancel), |(mut events, cancel)| async move {
        let event = events.recv().await?;
        let mut frame = Vec::with_capacity(FRAME);
        sse(&mut frame, &event);
        while let Ok(event) = events.try_recv() {
            sse(&mut frame, &event);
        }
        Some((Ok::<_, Infallible>(Bytes::from(frame)), (events, cancel)))
    });
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body.boxed()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    with_request_id(response, &request_id)
}

/// What a frame of events is made with room for: a text delta's message is
/// about 300 bytes, a closing `result` about 1 KB.
const FRAME: usize = 1024;

/// Appends one event as a Server-Sent Events message to `out`: `event:
/// KIND`, `id: ID`, `data: JSON` and a blank line. (JSON has no raw line
/// breaks, so the data is one line.)
fn sse(out: &mut Vec<u8>, event: &Event) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.kind.name().as_bytes());
    out.extend_from_slice(b"\nid: ");
    out.extend_from_slice(event.id.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    let data = out.len();
    if serde_json::to_writer(&mut *out, event).is_err() {
        out.truncate(data);
    }
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_sse_message() {
        let event = Event::new(lllm::EventKind::SubTacticStarted {
            step: "s".into(),
            tactic: "t\nx".into(),
        });
        let mut frame = Vec::new();
        sse(&mut frame, &event);
        let text = String::from_utf8(frame).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines[0], "event: sub_tactic_started");
        assert_eq!(lines[1], format!("id: {}", event.id));
        let data: Value = serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["data"]["tactic"], "t\nx");
        assert_eq!(&lines[3..], ["", ""]);
    }

    #[test]
    fn events_in_one_frame_stay_separate_messages() {
        let first = Event::new(lllm::EventKind::SubTacticStarted {
            step: "a".into(),
            tactic: "t".into(),
        });
        let second = Event::new(lllm::EventKind::SubTacticStarted {
            step: "b".into(),
            tactic: "t".into(),
        });
        let mut frame = Vec::new();
        sse(&mut frame, &first);
        sse(&mut frame, &second);
        let text = String::from_utf8(frame).unwrap();
        let messages: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(messages.len(), 2, "{text}");
        for (message, event) in messages.iter().zip([&first, &second]) {
            let lines: Vec<&str> = message.split('\n').collect();
            assert_eq!(lines[1], format!("id: {}", event.id));
            let data: Event =
                serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(&data, event);
        }
    }
}
