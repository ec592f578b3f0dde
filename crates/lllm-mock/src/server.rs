//! `lllm-mock`: an HTTP server on loopback that answers the OpenAI chat
//! completions, OpenAI Responses and Anthropic Messages APIs from a script,
//! with injected faults, latency and a request log. Tests, benchmarks and
//! users point `lllm` at it instead of a real provider. It also emulates the
//! providers' Batch APIs (OpenAI's files and batches, Anthropic's Message
//! Batches), whose requests the same script answers (`batch`), and, with
//! `slots`, a local server of limited capacity (llama-server's `--parallel`
//! and `/props`).
//!
//! The script decides what to answer (`script`), the wire modules say how
//! each API spells it (`wire`); this file does the HTTP: routing, waiting,
//! faults that live below HTTP (resets, cut streams, held requests), the log
//! and a clean shutdown.

use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::wire::{Api, Event, Incoming, Reference, Usage};
use connection::{ConnectionHandle, Listener};
use lllm::mock::script::{
    Fault, Reply, Script, ScriptError, ScriptMessage, ScriptRequest, Served, estimate_tokens,
};
use log::{LogEntry, RequestLog};

pub use batch::BatchOptions;
pub use quota::QuotaOptions;

mod anthropic_batch;
mod batch;
mod connection;
mod headers;
mod log;
mod multipart;
mod openai_batch;
mod quota;
mod slots;

/// How long a stopping server waits for requests still in flight.
const GRACE: Duration = Duration::from_secs(2);

/// How to run a server: its script, address, latency, log and the Batch
/// APIs' behaviour.
///
/// ```
/// let options = lllm_mock::server::ServerOptions {
///     script: "script.yaml".into(),
///     log: Some("requests.jsonl".into()),
///     ..Default::default()
/// };
/// assert_eq!((options.host.as_str(), options.port), ("127.0.0.1", 0));
/// ```
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The mock script (YAML or JSON).
    pub script: PathBuf,
    /// The address to listen on; only loopback unless `allow_remote`.
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// Replaces every latency of the script.
    pub latency_ms: Option<f64>,
    /// Append one JSON line per request here.
    pub log: Option<PathBuf>,
    /// Allow a host that is not loopback.
    pub allow_remote: bool,
    /// How the emulated Batch APIs process a batch: how long it stays in
    /// progress and which requests expire.
    pub batch: BatchOptions,
    /// Requests and tokens per minute for each API key (none by default).
    pub quota: QuotaOptions,
    /// Serve at most this many model requests at once and queue the rest,
    /// first come first served, as llama-server does with `--parallel N`;
    /// `GET /props` says it (`total_slots`). `None`: every request at once,
    /// and no `/props`.
    pub slots: Option<usize>,
    /// With `slots`: `GET /props` is a 404, as on Ollama and vLLM, whose
    /// capacity a client has to find out by itself.
    pub hide_props: bool,
    /// On the Messages API, answer a request that forces a tool with the
    /// scripted text, as llama-server's `/v1/messages` does: it keeps no
    /// forced `tool_choice` for a model whose chat template takes no tools
    /// (read in its `server-chat.cpp`; SmolLM2, issue 27). Anthropic's API
    /// never does.
    pub ignore_tool_choice: bool,
}

