//! What the two Batch API emulations share: their options (how long a batch
//! stays in progress, which requests expire), the in-memory store of files
//! and batches, and running one request of a batch through the script by the
//! same path a request sent on its own takes (`Shared::take_turn`), so one
//! script serves both and its faults become a batch's partial failures.
//!
//! A batch moves on only when it is retrieved (`GET` of the batch): the
//! retrieval that finds it due runs all its requests at once, in their
//! order, and ends it; lists, cancels and results show it as it stands. Requests a cancelled batch
//! never ran and requests that expire are never shown to the script. The
//! wire shapes live in `openai_batch` and `anthropic_batch`.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::anthropic_batch::MessageBatches;
use super::log::LogEntry;
use super::openai_batch::OpenAiBatches;
use super::{ServerError, Shared, Turn, fault_name, json_response, usage_of};
use crate::wire::{Api, Reference};
use lllm::mock::script::{Fault, Reply};

/// How the emulated Batch APIs process a batch. A batch moves on only when
/// it is retrieved (`GET` of the batch): it ends at the first retrieval that
/// finds both `polls` retrievals done and `delay_ms` passed since its
/// creation; until then it is in progress. Counting polls lets a test see
/// every state without sleeping.
///
/// ```
/// use lllm_mock::server::{BatchOptions, ServerOptions};
///
/// let options = ServerOptions {
///     script: "script.yaml".into(),
///     // Two retrievals see the batch in progress, the third sees it ended;
///     // `c` and the last quarter of the requests expire.
///     batch: BatchOptions {
///         polls: 2,
///         expire_fraction: 0.25,
///         expire_ids: vec!["c".into()],
///         ..Default::default()
///     },
///     ..Default::default()
/// };
/// assert_eq!(options.batch.delay_ms, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchOptions {
    /// Retrievals of a batch that still find it in progress (0: the first
    /// one finds it ended).
    pub polls: u32,
    /// Milliseconds a batch stays in progress after its creation, at least.
    pub delay_ms: u64,
    /// The fraction of each batch's requests that expire: the last ones, as
    /// if the completion window closed before they ran (0 to 1).
    pub expire_fraction: f64,
    /// Requests that expire, by `custom_id`, in every batch that has them.
    pub expire_ids: Vec<String>,
    /// Seconds before its creation each batch says it was created (its
    /// `created_at`, and `expires_at` a day after that): a client's deadline
    /// past the completion window is tested without waiting a day.
    pub age_s: u64,
    /// The state a batch in progress is reported in instead of the API's
    /// own `in_progress`: one no client knows, to test what a client does
    /// with it.
    pub in_progress_state: Option<String>,
}

impl BatchOptions {
    pub(super) fn check(&self) -> Result<(), ServerError> {
        if (0.0..=1.0).contains(&self.expire_fraction) {
            Ok(())
        } else {
            Err(ServerError::BatchExpire(self.expire_fraction))
        }
    }

    /// Which of these requests expire.
    pub(super) fn expired(&self, custom_ids: &[&str]) -> Vec<bool> {
        // Rounded, so a fraction of 0.5 over 3 requests expires 2 of them.
        let tail = (self.expire_fraction * custom_ids.len() as f64).round() as usize;
        let first_of_tail = custom_ids.len().saturating_sub(tail);
        custom_ids
            .iter()
            .enumerate()
            .map(|(at, id)| {
                at >= first_of_tail || self.expire_ids.iter().any(|wanted| wanted == id)
            })
            .collect()
    }
}

/// Every file and batch of the server's lifetime, behind one lock: a read
/// that ends a batch runs its requests while holding it, so two polls never
/// run a batch twice.
pub(super) struct Batches {
    pub options: BatchOptions,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub openai: OpenAiBatches,
    pub anthropic: MessageBatches,
}

