//! Anthropic's Message Batches API, as `anthropic-sdk-python` types it
//! (`MessageBatch`, `MessageBatchIndividualResponse`, `DeletedMessageBatch`):
//!
//! - `POST /v1/messages/batches` (`{"requests": [{"custom_id", "params"}]}`),
//!   `GET /v1/messages/batches/{id}`, `GET /v1/messages/batches` (`limit`,
//!   `after_id`, `before_id`; newest first), `POST
//!   /v1/messages/batches/{id}/cancel`, `DELETE /v1/messages/batches/{id}`
//!   (an ended batch only), `GET /v1/messages/batches/{id}/results` (JSONL,
//!   once ended; the batch's `results_url` names it).
//!
//! Every endpoint wants what `/v1/messages` wants: `anthropic-version` and a
//! key (`x-api-key` or a bearer token); `anthropic-beta` is not needed (the
//! API left beta) and is ignored. A batch is refused whole only for its
//! shape (`custom_id` 1–64 of `[a-zA-Z0-9_-]`, unique; `params` an object);
//! each request's `params` are checked when it runs, as the real API checks
//! them asynchronously, so a bad one is an `errored` result. The batch is
//! `in_progress`, then `canceling` if cancelled, then `ended`, with
//! `request_counts` (`processing` until the end, then `succeeded`,
//! `errored`, `canceled`, `expired`).

use std::collections::HashSet;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::batch::{Answer, BatchRequest, Call, Progress, Submitter, page, query_pairs};
use super::log::fingerprint;
use super::{Shared, raw_response, refusal};
use crate::wire::{Api, anthropic};

/// Requests in one batch, at most (the API's limit).
const MAX_REQUESTS: usize = 100_000;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/messages/batches", post(create).get(list))
        .route("/v1/messages/batches/{id}", get(retrieve).delete(delete))
        .route("/v1/messages/batches/{id}/cancel", post(cancel))
        .route("/v1/messages/batches/{id}/results", get(results))
}

