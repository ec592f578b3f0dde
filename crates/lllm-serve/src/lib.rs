//! `lllm serve`'s server: loaded tactics behind HTTP (docs/serve.md).
//!
//! Upstream lllm-core 0.2's service routes (`/health`, `/tactics`,
//! `/tactics/{name}/info|run|stream`, and `/info|run|stream` when one tactic
//! is served), wire-compatible with its `RemoteTactic`, and an
//! OpenAI-compatible face (`/v1/chat/completions`, `/v1/models`) where a
//! tactic is a model. Every served call is a session of its own: its record
//! is written and indexed in the session store, the response cache and the
//! provider limits are those of the one loaded [`Tactic`] every caller
//! shares, and a caller who goes away cancels the run (recorded as
//! cancelled). Trust (D20): a bearer token, a body size limit, a per-request
//! deadline, a concurrency limit answered with 429 and `Retry-After`, one
//! error shape (`error`), and a drain of the runs in flight on shutdown.
//!
//! This crate owns HTTP; loading the tactics, the user's settings and the
//! command line are `lllm-cli`'s (`lllm serve`), running them the library's.
//! The library itself stays free of axum.

mod auth;
mod body;
mod call;
mod error;
mod metrics;
mod openai;
mod records;
mod routes;
mod session;

// What a JSON value is, for errors (`a string`, `an array`, …).
use lllm::words::json_kind as kind;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lllm::Tactic;
use serde_json::{Map, Value};

pub use error::ApiError;

/// The limits every request is held to (docs/serve.md, "Flags"); each
/// is clamped into its range by [`Limits::clamped`].
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The largest request body, in bytes (413 beyond it).
    pub max_body: usize,
    /// How long one request may take, body and run (504 beyond it; a
    /// stream ends with an `error` event).
    pub timeout: Duration,
    /// How many runs at once, all routes together; one more is answered
    /// 429 with `Retry-After` at once, never queued.
    pub concurrency: usize,
}

impl Limits {
    /// The default body limit: 1 MiB.
    pub const MAX_BODY: usize = 1 << 20;
    /// The default deadline: 5 minutes.
    pub const TIMEOUT: Duration = Duration::from_secs(300);
    /// The default number of runs at once.
    pub const CONCURRENCY: usize = 256;
    /// The range of a body limit: 1 KiB to 64 MiB.
    pub const MAX_BODY_RANGE: (usize, usize) = (1 << 10, 64 << 20);
    /// The range of a deadline: 1 s to 24 h.
    pub const TIMEOUT_RANGE: (Duration, Duration) =
        (Duration::from_secs(1), Duration::from_secs(24 * 3600));
    /// The range of the concurrency limit: 1 to 100,000.
    pub const CONCURRENCY_RANGE: (usize, usize) = (1, 100_000);

    /// These limits, each brought into its range.
    pub fn clamped(self) -> Limits {
        Limits {
            max_body: self
                .max_body
                .clamp(Self::MAX_BODY_RANGE.0, Self::MAX_BODY_RANGE.1),
            timeout: self
                .timeout
                .clamp(Self::TIMEOUT_RANGE.0, Self::TIMEOUT_RANGE.1),
            concurrency: self
                .concurrency
                .clamp(Self::CONCURRENCY_RANGE.0, Self::CONCURRENCY_RANGE.1),
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body: Self::MAX_BODY,
            timeout: Self::TIMEOUT,
            concurrency: Self::CONCURRENCY,
        }
    }
}

/// What a server serves and how.
#[derive(Clone)]
pub struct Options {
    /// The tactics, each loaded once for the server's life; a tactic is
    /// served under its name (`tactic_type`), checked by [`check_names`].
    pub tactics: Vec<Tactic>,
    /// The bearer token every route but `/health` requires, when set.
    pub token: Option<String>,
    /// The request limits.
    pub limits: Limits,
    /// Where each session's record is written (`<session id>.json`);
    /// `None`: no records.
    pub records: Option<PathBuf>,
    /// The session store the records are indexed in; `None`: none.
    pub store: Option<PathBuf>,
    /// The server's spending cap, shared by every call (the same budget
    /// the tactics' providers were loaded with: `LoadOptions::budget`).
    pub budget: Option<Arc<lllm::provider::budget::CostBudget>>,
    /// Tags every session gets (a request's own win).
    pub tags: Map<String, Value>,
    /// Metadata every session gets (a request's own win).
    pub metadata: Map<String, Value>,
    /// Whether `GET /metrics` is answered without the token (it needs
    /// it by default, as every route but `/health` does).
    pub metrics_public: bool,
}

