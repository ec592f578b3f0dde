//! `GET /metrics` (docs/serve.md, "Metrics"): the server's counters in
//! Prometheus's text exposition format 0.0.4. Requests by tactic, route and
//! status, their latency as a histogram and how many are in flight, counted
//! by a middleware around every route (the token check included, so a 401
//! is counted too); the served sessions' outcomes, tokens and cost by
//! tactic, counted as each run's record is written (`session`); the budget
//! and the concurrency limit, read when the text is made.
//!
//! Hand-written rather than `prometheus-client`: that crate writes
//! OpenMetrics text (not 0.0.4), its `Family` takes a lock and hashes the
//! label set on every observation and its `Histogram` takes a mutex per
//! observation. Here every label set is known when the server starts (the
//! served tactics, the routes, the statuses it answers), so each series is
//! an atomic at a fixed place: a request costs a few relaxed atomic adds
//! and no lock (a status outside `STATUSES`, which this server does not
//! answer, takes a mutex). The text itself is a few dozen lines.
//!
//! A tactic label is only ever a served tactic's name or `""` (a request
//! that named none, or one that is not served): a caller cannot make
//! series by naming tactics.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State as Extract};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use lllm::tactic::{RunState, SessionRecord};

use crate::routes::State;
use crate::session::Ending;

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The routes as the `route` label names them (docs/serve.md, "Routes");
/// a request on no route is `other`.
const ROUTES: [&str; 12] = [
    "/health",
    "/tactics",
    "/tactics/{name}/info",
    "/tactics/{name}/run",
    "/tactics/{name}/stream",
    "/info",
    "/run",
    "/stream",
    "/v1/models",
    "/v1/chat/completions",
    "/metrics",
    "other",
];
const OTHER: usize = ROUTES.len() - 1;

/// The statuses this server answers, each with a counter of its own; 499
/// (nginx's "client closed request") is a request whose client went away
/// before it was answered.
const STATUSES: [u16; 13] = [
    200, 400, 401, 404, 405, 408, 413, 429, 499, 500, 502, 503, 504,
];

/// The latency histogram's upper bounds, in seconds: from a refused
/// request's milliseconds to the default deadline (300 s) and beyond.
const BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The session outcomes as the `state` label names them: the record's
/// state, or how a served run was stopped.
const OUTCOMES: [&str; 5] = ["success", "failure", "skipped", "cancelled", "timeout"];

/// Every counter of one server.
pub struct Metrics {
    /// The served tactics' names, in the order served; a tactic's label
    /// index is its position + 1, index 0 being `""`.
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// Per (tactic label, route): `tactic * ROUTES.len() + route`.
    requests: Vec<Requests>,
    in_flight: AtomicU64,
    /// Per served tactic, in the order served.
    sessions: Vec<Sessions>,
}

/// The requests of one (tactic, route).
#[derive(Default)]
struct Requests {
    statuses: [AtomicU64; STATUSES.len()],
    /// Statuses outside `STATUSES`: none this server answers today.
    other: Mutex<Vec<(u16, u64)>>,
    /// Observations per bucket (not cumulative), the last one `+Inf`'s.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// The finished sessions of one tactic.
#[derive(Default)]
struct Sessions {
    outcomes: [AtomicU64; OUTCOMES.len()],
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    /// In nano-USD, so that adding is one atomic add.
    cost_nanos: AtomicU64,
    /// Sessions whose cost is not all known (a model without a price).
    cost_unknown: AtomicU64,
}

/// A served tactic's name on a response: which tactic a request ran, for
/// routes whose path does not say (`/v1/chat/completions`).
#[derive(Clone)]
pub struct ServedTactic(pub String);

impl Metrics {
    /// Counters for a server of `names` (the served tactics, in order).
    pub fn new(names: &[String]) -> Metrics {
        let labels = names.len() + 1;
        Metrics {
            names: names.to_vec(),
            index: names
                .iter()
                .enumerate()
                .map(|(position, name)| (name.clone(), position + 1))
                .collect(),
            requests: (0..labels * ROUTES.len())
                .map(|_| Requests::default())
                .collect(),
            in_flight: AtomicU64::new(0),
            sessions: names.iter().map(|_| Sessions::default()).collect(),
        }
    }

    /// A tactic's label index: its position + 1, or 0 when not served.
    fn tactic(&self, name: &str) -> usize {
        self.index.get(name).copied().unwrap_or(0)
    }