/// The Message Batches of the server's lifetime, in creation order.
#[derive(Default)]
pub(super) struct MessageBatches {
    batches: Vec<MessageBatch>,
    created: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Processing {
    InProgress,
    Canceling,
    Ended,
}

#[derive(Debug, Default)]
struct Counts {
    succeeded: usize,
    errored: usize,
    canceled: usize,
    expired: usize,
}

struct MessageBatch {
    id: String,
    progress: Progress,
    status: Processing,
    requests: Vec<BatchRequest>,
    submitter: Submitter,
    cancel_initiated_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
    /// The results file's lines, once ended.
    results: Vec<Value>,
    counts: Counts,
}

fn time(moment: DateTime<Utc>) -> String {
    moment.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl MessageBatch {
    /// The batch object; `url` is the server's, for `results_url`.
    fn object(&self, url: &str) -> Value {
        let ended = self.status == Processing::Ended;
        json!({
            "id": self.id,
            "type": "message_batch",
            "processing_status": match (self.status, &self.progress.in_progress_state) {
                (Processing::InProgress, Some(state)) => state.as_str(),
                (Processing::InProgress, None) => "in_progress",
                (Processing::Canceling, _) => "canceling",
                (Processing::Ended, _) => "ended",
            },
            "request_counts": {
                "processing": if ended { 0 } else { self.requests.len() },
                "succeeded": self.counts.succeeded,
                "errored": self.counts.errored,
                "canceled": self.counts.canceled,
                "expired": self.counts.expired,
            },
            "ended_at": self.ended_at.map(time),
            "created_at": time(self.progress.reported),
            "expires_at": time(self.progress.reported + chrono::TimeDelta::days(1)),
            "archived_at": null,
            "cancel_initiated_at": self.cancel_initiated_at.map(time),
            "results_url": ended.then(|| format!("{url}/v1/messages/batches/{}/results", self.id)),
        })
    }
}

impl Call<'_> {
    fn refuse_anthropic(self, status: u16, message: &str) -> Response {
        self.respond(status, anthropic::error_body(status, None, message))
    }

    fn not_found(self, id: &str) -> Response {
        let message = format!("lllm-mock: no message batch `{id}`");
        self.refuse_anthropic(404, &message)
    }
}

/// The headers `/v1/messages` wants, on every Message Batches endpoint:
/// the refusal's status and body when they are missing.
fn header_refusal(headers: &HeaderMap) -> Option<(u16, Value)> {
    refusal(Api::Anthropic, headers, &Value::Null).map(|(status, code, message)| {
        (status, anthropic::error_body(status, Some(code), &message))
    })
}

async fn create(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut call = Call::new(&shared, &method, &uri, &headers, &body);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    let requests = match read_requests(&call.entry.body) {
        Ok(requests) => requests,
        Err(message) => return call.refuse_anthropic(400, &message),
    };
    let object = {
        let mut state = shared.batches.lock();
        let batches = &mut state.anthropic;
        batches.created += 1;
        let batch = MessageBatch {
            id: format!("msgbatch_mock{}", batches.created),
            progress: Progress::new(call.entry.received, &shared.batches.options),
            status: Processing::InProgress,
            requests,
            submitter: Submitter {
                headers: headers.clone(),
                auth: fingerprint(&headers),
            },
            cancel_initiated_at: None,
            ended_at: None,
            results: Vec::new(),
            counts: Counts::default(),
        };
        call.entry.extra = vec![
            ("batch", json!(batch.id)),
            (
                "custom_ids",
                batch
                    .requests
                    .iter()
                    .map(|request| json!(request.custom_id))
                    .collect(),
            ),
        ];
        let object = batch.object(&shared.url);
        batches.batches.push(batch);
        object
    };
    call.respond(200, object)
}

/// The batch's requests, or what is wrong with its shape, in the API's
/// `path: problem` style.
fn read_requests(body: &Value) -> Result<Vec<BatchRequest>, String> {
    let fields = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    if let Some(key) = fields.keys().find(|key| *key != "requests") {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    let items = match fields.get("requests") {
        None => return Err("requests: Field required".into()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("requests: Input should be a valid list".into()),
    };
    if items.is_empty() {
        return Err("requests: List should have at least 1 item after validation, not 0".into());
    }
    if items.len() > MAX_REQUESTS {
        return Err(format!(
            "requests: List should have at most {MAX_REQUESTS} items after validation, not {}",
            items.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut requests = Vec::with_capacity(items.len());
    for (at, item) in items.iter().enumerate() {
        let item = item
            .as_object()
            .ok_or_else(|| format!("requests.{at}: Input should be a valid dictionary"))?;
        if let Some(key) = item
            .keys()
            .find(|key| !["custom_id", "params"].contains(&key.as_str()))
        {
            return Err(format!(
                "requests.{at}.{key}: Extra inputs are not permitted"
            ));
        }
        let custom_id = match item.get("custom_id") {
            None => return Err(format!("requests.{at}.custom_id: Field required")),
            Some(Value::String(id)) => id,
            Some(_) => {
                return Err(format!(
                    "requests.{at}.custom_id: Input should be a valid string"
                ));
            }
        };
        let valid = (1..=64).contains(&custom_id.len())
            && custom_id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if !valid {
            return Err(format!(
                "requests.{at}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            ));
        }
        let params = match item.get("params") {
            None => return Err(format!("requests.{at}.params: Field required")),
            Some(params @ Value::Object(_)) => params,
            Some(_) => {
                return Err(format!(
                    "requests.{at}.params: Input should be a valid dictionary"
                ));
            }
        };
        if !seen.insert(custom_id.as_str()) {
            return Err(format!(
                "requests.{at}.custom_id: Duplicate custom_id `{custom_id}`; each request in a batch needs its own"
            ));
        }
        requests.push(BatchRequest {
            custom_id: custom_id.clone(),
            body: params.clone(),
        });
    }
    Ok(requests)
}

/// What a handler does with a found batch, under the lock; a retrieval
/// (`poll`) moves it on first.
fn with_batch<T>(
    shared: &Shared,
    id: &str,
    poll: bool,
    then: impl FnOnce(&mut MessageBatch) -> T,
) -> Option<T> {
    let mut state = shared.batches.lock();
    let batch = state
        .anthropic
        .batches
        .iter_mut()
        .find(|batch| batch.id == id)?;
    if poll {
        advance(shared, batch);
    }
    Some(then(batch))
}

async fn retrieve(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    match with_batch(&shared, &id, true, |batch| batch.object(&shared.url)) {
        Some(object) => call.respond(200, object),
        None => call.not_found(&id),
    }
}

async fn list(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    let (mut limit, mut after, mut before) = (20, None, None);
    for (key, value) in query_pairs(uri.query()) {
        match key.as_str() {
            "limit" => match value.parse::<usize>() {
                Ok(number @ 1..=1000) => limit = number,
                _ => {
                    let message = format!(
                        "limit: Input should be an integer between 1 and 1000, not `{value}`"
                    );
                    return call.refuse_anthropic(400, &message);
                }
            },
            "after_id" => after = Some(value),
            "before_id" => before = Some(value),
            _ => {}
        }
    }
    let listed = {
        let state = shared.batches.lock();
        let batches = &state.anthropic.batches;
        let ids: Vec<&str> = batches
            .iter()
            .rev()
            .map(|batch| batch.id.as_str())
            .collect();
        page(&ids, after.as_deref(), before.as_deref(), limit).map(|(ids, has_more)| {
            let data: Vec<Value> = ids
                .iter()
                .filter_map(|id| batches.iter().find(|batch| batch.id == *id))
                .map(|batch| batch.object(&shared.url))
                .collect();
            json!({
                "data": data,
                "has_more": has_more,
                "first_id": ids.first(),
                "last_id": ids.last(),
            })
        })
    };
    match listed {
        Some(listed) => call.respond(200, listed),
        None => {
            let cursor = after.or(before).unwrap_or_default();
            call.not_found(&cursor)
        }
    }
}

async fn cancel(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    let now = call.entry.received;
    let answer = with_batch(&shared, &id, false, |batch| match batch.status {
        Processing::InProgress => {
            batch.status = Processing::Canceling;
            batch.cancel_initiated_at = Some(now);
            Ok(batch.object(&shared.url))
        }
        Processing::Canceling => Ok(batch.object(&shared.url)),
        Processing::Ended => Err(format!(
            "Batch `{id}` has ended; only a batch in progress can be canceled"
        )),
    });
    match answer {
        None => call.not_found(&id),
        Some(Ok(object)) => call.respond(200, object),
        Some(Err(message)) => call.refuse_anthropic(400, &message),
    }
}

async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    let ended = with_batch(&shared, &id, false, |batch| {
        batch.status == Processing::Ended
    });
    match ended {
        None => call.not_found(&id),
        Some(false) => {
            let message = format!(
                "Batch `{id}` is still processing; cancel it and wait for it to end before deleting it"
            );
            call.refuse_anthropic(400, &message)
        }
        Some(true) => {
            shared
                .batches
                .lock()
                .anthropic
                .batches
                .retain(|batch| batch.id != id);
            call.respond(200, json!({"id": id, "type": "message_batch_deleted"}))
        }
    }
}

async fn results(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    if let Some((status, body)) = header_refusal(&headers) {
        return call.respond(status, body);
    }
    let lines = with_batch(&shared, &id, false, |batch| {
        (batch.status == Processing::Ended).then(|| {
            batch
                .results
                .iter()
                .map(|line| format!("{line}\n"))
                .collect::<String>()
        })
    });
    match lines {
        None => call.not_found(&id),
        Some(None) => {
            let message = format!(
                "Batch `{id}` has not ended yet; its results are available once `processing_status` is `ended`"
            );
            call.refuse_anthropic(400, &message)
        }
        Some(Some(lines)) => call.respond_with(
            200,
            raw_response(200, "application/x-jsonl", Body::from(lines)),
        ),
    }
}

/// Moves `batch` on as far as a retrieval now finds it: through its
/// requests when due, to ended when canceling.
fn advance(shared: &Shared, batch: &mut MessageBatch) {
    let now = Utc::now();
    match batch.status {
        Processing::InProgress if batch.progress.due(&shared.batches.options, now) => {
            let custom_ids: Vec<&str> = batch
                .requests
                .iter()
                .map(|request| request.custom_id.as_str())
                .collect();
            let expired = shared.batches.options.expired(&custom_ids);
            for (request, expired) in batch.requests.iter().zip(expired) {
                let result = if expired {
                    batch.counts.expired += 1;
                    json!({"type": "expired"})
                } else {
                    match shared.run_in_batch(Api::Anthropic, &batch.id, request, &batch.submitter)
                    {
                        Answer::Response { status: 200, body } => {
                            batch.counts.succeeded += 1;
                            json!({"type": "succeeded", "message": body})
                        }
                        Answer::Response { body, .. } => {
                            batch.counts.errored += 1;
                            json!({"type": "errored", "error": body})
                        }
                        Answer::TimedOut => {
                            batch.counts.errored += 1;
                            let error = anthropic::error_body(
                                500,
                                None,
                                "lllm-mock: scripted timeout: the request got no answer",
                            );
                            json!({"type": "errored", "error": error})
                        }
                    }
                };
                batch
                    .results
                    .push(json!({"custom_id": request.custom_id, "result": result}));
            }
            batch.status = Processing::Ended;
            batch.ended_at = Some(now);
        }
        Processing::Canceling => {
            for request in &batch.requests {
                batch
                    .results
                    .push(json!({"custom_id": request.custom_id, "result": {"type": "canceled"}}));
            }
            batch.counts.canceled = batch.requests.len();
            batch.status = Processing::Ended;
            batch.ended_at = Some(now);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn refused(body: Value, expected: &str) {
        let error = read_requests(&body).unwrap_err();
        assert_eq!(error, expected);
    }

    #[test]
    fn a_batch_is_refused_for_its_shape() {
        let params = json!({"model": "m", "max_tokens": 10, "messages": []});
        let ok = json!({"requests": [{"custom_id": "a-1_B", "params": params}]});
        assert_eq!(read_requests(&ok).unwrap()[0].custom_id, "a-1_B");
        refused(json!({}), "requests: Field required");
        refused(
            json!({"requests": []}),
            "requests: List should have at least 1 item after validation, not 0",
        );
        refused(
            json!({"requests": [], "model": "m"}),
            "model: Extra inputs are not permitted",
        );
        refused(
            json!({"requests": [{"custom_id": "has space", "params": params}]}),
            "requests.0.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        );
        refused(
            json!({"requests": [{"custom_id": "x".repeat(65), "params": params}]}),
            "requests.0.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        );
        refused(
            json!({"requests": [{"custom_id": "a"}]}),
            "requests.0.params: Field required",
        );
        refused(
            json!({"requests": [{"custom_id": "a", "params": params}, {"custom_id": "a", "params": params}]}),
            "requests.1.custom_id: Duplicate custom_id `a`; each request in a batch needs its own",
        );
    }
}