impl Batches {
    pub fn new(options: BatchOptions) -> Batches {
        Batches {
            options,
            state: Mutex::new(State::default()),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// When a batch was created and how often it was polled since, and how
/// its objects show that (`BatchOptions::age_s`, `in_progress_state`).
#[derive(Debug, Clone)]
pub(super) struct Progress {
    pub created: DateTime<Utc>,
    polls: u32,
    /// The creation time its objects report.
    pub reported: DateTime<Utc>,
    /// The state its objects report while it is in progress, if not the API's.
    pub in_progress_state: Option<String>,
}

impl Progress {
    pub fn new(created: DateTime<Utc>, options: &BatchOptions) -> Progress {
        let age = chrono::TimeDelta::try_seconds(i64::try_from(options.age_s).unwrap_or(i64::MAX))
            .unwrap_or(chrono::TimeDelta::MAX);
        Progress {
            created,
            polls: 0,
            reported: created
                .checked_sub_signed(age)
                .unwrap_or(DateTime::UNIX_EPOCH),
            in_progress_state: options.in_progress_state.clone(),
        }
    }

    /// Whether the batch is due at a retrieval at `now`; a retrieval that
    /// finds it not due yet is counted.
    pub fn due(&mut self, options: &BatchOptions, now: DateTime<Utc>) -> bool {
        let waited = (now - self.created)
            .to_std()
            .is_ok_and(|waited| waited >= Duration::from_millis(options.delay_ms));
        if self.polls >= options.polls && waited {
            return true;
        }
        self.polls = self.polls.saturating_add(1);
        false
    }
}

/// One request of a batch, as its creator sent it.
#[derive(Debug, Clone)]
pub(super) struct BatchRequest {
    pub custom_id: String,
    pub body: Value,
}

/// What the creator of a batch sent with it: the headers its requests are
/// checked with, and the key's fingerprint for the log.
#[derive(Debug, Clone)]
pub(super) struct Submitter {
    pub headers: HeaderMap,
    pub auth: Value,
}

/// How one request of a batch ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Answer {
    /// The API answered with this status and JSON body.
    Response { status: u16, body: Value },
    /// No answer came (the `timeout` fault).
    TimedOut,
}

impl Shared {
    /// Runs one request of batch `batch` as `api` would answer it alone, and
    /// logs it as a line of its own (`"batch"`, `"custom_id"`). The script's
    /// latency is not waited for; faults below HTTP have no connection to
    /// break, so `reset`, `malformed` and `cut_stream` are a 500 and
    /// `timeout` is a request that never got an answer.
    pub(super) fn run_in_batch(
        &self,
        api: Api,
        batch: &str,
        request: &BatchRequest,
        submitter: &Submitter,
    ) -> Answer {
        let received = Utc::now();
        let mut entry = LogEntry {
            index: None,
            received,
            method: "POST".into(),
            path: api.path().into(),
            query: None,
            model: None,
            stream: false,
            auth: submitter.auth.clone(),
            body: request.body.clone(),
            status: None,
            fault: None,
            extra: vec![
                ("batch", json!(batch)),
                ("custom_id", json!(request.custom_id)),
            ],
        };
        let answer = self.answer_in_batch(api, request, submitter, &mut entry);
        if let Answer::Response { status, .. } = &answer {
            entry.status = Some(*status);
        }
        self.record(entry);
        answer
    }

    fn answer_in_batch(
        &self,
        api: Api,
        request: &BatchRequest,
        submitter: &Submitter,
        entry: &mut LogEntry,
    ) -> Answer {
        let refused = |status: u16, code: &str, message: &str| Answer::Response {
            status,
            body: api.error_body(status, Some(code), message),
        };
        if request.body.get("stream") == Some(&Value::Bool(true)) {
            return refused(
                400,
                "invalid_request_error",
                "lllm-mock: `stream` is not supported in a batch request",
            );
        }
        let Turn { incoming, served } = match self.take_turn(api, &submitter.headers, &request.body)
        {
            Ok(turn) => turn,
            Err((status, code, message)) => return refused(status, code, &message),
        };
        entry.index = Some(served.index);
        entry.model = Some(incoming.model.clone());
        let reference = Reference {
            index: served.index,
            model: if incoming.model.is_empty() {
                "mock"
            } else {
                &incoming.model
            },
            created: entry.received.timestamp(),
        };
        match &served.reply {
            Reply::Message(message) => {
                let message = &*api.shape(message, &incoming, served.index);
                Answer::Response {
                    status: 200,
                    body: api.body(reference, message, usage_of(message, &incoming)),
                }
            }
            Reply::Fault(fault) => {
                entry.fault = Some(fault_name(fault));
                match fault {
                    Fault::Http {
                        status,
                        code,
                        message,
                        ..
                    } => {
                        let text = message
                            .clone()
                            .unwrap_or_else(|| format!("lllm-mock: scripted fault {status}"));
                        Answer::Response {
                            status: *status,
                            body: api.error_body(*status, code.as_deref(), &text),
                        }
                    }
                    Fault::Timeout => Answer::TimedOut,
                    Fault::Reset | Fault::Malformed | Fault::CutStream => Answer::Response {
                        status: 500,
                        body: api.error_body(
                            500,
                            None,
                            &format!(
                                "lllm-mock: scripted fault `{}` in a batch request",
                                fault_name(fault)
                            ),
                        ),
                    },
                }
            }
            Reply::Exhausted { served } => refused(
                400,
                "script_exhausted",
                &format!("lllm-mock: script exhausted after {served} replies"),
            ),
        }
    }
}

/// One HTTP request to a Batch API endpoint: its log line, written when
/// the response is made.
pub(super) struct Call<'a> {
    shared: &'a Shared,
    pub entry: LogEntry,
}

impl<'a> Call<'a> {
    pub fn new(
        shared: &'a Shared,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Call<'a> {
        let mut entry = LogEntry::new(method.as_str(), uri, headers, body, shared.log.is_some());
        if body.is_empty() {
            entry.body = Value::Null;
        }
        Call { shared, entry }
    }

    /// A JSON response, logged with its status.
    pub fn respond(self, status: u16, body: Value) -> Response {
        self.respond_with(status, json_response(status, body))
    }

    /// `response`, logged with `status`.
    pub fn respond_with(mut self, status: u16, response: Response) -> Response {
        self.entry.status = Some(status);
        self.shared.record(self.entry);
        response
    }
}

/// `?key=value&…` as pairs; the ids and numbers the list endpoints take
/// need no percent-decoding.
pub(super) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key.to_string(), value.to_string())
        })
        .collect()
}