/// Why a tactic name cannot be served: it must be a path segment as
/// upstream's service takes one (not empty, not `.` or `..`, no white
/// space, `%`, `/`, `\`, `:` or `;`).
pub fn segment_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        return Some("it is empty");
    }
    if matches!(name, "." | "..") {
        return Some("`.` and `..` are not names");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it holds white space");
    }
    if name.chars().any(|c| "%/\\:;?#".contains(c)) {
        return Some("it holds one of `%`, `/`, `\\`, `:`, `;`, `?`, `#`");
    }
    None
}

/// Every problem with the names `tactics` would be served under, one a
/// line: two tactics of one name, or a name that is not a path segment
/// (each names the tactic's file).
pub fn check_names(tactics: &[Tactic]) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut seen: Vec<(&str, &std::path::Path)> = Vec::new();
    for tactic in tactics {
        let name = tactic.config.name.as_str();
        let path = tactic.config.path.as_path();
        if let Some(problem) = segment_problem(name) {
            problems.push(format!(
                "{}: tactic name `{}` cannot be served as a route segment: {problem}; hint: \
                 rename its `tactic_type`",
                path.display(),
                lllm::suggest::printable(name)
            ));
        }
        if let Some((_, first)) = seen.iter().find(|(seen, _)| *seen == name) {
            problems.push(format!(
                "{}: tactic name `{}` is served by {} already; hint: give one of them another \
                 `tactic_type`",
                path.display(),
                lllm::suggest::printable(name),
                first.display()
            ));
        }
        seen.push((name, path));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The most bytes a connection buffers as it reads: a request's head must
/// fit (a longer one is answered 431), a body is read through it piece by
/// piece. hyper's own default (about 400 KB) let a head that came in two
/// reads double an 8 KB buffer to 16 KB on every connection, a fifth of a
/// served call's memory (docs/benchmarks.md, "Serving").
pub const READ_BUFFER: usize = 8 * 1024;

/// Serves `options` on `listener` until `shutdown` completes; then stops
/// accepting, lets the requests in flight finish and waits for every run's
/// record to be written and synced (runs whose callers went away included).
///
/// HTTP/1.1 (as upstream's uvicorn serves), each connection with
/// TCP_NODELAY, a [`READ_BUFFER`] and hyper's 30 s limit on reading a
/// request's head.
pub async fn serve(
    listener: tokio::net::TcpListener,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Arc::new(routes::State::new(options));
    let app = routes::router(state.clone());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(READ_BUFFER)
        .timer(hyper_util::rt::TokioTimer::new());
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Each answer's bytes go out as written: without TCP_NODELAY,
        // Nagle's algorithm holds an SSE event (or the end of an answer
        // written in two pieces) until the client's delayed ACK, 40 ms on
        // Linux.
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            // A connection's errors (a client gone mid-request, a head too
            // long) are the client's; its run, if any, records how it ended.
            let _ = connection.await;
        });
    }
    drop(listener);
    connections.shutdown().await;
    state.drain().await;
    Ok(())
}

/// After a failed `accept`: a connection that failed before it was taken
/// is skipped at once; anything else (out of file descriptors, most often)
/// is said and waited out for a second rather than retried in a busy loop.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    lllm::report::warn(&format!(
        "lllm serve: accepting a connection failed: {error}"
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_path_segments() {
        for good in ["triage", "summarize-v2", "a.b_c"] {
            assert_eq!(segment_problem(good), None, "{good}");
        }
        for bad in [
            "", " ", ".", "..", "a b", "a/b", "a%2f", "a:b", "a;b", "a\\b", "a?b",
        ] {
            assert!(segment_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn limits_are_clamped_into_their_ranges() {
        let limits = Limits {
            max_body: 0,
            timeout: Duration::from_secs(100_000),
            concurrency: 0,
        }
        .clamped();
        assert_eq!(limits.max_body, 1024);
        assert_eq!(limits.timeout, Duration::from_secs(24 * 3600));
        assert_eq!(limits.concurrency, 1);
        assert_eq!(Limits::default().clamped(), Limits::default());
    }
}
