//! The OpenAI Batch API, as `openai-python` types it (`Batch`, `FileObject`,
//! `BatchError`) and the API reference documents the files it writes:
//!
//! - `POST /v1/files` (multipart: `purpose`, `file`; a `batch` file must be
//!   named `*.jsonl`), `GET /v1/files` (`purpose`, `limit`, `after`,
//!   `order`), `GET /v1/files/{id}`, `GET /v1/files/{id}/content`, `DELETE
//!   /v1/files/{id}`;
//! - `POST /v1/batches` (`input_file_id`, `endpoint` `/v1/chat/completions` or
//!   `/v1/responses`, `completion_window` `24h`, `metadata`), `GET
//!   /v1/batches/{id}`, `GET /v1/batches` (`limit`, `after`; newest first),
//!   `POST /v1/batches/{id}/cancel`.
//!
//! A batch is created `validating`; its input lines are checked then, and
//! the first retrieval finds it `failed` (with `errors.data`: `code`, `line`,
//! `message`, `param`) or `in_progress`. When it is due it runs and ends
//! `completed`, or `expired` when some of its requests expired; a cancelled
//! one goes `cancelling`, then `cancelled`. Answers with status 200 go to the
//! output file (`{"id", "custom_id", "response": {"status_code",
//! "request_id", "body"}, "error": null}`), other statuses to the error file
//! the same way; requests that got no answer are there with `"response":
//! null` and an `error` code: `batch_expired`, `batch_cancelled` or
//! `request_timeout`.
//!
//! Like the mock's `/v1/chat/completions`, these endpoints take any
//! credential or none.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::Response;
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::batch::{
    Answer, BatchOptions, BatchRequest, Call, Progress, Submitter, page, query_pairs,
};
use super::log::fingerprint;
use super::{Shared, multipart, raw_response};
use crate::wire::Api;

/// A batch file's lines, at most (the API reference's limit).
const MAX_REQUESTS: usize = 50_000;
/// How many line errors a failed batch lists, at most.
const MAX_ERRORS: usize = 1_000;
/// The endpoints a batch can name (`BatchCreateParams.endpoint`).
const ENDPOINTS: [&str; 8] = [
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
];
/// The purposes a file can be uploaded with (`FilePurpose`).
const PURPOSES: [&str; 6] = [
    "assistants",
    "batch",
    "fine-tune",
    "vision",
    "user_data",
    "evals",
];
const DAY: i64 = 24 * 60 * 60;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/files", post(upload).get(files))
        .route("/v1/files/{id}", get(file).delete(delete_file))
        .route("/v1/files/{id}/content", get(content))
        .route("/v1/batches", post(create).get(list))
        .route("/v1/batches/{id}", get(retrieve))
        .route("/v1/batches/{id}/cancel", post(cancel))
}

/// The files and batches of the server's lifetime.
#[derive(Default)]
pub(super) struct OpenAiBatches {
    files: BTreeMap<String, StoredFile>,
    /// In creation order.
    batches: Vec<OpenAiBatch>,
    numbers: Numbers,
}

#[derive(Default)]
struct Numbers {
    file: u64,
    batch: u64,
    request: u64,
}

struct StoredFile {
    /// Its place in the order of creation.
    number: u64,
    id: String,
    filename: String,
    purpose: String,
    data: Bytes,
    created_at: i64,
    expires_at: Option<i64>,
}

impl StoredFile {
    fn object(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.data.len(),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": null,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Validating,
    Failed,
    InProgress,
    Completed,
    Expired,
    Cancelling,
    Cancelled,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Validating => "validating",
            Status::Failed => "failed",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Expired => "expired",
            Status::Cancelling => "cancelling",
            Status::Cancelled => "cancelled",
        }
    }
}

struct OpenAiBatch {
    id: String,
    api: Api,
    endpoint: String,
    input_file_id: String,
    metadata: Value,
    model: Option<String>,
    progress: Progress,
    status: Status,
    requests: Vec<BatchRequest>,
    /// The input file's problems (`errors.data`); the batch fails if any.
    errors: Vec<Value>,
    submitter: Submitter,
    in_progress_at: Option<i64>,
    finalizing_at: Option<i64>,
    completed_at: Option<i64>,
    failed_at: Option<i64>,
    expired_at: Option<i64>,
    cancelling_at: Option<i64>,
    cancelled_at: Option<i64>,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    completed: usize,
    failed: usize,
    input_tokens: u64,
    output_tokens: u64,
}