impl Default for ServerOptions {
    /// No script path, `127.0.0.1`, a free port, the script's latencies, no
    /// log, batches that end at their first retrieval.
    fn default() -> ServerOptions {
        ServerOptions {
            script: PathBuf::new(),
            host: "127.0.0.1".into(),
            port: 0,
            latency_ms: None,
            log: None,
            allow_remote: false,
            batch: BatchOptions::default(),
            quota: QuotaOptions::default(),
            slots: None,
            hide_props: false,
            ignore_tool_choice: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(
        "refusing to listen on `{host}`: lllm-mock is a test tool; hint: pass --allow-remote to listen beyond loopback"
    )]
    Remote { host: String },
    #[error("cannot listen on `{address}`: {message}")]
    Bind { address: String, message: String },
    #[error("cannot open the request log `{path}`: {message}")]
    Log { path: String, message: String },
    #[error("`--latency-ms` must be a number ≥ 0, not `{0}`")]
    Latency(f64),
    #[error("`--batch-expire` must be a fraction between 0 and 1, not `{0}`")]
    BatchExpire(f64),
    #[error("`{0}` must be at least 1; hint: leave it out for no limit")]
    Quota(&'static str),
    #[error("`--slots` must be a whole number from 1 to {max}, not `{0}`; hint: leave it out to serve every request at once", max = slots::MAX_SLOTS)]
    Slots(usize),
    #[error("the server failed: {0}")]
    Serve(String),
}

pub type Result<T, E = ServerError> = std::result::Result<T, E>;

/// A bound server, not yet serving.
pub struct Server {
    listener: Listener,
    address: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    script: Script,
    log: Option<RequestLog>,
    /// Flips to `true` when the server stops; held requests end then.
    stopping: watch::Sender<bool>,
    /// The emulated Batch APIs' files and batches.
    batches: batch::Batches,
    /// `http://HOST:PORT`, for the URLs a response names (`results_url`).
    url: String,
    /// Each API key's requests and tokens per minute, when limited.
    quotas: Option<quota::Quotas>,
    /// The model requests served at once, when limited.
    slots: Option<slots::Slots>,
    /// `GET /props` answers (with `slots`).
    props: bool,
    /// A forced tool is answered with text (`ServerOptions::ignore_tool_choice`).
    ignore_tool_choice: bool,
}

/// Binds, prints `listening on http://HOST:PORT` (one line, flushed), then
/// serves until SIGINT or SIGTERM.
pub async fn run(options: ServerOptions) -> Result<()> {
    let server = Server::bind(&options).await?;
    // Installed before the address is printed, so a SIGTERM sent as soon as
    // it is read stops the server gracefully.
    let stop = stop_signal();
    {
        let mut stdout = std::io::stdout().lock();
        // Nobody may be reading stdout; the server is useful all the same.
        let _ = writeln!(stdout, "listening on {}", server.url());
        let _ = stdout.flush();
    }
    server.serve(stop).await
}

impl Server {
    /// Loads `options.script` and binds.
    pub async fn bind(options: &ServerOptions) -> Result<Server> {
        Server::bind_with(Script::load(&options.script)?, options).await
    }

    /// Binds with a script already loaded (`options.script` is not read).
    pub async fn bind_with(mut script: Script, options: &ServerOptions) -> Result<Server> {
        let host = match options.host.as_str() {
            "localhost" => "127.0.0.1",
            host => host,
        };
        let loopback = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback());
        if !loopback && !options.allow_remote {
            return Err(ServerError::Remote {
                host: options.host.clone(),
            });
        }
        if let Some(millis) = options.latency_ms {
            if !(millis.is_finite() && millis >= 0.0) {
                return Err(ServerError::Latency(millis));
            }
            script.set_latency_ms(millis);
        }
        options.batch.check()?;
        options.quota.check()?;
        let slots = options.slots.map(slots::Slots::new).transpose()?;
        let log = match &options.log {
            Some(path) => Some(RequestLog::open(path).map_err(|error| ServerError::Log {
                path: path.display().to_string(),
                message: error.to_string(),
            })?),
            None => None,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let bind_error = |error: std::io::Error| ServerError::Bind {
            address: format!("{}:{}", options.host, options.port),
            message: error.to_string(),
        };
        let listener = TcpListener::bind((host, options.port))
            .await
            .map_err(bind_error)?;
        let address = listener.local_addr().map_err(bind_error)?;
        Ok(Server {
            listener: Listener { inner: listener },
            address,
            shared: Arc::new(Shared {
                script,
                log,
                stopping: watch::Sender::new(false),
                batches: batch::Batches::new(options.batch.clone()),
                url: format!("http://{address}"),
                quotas: quota::Quotas::new(options.quota),
                props: slots.is_some() && !options.hide_props,
                slots,
                ignore_tool_choice: options.ignore_tool_choice,
            }),
        })
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://HOST:PORT`, without a path; clients add `/v1`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Serves until `shutdown` completes, then stops accepting, ends held
    /// requests and waits up to two seconds for the others.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let shared = self.shared.clone();
        let mut stopped = shared.stopping.subscribe();
        let stopping = shared.stopping.clone();
        // Only the paths the real APIs have: a client that builds another
        // URL (`/messages` without `/v1`) gets the 404 the real one would.
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/responses", post(responses))
            .route("/v1/messages", post(messages))
            .route("/v1/models", get(models))
            // llama-server's, at the server's root whatever the API paths.
            .route("/props", get(props))
            .merge(openai_batch::routes())
            .merge(anthropic_batch::routes())
            .fallback(unknown_route)
            // Long dialogs make big requests; a test server takes them all.
            .layer(DefaultBodyLimit::disable())
            .with_state(self.shared);
        let serving = axum::serve(
            self.listener,
            app.into_make_service_with_connect_info::<ConnectionHandle>(),
        )
        .with_graceful_shutdown(async move {
            shutdown.await;
            stopping.send_replace(true);
        });
        let grace = async move {
            let _ = stopped.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(GRACE).await;
        };
        let result = tokio::select! {
            result = serving => result.map_err(|error| ServerError::Serve(error.to_string())),
            () = grace => Ok(()),
        };
        if let Some(log) = &shared.log {
            log.flush();
        }
        result
    }
}

/// SIGINT (Ctrl-C) or, on Unix, SIGTERM. The handlers are installed when
/// this is called, not when the future is first polled.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        if let (Ok(mut interrupt), Ok(mut terminate)) = handlers {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(connection): ConnectInfo<ConnectionHandle>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Api::Chat, shared, connection, uri, headers, body).await
}

async fn responses(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(connection): ConnectInfo<ConnectionHandle>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Api::Responses, shared, connection, uri, headers, body).await
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(connection): ConnectInfo<ConnectionHandle>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Api::Anthropic, shared, connection, uri, headers, body).await
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "lllm-mock"}],
    }))
    .into_response()
}