/// A page of `ids` (newest first) after `after` or before `before`, at most
/// `limit` long; `None` when the cursor names nothing in the list.
pub(super) fn page<'a>(
    ids: &[&'a str],
    after: Option<&str>,
    before: Option<&str>,
    limit: usize,
) -> Option<(Vec<&'a str>, bool)> {
    let position = |cursor: &str| ids.iter().position(|id| *id == cursor);
    let (start, end) = match (after, before) {
        (Some(after), _) => (position(after)? + 1, ids.len()),
        (None, Some(before)) => {
            let end = position(before)?;
            (end.saturating_sub(limit), end)
        }
        (None, None) => (0, ids.len()),
    };
    let taken: Vec<&str> = ids[start..end].iter().take(limit).copied().collect();
    let has_more = match before {
        Some(_) if after.is_none() => start > 0,
        _ => start + taken.len() < end,
    };
    Some((taken, has_more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn expired_case(fraction: f64, ids: &[&str], listed: &[&str], expected: &[bool]) {
        let options = BatchOptions {
            expire_fraction: fraction,
            expire_ids: listed.iter().map(|id| id.to_string()).collect(),
            ..BatchOptions::default()
        };
        assert_eq!(options.expired(ids), expected);
    }

    #[test]
    fn expiry_takes_the_tail_and_the_listed_ids() {
        expired_case(0.0, &["a", "b"], &[], &[false, false]);
        expired_case(0.5, &["a", "b", "c", "d"], &[], &[false, false, true, true]);
        expired_case(0.5, &["a", "b", "c"], &[], &[false, true, true]);
        expired_case(1.0, &["a"], &[], &[true]);
        expired_case(0.0, &["a", "b", "c"], &["b", "z"], &[false, true, false]);
        expired_case(0.0, &[], &[], &[]);
    }

    #[test]
    fn progress_counts_polls_and_waits() {
        let created = Utc::now();
        let options = BatchOptions {
            polls: 2,
            ..BatchOptions::default()
        };
        let mut progress = Progress::new(created, &options);
        assert!(!progress.due(&options, created));
        assert!(!progress.due(&options, created));
        assert!(progress.due(&options, created));

        let waiting = BatchOptions {
            delay_ms: 60_000,
            ..BatchOptions::default()
        };
        let mut progress = Progress::new(created, &waiting);
        assert!(!progress.due(&waiting, created));
        assert!(progress.due(&waiting, created + chrono::TimeDelta::seconds(60)));
    }

    #[track_caller]
    fn page_case(
        after: Option<&str>,
        before: Option<&str>,
        limit: usize,
        expected: Option<(&[&str], bool)>,
    ) {
        let ids = ["e", "d", "c", "b", "a"];
        let got = page(&ids, after, before, limit);
        assert_eq!(
            got.as_ref().map(|(ids, more)| (ids.as_slice(), *more)),
            expected
        );
    }

    #[test]
    fn pages_follow_cursors() {
        page_case(None, None, 2, Some((&["e", "d"], true)));
        page_case(None, None, 5, Some((&["e", "d", "c", "b", "a"], false)));
        page_case(Some("d"), None, 2, Some((&["c", "b"], true)));
        page_case(Some("b"), None, 2, Some((&["a"], false)));
        page_case(None, Some("b"), 2, Some((&["d", "c"], true)));
        page_case(None, Some("d"), 2, Some((&["e"], false)));
        page_case(Some("zz"), None, 2, None);
    }
}