impl OpenAiBatch {
    fn object(&self) -> Value {
        let created_at = self.progress.reported.timestamp();
        let status = match (self.status, &self.progress.in_progress_state) {
            (Status::InProgress, Some(state)) => state.as_str(),
            (status, _) => status.name(),
        };
        json!({
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": if self.errors.is_empty() {
                Value::Null
            } else {
                json!({"object": "list", "data": self.errors})
            },
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": created_at + DAY,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {
                "total": self.requests.len(),
                "completed": self.completed,
                "failed": self.failed,
            },
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens.saturating_add(self.output_tokens),
            },
            "metadata": self.metadata,
        })
    }
}

/// OpenAI's error body.
fn error_body(message: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
}

impl Call<'_> {
    fn refuse(
        self,
        status: u16,
        message: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Response {
        self.respond(status, error_body(message, param, code))
    }

    fn no_such(self, kind: &str, id: &str) -> Response {
        self.refuse(
            404,
            &format!("No such {kind} object: {id}"),
            Some("id"),
            None,
        )
    }
}

async fn upload(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The log gets the form's fields and the file's name and size, not a
    // multipart body.
    let mut call = Call::new(&shared, &method, &uri, &headers, &[]);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let parts = match multipart::parse(content_type, &body) {
        Ok(parts) => parts,
        Err(message) => return call.refuse(400, &format!("lllm-mock: {message}"), None, None),
    };
    let mut purpose = None;
    let mut file = None;
    for part in parts {
        match part.name.as_str() {
            "purpose" => purpose = Some(String::from_utf8_lossy(&part.data).into_owned()),
            "file" => file = Some(part),
            // `expires_after[anchor]`, `expires_after[seconds]`: taken, not applied.
            name if name.starts_with("expires_after[") => {}
            name => {
                let message = format!("Unrecognized request argument supplied: {name}");
                return call.refuse(400, &message, Some(name), None);
            }
        }
    }
    call.entry.body = json!({
        "purpose": purpose,
        "filename": file.as_ref().and_then(|file| file.filename.clone()),
        "bytes": file.as_ref().map(|file| file.data.len()),
    });
    let Some(purpose) = purpose else {
        return call.refuse(
            400,
            "Missing required parameter: 'purpose'.",
            Some("purpose"),
            Some("missing_required_parameter"),
        );
    };
    let Some(file) = file else {
        return call.refuse(
            400,
            "Missing required parameter: 'file'.",
            Some("file"),
            Some("missing_required_parameter"),
        );
    };
    if !PURPOSES.contains(&purpose.as_str()) {
        let message = format!(
            "Invalid value for 'purpose': '{purpose}'. Supported values are: {}.",
            PURPOSES.map(|purpose| format!("'{purpose}'")).join(", ")
        );
        return call.refuse(400, &message, Some("purpose"), None);
    }
    let filename = file.filename.unwrap_or_else(|| "upload".into());
    if purpose == "batch" && !filename.ends_with(".jsonl") {
        return call.refuse(
            400,
            "Invalid file format for Batch API. Must be .jsonl",
            Some("file"),
            None,
        );
    }
    let created_at = call.entry.received.timestamp();
    let mut state = shared.batches.lock();
    let stored = state.openai.store(
        filename,
        &purpose,
        file.data,
        created_at,
        // Batch files expire after 30 days unless told otherwise.
        (purpose == "batch").then_some(created_at + 30 * DAY),
    );
    call.entry.extra.push(("file", json!(stored.id)));
    let object = stored.object();
    drop(state);
    call.respond(200, object)
}

impl OpenAiBatches {
    fn store(
        &mut self,
        filename: String,
        purpose: &str,
        data: Bytes,
        created_at: i64,
        expires_at: Option<i64>,
    ) -> &StoredFile {
        self.numbers.file += 1;
        let id = format!("file-mock{}", self.numbers.file);
        self.files.entry(id.clone()).or_insert(StoredFile {
            number: self.numbers.file,
            id,
            filename,
            purpose: purpose.into(),
            data,
            created_at,
            expires_at,
        })
    }
}

