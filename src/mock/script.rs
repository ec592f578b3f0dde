//! The script format of the `mock/script` provider and the `lllm-mock` server:
//! rules matched against each request, then replies served in order, then a
//! default. This module reads, validates and serves scripts; it knows nothing
//! of HTTP or wire formats (the server and the in-process provider translate a
//! [`Served`] into their own shapes).
//!
//! ```yaml
//! latency_ms: 50              # or {min: 10, max: 100}, or {mean: 50, stddev: 10}
//! replies:                    # one per request, in order
//!   - text: Hello             # or just `- Hello`
//!     usage: {prompt_tokens: 12, completion_tokens: 3}
//!     delay_ms: 10            # this reply's latency (same forms as latency_ms)
//!   - tool_calls: [{name: f, arguments: {a: 1}, id: call_1}]
//!   - echo: true              # the last message's text
//!   - fault: {status: 429, retry_after_s: 1}   # or timeout / malformed / reset / cut_stream
//!   - text: slow down
//!     headers: {retry-after: inf}         # sent as written, on any reply or fault
//!     rate_limit: {requests: {limit: 50, remaining: 0, reset_s: 2}}   # in the API's own headers
//! rules:                      # checked first; a match does not consume a reply
//!   - when: {contains: weather, regex: "^Q:", model: gpt-4o, last_role: tool}
//!     reply: {text: sunny}
//!     times: 2
//! default: {text: ok}         # once `replies` run out
//! ```
//!
//! A script describes one run: where it is (the next reply, the uses of each
//! rule, the generated tool-call ids) is kept per run. Inside
//! [`with_own_positions`] — every tactic run: each `lllm run`, each task of
//! a batch — a script starts from its beginning, shared by the agents and
//! sub-tactic steps of that run; elsewhere (the `lllm-mock` server) one
//! position serves every request.

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};

mod read;

/// A script that cannot be used (bad input, exit 2 where nothing ran).
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file cannot be read.
    #[error("cannot read the script `{path}`: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The YAML does not parse.
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        /// The file (or where the script text came from).
        origin: String,
        /// Where, from 1.
        line: usize,
        /// Where on the line, from 1.
        column: usize,
        /// What the YAML parser says.
        message: String,
    },
    /// `place` is where in the script, like `replies[2].tool_calls[0]`;
    /// `at` its line and column in the text, when known.
    #[error("{origin}{}: {}{message}", at_suffix(.at), place_prefix(.place))]
    Invalid {
        /// The file (or where the script text came from).
        origin: String,
        /// Where in the script.
        place: String,
        /// The line and column of `place` in the text.
        at: Option<crate::yaml::Location>,
        /// What is wrong.
        message: String,
    },
}

fn at_suffix(at: &Option<crate::yaml::Location>) -> String {
    at.map(|at| format!(":{}:{}", at.line, at.column))
        .unwrap_or_default()
}

/// A result whose error is a [`ScriptError`].
pub type Result<T, E = ScriptError> = std::result::Result<T, E>;

fn place_prefix(place: &str) -> String {
    if place.is_empty() {
        String::new()
    } else {
        format!("{place}: ")
    }
}

/// What a request looks like to the script: the fields rules can test.
#[derive(Debug, Clone, Copy)]
pub struct ScriptRequest<'a> {
    /// The model asked for.
    pub model: &'a str,
    /// The text of the last message (a tool result's text when `last_role` is `tool`).
    pub last_text: &'a str,
    /// `user`, `assistant`, `tool` or `system`.
    pub last_role: &'a str,
    /// Messages in the request, the system message included.
    pub message_count: usize,
}

/// A tool call a scripted reply makes.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptToolCall {
    /// The call's id.
    pub id: String,
    /// The tool called.
    pub name: String,
    /// Raw JSON text, sent verbatim (a script may send malformed arguments on purpose).
    pub arguments: String,
}

/// The token counts a scripted reply reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptUsage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
}

/// An assistant message: text and/or tool calls (`echo` is already resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptMessage {
    /// The reply's text.
    pub text: Option<String>,
    /// The reply's tool calls.
    pub tool_calls: Vec<ScriptToolCall>,
    /// `None`: the reader estimates it (see [`estimate_tokens`]).
    pub usage: Option<ScriptUsage>,
    /// `None`: `stop`, or `tool_calls` when there are tool calls.
    pub finish_reason: Option<String>,
}

