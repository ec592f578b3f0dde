//! The client of a served tactic ([`RemoteTactic`]): its contract (`info`),
//! a run (`run`) and a run's events (`events`), over HTTP, against `lllm
//! serve` or upstream lllm-core's `lllm serve` alike.
//!
//! What comes back is untrusted: bodies are read up to a cap, every field
//! taken from an answer is checked (ids are tokens, numbers finite and not
//! negative), and an error answer becomes one line of the server's own
//! words, cut short. The token goes only to the URL's origin: no redirect is
//! followed, and no error, record or log line shows it. Recording an
//! exchange and serving it again in a re-run is `exchange`'s.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use serde_json::{Map, Value, json};

use super::TacticInfo;
pub use super::answer::{RemoteAnswer, RemoteError};
use super::answer::{read_answer, status_error};
use super::sse::{self, Parser, Said};
use super::url::Routes;
use crate::event::{Event, EventKind};
use crate::tactic::Task;

/// How long a call waits for its answer by default (a stream: for its next
/// bytes), in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 300;

/// The largest answer read by default (`info`, `run`, an error), in bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A tactic served over HTTP, by `lllm serve` or by upstream lllm-core's.
///
/// Made from the URL of the tactic: a server base (`http://host:8000`,
/// which serves one tactic), `http://host:8000/tactics/NAME`, or either
/// with `/run`, `/stream` or `/info` after it. Cheap to clone; clones share
/// one connection pool.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::remote::RemoteTactic;
///
/// let triage = RemoteTactic::new("http://127.0.0.1:8000/tactics/triage")?
///     .token(std::env::var("LLLM_SERVE_TOKEN")?);
/// println!("{}", triage.info().await?.description);
/// let answer = triage.run(serde_json::json!({"ticket": "The app crashes"})).await?;
/// println!("{} (request {})", answer.output, answer.request_id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RemoteTactic {
    routes: Arc<Routes>,
    token: Option<Arc<HeaderValue>>,
    timeout: Duration,
    max_body: usize,
    client: reqwest::Client,
    /// `lllm run --dry-run`: a run is not sent (its contract is read).
    pub(crate) dry_run: bool,
}