async fn files(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let (mut purpose, mut limit, mut after, mut ascending) = (None, 10_000, None, false);
    for (key, value) in query_pairs(uri.query()) {
        match key.as_str() {
            "purpose" => purpose = Some(value),
            "limit" => match value.parse::<usize>() {
                Ok(number @ 1..=10_000) => limit = number,
                _ => {
                    let message = format!(
                        "Invalid 'limit': integer between 1 and 10000 expected, got '{value}'."
                    );
                    return call.refuse(400, &message, Some("limit"), Some("invalid_value"));
                }
            },
            "after" => after = Some(value),
            "order" => match value.as_str() {
                "asc" => ascending = true,
                "desc" => ascending = false,
                _ => {
                    let message = format!(
                        "Invalid value: '{value}'. Supported values are: 'asc' and 'desc'."
                    );
                    return call.refuse(400, &message, Some("order"), Some("invalid_value"));
                }
            },
            _ => {}
        }
    }
    let listed = {
        let state = shared.batches.lock();
        let mut chosen: Vec<&StoredFile> = state
            .openai
            .files
            .values()
            .filter(|file| {
                purpose
                    .as_ref()
                    .is_none_or(|purpose| file.purpose == *purpose)
            })
            .collect();
        chosen.sort_by_key(|file| file.number);
        if !ascending {
            chosen.reverse();
        }
        let ids: Vec<&str> = chosen.iter().map(|file| file.id.as_str()).collect();
        page(&ids, after.as_deref(), None, limit).map(|(ids, has_more)| {
            let data: Vec<Value> = ids
                .iter()
                .filter_map(|id| state.openai.files.get(*id))
                .map(StoredFile::object)
                .collect();
            json!({
                "object": "list",
                "data": data,
                "first_id": ids.first(),
                "last_id": ids.last(),
                "has_more": has_more,
            })
        })
    };
    match listed {
        Some(listed) => call.respond(200, listed),
        None => call.no_such("File", after.as_deref().unwrap_or_default()),
    }
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let object = shared
        .batches
        .lock()
        .openai
        .files
        .get(&id)
        .map(StoredFile::object);
    match object {
        Some(object) => call.respond(200, object),
        None => call.no_such("File", &id),
    }
}

async fn content(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let data = shared
        .batches
        .lock()
        .openai
        .files
        .get(&id)
        .map(|file| file.data.clone());
    match data {
        Some(data) => call.respond_with(
            200,
            raw_response(200, "application/octet-stream", Body::from(data)),
        ),
        None => call.no_such("File", &id),
    }
}

async fn delete_file(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let removed = shared.batches.lock().openai.files.remove(&id).is_some();
    if removed {
        call.respond(200, json!({"id": id, "object": "file", "deleted": true}))
    } else {
        call.no_such("File", &id)
    }
}

