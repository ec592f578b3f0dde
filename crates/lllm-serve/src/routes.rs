//! The routes (docs/serve.md, "Routes") and what every call does before it
//! runs: find the tactic, take a slot of the concurrency limit (429 with
//! `Retry-After` when none is free), read the body within its limit, make
//! the task (`body`), check it against the tactic (`check_task`,
//! `check_input`) and the server's budget; only then is anything sent to a
//! provider, and only then does a stream answer 200.

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
use lllm::tactic::{RunState, SessionRecord};
use lllm::{Event, Tactic};
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::{self, Call};
use crate::error::ApiError;
use crate::session::{self, Ending, Finished};
use crate::{Limits, Options};

/// What every handler shares.
pub struct State {
    /// The served tactics by name, in the order given.
    pub tactics: Vec<(String, Tactic)>,
    pub token: Option<String>,
    pub limits: Limits,
    /// One permit per call being prepared or run.
    slots: Arc<Semaphore>,
    /// Runs started and not yet recorded (`/health`'s `running`).
    pub running: std::sync::atomic::AtomicUsize,
    records: Option<std::path::PathBuf>,
    store: Option<std::path::PathBuf>,
    budget: Option<Arc<lllm::provider::budget::CostBudget>>,
    pub tags: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

impl State {
    pub fn new(options: Options) -> State {
        let limits = options.limits.clamped();
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
            records: options.records,
            store: options.store,
            budget: options.budget,
            tags: options.tags,
            metadata: options.metadata,
        }
    }

    /// The tactic served as `name`.
    pub fn tactic(&self, name: &str) -> Option<&Tactic> {
        self.tactics
            .iter()
            .find(|(served, _)| served == name)
            .map(|(_, tactic)| tactic)
    }