/// llama-server's `GET /props` with `--slots`; otherwise the 404 of a
/// server that has none (Ollama, vLLM). Never logged: clients ask it once a
/// run, and llama-server's own request log leaves it out too.
async fn props(State(shared): State<Arc<Shared>>) -> Response {
    match (&shared.slots, shared.props) {
        (Some(slots), true) => axum::Json(slots.props()).into_response(),
        _ => json_response(
            404,
            Api::Chat.error_body(
                404,
                Some("not_found_error"),
                "lllm-mock: no endpoint `GET /props` (it has one with `--slots N`)",
            ),
        ),
    }
}

async fn unknown_route(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let message = format!(
        "lllm-mock: no endpoint `{method} {}`; it serves POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, GET /v1/models, GET /props (with --slots), the OpenAI Batch API (/v1/files, /v1/batches) and Anthropic Message Batches (/v1/messages/batches)",
        uri.path()
    );
    let mut entry = LogEntry::new(method.as_str(), &uri, &headers, &body, shared.log.is_some());
    entry.status = Some(404);
    shared.record(entry);
    // An Anthropic client gets Anthropic's error shape, others OpenAI's.
    let api = if headers.contains_key("anthropic-version") {
        Api::Anthropic
    } else {
        Api::Chat
    };
    json_response(404, api.error_body(404, Some("not_found_error"), &message))
}

/// What the script answered a request with, and what it read from it.
struct Turn {
    incoming: Incoming,
    served: Served,
}