async fn create(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut call = Call::new(&shared, &method, &uri, &headers, &body);
    let Some(fields) = call.entry.body.as_object().cloned() else {
        return call.refuse(
            400,
            "We could not parse the JSON body of your request: it must be a JSON object.",
            None,
            None,
        );
    };
    if let Some(key) = fields.keys().find(|key| {
        ![
            "input_file_id",
            "endpoint",
            "completion_window",
            "metadata",
            "output_expires_after",
        ]
        .contains(&key.as_str())
    }) {
        let message = format!("Unrecognized request argument supplied: {key}");
        return call.refuse(400, &message, Some(key), None);
    }
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    for key in ["input_file_id", "endpoint", "completion_window"] {
        if text(key).is_none() {
            let message = format!("Missing required parameter: '{key}'.");
            return call.refuse(400, &message, Some(key), Some("missing_required_parameter"));
        }
    }
    let (input_file_id, endpoint) = (
        text("input_file_id").unwrap_or_default().to_string(),
        text("endpoint").unwrap_or_default().to_string(),
    );
    let api = match endpoint.as_str() {
        "/v1/chat/completions" => Api::Chat,
        "/v1/responses" => Api::Responses,
        other if ENDPOINTS.contains(&other) => {
            let message = format!(
                "lllm-mock: the endpoint '{other}' is not emulated; a batch here runs /v1/chat/completions or /v1/responses"
            );
            return call.refuse(400, &message, Some("endpoint"), None);
        }
        other => {
            let message = format!(
                "Invalid value: '{other}'. Supported values are: {}.",
                ENDPOINTS.map(|endpoint| format!("'{endpoint}'")).join(", ")
            );
            return call.refuse(400, &message, Some("endpoint"), Some("invalid_value"));
        }
    };
    if text("completion_window") != Some("24h") {
        let message = format!(
            "Invalid value: '{}'. Supported values are: '24h'.",
            text("completion_window").unwrap_or_default()
        );
        return call.refuse(
            400,
            &message,
            Some("completion_window"),
            Some("invalid_value"),
        );
    }
    let metadata = fields.get("metadata").cloned().unwrap_or(Value::Null);
    if let Err(message) = check_metadata(&metadata) {
        return call.refuse(400, &message, Some("metadata"), None);
    }
    let now = call.entry.received;
    let mut state = shared.batches.lock();
    let openai = &mut state.openai;
    let found = openai
        .files
        .get(&input_file_id)
        .map(|file| (file.purpose.clone(), file.data.clone()));
    let data = match found {
        None => {
            let message = format!("No such File object: {input_file_id}");
            return call.refuse(404, &message, Some("input_file_id"), None);
        }
        Some((purpose, _)) if purpose != "batch" => {
            let message =
                format!("The input file must be uploaded with purpose 'batch', not '{purpose}'.");
            return call.refuse(400, &message, Some("input_file_id"), None);
        }
        Some((_, data)) => data,
    };
    let lines = read_lines(&data, &endpoint);
    openai.numbers.batch += 1;
    let batch = OpenAiBatch {
        id: format!("batch_mock{}", openai.numbers.batch),
        api,
        endpoint,
        input_file_id,
        metadata,
        model: lines.model,
        progress: Progress::new(now, &shared.batches.options),
        status: Status::Validating,
        requests: if lines.errors.is_empty() {
            lines.requests
        } else {
            Vec::new()
        },
        errors: lines.errors,
        submitter: Submitter {
            headers: headers.clone(),
            auth: fingerprint(&headers),
        },
        in_progress_at: None,
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        expired_at: None,
        cancelling_at: None,
        cancelled_at: None,
        output_file_id: None,
        error_file_id: None,
        completed: 0,
        failed: 0,
        input_tokens: 0,
        output_tokens: 0,
    };
    let object = batch.object();
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
    openai.batches.push(batch);
    drop(state);
    call.respond(200, object)
}

/// At most 16 keys of at most 64 characters, string values of at most 512.
fn check_metadata(metadata: &Value) -> Result<(), String> {
    let pairs = match metadata {
        Value::Null => return Ok(()),
        Value::Object(pairs) => pairs,
        _ => return Err("Invalid type for 'metadata': expected an object.".into()),
    };
    if pairs.len() > 16 {
        return Err(format!(
            "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with {} properties instead.",
            pairs.len()
        ));
    }
    for (key, value) in pairs {
        if key.chars().count() > 64 {
            return Err(format!(
                "Invalid 'metadata': the key '{key}' is longer than 64 characters."
            ));
        }
        match value {
            Value::String(text) if text.chars().count() <= 512 => {}
            Value::String(_) => {
                return Err(format!(
                    "Invalid 'metadata.{key}': string too long. Expected a string with maximum length 512."
                ));
            }
            _ => {
                return Err(format!(
                    "Invalid type for 'metadata.{key}': expected a string."
                ));
            }
        }
    }
    Ok(())
}

/// An input file read: its requests, or its problems.
struct Lines {
    requests: Vec<BatchRequest>,
    errors: Vec<Value>,
    model: Option<String>,
}

/// Reads a batch input file: one `{"custom_id", "method": "POST", "url",
/// "body"}` per line, `url` the batch's endpoint, `custom_id`s unique, one
/// model. Blank lines are skipped. Problems carry the documented codes
/// (`invalid_json_line`, `duplicate_custom_id`, `url_mismatch`,
/// `model_mismatch`, `empty_file`, `too_many_tasks`), a missing field
/// `missing_required_parameter` and another method `invalid_method`.
fn read_lines(data: &[u8], endpoint: &str) -> Lines {
    let mut lines = Lines {
        requests: Vec::new(),
        errors: Vec::new(),
        model: None,
    };
    let mut seen = HashSet::new();
    for (number, line) in data.split(|byte| *byte == b'\n').enumerate() {
        let number = number + 1;
        let error = |code: &str, message: String, param: Option<&str>| json!({"code": code, "line": number, "message": message, "param": param});
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let fields = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(fields)) => fields,
            _ => {
                lines.errors.push(error(
                    "invalid_json_line",
                    "This line is not parseable as valid JSON.".into(),
                    None,
                ));
                continue;
            }
        };
        match read_line(&fields, endpoint, &mut seen, &mut lines.model) {
            Ok(request) => lines.requests.push(request),
            Err((code, message, param)) => lines.errors.push(error(code, message, Some(param))),
        }
        if lines.errors.len() >= MAX_ERRORS {
            break;
        }
    }
    if lines.requests.is_empty() && lines.errors.is_empty() {
        lines.errors.push(json!({"code": "empty_file", "line": null,
            "message": "The batch input file is empty.", "param": null}));
    }
    if lines.requests.len() > MAX_REQUESTS {
        let message = format!(
            "The batch input file has {} requests; a batch may have at most {MAX_REQUESTS}.",
            lines.requests.len()
        );
        lines.errors.push(
            json!({"code": "too_many_tasks", "line": null, "message": message, "param": null}),
        );
    }
    lines
}