/// Shows the URL, never the token.
impl std::fmt::Debug for RemoteTactic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTactic")
            .field("url", &self.routes.service)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RemoteTactic {
    /// The served tactic at `url` (see the type's forms); an error says what
    /// is wrong with the URL: not `http(s)`, credentials, a query or a
    /// fragment in it, or a path with empty, `.` or `..` segments.
    pub fn new(url: &str) -> Result<RemoteTactic, RemoteError> {
        let routes = Routes::parse(url).map_err(|reason| RemoteError::Url {
            url: crate::redact::echo(&crate::redact::place(url)).into_owned(),
            reason,
        })?;
        let client = crate::provider::http::client(Duration::from_secs(30)).map_err(|message| {
            RemoteError::Unreachable {
                url: routes.service.clone(),
                message,
            }
        })?;
        Ok(RemoteTactic {
            routes: Arc::new(routes),
            token: None,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_S),
            max_body: DEFAULT_MAX_BODY_BYTES,
            client,
            dry_run: false,
        })
    }

    /// Sends `token` as `Authorization: Bearer TOKEN` (to this URL's origin
    /// only). A token that cannot be a header value (a line break in it) is
    /// not sent, and every call then fails saying so.
    pub fn token(mut self, token: impl AsRef<str>) -> RemoteTactic {
        let header = HeaderValue::from_str(&format!("Bearer {}", token.as_ref().trim()))
            .map(|mut value| {
                value.set_sensitive(true);
                value
            })
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        self.token = Some(Arc::new(header));
        self
    }

    /// How long a call waits for its answer (a stream: for its next bytes);
    /// at least a millisecond. Default [`DEFAULT_TIMEOUT_S`].
    pub fn timeout(mut self, timeout: Duration) -> RemoteTactic {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The largest answer read, in bytes (at least 1 KiB). Default
    /// [`DEFAULT_MAX_BODY_BYTES`].
    pub fn max_body_bytes(mut self, bytes: usize) -> RemoteTactic {
        self.max_body = bytes.max(1024);
        self
    }

    /// The URL, normalised: without a route at the end.
    pub fn url(&self) -> &str {
        &self.routes.service
    }

    /// The tactic's name when the URL says it (`…/tactics/NAME`).
    pub fn name(&self) -> Option<&str> {
        self.routes.name.as_deref()
    }

    /// The tactic's contract, from its `/info`.
    pub async fn info(&self) -> Result<TacticInfo, RemoteError> {
        self.info_with_body().await.map(|(info, _)| info)
    }

    /// `info`, with the answer as it came (what a record keeps).
    pub(crate) async fn info_with_body(&self) -> Result<(TacticInfo, Value), RemoteError> {
        let url = self.routes.route("info");
        let request = self.client.get(&url).header(ACCEPT, "application/json");
        let body = self.answer(&url, request).await?;
        let info = serde_json::from_value(body.clone()).map_err(|error| RemoteError::Invalid {
            url,
            message: format!("its `info` is not a tactic's contract: {error}"),
        })?;
        Ok((info, body))
    }

    /// The same tactic with a connection pool of its own (for a call made
    /// on another runtime).
    pub(crate) fn fresh(&self) -> Result<RemoteTactic, RemoteError> {
        let client = crate::provider::http::client(Duration::from_secs(30)).map_err(|message| {
            RemoteError::Unreachable {
                url: self.routes.service.clone(),
                message,
            }
        })?;
        Ok(RemoteTactic {
            client,
            ..self.clone()
        })
    }

    /// Runs `task` (a text, a JSON value, or a [`Task`] whose `args` are the
    /// input) on the served tactic and waits for its answer.
    pub async fn run(&self, task: impl Into<Task>) -> Result<RemoteAnswer, RemoteError> {
        self.run_envelope(&envelope(&task.into(), &new_request_id()))
            .await
    }

    /// `run` with the envelope as it is sent (`{"input", "context"}`).
    pub(crate) async fn run_envelope(&self, envelope: &Value) -> Result<RemoteAnswer, RemoteError> {
        let url = self.routes.route("run");
        let request = self
            .client
            .post(&url)
            .headers(trace_headers())
            .header(ACCEPT, "application/json")
            .json(envelope);
        let body = self.answer(&url, request).await?;
        let sent_id = envelope["context"]["request_id"]
            .as_str()
            .unwrap_or_default();
        read_answer(&url, body, sent_id)
    }

    /// Runs `task` and reads its events as they come, from its `/stream`.
    /// The stream ends after the run's `result` (or, from upstream's server,
    /// which sends no closing event, when the body ends); a failure is an
    /// `Err` item (D18), as is a stream of `lllm serve` that ends without its
    /// closing event.
    pub async fn events(&self, task: impl Into<Task>) -> Result<RemoteEvents, RemoteError> {
        let url = self.routes.route("stream");
        let request = self
            .client
            .post(&url)
            .headers(trace_headers())
            .header(ACCEPT, "text/event-stream")
            .json(&envelope(&task.into(), &new_request_id()));
        let response = self.send(&url, request).await?;
        let idle = self.timeout;
        let state = StreamState {
            url,
            body: response.bytes_stream().boxed(),
            parser: Parser::default(),
            pending: std::collections::VecDeque::new(),
            finished: false,
            idle,
        };
        Ok(RemoteEvents {
            inner: futures_util::stream::unfold(state, next_event).boxed(),
        })
    }

    /// Sends `request` with the token and waits for its status: a success,
    /// or the error the answer says (a redirect is one: not followed).
    async fn send(
        &self,
        url: &str,
        mut request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, RemoteError> {
        if let Some(token) = &self.token {
            if token.as_bytes() == b"invalid" {
                return Err(RemoteError::Url {
                    url: url.to_string(),
                    reason:
                        "the token cannot be sent: it holds a line break or a control character"
                            .into(),
                });
            }
            request = request.header(AUTHORIZATION, token.as_ref().clone());
        }
        let response = tokio::time::timeout(self.timeout, request.send())
            .await
            .map_err(|_| RemoteError::Unreachable {
                url: url.to_string(),
                message: format!("no answer within {} s", self.timeout.as_secs_f64()),
            })?
            .map_err(|error| RemoteError::Unreachable {
                url: url.to_string(),
                message: network_text(error),
            })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        if (300..400).contains(&status) {
            let place = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(|location| {
                    format!(
                        " to `{}`",
                        crate::redact::echo(&crate::redact::place(location))
                    )
                })
                .unwrap_or_default();
            return Err(RemoteError::Status {
                url: url.to_string(),
                status,
                kind: None,
                message: format!(
                    "redirected{place}; redirects are not followed (give the URL it names)"
                ),
                request_id: None,
            });
        }
        let body = self.body(url, response).await.unwrap_or_default();
        Err(status_error(url, status, &body))
    }

    /// The JSON answer of `request`.
    async fn answer(
        &self,
        url: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, RemoteError> {
        let response = self.send(url, request).await?;
        let body = self.body(url, response).await?;
        serde_json::from_slice(&body).map_err(|error| RemoteError::Invalid {
            url: url.to_string(),
            message: format!("not JSON: {error}"),
        })
    }

    /// A body, read up to the cap within the timeout.
    async fn body(&self, url: &str, response: reqwest::Response) -> Result<Vec<u8>, RemoteError> {
        let max = self.max_body;
        let read = async {
            let mut body = Vec::new();
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|error| RemoteError::Unreachable {
                    url: url.to_string(),
                    message: network_text(error),
                })?;
                if body.len() + chunk.len() > max {
                    return Err(RemoteError::Invalid {
                        url: url.to_string(),
                        message: format!("the answer is larger than {max} bytes"),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| RemoteError::Unreachable {
                url: url.to_string(),
                message: format!("no whole answer within {} s", self.timeout.as_secs_f64()),
            })?
    }
}

/// A network failure in words, without the URL (the error names it once).
fn network_text(error: reqwest::Error) -> String {
    if error.is_connect() {
        return "no connection (is the server running, and is the port right?)".into();
    }
    if error.is_timeout() {
        return "no answer in time".into();
    }
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// A fresh request id: a UUID (a token upstream's `CallContext` takes).
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Upstream's request envelope for `task`: `{"input": …, "context":
/// {"request_id", "tags", "metadata"}}` (an envelope, so an input with a
/// `task` field travels as it is, D19). Tags travel as text: upstream's
/// `CallContext` takes string tags only.
pub(crate) fn envelope(task: &Task, request_id: &str) -> Value {
    let tags: Map<String, Value> = task
        .tags
        .iter()
        .map(|(key, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (key.clone(), Value::String(text))
        })
        .collect();
    json!({
        "input": super::task_input(task),
        "context": {"request_id": request_id, "tags": tags, "metadata": task.metadata},
    })
}

/// The events of a served run, as they come: see [`RemoteTactic::events`].
pub struct RemoteEvents {
    inner: BoxStream<'static, Result<Event, RemoteError>>,
}

impl std::fmt::Debug for RemoteEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteEvents")
    }
}

impl Stream for RemoteEvents {
    type Item = Result<Event, RemoteError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

struct StreamState {
    url: String,
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: Parser,
    pending: std::collections::VecDeque<sse::Frame>,
    finished: bool,
    idle: Duration,
}

/// The stream's next item: a pending frame's event, else more of the body.
async fn next_event(mut state: StreamState) -> Option<(Result<Event, RemoteError>, StreamState)> {
    loop {
        if state.finished {
            return None;
        }
        if let Some(frame) = state.pending.pop_front() {
            match sse::said(&frame) {
                Said::Event(event) => {
                    if matches!(event.kind, EventKind::Result { .. }) {
                        // The closing event: nothing after it is read.
                        state.finished = true;
                    }
                    return Some((Ok(*event), state));
                }
                Said::Failed(message) => {
                    state.finished = true;
                    let url = state.url.clone();
                    return Some((Err(RemoteError::Failed { url, message }), state));
                }
            }
        }
        let next = tokio::time::timeout(state.idle, state.body.next()).await;
        let failure = |state: &mut StreamState, message: String| {
            state.finished = true;
            RemoteError::Unreachable {
                url: state.url.clone(),
                message,
            }
        };
        match next {
            Err(_) => {
                let message = format!("no event within {} s", state.idle.as_secs_f64());
                let error = failure(&mut state, message);
                return Some((Err(error), state));
            }
            Ok(Some(Err(error))) => {
                let message = network_text(error);
                let error = failure(&mut state, message);
                return Some((Err(error), state));
            }
            Ok(Some(Ok(chunk))) => match state.parser.push(&chunk) {
                Ok(frames) => state.pending.extend(frames),
                Err(message) => {
                    state.finished = true;
                    let url = state.url.clone();
                    return Some((Err(RemoteError::Invalid { url, message }), state));
                }
            },
            Ok(None) => {
                // The body ended: its last frame, if any, then the end; a
                // stream that promised a closing event and sent none was cut.
                match state.parser.finish() {
                    Ok(Some(frame)) => state.pending.push_back(frame),
                    Ok(None) => {}
                    Err(message) => {
                        state.finished = true;
                        let url = state.url.clone();
                        return Some((Err(RemoteError::Invalid { url, message }), state));
                    }
                }
                if state.pending.is_empty() {
                    state.finished = true;
                    if state.parser.named {
                        let url = state.url.clone();
                        return Some((Err(RemoteError::Dropped { url }), state));
                    }
                    return None;
                }
                // Mark the body done: the pending frames go first.
                state.body = futures_util::stream::empty().boxed();
            }
        }
    }
}

/// The running tactic's `traceparent`, when it has a trace: the served
/// tactic's run continues it.
fn trace_headers() -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(context) = crate::trace_context::current_run()
        && let Ok(value) = reqwest::header::HeaderValue::from_str(&context.to_string())
    {
        headers.insert(crate::trace_context::TRACEPARENT, value);
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback that answers each connection with the next of
    /// `answers` (a whole HTTP response) and hands over what it was sent.
    async fn canned(
        answers: Vec<String>,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("{error}"));
        let (sent, received) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for answer in answers {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                // Headers, then as many body bytes as they announce.
                loop {
                    let Ok(read) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if read == 0 {
                        break;
                    }
                    request.extend_from_slice(&buffer[..read]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|line| {
                                line.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let _ = sent.send(String::from_utf8_lossy(&request).to_string());
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (format!("http://{address}"), received)
    }

    fn answer(status: &str, content_type: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn stream(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}"
        )
    }

    #[tokio::test]
    async fn run_sends_the_envelope_and_the_token_and_reads_the_answer() {
        let body = r#"{"output": {"category": "bug"}, "request_id": "r-1", "tactic": "triage", "session_id": "s-9", "cost": 0.5, "latency_ms": 12, "state": "success"}"#;
        let (base, mut requests) = canned(vec![answer("200 OK", "application/json", body)]).await;
        let remote = RemoteTactic::new(&format!("{base}/tactics/triage/stream"))
            .unwrap_or_else(|error| panic!("{error}"))
            .token("s3cret");
        let task = Task::from(json!({"ticket": "crash", "task": "a field named task"}));
        let answer = remote
            .run(task)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(answer.output, json!({"category": "bug"}));
        assert_eq!(
            (answer.request_id.as_str(), answer.session_id.as_deref()),
            ("r-1", Some("s-9"))
        );
        assert_eq!((answer.cost, answer.latency_ms), (Some(0.5), Some(12)));
        assert_eq!(answer.delivery(), r#"{"category":"bug"}"#);
        let request = requests.recv().await.unwrap_or_default();
        assert!(
            request.starts_with("POST /tactics/triage/run HTTP/1.1"),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("authorization: bearer s3cret"),
            "{request}"
        );
        let body: Value =
            serde_json::from_str(&request[request.find("\r\n\r\n").unwrap_or(0) + 4..])
                .unwrap_or_default();
        // An input with a `task` field travels as it is (D19).
        assert_eq!(
            body["input"],
            json!({"ticket": "crash", "task": "a field named task"})
        );
        assert!(
            body["context"]["request_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty())
        );
        assert!(!format!("{remote:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn error_answers_become_one_error_in_the_servers_words() {
        let ours = r#"{"error": {"type": "SchemaError", "message": "input at /ticket: expected string", "tactic": "t", "endpoint": "run", "request_id": "q1"}}"#;
        let fastapi = r#"{"detail": {"error": {"type": "TacticNotFound", "message": "Tactic not found: x", "tactic": "x"}}}"#;
        let (base, _requests) = canned(vec![
            answer("400 Bad Request", "application/json", ours),
            answer("404 Not Found", "application/json", fastapi),
            answer("500 Internal Server Error", "text/plain", "boom\n"),
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://elsewhere.example/run\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
            answer("200 OK", "application/json", r#"{"output": 1, "request_id": "has space"}"#),
            answer("200 OK", "application/json", r#"{"output": 1, "cost": -3}"#),
            answer("200 OK", "application/json", r#"{"output": null, "state": "failure", "error": "step `a`: no"}"#),
        ])
        .await;
        let remote = RemoteTactic::new(&base).unwrap_or_else(|error| panic!("{error}"));
        let errors: Vec<String> = {
            let mut errors = Vec::new();
            for _ in 0..7 {
                errors.push(
                    remote
                        .run("x")
                        .await
                        .map(|answer| format!("{answer:?}"))
                        .unwrap_or_else(|error| error.to_string()),
                );
            }
            errors
        };
        assert_eq!(
            errors[0],
            format!(
                "`{base}/run` answered HTTP 400 (SchemaError): input at /ticket: expected string"
            )
        );
        assert_eq!(
            errors[1],
            format!("`{base}/run` answered HTTP 404 (TacticNotFound): Tactic not found: x")
        );
        assert_eq!(errors[2], format!("`{base}/run` answered HTTP 500: boom"));
        assert!(
            errors[3].contains(
                "redirected to `http://elsewhere.example/run`; redirects are not followed"
            ),
            "{}",
            errors[3]
        );
        assert!(
            errors[4].contains("its `request_id` is not an id"),
            "{}",
            errors[4]
        );
        assert!(
            errors[5].contains("its `cost` is not a price"),
            "{}",
            errors[5]
        );
        assert_eq!(
            errors[6],
            format!("the tactic at `{base}/run` failed: step `a`: no")
        );
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_refused_and_a_dead_port_is_unreachable() {
        let big = format!(r#"{{"output": "{}"}}"#, "x".repeat(4096));
        let (base, _requests) = canned(vec![answer("200 OK", "application/json", &big)]).await;
        let remote = RemoteTactic::new(&base)
            .unwrap_or_else(|error| panic!("{error}"))
            .max_body_bytes(1024);
        let error = remote
            .run("x")
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("larger than 1024 bytes"), "{error}");
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap_or_else(|error| panic!("{error}"));
            listener
                .local_addr()
                .map(|address| address.port())
                .unwrap_or(9)
        };
        let remote = RemoteTactic::new(&format!("http://127.0.0.1:{closed}"))
            .unwrap_or_else(|error| panic!("{error}"));
        let error = remote.info().await.err();
        assert!(
            matches!(error, Some(RemoteError::Unreachable { .. })),
            "{error:?}"
        );
    }

    fn our_event(kind: EventKind) -> String {
        let event = Event::new(kind);
        format!(
            "event: {}\nid: {}\ndata: {}\n\n",
            event.kind.name(),
            event.id,
            serde_json::to_string(&event).unwrap_or_default()
        )
    }

    async fn collect(events: RemoteEvents) -> Vec<Result<String, String>> {
        events
            .map(|item| {
                item.map(|event| event.kind.name().to_string())
                    .map_err(|error| error.to_string())
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn our_streams_end_at_their_closing_event_and_a_cut_one_is_an_error() {
        let delta = our_event(EventKind::TextDelta {
            agent: "a".into(),
            dialog: "main".into(),
            text: "hi".into(),
        });
        let result = our_event(EventKind::Result {
            delivery: "hi".into(),
            state: "success".into(),
            session_id: "s".into(),
            cost: None,
            usage: crate::dialog::InvokeCost::default(),
        });
        let error = our_event(EventKind::Error {
            message: "step `a`: boom".into(),
            state: "failure".into(),
            session_id: "s".into(),
            cost: None,
            usage: crate::dialog::InvokeCost::default(),
        });
        let (base, _requests) = canned(vec![
            stream(&format!("{delta}{result}")),
            stream(&format!("{delta}{error}")),
            stream(&delta),
        ])
        .await;
        let remote = RemoteTactic::new(&base).unwrap_or_else(|error| panic!("{error}"));
        let whole = collect(
            remote
                .events("x")
                .await
                .unwrap_or_else(|error| panic!("{error}")),
        )
        .await;
        assert_eq!(
            whole,
            vec![Ok("text_delta".to_string()), Ok("result".to_string())]
        );
        let failed = collect(
            remote
                .events("x")
                .await
                .unwrap_or_else(|error| panic!("{error}")),
        )
        .await;
        assert_eq!(
            failed,
            vec![
                Ok("text_delta".to_string()),
                Err(format!(
                    "the tactic at `{base}/stream` failed: step `a`: boom"
                ))
            ]
        );
        let cut = collect(
            remote
                .events("x")
                .await
                .unwrap_or_else(|error| panic!("{error}")),
        )
        .await;
        assert_eq!(
            cut,
            vec![
                Ok("text_delta".to_string()),
                Err(format!(
                    "`{base}/stream`: the connection dropped before the run's closing event"
                ))
            ]
        );
    }

    #[tokio::test]
    async fn upstream_streams_end_with_their_body_and_their_error_event_is_an_error() {
        let message = r#"data: {"id": "u1", "timestamp": 1.0, "kind": "message", "data": "part", "metadata": {}}"#;
        let error = r#"data: {"id": "u2", "timestamp": 2.0, "kind": "error", "data": {"message": "ValueError: bad"}, "metadata": {}}"#;
        let (base, _requests) = canned(vec![
            stream(&format!("{message}\n\n{message}\n\n")),
            stream(&format!("{message}\n\n{error}\n\n{message}\n\n")),
            answer(
                "400 Bad Request",
                "application/json",
                r#"{"error": {"type": "SchemaError", "message": "bad input"}}"#,
            ),
        ])
        .await;
        let remote =
            RemoteTactic::new(&format!("{base}/run")).unwrap_or_else(|error| panic!("{error}"));
        let whole = collect(
            remote
                .events("x")
                .await
                .unwrap_or_else(|error| panic!("{error}")),
        )
        .await;
        assert_eq!(
            whole,
            vec![Ok("remote".to_string()), Ok("remote".to_string())]
        );
        let failed = collect(
            remote
                .events("x")
                .await
                .unwrap_or_else(|error| panic!("{error}")),
        )
        .await;
        assert_eq!(
            failed,
            vec![
                Ok("remote".to_string()),
                Err(format!(
                    "the tactic at `{base}/stream` failed: ValueError: bad"
                ))
            ]
        );
        let refused = remote
            .events("x")
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert_eq!(
            refused,
            format!("`{base}/stream` answered HTTP 400 (SchemaError): bad input")
        );
    }

    #[test]
    fn a_url_with_credentials_is_refused_without_showing_them() {
        let error = RemoteTactic::new("http://me:hunter2@h:1/run")
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("credentials"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