    fn names(&self) -> Vec<&str> {
        self.tactics.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// The only tactic, when one is served.
    fn only(&self) -> Option<&str> {
        match self.tactics.as_slice() {
            [(name, _)] => Some(name),
            _ => None,
        }
    }

    /// Writes `record` (and indexes it in the store), off the async threads;
    /// a record that cannot be written is said on stderr.
    pub async fn write_record(&self, record: &SessionRecord) {
        let Some(dir) = &self.records else {
            return;
        };
        let path = dir.join(format!("{}.json", record.session_id));
        let store = self.store.clone();
        let written = record.clone();
        let result = tokio::task::spawn_blocking(move || {
            lllm::records::write_and_index(&written, &path, store.as_deref())
                .map_err(|error| format!("{}: {error}", path.display()))
        })
        .await
        .unwrap_or_else(|error| Err(error.to_string()));
        if let Err(error) = result {
            lllm::output::stderr_line(&format!(
                "lllm serve: warning: the record of session {} was not written: {error}",
                record.session_id
            ));
        }
    }

    /// Waits until every run has ended and its record is written.
    pub async fn drain(&self) {
        let all = u32::try_from(self.limits.concurrency).unwrap_or(u32::MAX);
        let _all = self.slots.acquire_many(all).await;
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
        .route("/v1/chat/completions", post(crate::openai::completions));
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

/// A call checked and ready to run.
pub struct Prepared {
    pub tactic: Tactic,
    pub name: String,
    pub call: Call,
    pub permit: OwnedSemaphorePermit,
}

/// Everything before a run on the tactic served as `name`: the tactic (404
/// first), then [`prepare_named`] with the body read as upstream's envelope,
/// a task line or a string.
pub async fn prepare(
    state: &State,
    name: &str,
    endpoint: &'static str,
    request: Request,
) -> Result<Prepared, ApiError> {
    if state.tactic(name).is_none() {
        return Err(ApiError::no_tactic(name, &state.names()).at_endpoint(endpoint));
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    prepare_named(state, endpoint, request, |bytes, _| {
        body::parse(bytes, content_type.as_deref())
            .map(|call| (name.to_string(), call))
            .map_err(|error| error.at(name, endpoint))
    })
    .await
}

/// Everything before a run: a slot, the budget, the body (which `read`
/// makes into the served tactic's name and the call), the task's checks.
/// The error names the endpoint, and the tactic once it is known.
pub async fn prepare_named(
    state: &State,
    endpoint: &'static str,
    request: Request,
    read: impl FnOnce(&[u8], &State) -> Result<(String, Call), ApiError>,
) -> Result<Prepared, ApiError> {
    let permit = state.slots.clone().try_acquire_owned().map_err(|_| {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Busy",
            format!(
                "the server runs {} calls at once and all are taken; retry after a second",
                state.limits.concurrency
            ),
        );
        error.retry_after = Some(1);
        error.at_endpoint(endpoint)
    })?;
    if let Some(budget) = &state.budget
        && budget.is_spent()
    {
        return Err(over_budget(budget.max()).at_endpoint(endpoint));
    }
    let bytes = read_body(request.into_body(), &state.limits)
        .await
        .map_err(|error| error.at_endpoint(endpoint))?;
    let (name, call) = read(&bytes, state).map_err(|error| match error.endpoint {
        Some(_) => error,
        None => error.at_endpoint(endpoint),
    })?;
    let Some(tactic) = state.tactic(&name) else {
        return Err(ApiError::no_tactic(&name, &state.names()).at_endpoint(endpoint));
    };
    check(tactic, &call.task)
        .map_err(|error| error.at(&name, endpoint).request(&call.request_id))?;
    Ok(Prepared {
        tactic: tactic.clone(),
        name,
        call,
        permit,
    })
}

/// 429 `BudgetExceeded`.
fn over_budget(max: f64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "BudgetExceeded",
        format!("the server's budget (`--max-cost {max}`) is spent; no more calls are run"),
    )
}

/// The body, at most `limits.max_body` bytes, read within the deadline.
async fn read_body(body: Body, limits: &Limits) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BodyTooLarge",
            format!("the body is larger than {} bytes", limits.max_body),
        )
    };
    let read = axum::body::to_bytes(body, limits.max_body);
    match tokio::time::timeout(limits.timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(error)) => {
            // `to_bytes` says "length limit exceeded", in its error or a source of it.
            let mut cause: Option<&dyn std::error::Error> = Some(&error);
            let mut limit = false;
            while let Some(error) = cause {
                limit |= error.to_string().contains("length limit exceeded");
                cause = error.source();
            }
            if limit {
                Err(too_large())
            } else {
                Err(ApiError::bad_input(format!(
                    "the body could not be read: {error}"
                )))
            }
        }
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "Timeout",
            format!(
                "the body did not arrive within the deadline of {} s",
                limits.timeout.as_secs()
            ),
        )),
    }
}