fn read_line(
    fields: &Map<String, Value>,
    endpoint: &str,
    seen: &mut HashSet<String>,
    model: &mut Option<String>,
) -> Result<BatchRequest, (&'static str, String, &'static str)> {
    let missing = |param: &'static str| {
        (
            "missing_required_parameter",
            format!("Missing required parameter: '{param}'."),
            param,
        )
    };
    let custom_id = fields
        .get("custom_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| missing("custom_id"))?;
    let method = fields
        .get("method")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("method"))?;
    if method != "POST" {
        return Err((
            "invalid_method",
            format!("The method '{method}' is not supported; batch requests use 'POST'."),
            "method",
        ));
    }
    let url = fields
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("url"))?;
    if url != endpoint {
        return Err((
            "url_mismatch",
            format!("The provided URL '{url}' does not match the batch's endpoint '{endpoint}'."),
            "url",
        ));
    }
    let body = fields
        .get("body")
        .filter(|body| body.is_object())
        .ok_or_else(|| missing("body"))?;
    let line_model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("body.model"))?;
    match model {
        Some(model) if model != line_model => {
            return Err((
                "model_mismatch",
                format!(
                    "The provided model '{line_model}' does not match the model '{model}' of the other requests in this batch."
                ),
                "body.model",
            ));
        }
        Some(_) => {}
        None => *model = Some(line_model.to_string()),
    }
    if !seen.insert(custom_id.to_string()) {
        return Err((
            "duplicate_custom_id",
            format!(
                "The custom_id '{custom_id}' is a duplicate of another request's; custom_ids must be unique in a batch."
            ),
            "custom_id",
        ));
    }
    Ok(BatchRequest {
        custom_id: custom_id.to_string(),
        body: body.clone(),
    })
}

async fn retrieve(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let object = {
        let mut state = shared.batches.lock();
        let openai = &mut state.openai;
        match openai.batches.iter_mut().find(|batch| batch.id == id) {
            Some(batch) => {
                advance(&shared, &mut openai.files, &mut openai.numbers, batch);
                Some(batch.object())
            }
            None => None,
        }
    };
    match object {
        Some(object) => call.respond(200, object),
        None => call.no_such("Batch", &id),
    }
}