/// A failure a script makes the provider answer with.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// An HTTP error status with a provider-style error body.
    Http {
        /// The status (429, 500, …).
        status: u16,
        /// A `Retry-After` header, in seconds.
        retry_after_s: Option<f64>,
        /// A `retry-after-ms` header.
        retry_after_ms: Option<u64>,
        /// The error body's code.
        code: Option<String>,
        /// The error body's message.
        message: Option<String>,
    },
    /// Never answer; hold the request until the client gives up.
    Timeout,
    /// Status 200 with a body that is not JSON.
    Malformed,
    /// Close the connection without a response.
    Reset,
    /// Stream a few chunks, then close without the end of the stream.
    CutStream,
}

/// What the script answers one request with.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An assistant message.
    Message(ScriptMessage),
    /// A failure.
    Fault(Fault),
    /// No rule matched, `replies` are used up and there is no `default`.
    Exhausted {
        /// Replies served before.
        served: usize,
    },
}

/// One answer of the script: which request it was, what to send, after how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The 0-based number of the request, counting every request.
    pub index: usize,
    /// What to send.
    pub reply: Reply,
    /// The sampled latency to wait before answering.
    pub delay: Duration,
    /// Response headers the reply adds.
    pub headers: ReplyHeaders,
}

/// Response headers a reply adds (`headers:` and `rate_limit:`), so tests can
/// see what a client makes of what real servers and proxies send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyHeaders {
    /// Sent exactly as written, whatever they say (`retry-after: inf`).
    pub raw: Vec<(String, String)>,
    /// Rate-limit windows, sent in the headers of the API the request came
    /// in on: OpenAI's `x-ratelimit-*` or Anthropic's `anthropic-ratelimit-*`.
    pub rate_limits: Vec<RateLimitWindow>,
}

/// What a rate-limit window counts (`rate_limit: {requests: …}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Requests.
    Requests,
    /// Tokens, input and output.
    Tokens,
    /// Anthropic only, as on the real APIs.
    InputTokens,
    /// Anthropic only.
    OutputTokens,
}

/// One rate-limit window as a server reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitWindow {
    /// What it counts.
    pub kind: WindowKind,
    /// Its size.
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Until the window is replenished, from the moment of the reply.
    pub reset: Duration,
}

/// A latency in milliseconds: fixed, uniform in `[min, max]`, or normal
/// (clamped at 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// Always this long.
    Fixed(f64),
    /// Uniform between the two.
    Uniform {
        /// The shortest.
        min: f64,
        /// The longest.
        max: f64,
    },
    /// Normal, clamped at 0.
    Normal {
        /// Its mean.
        mean: f64,
        /// Its standard deviation.
        stddev: f64,
    },
}

impl Latency {
    /// One latency drawn from the distribution.
    pub fn sample(&self) -> Duration {
        let millis = match *self {
            Latency::Fixed(millis) => millis,
            Latency::Uniform { min, max } => min + fastrand::f64() * (max - min).max(0.0),
            Latency::Normal { mean, stddev } => {
                // Box–Muller; `1 - f64()` is in (0, 1], so the logarithm is finite.
                let (first, second) = (1.0 - fastrand::f64(), fastrand::f64());
                mean + stddev
                    * (-2.0 * first.ln()).sqrt()
                    * (2.0 * std::f64::consts::PI * second).cos()
            }
        };
        duration_from_millis(millis)
    }
}

/// Negative and NaN become zero, huge values the longest `Duration`.
fn duration_from_millis(millis: f64) -> Duration {
    if millis.is_nan() || millis <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(millis / 1000.0).unwrap_or(Duration::MAX)
}

/// Tokens estimated at four characters each, at least one.
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4).max(1) as u64
}

/// A reply as written, before `echo` and generated tool-call ids are resolved.
#[derive(Debug)]
enum Planned {
    Message {
        text: Option<String>,
        echo: bool,
        tool_calls: Vec<PlannedCall>,
        usage: Option<ScriptUsage>,
        finish_reason: Option<String>,
    },
    Fault(Fault),
}

