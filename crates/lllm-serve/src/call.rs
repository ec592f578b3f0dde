//! What a call goes through before and after its run: find the tactic,
//! take a slot of the concurrency limit (429 with `Retry-After` when none is
//! free), check the budget, read the body within its limit, make the task
//! (`body`), check it against the tactic (`check_input`, `check_task`);
//! only then is anything sent to a provider, and only then does a stream
//! answer 200. After the run: the answer, or the error it ended with.

use std::borrow::Cow;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use bytes::Bytes;
use lllm::Tactic;
use lllm::batch::output::{ResultLine, TaskState};
use lllm::tactic::{RunState, SessionRecord};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::OwnedSemaphorePermit;

use crate::Limits;
use crate::body::{self, Call};
use crate::error::ApiError;
use crate::routes::State;
use crate::session::{Ending, Finished};

/// A call checked and ready to run.
pub struct Prepared {
    pub tactic: Tactic,
    pub name: String,
    pub call: Call,
    pub permit: OwnedSemaphorePermit,
    /// The caller's `traceparent`: the run continues its trace (one that
    /// does not read is ignored, as W3C trace context says).
    pub trace: Option<lllm::trace_context::TraceContext>,
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
        let error = ApiError::no_tactic(name, &state.names()).at_endpoint(endpoint);
        return Err(identified(error));
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
    checked(state, endpoint, request, read)
        .await
        .map_err(identified)
}

/// `error` with a request id: a call refused before its body named one
/// gets a new one, as upstream's service gives every call one.
pub fn identified(mut error: ApiError) -> ApiError {
    if error.request_id.is_none() {
        error.request_id = Some(uuid::Uuid::now_v7().to_string());
    }
    error
}

async fn checked(
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
    let trace = request
        .headers()
        .get(lllm::trace_context::TRACEPARENT)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
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
        trace,
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

/// A finished run's answer: `{"output", "request_id", "tactic"}` and the
/// result line's fields, or the error it ended with.
pub fn answer<'a>(
    state: &State,
    tactic: &'a Tactic,
    finished: &'a Finished,
    request_id: &'a str,
    output_schema: bool,
) -> Result<Answer<'a>, ApiError> {
    let record = &finished.record;
    let line = ResultLine::from_record(String::new(), record);
    let failed = |status, kind, message: String| {
        let mut error = ApiError::new(status, kind, message);
        error.metadata = error_fields(tactic, &line);
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
                true => serde_json::from_str(delivery).map_or(Output::Text(delivery), Output::Json),
                false => Output::Text(delivery),
            };
            Ok(Answer {
                output,
                // The caller's own; scrubbed all the same, as every other
                // string of the answer was with the record.
                request_id: tactic.secrets().scrub(request_id),
                tactic: &tactic.config.name,
                line,
            })
        }
        _ if refused(record) => {
            let max = state.budget.as_ref().map_or(0.0, |budget| budget.max());
            let mut error = over_budget(max);
            error.metadata = error_fields(tactic, &line);
            Err(error)
        }
        _ => Err(failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "RunFailed",
            message,
        )),
    }
}

/// A successful call's answer: upstream's `{"output", "request_id",
/// "tactic"}`, then the result line's fields (docs/batch.md) but its `id`,
/// `delivery`, `tags` and `args`.
///
/// Written straight from the result line: made as a JSON value first, then
/// scrubbed and written, it cost about a tenth of a served call's
/// instructions (callgrind of `lllm serve`, docs/benchmarks.md, "Serving").
/// Its strings come from the run's record, which is scrubbed of the run's
/// secrets before anything reads it (`Tactic::run`).
#[derive(Serialize)]
pub struct Answer<'a> {
    output: Output<'a>,
    request_id: Cow<'a, str>,
    tactic: &'a str,
    #[serde(flatten, serialize_with = "line_fields")]
    line: ResultLine,
}