    /// The route of `path` and the tactic its path names (0: none).
    fn route(&self, path: &str) -> (usize, usize) {
        let only = match self.names.len() {
            1 => 1,
            _ => 0,
        };
        let exact = |route: &str| ROUTES.iter().position(|known| *known == route);
        match path {
            "/info" | "/run" | "/stream" if only == 1 => (exact(path).unwrap_or(OTHER), only),
            "/info" | "/run" | "/stream" => (OTHER, 0),
            _ => {
                if let Some(rest) = path.strip_prefix("/tactics/")
                    && let Some((name, endpoint)) = rest.split_once('/')
                {
                    let route = match endpoint {
                        "info" => 2,
                        "run" => 3,
                        "stream" => 4,
                        _ => return (OTHER, 0),
                    };
                    return (route, self.tactic(name));
                }
                (exact(path).unwrap_or(OTHER), 0)
            }
        }
    }

    /// Counts a request of `tactic` (label index) on `route` that was
    /// answered `status` after `nanos`.
    fn request(&self, tactic: usize, route: usize, status: u16, nanos: u64) {
        let Some(cell) = self.requests.get(tactic * ROUTES.len() + route) else {
            return;
        };
        match STATUSES.iter().position(|known| *known == status) {
            Some(index) => {
                cell.statuses[index].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                let mut other = cell
                    .other
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                match other.iter_mut().find(|(known, _)| *known == status) {
                    Some((_, count)) => *count += 1,
                    None => other.push((status, 1)),
                }
            }
        }
        let seconds = nanos as f64 / 1e9;
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        cell.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        cell.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Counts a finished session of the tactic served as `name`: its
    /// outcome, tokens and cost.
    pub fn session(&self, name: &str, ending: Ending, record: &SessionRecord) {
        let Some(sessions) = self
            .tactic(name)
            .checked_sub(1)
            .and_then(|position| self.sessions.get(position))
        else {
            return;
        };
        let outcome = match (ending, record.state) {
            (Ending::Cancelled, _) => 3,
            (Ending::Timeout, _) => 4,
            (Ending::Finished, RunState::Success) => 0,
            (Ending::Finished, RunState::Failure) => 1,
            (Ending::Finished, RunState::Skipped) => 2,
        };
        sessions.outcomes[outcome].fetch_add(1, Ordering::Relaxed);
        let cost = &record.cost;
        sessions
            .input_tokens
            .fetch_add(cost.prompt_tokens, Ordering::Relaxed);
        sessions
            .output_tokens
            .fetch_add(cost.completion_tokens, Ordering::Relaxed);
        let usd = cost.cost.unwrap_or(0.0);
        if usd.is_finite() && usd > 0.0 {
            // Rounded to a nano-dollar; `as` saturates at u64::MAX.
            let nanos = (usd * 1e9).round() as u64;
            sessions.cost_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        if !record.cost_known {
            sessions.cost_unknown.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The exposition text, with the gauges the server's state holds.
    fn render(&self, gauges: &Gauges) -> String {
        let mut text = String::with_capacity(4096);
        let label = |tactic: usize| match tactic {
            0 => "",
            position => self.names[position - 1].as_str(),
        };
        let cells = || {
            self.requests.iter().enumerate().map(|(index, cell)| {
                let tactic = escape(label(index / ROUTES.len()));
                (tactic, ROUTES[index % ROUTES.len()], cell)
            })
        };

        family(
            &mut text,
            "lllm_serve_requests_total",
            "counter",
            "Requests answered, by served tactic (\"\" when none), route and HTTP status.",
        );
        for (tactic, route, cell) in cells() {
            let mut counts: Vec<(u16, u64)> = STATUSES
                .iter()
                .zip(&cell.statuses)
                .map(|(status, count)| (*status, count.load(Ordering::Relaxed)))
                .collect();
            counts.extend(
                cell.other
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .iter()
                    .copied(),
            );
            for (status, count) in counts.into_iter().filter(|(_, count)| *count > 0) {
                let _ = writeln!(
                    text,
                    "lllm_serve_requests_total{{tactic=\"{tactic}\",route=\"{route}\",status=\"{status}\"}} {count}"
                );
            }
        }

        family(
            &mut text,
            "lllm_serve_request_duration_seconds",
            "histogram",
            "Time from a request's arrival to its answer's last byte (a stream's end), in seconds.",
        );
        for (tactic, route, cell) in cells() {
            let counts: Vec<u64> = cell
                .buckets
                .iter()
                .map(|bucket| bucket.load(Ordering::Relaxed))
                .collect();
            let count: u64 = counts.iter().sum();
            if count == 0 {
                continue;
            }
            let labels = format!("tactic=\"{tactic}\",route=\"{route}\"");
            let mut cumulative = 0;
            for (bound, observed) in BUCKETS.iter().zip(&counts) {
                cumulative += observed;
                let _ = writeln!(
                    text,
                    "lllm_serve_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                text,
                "lllm_serve_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
            );
            let sum = cell.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                text,
                "lllm_serve_request_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                text,
                "lllm_serve_request_duration_seconds_count{{{labels}}} {count}"
            );
        }

        let in_flight = self.in_flight.load(Ordering::Relaxed);
        gauge(
            &mut text,
            "lllm_serve_requests_in_flight",
            "Requests arrived and not yet answered to their last byte (this one included).",
            in_flight as f64,
        );
        gauge(
            &mut text,
            "lllm_serve_runs_in_flight",
            "Runs started whose record is not yet written (/health's running).",
            gauges.running as f64,
        );
        gauge(
            &mut text,
            "lllm_serve_concurrency_limit",
            "Runs the server takes at once (--concurrency); one more is answered 429.",
            gauges.concurrency as f64,
        );

        let served = || {
            self.names
                .iter()
                .zip(&self.sessions)
                .map(|(name, sessions)| (escape(name), sessions))
        };
        family(
            &mut text,
            "lllm_serve_sessions_total",
            "counter",
            "Served sessions by tactic and outcome (the record's state, or cancelled: the caller \
             went away, timeout: the deadline passed).",
        );
        for (tactic, sessions) in served() {
            for (state, count) in OUTCOMES.iter().zip(&sessions.outcomes) {
                let count = count.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "lllm_serve_sessions_total{{tactic=\"{tactic}\",state=\"{state}\"}} {count}"
                );
            }
        }
        family(
            &mut text,
            "lllm_serve_tokens_total",
            "counter",
            "Tokens of the served sessions by tactic and type (input: the requests', output: the \
             replies'), sub-tactics included.",
        );
        for (tactic, sessions) in served() {
            for (kind, count) in [
                ("input", &sessions.input_tokens),
                ("output", &sessions.output_tokens),
            ] {
                let count = count.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "lllm_serve_tokens_total{{tactic=\"{tactic}\",type=\"{kind}\"}} {count}"
                );
            }
        }
        family(
            &mut text,
            "lllm_serve_cost_usd_total",
            "counter",
            "What the served sessions cost, in USD, by tactic (calls of unknown price count 0).",
        );
        for (tactic, sessions) in served() {
            let usd = sessions.cost_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                text,
                "lllm_serve_cost_usd_total{{tactic=\"{tactic}\"}} {usd}"
            );
        }
        family(
            &mut text,
            "lllm_serve_cost_unknown_sessions_total",
            "counter",
            "Served sessions with a call of unknown price, by tactic: their cost is not all in \
             lllm_serve_cost_usd_total.",
        );
        for (tactic, sessions) in served() {
            let count = sessions.cost_unknown.load(Ordering::Relaxed);
            let _ = writeln!(
                text,
                "lllm_serve_cost_unknown_sessions_total{{tactic=\"{tactic}\"}} {count}"
            );
        }

        if let Some(budget) = &gauges.budget {
            gauge(
                &mut text,
                "lllm_serve_budget_limit_usd",
                "The server's spending cap (--max-cost), in USD.",
                budget.limit,
            );
            gauge(
                &mut text,
                "lllm_serve_budget_spent_usd",
                "What the server has spent of its cap, in USD.",
                budget.spent,
            );
            family(
                &mut text,
                "lllm_serve_budget_refused_calls_total",
                "counter",
                "Model calls the cap refused to send.",
            );
            let _ = writeln!(
                text,
                "lllm_serve_budget_refused_calls_total {}",
                budget.refused
            );
        }
        text
    }
}

/// What the server's state holds besides the counters, read when the text
/// is made.
struct Gauges {
    running: usize,
    concurrency: usize,
    budget: Option<Budget>,
}

struct Budget {
    limit: f64,
    spent: f64,
    refused: usize,
}

/// A family's `# HELP` and `# TYPE` lines.
fn family(text: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(text, "# TYPE {name} {kind}");
}

/// A gauge of one series without labels.
fn gauge(text: &mut String, name: &str, help: &str, value: f64) {
    family(text, name, "gauge", help);
    let _ = writeln!(text, "{name} {}", number(value));
}

/// A value as the format writes one (`+Inf`, `-Inf`, `NaN`, else Rust's
/// shortest decimal, which Go's `ParseFloat` reads).
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        value.to_string()
    }
}