/// Why a request never reached the script: its status, error code, message.
type Refused = (u16, &'static str, String);

impl Shared {
    fn record(&self, entry: LogEntry) {
        if let Some(log) = &self.log {
            log.write(entry);
        }
    }

    /// The checks the real API makes, then the script's answer: the one path
    /// every model request takes, on its own or inside a batch.
    fn take_turn(&self, api: Api, headers: &HeaderMap, body: &Value) -> Result<Turn, Refused> {
        let incoming = checked(api, headers, body)?;
        Ok(self.script_turn(incoming))
    }

    /// The script's answer to a request that passed the checks.
    fn script_turn(&self, incoming: Incoming) -> Turn {
        let served = self.script.next(&ScriptRequest {
            model: &incoming.model,
            last_text: &incoming.last_text,
            last_role: &incoming.last_role,
            message_count: incoming.message_count,
        });
        Turn { incoming, served }
    }
}

/// The checks the real API makes before it looks at a request's content.
fn checked(api: Api, headers: &HeaderMap, body: &Value) -> Result<Incoming, Refused> {
    if !body.is_object() {
        return Err((
            400,
            "invalid_json",
            "lllm-mock: the request body is not a JSON object".into(),
        ));
    }
    if let Some(refused) = refusal(api, headers, body) {
        return Err(refused);
    }
    Ok(api.read(body))
}

/// What to do once the script has answered.
enum Outcome {
    Respond {
        response: Response,
        status: u16,
    },
    /// Never answer (the `timeout` fault).
    Hold,
    /// Close the connection without a response.
    Reset,
}

async fn answer(
    api: Api,
    shared: Arc<Shared>,
    connection: ConnectionHandle,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut entry = LogEntry::new("POST", &uri, &headers, &body, shared.log.is_some());
    let mut incoming = match checked(api, &headers, &entry.body) {
        Ok(incoming) => incoming,
        Err((status, code, message)) => {
            entry.status = Some(status);
            shared.record(entry);
            return json_response(status, api.error_body(status, Some(code), &message));
        }
    };
    if shared.ignore_tool_choice {
        incoming.forced_tool = None;
    }
    // The quota counts a request before the model runs; a refused one
    // never reaches the script.
    let quota_headers = match &shared.quotas {
        Some(quotas) => {
            let key = log::fingerprint(&headers);
            let cost = quota::Cost::of(&incoming, &entry.body);
            match quotas.admit(key.as_str().unwrap_or_default(), api, cost) {
                Ok(headers) => headers,
                Err(exceeded) => {
                    entry.status = Some(429);
                    entry.model = Some(incoming.model);
                    entry.extra.push(("quota", json!("exceeded")));
                    shared.record(entry);
                    return quota_exceeded(api, exceeded);
                }
            }
        }
        None => lllm::mock::script::ReplyHeaders::default(),
    };
    // A slot first, as llama-server defers a task until one frees: the
    // script answers in the order requests are served, and its latency is
    // the time a slot is held.
    let slot = match &shared.slots {
        Some(slots) => {
            let (slot, admission) = slots.take().await;
            entry.extra.push(("queued", json!(admission.queued)));
            entry.extra.push(("busy", json!(admission.busy)));
            Some(slot)
        }
        None => None,
    };
    let Turn { incoming, served } = shared.script_turn(incoming);
    if !served.delay.is_zero() {
        tokio::time::sleep(served.delay).await;
    }
    let reference = Reference {
        index: served.index,
        model: if incoming.model.is_empty() {
            "mock"
        } else {
            &incoming.model
        },
        created: entry.received.timestamp(),
    };
    entry.index = Some(served.index);
    entry.stream = incoming.stream;
    entry.model = Some(incoming.model.clone());
    let mut outcome = match &served.reply {
        Reply::Message(message) => {
            let message = &*api.shape(message, &incoming, served.index);
            let usage = usage_of(message, &incoming);
            let response = if incoming.stream {
                let events = api.events(reference, message, usage, incoming.include_usage);
                event_stream(rendered(&events), api)
            } else {
                json_response(200, api.body(reference, message, usage))
            };
            Outcome::Respond {
                response,
                status: 200,
            }
        }
        Reply::Fault(fault) => {
            entry.fault = Some(fault_name(fault));
            fault_outcome(api, fault, reference, &incoming)
        }
        Reply::Exhausted { served } => {
            let message = format!("lllm-mock: script exhausted after {served} replies");
            Outcome::Respond {
                response: json_response(
                    400,
                    api.error_body(400, Some("script_exhausted"), &message),
                ),
                status: 400,
            }
        }
    };
    if let Outcome::Respond { status, response } = &mut outcome {
        entry.status = Some(*status);
        headers::add(
            response.headers_mut(),
            api,
            &quota_headers,
            chrono::Utc::now(),
        );
        headers::add(
            response.headers_mut(),
            api,
            &served.headers,
            chrono::Utc::now(),
        );
    }
    shared.record(entry);
    // A held request keeps its slot until the client gives up, as a hung
    // generation keeps llama-server's.
    let _slot = slot;
    match outcome {
        Outcome::Respond { response, .. } => response,
        Outcome::Hold => {
            // Until the client gives up (hyper then drops this future) or
            // the server stops.
            let _ = shared
                .stopping
                .subscribe()
                .wait_for(|stopping| *stopping)
                .await;
            connection.reset();
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        Outcome::Reset => {
            connection.reset();
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

/// What the real API refuses before it looks at the script: Anthropic
/// without `anthropic-version` or a credential (`x-api-key` or a bearer
/// token), a Responses input item that llama-server cannot place, an image
/// part the API does not take (`Api::check`).
fn refusal(api: Api, headers: &HeaderMap, body: &Value) -> Option<(u16, &'static str, String)> {
    match api {
        Api::Anthropic if !headers.contains_key("anthropic-version") => Some((
            400,
            "invalid_request_error",
            "anthropic-version: header is required".into(),
        )),
        Api::Anthropic
            if !headers.contains_key("x-api-key")
                && !headers.contains_key(header::AUTHORIZATION) =>
        {
            Some((
                401,
                "authentication_error",
                "x-api-key header is required".into(),
            ))
        }
        api => api
            .check(body)
            .err()
            .map(|message| (400, "invalid_request_error", message)),
    }
}

/// A 429 in the provider's shape (OpenAI's `type` names the window that
/// refused: `requests` or `tokens`), with its `retry-after` headers and the
/// windows as they stand.
fn quota_exceeded(api: Api, exceeded: quota::Exceeded) -> Response {
    let body = match api {
        Api::Chat | Api::Responses => {
            let window = if exceeded.message.contains("(RPM)") {
                "requests"
            } else {
                "tokens"
            };
            json!({"error": {"message": exceeded.message, "type": window, "param": null, "code": "rate_limit_exceeded"}})
        }
        Api::Anthropic => api.error_body(429, Some("rate_limit_error"), &exceeded.message),
    };
    let mut response = json_response(429, body);
    headers::add(
        response.headers_mut(),
        api,
        &exceeded.headers,
        chrono::Utc::now(),
    );
    if let Some(wait) = exceeded.wait {
        let headers = response.headers_mut();
        // Whole seconds, rounded up, as HTTP allows; the SDKs read the
        // millisecond header first where OpenAI sends it.
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        if api != Api::Anthropic {
            let millis = wait.as_nanos().div_ceil(1_000_000).max(1);
            headers.insert("retry-after-ms", HeaderValue::from(millis as u64));
        }
    }
    response
}

fn fault_name(fault: &Fault) -> &'static str {
    match fault {
        Fault::Http { .. } => "http",
        Fault::Timeout => "timeout",
        Fault::Malformed => "malformed",
        Fault::Reset => "reset",
        Fault::CutStream => "cut_stream",
    }
}

/// The script's usage, else an estimate at four characters a token.
fn usage_of(message: &ScriptMessage, incoming: &Incoming) -> Usage {
    match message.usage {
        Some(usage) => Usage {
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
        },
        None => {
            let calls: usize = message
                .tool_calls
                .iter()
                .map(|call| call.name.len() + call.arguments.len())
                .sum();
            Usage {
                input: estimate_tokens(incoming.prompt_chars),
                output: estimate_tokens(message.text.as_deref().map_or(0, str::len) + calls),
            }
        }
    }
}

fn fault_outcome(
    api: Api,
    fault: &Fault,
    reference: Reference<'_>,
    incoming: &Incoming,
) -> Outcome {
    match fault {
        Fault::Http {
            status,
            retry_after_s,
            retry_after_ms,
            code,
            message,
        } => {
            let text = message
                .clone()
                .unwrap_or_else(|| format!("lllm-mock: scripted fault {status}"));
            let mut response =
                json_response(*status, api.error_body(*status, code.as_deref(), &text));
            let headers = response.headers_mut();
            if let Some(value) =
                retry_after_s.and_then(|seconds| HeaderValue::from_str(&seconds.to_string()).ok())
            {
                headers.insert(header::RETRY_AFTER, value);
            }
            if let Some(millis) = retry_after_ms {
                headers.insert("retry-after-ms", HeaderValue::from(*millis));
            }
            Outcome::Respond {
                response,
                status: *status,
            }
        }
        Fault::Timeout => Outcome::Hold,
        Fault::Reset => Outcome::Reset,
        Fault::Malformed => {
            let response = if incoming.stream {
                event_stream(vec!["data: {not json\n\n".to_string()], api)
            } else {
                raw_response(200, "application/json", Body::from("{not json"))
            };
            Outcome::Respond {
                response,
                status: 200,
            }
        }
        Fault::CutStream => {
            let message = ScriptMessage {
                text: Some("this reply is cut off before its end".into()),
                tool_calls: Vec::new(),
                usage: None,
                finish_reason: None,
            };
            let usage = usage_of(&message, incoming);
            let (content_type, mut parts) = if incoming.stream {
                let events = api.events(reference, &message, usage, incoming.include_usage);
                let half = events.len() / 2;
                let parts: Vec<String> = events[..half].iter().map(Event::render).collect();
                ("text/event-stream", parts)
            } else {
                let whole = api.body(reference, &message, usage).to_string();
                let half = whole.len() / 2;
                ("application/json", vec![whole[..half].to_string()])
            };
            parts.retain(|part| !part.is_empty());
            Outcome::Respond {
                response: raw_response(200, content_type, broken_body(parts)),
                status: 200,
            }
        }
    }
}

fn raw_response(status: u16, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: u16, body: Value) -> Response {
    raw_response(status, "application/json", Body::from(body.to_string()))
}

/// Each event as its `event:` / `data:` lines.
fn rendered(events: &[Event]) -> Vec<String> {
    events.iter().map(Event::render).collect()
}

/// SSE, each part its own chunk as a real provider sends them, then the
/// API's end-of-stream line.
fn event_stream(mut parts: Vec<String>, api: Api) -> Response {
    parts.extend(api.done().map(String::from));
    let chunks = futures_util::stream::iter(
        parts
            .into_iter()
            .map(|part| Ok::<_, std::io::Error>(Bytes::from(part))),
    );
    let mut response = raw_response(200, "text/event-stream", Body::from_stream(chunks));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A body that sends `parts`, then fails: hyper closes the connection
/// mid-body, so the client sees a truncated reply.
fn broken_body(parts: Vec<String>) -> Body {
    let sent = futures_util::stream::iter(parts.into_iter().map(|part| Ok(Bytes::from(part))));
    let failure = futures_util::stream::once(async {
        // Let the parts reach the client before the connection drops.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "lllm-mock: scripted cut_stream",
        ))
    });
    Body::from_stream(sent.chain(failure))
}
