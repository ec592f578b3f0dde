//! The providers' Batch APIs on the wire: OpenAI's (`/v1/files` with
//! `purpose=batch`, `/v1/batches`, the output and error files) and
//! Anthropic's Message Batches (`/v1/messages/batches`, its results). This
//! module submits, retrieves, downloads, cancels and finds batches; what to
//! submit and when is `BatchApi`'s, and the bodies themselves are the
//! provider modules' (`openai`, `responses`, `anthropic`).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::super::exchange::error_object;
use super::super::http::{self, Endpoint, HttpReply};
use super::super::{ErrorKind, ProviderError, anthropic, openai};

/// How long one request to a Batch API may take (an upload or a download
/// of a large file included).
const TIMEOUT: Duration = Duration::from_secs(600);
/// Batches a page of a list asks for: the most OpenAI's `GET /v1/batches`
/// gives (Anthropic's gives up to 1,000; both default to 20).
const PAGE: usize = 100;
/// Pages a search for a lost batch reads at most: 100,000 batches created
/// since the submission.
const MAX_PAGES: usize = 1_000;
/// The clock skew allowed between this machine and the provider's.
const CLOCK_SKEW_S: i64 = 60;
/// How long a batch may take, at most, by both APIs (`completion_window:
/// 24h`; Anthropic's batches expire after 24 hours).
pub const COMPLETION_WINDOW_S: i64 = 24 * 3600;
/// How long past its completion window a batch in a state lllm does not
/// know is still waited for.
pub const PAST_WINDOW_S: i64 = 3600;
/// What may stand in a cursor as is: the unreserved characters of a URL.
const CURSOR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Which Batch API a service speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/files` and `/v1/batches`.
    OpenAi,
    /// `/v1/messages/batches`.
    Anthropic,
}

/// The answer to one request of a batch: the reply body, or why there is none.
pub type Answer = Result<Value, ProviderError>;

/// One provider's Batch API: where it is, with the provider's own headers
/// and key (held in the endpoint, never shown).
pub struct Service {
    /// Names the service in the journal: the provider's name and base URL
    /// (without credentials), so `--resume` finds the batches of the same
    /// provider again.
    pub key: String,
    /// The provider's name, for messages.
    pub provider: String,
    /// Which API.
    pub api: Api,
    client: reqwest::Client,
    /// `{base_url}` (OpenAI, ending in `/v1`) or `{host}/v1/messages/batches`
    /// (Anthropic), with the provider's headers.
    base: Endpoint,
}

/// A batch as a retrieval finds it.
#[derive(Debug, Clone)]
pub struct Status {
    /// The provider's own state (`validating`, `in_progress`, `ended`, …).
    pub state: String,
    /// Whether it will not change any more (results can be read).
    pub ended: bool,
    /// OpenAI: the file of status-200 answers.
    pub output_file_id: Option<String>,
    /// OpenAI: the file of the other answers.
    pub error_file_id: Option<String>,
    /// OpenAI: why a batch `failed` validation, one line.
    pub errors: Option<String>,
    /// Whether `state` is one lllm knows (ended or on its way).
    pub known: bool,
    /// When the batch was created, seconds since the epoch (`None` when
    /// the object does not say).
    pub created_at: Option<i64>,
}

impl Status {
    /// Whether a batch in a state lllm does not know has been so past its
    /// completion window and an hour more: at `now`, having been seen in
    /// that state since `seen_since` (seconds since the epoch; the
    /// deadline counts from its creation when the object gives it, else
    /// from then).
    pub fn overdue(&self, now: i64, seen_since: i64) -> bool {
        let start = self.created_at.unwrap_or(seen_since);
        !self.ended
            && !self.known
            && now.saturating_sub(start) > COMPLETION_WINDOW_S + PAST_WINDOW_S
    }
}

impl Service {
    /// The Batch API beside a provider's model endpoint (OpenAI:
    /// `{base}/chat/completions`; Anthropic: `{host}/v1/messages`), with its
    /// headers (the key included).
    pub fn new(
        provider: &str,
        api: Api,
        client: reqwest::Client,
        model_endpoint: &Endpoint,
    ) -> Result<Service, String> {
        // Paths, not texts: the model endpoint's query (Azure's
        // `?api-version=`) stays on every request of the Batch API.
        let base = model_endpoint.with_path(|path| match api {
            Api::OpenAi => path
                .strip_suffix("/chat/completions")
                .unwrap_or(path)
                .to_string(),
            Api::Anthropic => format!("{path}/batches"),
        });
        Ok(Service {
            key: format!("{provider} {}", base.place()),
            provider: provider.to_string(),
            api,
            client,
            base,
        })
    }

    /// The endpoint `suffix` (a path, perhaps with a query) below the base.
    fn at(&self, suffix: &str) -> Endpoint {
        self.base.below(suffix)
    }

    async fn send(
        &self,
        method: Method,
        suffix: &str,
        body: Option<(Vec<u8>, String)>,
    ) -> Result<HttpReply, ProviderError> {
        let endpoint = self.at(suffix);
        let reply = http::request(&self.client, &endpoint, method, body, TIMEOUT).await?;
        if (200..300).contains(&reply.status) {
            return Ok(reply);
        }
        let mut error = match self.api {
            Api::OpenAi => openai::parse_error(&reply),
            Api::Anthropic => anthropic::parse_error(&reply),
        };
        error.endpoint = Some(endpoint.place().to_string());
        Err(error)
    }

    async fn json(
        &self,
        method: Method,
        suffix: &str,
        body: Option<&Value>,
    ) -> Result<Value, ProviderError> {
        let body = match body {
            Some(body) => Some((http::json_body(body)?, "application/json".to_string())),
            None => None,
        };
        let reply = self.send(method, suffix, body).await?;
        serde_json::from_str(&reply.body).map_err(|error| {
            ProviderError::transient(format!("malformed reply from the Batch API: {error}"))
        })
    }

    /// Submits `requests` (`(custom_id, body)`) to `endpoint` (OpenAI:
    /// `/v1/chat/completions` or `/v1/responses`) as one batch tagged with
    /// `submission`, journaled at `submitted_at` (seconds since the epoch);
    /// returns the batch id.
    pub async fn submit(
        &self,
        submission: &str,
        submitted_at: i64,
        endpoint: &str,
        requests: &[(String, Value)],
    ) -> Result<String, ProviderError> {
        let created = match self.api {
            Api::OpenAi => {
                let mut lines = Vec::new();
                for (custom_id, body) in requests {
                    let line = json!({"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body});
                    lines.extend(http::json_body(&line)?);
                    lines.push(b'\n');
                }
                let file = self
                    .upload(&format!("lllm-{submission}.jsonl"), lines)
                    .await?;
                let file_id = text(&file, "id")
                    .ok_or_else(|| ProviderError::transient("the uploaded file has no `id`"))?;
                let body = json!({"input_file_id": file_id, "endpoint": endpoint,
                    "completion_window": "24h", "metadata": {"lllm_submission": submission}});
                match self.json(Method::POST, "/batches", Some(&body)).await {
                    Ok(created) => created,
                    // The batch may exist though its answer was lost: found
                    // by its metadata, it is not created a second time.
                    Err(error) if error.is_retryable() => {
                        let known = std::collections::BTreeSet::new();
                        match self.candidates(submission, submitted_at, &known).await {
                            Ok(found) if !found.is_empty() => json!({"id": found[0]}),
                            _ => return Err(error),
                        }
                    }
                    Err(error) => return Err(error),
                }
            }
            Api::Anthropic => {
                let requests: Vec<Value> = requests
                    .iter()
                    .map(|(custom_id, body)| json!({"custom_id": custom_id, "params": body}))
                    .collect();
                self.json(Method::POST, "", Some(&json!({"requests": requests})))
                    .await?
            }
        };
        text(&created, "id").ok_or_else(|| ProviderError::transient("the batch has no `id`"))
    }

    /// `POST /files` with `purpose=batch` (multipart, as the SDKs send it).
    async fn upload(&self, filename: &str, content: Vec<u8>) -> Result<Value, ProviderError> {
        let boundary = format!("lllm-{}", uuid::Uuid::new_v4().simple());
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: application/jsonl\r\n\r\n"
        )
        .into_bytes();
        body.extend(content);
        body.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let reply = self
            .send(Method::POST, "/files", Some((body, content_type)))
            .await?;
        serde_json::from_str(&reply.body).map_err(|error| {
            ProviderError::transient(format!("malformed reply from the Files API: {error}"))
        })
    }

    /// The batch as it stands.
    pub async fn retrieve(&self, batch_id: &str) -> Result<Status, ProviderError> {
        let suffix = match self.api {
            Api::OpenAi => format!("/batches/{batch_id}"),
            Api::Anthropic => format!("/{batch_id}"),
        };
        let object = self.json(Method::GET, &suffix, None).await?;
        Ok(status_of(self.api, &object))
    }

    /// Every answer of an ended batch, by custom_id.
    pub async fn results(
        &self,
        batch_id: &str,
        status: &Status,
    ) -> Result<Vec<(String, Answer)>, ProviderError> {
        let mut answers = Vec::new();
        match self.api {
            Api::OpenAi => {
                for file in [&status.output_file_id, &status.error_file_id]
                    .into_iter()
                    .flatten()
                {
                    let reply = self
                        .send(Method::GET, &format!("/files/{file}/content"), None)
                        .await?;
                    answers.extend(reply.body.lines().filter_map(openai_answer));
                }
            }
            Api::Anthropic => {
                let reply = self
                    .send(Method::GET, &format!("/{batch_id}/results"), None)
                    .await?;
                answers.extend(reply.body.lines().filter_map(anthropic_answer));
            }
        }
        Ok(answers)
    }

    /// Asks the provider to cancel the batch.
    pub async fn cancel(&self, batch_id: &str) -> Result<(), ProviderError> {
        let suffix = match self.api {
            Api::OpenAi => format!("/batches/{batch_id}/cancel"),
            Api::Anthropic => format!("/{batch_id}/cancel"),
        };
        self.json(Method::POST, &suffix, None).await.map(drop)
    }

    /// The batches that may hold a submission whose batch id was never
    /// written down (the process died between creating the batch and
    /// journaling it). OpenAI's batch carries the submission in its
    /// `metadata`: the one found, if any. Anthropic's carry nothing of ours:
    /// every batch created since `submitted_at` (seconds since the epoch, a
    /// minute of clock skew allowed); the caller tells them apart by the
    /// custom_ids of their results. Batches in `known` (the journal's) are
    /// never returned.
    ///
    /// Both lists come newest first, a page at a time (`limit`, and the
    /// last id as the next page's `after` / `after_id`, while `has_more`):
    /// every page is read until a batch older than the submission, so a
    /// batch is found however many were created since (issue 26: only the
    /// newest 100 were looked at, and `--resume` created and paid for a
    /// batch beyond them again). At most `MAX_PAGES` (1,000) pages.
    pub async fn candidates(
        &self,
        submission: &str,
        submitted_at: i64,
        known: &std::collections::BTreeSet<String>,
    ) -> Result<Vec<String>, ProviderError> {
        let since = submitted_at.saturating_sub(CLOCK_SKEW_S);
        let mut found = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let after = cursor.as_deref().map(|id| {
                let id = percent_encoding::utf8_percent_encode(id, CURSOR);
                match self.api {
                    Api::OpenAi => format!("&after={id}"),
                    Api::Anthropic => format!("&after_id={id}"),
                }
            });
            let suffix = match self.api {
                Api::OpenAi => format!("/batches?limit={PAGE}{}", after.unwrap_or_default()),
                Api::Anthropic => format!("?limit={PAGE}{}", after.unwrap_or_default()),
            };
            let page = self.json(Method::GET, &suffix, None).await?;
            let batches = page
                .get("data")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for batch in batches {
                // Newest first: the rest of the list is older still.
                if created_at(self.api, batch).is_some_and(|created| created < since) {
                    return Ok(found);
                }
                let Some(id) = text(batch, "id").filter(|id| !known.contains(id)) else {
                    continue;
                };
                match self.api {
                    Api::OpenAi => {
                        if batch["metadata"]["lllm_submission"].as_str() == Some(submission) {
                            return Ok(vec![id]);
                        }
                    }
                    Api::Anthropic => found.push(id),
                }
            }
            if page.get("has_more").and_then(Value::as_bool) != Some(true) {
                return Ok(found);
            }
            let next = text(&page, "last_id")
                .or_else(|| batches.last().and_then(|batch| text(batch, "id")));
            if next.is_none() || next == cursor {
                return Err(ProviderError::transient(
                    "the list of batches says it has more, but its next page does not move on",
                ));
            }
            cursor = next;
        }
        Err(ProviderError::permanent(format!(
            "more than {} batches were created since the submission; lllm looks at no more",
            MAX_PAGES * PAGE
        )))
    }
}

/// When a batch object says it was created, seconds since the epoch:
/// OpenAI's `created_at` is a number of seconds, Anthropic's an RFC 3339 time.
fn created_at(api: Api, batch: &Value) -> Option<i64> {
    match api {
        Api::OpenAi => batch.get("created_at").and_then(Value::as_i64),
        Api::Anthropic => batch
            .get("created_at")
            .and_then(Value::as_str)
            .and_then(|time| chrono::DateTime::parse_from_rfc3339(time).ok())
            .map(|time| time.timestamp()),
    }
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_string)
}

/// The states of an OpenAI batch (`Batch.status` in openai-python).
const OPENAI_STATES: [&str; 8] = [
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
];

/// The states of an Anthropic message batch (`processing_status`).
const ANTHROPIC_STATES: [&str; 3] = ["in_progress", "canceling", "ended"];

/// A batch object read into a `Status`.
fn status_of(api: Api, object: &Value) -> Status {
    match api {
        Api::OpenAi => {
            let state = text(object, "status").unwrap_or_default();
            let errors = object["errors"]["data"].as_array().map(|errors| {
                errors
                    .iter()
                    .map(|error| {
                        let message = error["message"].as_str().unwrap_or("invalid");
                        match error["line"].as_u64() {
                            Some(line) => format!("line {line}: {message}"),
                            None => message.to_string(),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            Status {
                ended: matches!(
                    state.as_str(),
                    "completed" | "failed" | "expired" | "cancelled"
                ),
                known: OPENAI_STATES.contains(&state.as_str()),
                state,
                output_file_id: text(object, "output_file_id"),
                error_file_id: text(object, "error_file_id"),
                errors,
                created_at: created_at(api, object),
            }
        }
        Api::Anthropic => {
            let state = text(object, "processing_status").unwrap_or_default();
            Status {
                ended: state == "ended",
                known: ANTHROPIC_STATES.contains(&state.as_str()),
                state,
                output_file_id: None,
                error_file_id: None,
                errors: None,
                created_at: created_at(api, object),
            }
        }
    }
}

/// An error for a request the batch did not answer (expired, cancelled):
/// transient, so the call is tried again in the next round if its retries
/// allow.
fn unanswered(code: &str, message: &str) -> ProviderError {
    let mut error = ProviderError::new(ErrorKind::Transient, message);
    error.code = Some(code.to_string());
    error
}

/// One line of an OpenAI output or error file.
fn openai_answer(line: &str) -> Option<(String, Answer)> {
    let line: Value = serde_json::from_str(line).ok()?;
    let custom_id = text(&line, "custom_id")?;
    let response = &line["response"];
    let answer = match response["status_code"].as_u64() {
        Some(200) => Ok(response["body"].clone()),
        Some(status) => Err(openai::parse_error(&HttpReply {
            status: u16::try_from(status).unwrap_or(500),
            headers: Default::default(),
            body: response["body"].to_string(),
        })),
        None => {
            let code = line["error"]["code"].as_str().unwrap_or("batch_error");
            let message = line["error"]["message"]
                .as_str()
                .unwrap_or("the batch returned no answer for this request");
            if code.contains("expired") || code.contains("cancel") || code.contains("timeout") {
                Err(unanswered(code, message))
            } else {
                Err(error_object(&line["error"]))
            }
        }
    };
    Some((custom_id, answer))
}

/// One line of an Anthropic results file.
fn anthropic_answer(line: &str) -> Option<(String, Answer)> {
    let line: Value = serde_json::from_str(line).ok()?;
    let custom_id = text(&line, "custom_id")?;
    let result = &line["result"];
    let answer = match result["type"].as_str() {
        Some("succeeded") => Ok(result["message"].clone()),
        Some("errored") => {
            let error = &result["error"];
            Err(error_object(error.get("error").unwrap_or(error)))
        }
        Some("expired") => Err(unanswered(
            "batch_expired",
            "the batch expired before this request ran",
        )),
        Some("canceled") => Err(unanswered(
            "batch_canceled",
            "the batch was cancelled before this request ran",
        )),
        _ => Err(ProviderError::transient(
            "the batch returned an unknown result for this request",
        )),
    };
    Some((custom_id, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(line: &str, expected: Result<Value, (ErrorKind, Option<&str>)>) {
        let (api, line) = line.split_once(' ').unwrap();
        let parsed = if api == "openai" {
            openai_answer(line)
        } else {
            anthropic_answer(line)
        };
        let (custom_id, answer) = parsed.expect("a line with a custom_id");
        assert_eq!(custom_id, "c-1");
        match (answer, expected) {
            (Ok(body), Ok(expected)) => assert_eq!(body, expected),
            (Err(error), Err((kind, code))) => {
                assert_eq!(error.kind, kind, "{error}");
                assert_eq!(error.code.as_deref(), code, "{error}");
            }
            (answer, expected) => panic!("{answer:?} is not {expected:?}"),
        }
    }

    #[test]
    fn answers_are_read_from_each_apis_result_lines() {
        case(
            r#"openai {"custom_id":"c-1","response":{"status_code":200,"body":{"x":1}},"error":null}"#,
            Ok(json!({"x": 1})),
        );
        case(
            r#"openai {"custom_id":"c-1","response":{"status_code":400,"body":{"error":{"message":"bad","code":"invalid"}}},"error":null}"#,
            Err((ErrorKind::Permanent, Some("invalid"))),
        );
        case(
            r#"openai {"custom_id":"c-1","response":{"status_code":500,"body":{"error":{"message":"boom"}}},"error":null}"#,
            Err((ErrorKind::Transient, None)),
        );
        case(
            r#"openai {"custom_id":"c-1","response":null,"error":{"code":"batch_expired","message":"expired"}}"#,
            Err((ErrorKind::Transient, Some("batch_expired"))),
        );
        case(
            r#"anthropic {"custom_id":"c-1","result":{"type":"succeeded","message":{"y":2}}}"#,
            Ok(json!({"y": 2})),
        );
        case(
            r#"anthropic {"custom_id":"c-1","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"no"}}}}"#,
            Err((ErrorKind::Permanent, Some("invalid_request_error"))),
        );
        case(
            r#"anthropic {"custom_id":"c-1","result":{"type":"expired"}}"#,
            Err((ErrorKind::Transient, Some("batch_expired"))),
        );
        case(
            r#"anthropic {"custom_id":"c-1","result":{"type":"canceled"}}"#,
            Err((ErrorKind::Transient, Some("batch_canceled"))),
        );
    }

    #[test]
    fn a_batch_object_says_whether_it_ended() {
        let openai = status_of(
            Api::OpenAi,
            &json!({"status": "failed", "errors": {"data": [{"line": 2, "message": "duplicate"}]}}),
        );
        assert!(openai.ended);
        assert_eq!(openai.errors.as_deref(), Some("line 2: duplicate"));
        assert!(!status_of(Api::OpenAi, &json!({"status": "finalizing"})).ended);
        assert!(status_of(Api::Anthropic, &json!({"processing_status": "ended"})).ended);
        assert!(!status_of(Api::Anthropic, &json!({"processing_status": "canceling"})).ended);
    }

    #[track_caller]
    fn overdue_case(api: Api, object: Value, now: i64, seen_since: i64, expected: bool) {
        let status = status_of(api, &object);
        assert_eq!(
            status.overdue(now, seen_since),
            expected,
            "{object} at {now}"
        );
    }

    /// A batch in a state lllm does not know is waited for until its
    /// completion window and an hour more have passed since its creation
    /// (or, when the object does not say, since lllm first saw that state);
    /// a known state is waited for as long as it lasts.
    #[test]
    fn only_a_state_lllm_does_not_know_is_overdue_past_the_window() {
        let day = COMPLETION_WINDOW_S;
        let limit = day + PAST_WINDOW_S;
        let created = 1_700_000_000;
        let openai = |status: &str| json!({"status": status, "created_at": created});
        overdue_case(Api::OpenAi, openai("paused"), created + limit, 0, false);
        overdue_case(Api::OpenAi, openai("paused"), created + limit + 1, 0, true);
        overdue_case(
            Api::OpenAi,
            openai("in_progress"),
            created + 10 * day,
            0,
            false,
        );
        overdue_case(
            Api::OpenAi,
            openai("finalizing"),
            created + 10 * day,
            0,
            false,
        );
        let anthropic = |state: &str| json!({"processing_status": state, "created_at": "2023-11-14T22:13:20.000000Z"});
        overdue_case(
            Api::Anthropic,
            anthropic("archived"),
            created + limit + 1,
            0,
            true,
        );
        overdue_case(
            Api::Anthropic,
            anthropic("archived"),
            created + day,
            0,
            false,
        );
        overdue_case(
            Api::Anthropic,
            anthropic("in_progress"),
            created + 10 * day,
            0,
            false,
        );
        // No creation time: counted from when the state was first seen.
        let bare = json!({"status": "paused"});
        overdue_case(Api::OpenAi, bare.clone(), 5_000 + limit, 5_000, false);
        overdue_case(Api::OpenAi, bare, 5_001 + limit, 5_000, true);
        // Ended is never overdue, whatever its age.
        overdue_case(
            Api::OpenAi,
            openai("completed"),
            created + 10 * day,
            0,
            false,
        );
    }
}