impl Answer<'_> {
    /// The delivery: its text, or with an `output_schema` the JSON it holds.
    pub fn output(&self) -> Value {
        match &self.output {
            Output::Text(text) => Value::String(text.to_string()),
            Output::Json(value) => value.clone(),
        }
    }

    /// The run's tokens, summed over its calls.
    pub fn usage(&self) -> &lllm::batch::output::Usage {
        &self.line.usage
    }
}

/// The delivery as the answer holds it.
#[derive(Serialize)]
#[serde(untagged)]
enum Output<'a> {
    Text(&'a str),
    Json(Value),
}

/// The result line's fields that an answer holds: every one but `id`,
/// `delivery`, `tags` and `args`, by the same rules (a test holds the two
/// lists together).
#[derive(Serialize)]
struct LineFields<'a> {
    state: &'a TaskState,
    error: &'a Option<String>,
    cost: &'a Option<f64>,
    cost_known: bool,
    usage: &'a lllm::batch::output::Usage,
    latency_ms: u64,
    session_id: &'a Option<String>,
    calls: u64,
    #[serde(skip_serializing_if = "is_zero")]
    retries: u64,
    #[serde(skip_serializing_if = "is_zero")]
    cache_hits: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: &'a Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_of: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scores: &'a Option<Vec<lllm::eval::Score>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: &'a Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: &'a Option<bool>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl<'a> LineFields<'a> {
    fn of(line: &'a ResultLine) -> LineFields<'a> {
        let ResultLine {
            id: _,
            state,
            delivery: _,
            error,
            cost,
            cost_known,
            usage,
            latency_ms,
            session_id,
            calls,
            retries,
            cache_hits,
            tags: _,
            args: _,
            model,
            finish_reason,
            http_status,
            repeat_of,
            scores,
            score,
            pass,
        } = line;
        LineFields {
            state,
            error,
            cost,
            cost_known: *cost_known,
            usage,
            latency_ms: *latency_ms,
            session_id,
            calls: *calls,
            retries: *retries,
            cache_hits: *cache_hits,
            model,
            finish_reason,
            http_status,
            repeat_of,
            scores,
            score,
            pass,
        }
    }
}

fn line_fields<S: serde::Serializer>(line: &ResultLine, serializer: S) -> Result<S::Ok, S::Error> {
    LineFields::of(line).serialize(serializer)
}

/// A failed call's result fields, for its error's metadata.
fn error_fields(tactic: &Tactic, line: &ResultLine) -> Map<String, Value> {
    let mut fields = match serde_json::to_value(LineFields::of(line)) {
        Ok(Value::Object(fields)) => fields,
        _ => Map::new(),
    };
    tactic.secrets().scrub_map(&mut fields);
    fields
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the result line writes, but the four an answer leaves
    /// out, by the line's own rules. (A field added to `ResultLine` fails
    /// to compile in `LineFields::of` until it is taken in or left out.)
    #[test]
    fn an_answer_holds_the_result_lines_fields_but_four() {
        let full: ResultLine = serde_json::from_value(json!({
            "id": "t1", "state": "failure", "delivery": "d", "error": "e",
            "cost": 0.5, "cost_known": false,
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            "latency_ms": 4, "session_id": "s", "calls": 5, "retries": 1, "cache_hits": 2,
            "tags": {"a": 1}, "args": {"b": 2}, "model": "m", "finish_reason": "stop",
            "http_status": 500, "repeat_of": "t0", "scores": [], "score": 1.0, "pass": true
        }))
        .unwrap();
        let bare: ResultLine = serde_json::from_value(json!({
            "id": "t2", "state": "success", "delivery": null, "error": null,
            "cost": null, "session_id": null
        }))
        .unwrap();
        for line in [full, bare] {
            let mut expected = serde_json::to_value(&line).unwrap();
            for key in ["id", "delivery", "tags", "args"] {
                expected.as_object_mut().unwrap().remove(key);
            }
            assert_eq!(
                serde_json::to_value(LineFields::of(&line)).unwrap(),
                expected
            );
        }
    }
}