/// A label value escaped as the format asks: `\`, `"` and line feeds.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A `# HELP` text escaped as the format asks: `\` and line feeds.
fn escape_help(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `GET /metrics`.
pub async fn handler(Extract(state): Extract<Arc<State>>) -> Response {
    let gauges = Gauges {
        running: state.running.load(Ordering::SeqCst),
        concurrency: state.limits.concurrency,
        budget: state.budget.as_ref().map(|budget| Budget {
            limit: budget.max(),
            spent: budget.spent(),
            refused: budget.refused(),
        }),
    };
    let text = state.metrics.render(&gauges);
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

/// The middleware around every route: counts the request once its answer's
/// body has ended (or was dropped), with its latency to that moment.
pub async fn track(Extract(state): Extract<Arc<State>>, request: Request, next: Next) -> Response {
    let metrics = state.metrics.clone();
    let (route, tactic) = metrics.route(request.uri().path());
    metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let mut pending = Pending {
        metrics,
        started: Instant::now(),
        route,
        tactic,
        // Until there is an answer: the client went away first.
        status: 499,
    };
    let response = next.run(request).await;
    pending.status = response.status().as_u16();
    if let Some(ServedTactic(name)) = response.extensions().get::<ServedTactic>() {
        pending.tactic = pending.metrics.tactic(name);
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Body::new(Tracked { body, pending }))
}

/// A request being answered; counted when dropped.
struct Pending {
    metrics: Arc<Metrics>,
    started: Instant,
    route: usize,
    tactic: usize,
    status: u16,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.metrics
            .request(self.tactic, self.route, self.status, nanos);
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body that counts its request when it is dropped: hyper drops
/// it as soon as its last frame is taken, before that frame is written, so
/// a client that has read an answer finds it counted.
struct Tracked {
    body: Body,
    #[allow(dead_code)] // held for its `Drop`
    pending: Pending,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// `response` marked as a run of the tactic served as `name`.
pub fn served(mut response: Response, name: &str) -> Response {
    response
        .extensions_mut()
        .insert(ServedTactic(name.to_string()));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn routes_as(metrics: &Metrics, path: &str, route: &str, tactic: usize) {
        let (index, named) = metrics.route(path);
        assert_eq!((ROUTES[index], named), (route, tactic), "{path}");
    }

    #[test]
    fn paths_are_routes_and_tactics() {
        let two = Metrics::new(&["a".into(), "b\"c".into()]);
        routes_as(&two, "/tactics/a/run", "/tactics/{name}/run", 1);
        routes_as(&two, "/tactics/b\"c/stream", "/tactics/{name}/stream", 2);
        routes_as(&two, "/tactics/nope/info", "/tactics/{name}/info", 0);
        routes_as(&two, "/tactics/a/elsewhere", "other", 0);
        routes_as(&two, "/tactics", "/tactics", 0);
        routes_as(&two, "/run", "other", 0);
        routes_as(&two, "/v1/chat/completions", "/v1/chat/completions", 0);
        routes_as(&two, "/metrics", "/metrics", 0);
        routes_as(&two, "/nowhere", "other", 0);
        let one = Metrics::new(&["a".into()]);
        routes_as(&one, "/run", "/run", 1);
        routes_as(&one, "/info", "/info", 1);
        routes_as(&one, "/health", "/health", 0);
    }

    #[test]
    fn label_values_are_escaped() {
        for (value, escaped) in [
            ("plain", "plain"),
            ("a\"b", "a\\\"b"),
            ("a\\b", "a\\\\b"),
            ("a\nb", "a\\nb"),
        ] {
            assert_eq!(escape(value), escaped, "{value:?}");
        }
        assert_eq!(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(0.0012), "0.0012");
        assert_eq!(number(1.0), "1");
    }

    #[test]
    fn a_histogram_is_cumulative_and_its_count_is_its_buckets() {
        let metrics = Metrics::new(&["t".into()]);
        let (run, tactic) = metrics.route("/run");
        for millis in [1, 4, 5, 6, 700, 2_000_000] {
            metrics.request(tactic, run, 200, millis * 1_000_000);
        }
        metrics.request(tactic, run, 418, 1_000_000);
        let text = metrics.render(&Gauges {
            running: 0,
            concurrency: 1,
            budget: None,
        });
        let line = |prefix: &str| {
            text.lines()
                .find(|line| line.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        let labels = "{tactic=\"t\",route=\"/run\"";
        let bucket = |le: &str| {
            line(&format!(
                "lllm_serve_request_duration_seconds_bucket{labels},le=\"{le}\"}}"
            ))
        };
        assert_eq!(bucket("0.005"), "4", "1, 4, 5 ms and the 418's 1 ms");
        assert_eq!(bucket("0.01"), "5");
        assert_eq!(bucket("1"), "6");
        assert_eq!(bucket("600"), "6");
        assert_eq!(bucket("+Inf"), "7");
        assert_eq!(
            line(&format!(
                "lllm_serve_request_duration_seconds_count{labels}}}"
            )),
            "7"
        );
        let sum: f64 = line(&format!(
            "lllm_serve_request_duration_seconds_sum{labels}}}"
        ))
        .parse()
        .unwrap();
        assert!((sum - 2000.717).abs() < 1e-9, "{sum}");
        assert_eq!(
            line(&format!(
                "lllm_serve_requests_total{labels},status=\"200\"}}"
            )),
            "6"
        );
        assert_eq!(
            line(&format!(
                "lllm_serve_requests_total{labels},status=\"418\"}}"
            )),
            "1"
        );
        assert!(!text.contains("budget"), "{text}");
    }
}