async fn list(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(&shared, &method, &uri, &headers, &[]);
    let mut limit = 20;
    let mut after = None;
    for (key, value) in query_pairs(uri.query()) {
        match key.as_str() {
            "limit" => match value.parse::<usize>() {
                Ok(number @ 1..=100) => limit = number,
                _ => {
                    let message = format!(
                        "Invalid 'limit': integer between 1 and 100 expected, got '{value}'."
                    );
                    return call.refuse(400, &message, Some("limit"), Some("invalid_value"));
                }
            },
            "after" => after = Some(value),
            _ => {}
        }
    }
    let listed = {
        let state = shared.batches.lock();
        let openai = &state.openai;
        let ids: Vec<&str> = openai
            .batches
            .iter()
            .rev()
            .map(|batch| batch.id.as_str())
            .collect();
        page(&ids, after.as_deref(), None, limit).map(|(ids, has_more)| {
            let data: Vec<Value> = ids
                .iter()
                .filter_map(|id| openai.batches.iter().find(|batch| batch.id == *id))
                .map(OpenAiBatch::object)
                .collect();
            json!({
                "object": "list",
                "data": data,
                "first_id": ids.first(),
                "last_id": ids.last(),
                "has_more": has_more,
            })
        })
    };
    match listed {
        Some(listed) => call.respond(200, listed),
        None => call.no_such("Batch", after.as_deref().unwrap_or_default()),
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
    let now = call.entry.received.timestamp();
    let answer = {
        let mut state = shared.batches.lock();
        let openai = &mut state.openai;
        match openai.batches.iter_mut().find(|batch| batch.id == id) {
            None => None,
            Some(batch) => Some(match batch.status {
                Status::Validating | Status::InProgress => {
                    batch.status = Status::Cancelling;
                    batch.cancelling_at = Some(now);
                    Ok(batch.object())
                }
                Status::Cancelling => Ok(batch.object()),
                ended => Err(format!(
                    "Cannot cancel a batch with status '{}'.",
                    ended.name()
                )),
            }),
        }
    };
    match answer {
        None => call.no_such("Batch", &id),
        Some(Ok(object)) => call.respond(200, object),
        Some(Err(message)) => call.refuse(400, &message, None, None),
    }
}

/// Moves `batch` on as far as a retrieval at this moment finds it: out of
/// validation, through its requests when due, to cancelled when cancelling.
fn advance(
    shared: &Shared,
    files: &mut BTreeMap<String, StoredFile>,
    numbers: &mut Numbers,
    batch: &mut OpenAiBatch,
) {
    let now = Utc::now();
    if batch.status == Status::Validating {
        if batch.errors.is_empty() {
            batch.status = Status::InProgress;
            batch.in_progress_at = Some(now.timestamp());
        } else {
            batch.status = Status::Failed;
            batch.failed_at = Some(now.timestamp());
            return;
        }
    }
    match batch.status {
        Status::InProgress if batch.progress.due(&shared.batches.options, now) => {
            run(shared, files, numbers, batch, now);
        }
        Status::Cancelling => {
            let mut errors = String::new();
            for request in &batch.requests {
                numbers.request += 1;
                push_line(
                    &mut errors,
                    numbers.request,
                    &request.custom_id,
                    Value::Null,
                    json!({"code": "batch_cancelled",
                           "message": "The batch was cancelled before this request executed."}),
                );
            }
            batch.failed = batch.requests.len();
            batch.error_file_id = store_output(files, numbers, &batch.id, "error", errors, now);
            batch.status = Status::Cancelled;
            batch.cancelled_at = Some(now.timestamp());
        }
        _ => {}
    }
}

/// Runs the batch's requests (the expiring ones excepted) and writes its
/// output and error files.
fn run(
    shared: &Shared,
    files: &mut BTreeMap<String, StoredFile>,
    numbers: &mut Numbers,
    batch: &mut OpenAiBatch,
    now: DateTime<Utc>,
) {
    let options: &BatchOptions = &shared.batches.options;
    let custom_ids: Vec<&str> = batch
        .requests
        .iter()
        .map(|request| request.custom_id.as_str())
        .collect();
    let expired = options.expired(&custom_ids);
    let (mut output, mut errors) = (String::new(), String::new());
    for (request, expired) in batch.requests.iter().zip(&expired) {
        numbers.request += 1;
        let number = numbers.request;
        let response = |status: u16, body: Value| json!({"status_code": status, "request_id": format!("req_mock{number}"), "body": body});
        if *expired {
            push_line(
                &mut errors,
                number,
                &request.custom_id,
                Value::Null,
                json!({"code": "batch_expired",
                       "message": "This request could not be executed before the completion window expired."}),
            );
            batch.failed += 1;
            continue;
        }
        match shared.run_in_batch(batch.api, &batch.id, request, &batch.submitter) {
            Answer::Response { status: 200, body } => {
                let usage = &body["usage"];
                let count =
                    |keys: [&str; 2]| keys.iter().find_map(|key| usage[key].as_u64()).unwrap_or(0);
                // A script may report any count: the batch's sums saturate.
                batch.input_tokens = batch
                    .input_tokens
                    .saturating_add(count(["prompt_tokens", "input_tokens"]));
                batch.output_tokens = batch
                    .output_tokens
                    .saturating_add(count(["completion_tokens", "output_tokens"]));
                batch.completed += 1;
                let line_response = response(200, body);
                push_line(
                    &mut output,
                    number,
                    &request.custom_id,
                    line_response,
                    Value::Null,
                );
            }
            Answer::Response { status, body } => {
                batch.failed += 1;
                let line_response = response(status, body);
                push_line(
                    &mut errors,
                    number,
                    &request.custom_id,
                    line_response,
                    Value::Null,
                );
            }
            Answer::TimedOut => {
                batch.failed += 1;
                push_line(
                    &mut errors,
                    number,
                    &request.custom_id,
                    Value::Null,
                    json!({"code": "request_timeout",
                           "message": "The request to the model timed out."}),
                );
            }
        }
    }
    batch.output_file_id = store_output(files, numbers, &batch.id, "output", output, now);
    batch.error_file_id = store_output(files, numbers, &batch.id, "error", errors, now);
    if expired.contains(&true) {
        batch.status = Status::Expired;
        batch.expired_at = Some(now.timestamp());
    } else {
        batch.status = Status::Completed;
        batch.finalizing_at = Some(now.timestamp());
        batch.completed_at = Some(now.timestamp());
    }
}

/// One line of an output or error file.
fn push_line(file: &mut String, number: u64, custom_id: &str, response: Value, error: Value) {
    let line = json!({
        "id": format!("batch_req_mock{number}"),
        "custom_id": custom_id,
        "response": response,
        "error": error,
    });
    file.push_str(&line.to_string());
    file.push('\n');
}

/// Stores a batch's output or error file; none when it has no lines.
fn store_output(
    files: &mut BTreeMap<String, StoredFile>,
    numbers: &mut Numbers,
    batch: &str,
    kind: &str,
    lines: String,
    now: DateTime<Utc>,
) -> Option<String> {
    if lines.is_empty() {
        return None;
    }
    numbers.file += 1;
    let id = format!("file-mock{}", numbers.file);
    files.insert(
        id.clone(),
        StoredFile {
            number: numbers.file,
            id: id.clone(),
            filename: format!("{batch}_{kind}.jsonl"),
            purpose: "batch_output".into(),
            data: Bytes::from(lines),
            created_at: now.timestamp(),
            expires_at: Some(now.timestamp() + 30 * DAY),
        },
    );
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = "/v1/chat/completions";

    fn line(custom_id: &str, url: &str, model: &str) -> String {
        json!({"custom_id": custom_id, "method": "POST", "url": url,
               "body": {"model": model, "messages": [{"role": "user", "content": "hi"}]}})
        .to_string()
    }

    #[track_caller]
    fn errors_case(file: &str, expected: &[(&str, Option<u64>)]) {
        let lines = read_lines(file.as_bytes(), CHAT);
        let got: Vec<(String, Option<u64>)> = lines
            .errors
            .iter()
            .map(|error| {
                (
                    error["code"].as_str().unwrap_or_default().to_string(),
                    error["line"].as_u64(),
                )
            })
            .collect();
        let expected: Vec<(String, Option<u64>)> = expected
            .iter()
            .map(|(code, line)| (code.to_string(), *line))
            .collect();
        assert_eq!(got, expected, "{file}");
    }

    #[test]
    fn input_lines_are_checked() {
        let good = line("a", CHAT, "m");
        errors_case(&format!("{good}\n\n{}\n", line("b", CHAT, "m")), &[]);
        errors_case("", &[("empty_file", None)]);
        errors_case(
            &format!("{good}\n{{not json\n[1]"),
            &[
                ("invalid_json_line", Some(2)),
                ("invalid_json_line", Some(3)),
            ],
        );
        errors_case(
            &format!("{good}\n{good}"),
            &[("duplicate_custom_id", Some(2))],
        );
        errors_case(
            &format!("{good}\n{}", line("b", "/v1/responses", "m")),
            &[("url_mismatch", Some(2))],
        );
        errors_case(
            &format!("{good}\n{}", line("b", CHAT, "other")),
            &[("model_mismatch", Some(2))],
        );
        errors_case(
            &good.replace("\"POST\"", "\"GET\""),
            &[("invalid_method", Some(1))],
        );
        errors_case(
            r#"{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions"}"#,
            &[("missing_required_parameter", Some(1))],
        );
    }

    #[test]
    fn metadata_is_bounded() {
        assert!(check_metadata(&Value::Null).is_ok());
        assert!(check_metadata(&json!({"run": "7"})).is_ok());
        assert!(check_metadata(&json!({"run": 7})).is_err());
        assert!(check_metadata(&json!({"x".repeat(65): "v"})).is_err());
        let many: Map<String, Value> = (0..17).map(|n| (n.to_string(), json!("v"))).collect();
        assert!(check_metadata(&Value::Object(many)).is_err());
    }
}