#[derive(Debug)]
struct PlannedCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Debug)]
struct Step {
    planned: Planned,
    delay: Option<Latency>,
    headers: ReplyHeaders,
}

#[derive(Debug)]
struct Rule {
    contains: Option<String>,
    regex: Option<regex::Regex>,
    model: Option<String>,
    last_role: Option<String>,
    step: Step,
    times: Option<usize>,
}

/// A loaded script. [`Script::next`] takes `&self` and is safe to call from
/// many tasks at once: counters are atomics, nothing is locked.
#[derive(Debug)]
pub struct Script {
    /// Tells this script's positions apart in a run's [`RunPositions`].
    id: u64,
    origin: String,
    latency: Option<Latency>,
    /// `--latency-ms`: replaces every latency of the script.
    latency_override: Option<Latency>,
    rules: Vec<Rule>,
    replies: Vec<Step>,
    default: Option<Step>,
    /// Where requests outside any run scope are (the server's).
    shared: Arc<Position>,
}

/// How far a script has been served: requests, the next reply, the uses of
/// each rule, the tool-call ids generated.
#[derive(Debug)]
struct Position {
    requests: AtomicUsize,
    next_reply: AtomicUsize,
    rule_uses: Vec<AtomicUsize>,
    generated_ids: AtomicUsize,
}

impl Position {
    fn new(rules: usize) -> Position {
        Position {
            requests: AtomicUsize::new(0),
            next_reply: AtomicUsize::new(0),
            rule_uses: (0..rules).map(|_| AtomicUsize::new(0)).collect(),
            generated_ids: AtomicUsize::new(0),
        }
    }
}

/// The positions of the scripts one run has used, by script id.
#[derive(Default)]
pub struct RunPositions {
    positions: RefCell<Vec<(u64, Arc<Position>)>>,
}

tokio::task_local! {
    static RUN_POSITIONS: RunPositions;
}

/// Runs `future` with its own script positions: every script it serves from
/// starts at its beginning and moves on for this future only. Inside another
/// such future (a sub-tactic run, this function called while it runs), the
/// outer positions are kept.
// Not an `async fn`, which would hold `future` twice (`watch::scope`).
pub fn with_own_positions<F: std::future::Future>(
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    if RUN_POSITIONS.try_with(|_| ()).is_ok() {
        futures_util::future::Either::Left(future)
    } else {
        futures_util::future::Either::Right(RUN_POSITIONS.scope(RunPositions::default(), future))
    }
}

impl Script {
    /// Reads a script file (YAML, or JSON, which is YAML too).
    pub fn load(path: &Path) -> Result<Script> {
        let origin = path.display().to_string();
        let text = crate::file::read_text(path, crate::file::CONFIG_CAP).map_err(|error| {
            ScriptError::Read {
                path: origin.clone(),
                message: error.to_string(),
            }
        })?;
        Script::parse(&text, &origin)
    }

    /// Parses a script; `origin` names it in errors (usually the file path).
    pub fn parse(text: &str, origin: &str) -> Result<Script> {
        let (value, positions) = if text.trim().is_empty() {
            (Value::Object(Map::new()), crate::yaml::Positions::default())
        } else {
            // `.inf` and `.nan` stay text, so a number field rejects them by name.
            crate::yaml::parse_located(text).map_err(|error| {
                // The location goes in front, like every `file:line:column` error.
                ScriptError::Syntax {
                    origin: origin.to_string(),
                    line: error.location.map_or(0, |location| location.line),
                    column: error.location.map_or(0, |location| location.column),
                    message: error.message,
                }
            })?
        };
        let parts = read::script(&value).map_err(|problem| ScriptError::Invalid {
            origin: origin.to_string(),
            // Places are written as the document's paths (`replies[2].text`).
            at: positions.get(problem.node.as_deref().unwrap_or(&problem.place)),
            place: problem.place,
            message: problem.message,
        })?;
        static SCRIPTS: AtomicU64 = AtomicU64::new(0);
        Ok(Script {
            id: SCRIPTS.fetch_add(1, Ordering::Relaxed),
            origin: origin.to_string(),
            latency: parts.latency,
            latency_override: None,
            shared: Arc::new(Position::new(parts.rules.len())),
            rules: parts.rules,
            replies: parts.replies,
            default: parts.default,
        })
    }