/// The task against the tactic: its templates' variables and trial
/// renders, then its input against `input_schema`.
fn check(tactic: &Tactic, task: &lllm::Task) -> Result<(), ApiError> {
    if let Err(error) = tactic.check_input(task) {
        let problems: Vec<Value> = error
            .problems
            .iter()
            .map(|problem| json!({"pointer": problem.pointer, "message": problem.message}))
            .collect();
        let mut refused = ApiError::bad_input(format!(
            "the input does not fit the tactic's input_schema: {}",
            error
                .problems
                .iter()
                .map(|problem| format!("input at `{}`: {}", problem.pointer, problem.message))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        refused
            .metadata
            .insert("problems".into(), Value::Array(problems));
        return Err(refused);
    }
    tactic
        .check_task(task)
        .map_err(|error| ApiError::bad_input(error.to_string().replace('\n', "; ")))
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
        Ok(body) => with_request_id(axum::Json(body).into_response(), &request_id),
        Err(error) => error.at(&name, "run").request(&request_id).into_response(),
    }
}

/// A finished run's answer: `{"output", "request_id", "tactic"}` and the
/// result line's fields, or the error it ended with.
pub fn answer(
    state: &State,
    tactic: &Tactic,
    finished: &Finished,
    request_id: &str,
    output_schema: bool,
) -> Result<Value, ApiError> {
    let record = &finished.record;
    let mut fields = result_fields(request_id, record);
    tactic.secrets().scrub_value(&mut fields);
    let Value::Object(fields) = fields else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            "the run's result could not be written",
        ));
    };
    let failed = |status, kind, message: String| {
        let mut error = ApiError::new(status, kind, message);
        error.metadata = fields.clone();
        error.metadata.remove("error");
        error
    };
    let message = record
        .error
        .clone()
        .unwrap_or_else(|| "the run failed".into());
    match (finished.ending, &record.state, &record.delivery) {
        (Ending::Timeout, ..) => Err(failed(StatusCode::GATEWAY_TIMEOUT, "Timeout", message)),
        (Ending::Cancelled, ..) => Err(failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Cancelled",
            message,
        )),
        (Ending::Finished, RunState::Success, Some(delivery)) => {
            let output = match output_schema {
                true => serde_json::from_str(delivery)
                    .unwrap_or_else(|_| Value::String(delivery.clone())),
                false => Value::String(delivery.clone()),
            };
            let mut body = Map::new();
            body.insert("output".into(), output);
            body.insert("request_id".into(), Value::String(request_id.into()));
            body.insert("tactic".into(), Value::String(tactic.config.name.clone()));
            body.extend(fields);
            let mut body = Value::Object(body);
            tactic.secrets().scrub_value(&mut body);
            Ok(body)
        }
        _ if refused(record) => {
            let max = state.budget.as_ref().map_or(0.0, |budget| budget.max());
            let mut error = over_budget(max);
            error.metadata = fields.clone();
            Err(error)
        }
        _ => Err(failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "RunFailed",
            message,
        )),
    }
}

/// The result line's fields of a run (docs/batch.md), without its id,
/// delivery, tags and arguments.
fn result_fields(request_id: &str, record: &SessionRecord) -> Value {
    let line = lllm::batch::output::ResultLine::from_record(request_id.into(), record);
    let mut value = serde_json::to_value(line).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut value {
        for key in ["id", "delivery", "tags", "args"] {
            fields.remove(key);
        }
    }
    value
}

/// Whether the budget refused one of the run's calls.
fn refused(record: &SessionRecord) -> bool {
    record
        .agent_calls
        .iter()
        .flat_map(|call| &call.invokes)
        .any(|invoke| {
            invoke.error.as_ref().is_some_and(|error| {
                error.code.as_deref() == Some(lllm::provider::budget::REFUSED_CODE)
            })
        })
        || record.sub_tactic_sessions.iter().any(refused)
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
    );
    let Some(events) = started.events else {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal", "no events")
            .into_response();
    };
    let cancel = started.cancel;
    let body = futures_util::stream::unfold((events, cancel), |(mut events, cancel)| async move {
        let event = events.recv().await?;
        Some((Ok::<_, Infallible>(sse(&event)), (events, cancel)))
    });
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body.boxed()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    with_request_id(response, &request_id)
}

/// One event as Server-Sent Events: `event: KIND`, `id: ID`, `data: JSON`.
fn sse(event: &Event) -> Bytes {
    let data = serde_json::to_string(event).unwrap_or_default();
    Bytes::from(format!(
        "event: {}\nid: {}\ndata: {data}\n\n",
        event.kind.name(),
        event.id
    ))
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
        let text = String::from_utf8(sse(&event).to_vec()).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines[0], "event: sub_tactic_started");
        assert_eq!(lines[1], format!("id: {}", event.id));
        let data: Value = serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["data"]["tactic"], "t\nx");
        assert_eq!(&lines[3..], ["", ""]);
    }
}