    /// Where the script came from (the `origin` given to `parse`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Every reply waits `millis` (the server's `--latency-ms`); this replaces
    /// both `latency_ms` and each reply's `delay_ms`.
    pub fn set_latency_ms(&mut self, millis: f64) {
        self.latency_override = Some(Latency::Fixed(millis));
    }

    /// The answer to the next request: the first rule that matches (and has
    /// uses left), else the next reply, else the default, else `Exhausted`.
    pub fn next(&self, request: &ScriptRequest<'_>) -> Served {
        let position = self.position();
        let index = position.requests.fetch_add(1, Ordering::Relaxed);
        let step = self
            .rules
            .iter()
            .zip(&position.rule_uses)
            .find(|(rule, uses)| rule.claim(request, uses))
            .map(|(rule, _)| &rule.step)
            .or_else(|| self.take_reply(&position))
            .or(self.default.as_ref());
        let Some(step) = step else {
            return Served {
                index,
                reply: Reply::Exhausted {
                    served: self.replies.len(),
                },
                delay: Duration::ZERO,
                headers: ReplyHeaders::default(),
            };
        };
        let delay = self
            .latency_override
            .as_ref()
            .or(step.delay.as_ref())
            .or(self.latency.as_ref())
            .map_or(Duration::ZERO, Latency::sample);
        Served {
            index,
            reply: self.resolve(&step.planned, request, &position),
            delay,
            headers: step.headers.clone(),
        }
    }

    /// The position of the run this request belongs to, or the shared one.
    fn position(&self) -> Arc<Position> {
        RUN_POSITIONS
            .try_with(|run| {
                let mut positions = run.positions.borrow_mut();
                if let Some((_, position)) = positions.iter().find(|(id, _)| *id == self.id) {
                    return position.clone();
                }
                let position = Arc::new(Position::new(self.rules.len()));
                positions.push((self.id, position.clone()));
                position
            })
            .unwrap_or_else(|_| self.shared.clone())
    }

    fn take_reply(&self, position: &Position) -> Option<&Step> {
        let count = self.replies.len();
        position
            .next_reply
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |position| {
                (position < count).then_some(position + 1)
            })
            .ok()
            .and_then(|position| self.replies.get(position))
    }

    fn resolve(
        &self,
        planned: &Planned,
        request: &ScriptRequest<'_>,
        position: &Position,
    ) -> Reply {
        match planned {
            Planned::Fault(fault) => Reply::Fault(fault.clone()),
            Planned::Message {
                text,
                echo,
                tool_calls,
                usage,
                finish_reason,
            } => Reply::Message(ScriptMessage {
                text: if *echo {
                    Some(request.last_text.to_string())
                } else {
                    text.clone()
                },
                tool_calls: tool_calls
                    .iter()
                    .map(|call| ScriptToolCall {
                        // Generated per serve, so a repeated reply never repeats an id.
                        id: call.id.clone().unwrap_or_else(|| {
                            let number = position.generated_ids.fetch_add(1, Ordering::Relaxed) + 1;
                            format!("call_{number}")
                        }),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    })
                    .collect(),
                usage: *usage,
                finish_reason: finish_reason.clone(),
            }),
        }
    }
}

impl Rule {
    /// Whether the rule answers `request`; counts a use in `used` when it has a limit.
    fn claim(&self, request: &ScriptRequest<'_>, used: &AtomicUsize) -> bool {
        let fits = self
            .contains
            .as_ref()
            .is_none_or(|text| request.last_text.contains(text.as_str()))
            && self
                .regex
                .as_ref()
                .is_none_or(|regex| regex.is_match(request.last_text))
            && self
                .model
                .as_ref()
                .is_none_or(|model| model == request.model)
            && self
                .last_role
                .as_ref()
                .is_none_or(|role| role == request.last_role);
        if !fits {
            return false;
        }
        match self.times {
            None => true,
            Some(limit) => used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    (used < limit).then_some(used + 1)
                })
                .is_ok(),
        }
    }
}

#[cfg(test)]
mod tests;
