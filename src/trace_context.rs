//! W3C trace context (`traceparent`): which trace a run belongs to, and the
//! span its requests go out under. Always compiled and free of OpenTelemetry:
//! `lllm serve` continues a caller's trace with it, provider requests and
//! calls to served tactics carry it onward, and the session record keeps the
//! ids ([`RunTrace`]) so that `lllm logs --trace ID` finds the session. The
//! export of spans is the `otel` feature's (docs/telemetry.md).
//!
//! ```
//! use lllm::trace_context::TraceContext;
//!
//! let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let context: TraceContext = header.parse()?;
//! assert!(context.sampled());
//! assert_eq!(context.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(context.to_string(), header);
//! assert!("00-00000000000000000000000000000000-00f067aa0ba902b7-01".parse::<TraceContext>().is_err());
//! # Ok::<(), lllm::trace_context::TraceContextError>(())
//! ```

use futures_util::future::Either;
use std::fmt;
use std::future::Future;
use std::hash::Hasher;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

/// The name of the W3C header that carries a [`TraceContext`].
pub const TRACEPARENT: &str = "traceparent";

/// One `traceparent`: a trace id, the id of the span a request was made
/// under, and the flags (bit 0: sampled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad traceparent `{shown}`: {reason}")]
pub struct TraceContextError {
    shown: String,
    reason: &'static str,
}

impl TraceContext {
    /// A context from its parts; `None` when an id is all zeros (invalid
    /// by the W3C rules).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<Self> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags: u8::from(sampled),
        })
    }

    /// A new trace, sampled: a new trace id (its time, then random bytes;
    /// see `new_trace_id`) and a random span id.
    pub fn new_root() -> Self {
        Self {
            trace_id: new_trace_id(),
            span_id: random_span_id(),
            flags: 1,
        }
    }

    /// The same trace and flags, under span `span_id`.
    pub fn with_span(self, span_id: [u8; 8]) -> Self {
        Self { span_id, ..self }
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The span id.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace id in lower-case hex (32 digits), as records and
    /// backends show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id in lower-case hex (16 digits).
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// Whether the caller sampled the trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// How long a version-`00` `traceparent` value is.
pub(crate) const TRACEPARENT_LEN: usize = 55;

impl TraceContext {
    /// The `traceparent` header's value, `00-TRACE-SPAN-FLAGS`, as bytes.
    pub(crate) fn header(&self) -> [u8; TRACEPARENT_LEN] {
        let mut text = [0u8; TRACEPARENT_LEN];
        text[..3].copy_from_slice(b"00-");
        hex_into(&self.trace_id, &mut text[3..35]);
        text[35] = b'-';
        hex_into(&self.span_id, &mut text[36..52]);
        text[52] = b'-';
        hex_into(&[self.flags], &mut text[53..55]);
        text
    }
}

impl fmt::Display for TraceContext {
    /// The `traceparent` header's value: `00-TRACE-SPAN-FLAGS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.header();
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for TraceContext {
    type Err = TraceContextError;

    /// Reads a `traceparent` value by the W3C rules: version `00` (exactly
    /// four fields) or a later version (more fields allowed), lower-case hex,
    /// ids not all zeros, version `ff` refused.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // The usual case first: version 00, its fields where they always
        // are (a traced batch reads its span's link once a task).
        let bytes = text.as_bytes();
        if bytes.len() == TRACEPARENT_LEN
            && bytes.starts_with(b"00-")
            && bytes[35] == b'-'
            && bytes[52] == b'-'
            && let (Some(trace_id), Some(span_id), Some([flags])) = (
                from_hex::<16>(&text[3..35]),
                from_hex::<8>(&text[36..52]),
                from_hex::<1>(&text[53..]),
            )
            && let Some(context) = TraceContext::new(trace_id, span_id, false)
        {
            return Ok(Self { flags, ..context });
        }
        let refuse = |reason| TraceContextError {
            shown: crate::redact::terminal_line(&text.chars().take(80).collect::<String>())
                .into_owned(),
            reason,
        };
        let text = text.trim_matches([' ', '\t']);
        let mut fields = text.split('-');
        let version = fields.next().unwrap_or_default();
        let (Some(trace), Some(span), Some(flags)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(refuse("it has fewer than four `-`-separated fields"));
        };
        let version =
            from_hex::<1>(version).ok_or_else(|| refuse("the version is not two hex digits"))?;
        if version[0] == 0xff {
            return Err(refuse("version ff is invalid"));
        }
        if version[0] == 0 && fields.next().is_some() {
            return Err(refuse("version 00 has exactly four fields"));
        }
        let trace_id = from_hex::<16>(trace)
            .ok_or_else(|| refuse("the trace id is not 32 lower-case hex digits"))?;
        let span_id = from_hex::<8>(span)
            .ok_or_else(|| refuse("the parent id is not 16 lower-case hex digits"))?;
        let flags =
            from_hex::<1>(flags).ok_or_else(|| refuse("the flags are not two hex digits"))?;
        if trace_id == [0; 16] {
            return Err(refuse("the trace id is all zeros"));
        }
        if span_id == [0; 8] {
            return Err(refuse("the parent id is all zeros"));
        }
        Ok(Self {
            trace_id,
            span_id,
            flags: flags[0],
        })
    }
}

/// What a session record keeps of its trace (`trace` in the record; absent
/// when the run had none): enough to find the session by trace id and to
/// rebuild its spans, with the same ids, from the record alone.
///
/// The ids are held as bytes and written as lower-case hex (a `traceparent`'s
/// fields): a run's trace is made, read and written without allocating. A
/// record whose `trace` does not read (an id that is not hex of the right
/// length, a `link` that is not a `traceparent`) is refused as a whole,
/// saying what was expected, as any other malformed field of a record is.
///
/// ```
/// use lllm::trace_context::RunTrace;
///
/// let trace: RunTrace = serde_json::from_str(
///     r#"{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "sampled": true}"#,
/// )?;
/// assert_eq!(trace.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert_eq!(trace.context().unwrap().span_id_hex(), "00f067aa0ba902b7");
/// assert!(serde_json::from_str::<RunTrace>(r#"{"trace_id": "4BF9", "span_id": "00f067aa0ba902b7", "sampled": true}"#).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTrace {
    /// The trace's id (32 lower-case hex digits in the record).
    #[serde(with = "hex_id")]
    pub trace_id: [u8; 16],
    /// The run's own span (16 hex digits): every span of the run descends
    /// from it, with ids derived from it and the span's place in the run.
    #[serde(with = "hex_id")]
    pub span_id: [u8; 8],
    /// The span the run continued (a served call's `traceparent`, or the
    /// running tactic's span for a sub-tactic); absent for a new trace.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "hex_id_or_none"
    )]
    pub parent_span_id: Option<[u8; 8]>,
    /// The span the run links to without being its child (a batch's span;
    /// a `traceparent` value in the record): each task of a batch is a trace
    /// of its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "traceparent_or_none"
    )]
    pub link: Option<TraceContext>,
    /// Whether the trace is sampled (the caller's flag, or set for a new trace).
    pub sampled: bool,
}

impl RunTrace {
    /// The run's own span as a context: what its requests go out under
    /// (`None` when an id is all zeros, which no `traceparent` may carry).
    pub fn context(&self) -> Option<TraceContext> {
        TraceContext::new(self.trace_id, self.span_id, self.sampled)
    }

    /// The trace id in lower-case hex, as the record and backends show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The run's span id in lower-case hex, written into `out`: the text
    /// its spans' ids are derived from ([`Place`]).
    #[cfg(any(feature = "otel", test))]
    pub(crate) fn span_id_text<'a>(&self, out: &'a mut [u8; 16]) -> &'a str {
        span_text(&self.span_id, out)
    }
}

/// A span id's 16 lower-case hex digits, written into `out`: the text a
/// run's span ids are derived from, made without a `String`.
fn span_text<'a>(span_id: &[u8; 8], out: &'a mut [u8; 16]) -> &'a str {
    hex_into(span_id, out);
    std::str::from_utf8(out).unwrap_or_default()
}

/// Serde for an id of `N` bytes as `2N` lower-case hex digits.
mod hex_id {
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub(super) fn serialize<S: Serializer, const N: usize>(
        id: &[u8; N],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        // Ids are at most 16 bytes: 32 digits (checked as it compiles).
        const { assert!(N <= 16) };
        let mut text = [0u8; 32];
        let text = &mut text[..2 * N];
        super::hex_into(id, text);
        serializer.serialize_str(std::str::from_utf8(text).map_err(serde::ser::Error::custom)?)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<[u8; N], D::Error> {
        deserializer.deserialize_str(Hex::<N>)
    }

    pub(super) struct Hex<const N: usize>;

    impl<const N: usize> Visitor<'_> for Hex<N> {
        type Value = [u8; N];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} lower-case hex digits", 2 * N)
        }

        fn visit_str<E: Error>(self, text: &str) -> Result<[u8; N], E> {
            super::from_hex::<N>(text)
                .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
        }
    }
}

/// Serde for an optional id (`parent_span_id`): absent or null is `None`.
mod hex_id_or_none {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer, const N: usize>(
        id: &Option<[u8; N]>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => super::hex_id::serialize(id, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<Option<[u8; N]>, D::Error> {
        #[derive(Deserialize)]
        struct Id<const N: usize>(#[serde(with = "super::hex_id")] [u8; N]);
        Ok(Option::<Id<N>>::deserialize(deserializer)?.map(|Id(id)| id))
    }
}

/// Serde for an optional `traceparent` value (`link`).
mod traceparent_or_none {
    use super::TraceContext;
    use serde::de::{Error, Visitor};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt;

    pub(super) fn serialize<S: Serializer>(
        link: &Option<TraceContext>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match link {
            Some(link) => {
                let text = link.header();
                serializer
                    .serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
            }
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<TraceContext>, D::Error> {
        struct Traceparent;

        impl Visitor<'_> for Traceparent {
            type Value = TraceContext;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a traceparent value, 00-TRACE_ID-SPAN_ID-FLAGS")
            }

            fn visit_str<E: Error>(self, text: &str) -> Result<TraceContext, E> {
                text.parse().map_err(E::custom)
            }
        }

        struct Link(TraceContext);

        impl<'de> Deserialize<'de> for Link {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Link, D::Error> {
                deserializer.deserialize_str(Traceparent).map(Link)
            }
        }
        Ok(Option::<Link>::deserialize(deserializer)?.map(|Link(link)| link))
    }
}

/// The id of the span at `place` (`call/2`) of the run whose span is
/// `run_span`: the derivation written out, which [`Place`] hashes in parts.
#[cfg(test)]
pub(crate) fn span_id_for(run_span: &str, place: &str) -> [u8; 8] {
    Place::new(run_span).text("/").text(place).id()
}

/// The id of a span of a run as it is derived from the run's span and the
/// span's place in the run (`call/2`, `chat/DIALOG/0/0/1`, …): the span a
/// request goes out under at the time, and the span built from the record
/// later, get the same id without the record storing one per span.
///
/// Hashed in parts: the run's span (hex), `/`, then the place's parts,
/// numbers in decimal, with no text made for the place. The hash is
/// FNV-1a (64 bits), a fixed algorithm, so a record exported by a later
/// build gets the same ids. Ids are to be unique within their trace
/// only, and they are not secret (each goes out in a `traceparent`), so
/// nothing stronger is needed: SHA-256 here, five digests a traced request,
/// was a sixth of what tracing cost a batch task (docs/benchmarks.md,
/// "Telemetry").
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place(u64);

impl Place {
    pub(crate) fn new(run_span: &str) -> Place {
        Place(fnv::FnvHasher::default().finish()).text(run_span)
    }

    /// The hash with `bytes` written after what it has hashed.
    fn write(self, bytes: &[u8]) -> Place {
        let mut hasher = fnv::FnvHasher::with_key(self.0);
        hasher.write(bytes);
        Place(hasher.finish())
    }

    pub(crate) fn text(self, text: &str) -> Place {
        self.write(text.as_bytes())
    }

    pub(crate) fn number(self, number: u64) -> Place {
        let mut digits = [0u8; 20];
        self.write(crate::words::decimal(number, &mut digits))
    }

    pub(crate) fn id(self) -> [u8; 8] {
        let id = self.0.to_be_bytes();
        if id == [0; 8] {
            [0, 0, 0, 0, 0, 0, 0, 1]
        } else {
            id
        }
    }
}

/// A model call's place, all but its attempt:
/// `chat/DIALOG/STEP/REPAIR/`, hashed after the run's span.
fn chat_call(run_span: &str, dialog_id: &str, step: u32, repair: u32) -> Place {
    Place::new(run_span)
        .text("/chat/")
        .text(dialog_id)
        .text("/")
        .number(step.into())
        .text("/")
        .number(repair.into())
        .text("/")
}

/// The span id of a model call's attempt: at `chat/DIALOG/STEP/REPAIR/ATTEMPT`.
#[cfg(any(feature = "otel", test))]
pub(crate) fn chat_span_id(
    run_span: &str,
    dialog_id: &str,
    step: u32,
    repair: u32,
    attempt: u32,
) -> [u8; 8] {
    chat_call(run_span, dialog_id, step, repair)
        .number(attempt.into())
        .id()
}

/// The place of a model call's span in its run, written out: the dialog it
/// went out on, its tool round, repair and attempt.
#[cfg(test)]
pub(crate) fn chat_place(dialog_id: &str, step: u32, repair: u32, attempt: u32) -> String {
    format!("chat/{dialog_id}/{step}/{repair}/{attempt}")
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Makes every run start a trace of its own when it continues none (set by
/// the `otel` feature's exporter when it is on); without it, only a run
/// given a context ([`continuing`]) has a trace.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Runs no longer start traces of their own (the exporter is gone).
#[cfg(feature = "otel")]
pub(crate) fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether runs start traces of their own ([`enable`]).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

tokio::task_local! {
    /// The context a run started in `future` continues.
    static PARENT: TraceContext;
    /// The span a run started in `future` links to (a batch's).
    static LINK: TraceContext;
    /// The running tactic's own span.
    static RUN: TraceContext;
    /// The model call under way: the run's span and the call's place, its
    /// attempts counted as they go out.
    static CHAT: Chat;
}

/// Runs `future` with `parent` as the trace its runs continue: each run
/// started in it is a child span of `parent` (what `lllm serve` does with a
/// caller's `traceparent`).
///
/// Not an `async fn`, nor are the other wrappers here: an `async fn` keeps
/// its future argument in its own state beside the scope that runs it, so
/// every wrapped run took twice its size (16 KB more per request `lllm
/// serve` held; docs/benchmarks.md, "Serving").
pub fn continuing<F: Future>(parent: TraceContext, future: F) -> impl Future<Output = F::Output> {
    PARENT.scope(parent, future)
}

/// Runs `future` with `link` as the span its runs link to: each run
/// started in it begins a trace of its own that names `link` (a batch's
/// tasks and the batch's span).
pub fn linked<F: Future>(link: TraceContext, future: F) -> impl Future<Output = F::Output> {
    LINK.scope(link, future)
}

/// [`linked`] when there is a `link`.
pub(crate) fn linked_to<F: Future>(
    link: Option<TraceContext>,
    future: F,
) -> impl Future<Output = F::Output> {
    match link {
        Some(link) => Either::Left(LINK.scope(link, future)),
        None => Either::Right(future),
    }
}

/// The trace of a run starting now: the running tactic's (a sub-tactic),
/// the context given by [`continuing`], a new trace when tracing is
/// [`enable`]d, else none. The second value says whether the run is nested
/// in another (whose record holds it, so it is not exported on its own).
pub(crate) fn run_starting() -> (Option<RunTrace>, bool) {
    if let Ok(outer) = RUN.try_with(|context| *context) {
        let trace = RunTrace {
            trace_id: outer.trace_id(),
            span_id: random_span_id(),
            parent_span_id: Some(outer.span_id()),
            link: None,
            sampled: outer.sampled(),
        };
        return (Some(trace), true);
    }
    let link = LINK.try_with(|link| *link).ok();
    if let Ok(parent) = PARENT.try_with(|context| *context) {
        let trace = RunTrace {
            trace_id: parent.trace_id(),
            span_id: random_span_id(),
            parent_span_id: Some(parent.span_id()),
            link,
            sampled: parent.sampled(),
        };
        return (Some(trace), false);
    }
    if !enabled() {
        return (None, false);
    }
    let trace = RunTrace {
        trace_id: new_trace_id(),
        span_id: random_span_id(),
        parent_span_id: None,
        link,
        sampled: true,
    };
    (Some(trace), false)
}

/// Runs `future`, a run's work, as the run with trace `trace`.
pub(crate) fn in_run<F: Future>(
    trace: Option<&RunTrace>,
    future: F,
) -> impl Future<Output = F::Output> {
    match trace.and_then(RunTrace::context) {
        Some(context) => Either::Left(RUN.scope(context, future)),
        None => Either::Right(future),
    }
}

/// The model call under way (see [`in_chat`]).
#[derive(Debug)]
pub(crate) struct Chat {
    run: TraceContext,
    /// The call's place, its attempt still to add.
    call: Place,
    attempts: AtomicU32,
}

/// Runs `future`, one model request and its retries, so that each attempt
/// goes out under the span the record's invoke will have. The run's trace
/// is read when this is called, so it is called inside the run (as the
/// agent loop does).
pub(crate) fn in_chat<F: Future>(
    dialog_id: &str,
    step: u32,
    repair: u32,
    future: F,
) -> impl Future<Output = F::Output> {
    match RUN.try_with(|context| *context) {
        Ok(run) => {
            let chat = Chat {
                run,
                call: chat_call(
                    span_text(&run.span_id, &mut [0; 16]),
                    dialog_id,
                    step,
                    repair,
                ),
                attempts: AtomicU32::new(0),
            };
            Either::Left(CHAT.scope(chat, future))
        }
        Err(_) => Either::Right(future),
    }
}

/// The `traceparent` a provider request sends now, when the run has a
/// trace: the span of this attempt of the model call (each call counts one
/// attempt), else the run's span. The header's bytes, made without a
/// `String` (one goes out with every request of a traced run).
pub(crate) fn provider_request() -> Option<[u8; TRACEPARENT_LEN]> {
    if let Ok(context) = CHAT.try_with(|chat| {
        let attempt = chat.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        chat.run.with_span(chat.call.number(attempt.into()).id())
    }) {
        return Some(context.header());
    }
    current_run().map(|context| context.header())
}

/// The running tactic's span, when the run has a trace: what a call to a
/// served tactic goes out under.
pub fn current_run() -> Option<TraceContext> {
    RUN.try_with(|context| *context).ok()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    loop {
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&fastrand::u64(..).to_le_bytes()[..chunk.len()]);
        }
        if bytes != [0; N] {
            return bytes;
        }
    }
}

/// A new trace's id: the time in milliseconds since the Unix epoch in its
/// first six bytes (big-endian), ten random bytes after them, as AWS X-Ray's
/// ids carry their time. The session store indexes each session's trace id
/// (`lllm logs --trace`): random ids land all over that index, and a
/// batch's inserts dirtied a page of it each (five times the SQLite time of
/// ordered ids at 200,000 sessions, and growing with the store), where ids
/// in time order append. The last eight bytes are random, which is what
/// samplers that read the id (the trace-id ratio samplers) and W3C's
/// "random" trace ids rely on.
fn new_trace_id() -> [u8; 16] {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    let mut id = random_bytes::<16>();
    id[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    id
}

fn random_span_id() -> [u8; 8] {
    random_bytes()
}

fn hex(bytes: &[u8]) -> String {
    crate::sha256::hex(bytes)
}

/// Lower-case hex of `bytes` into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xF)];
    }
}

/// `N` bytes from exactly `2N` lower-case hex digits.
pub(crate) fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != N * 2 {
        return None;
    }
    let value = |digit: u8| match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0; N];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = (value(digits[2 * index])? << 4) | value(digits[2 * index + 1])?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_and_writes_back_the_same() {
        let context: TraceContext = HEADER.parse().unwrap();
        assert_eq!(context.to_string(), HEADER);
        assert_eq!(context.span_id_hex(), "00f067aa0ba902b7");
        assert!(context.sampled());
        let unsampled: TraceContext = HEADER.replace("-01", "-00").parse().unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn bad_traceparents_are_refused_with_the_reason() {
        let cases = [
            ("", "fewer than four"),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "fewer than four",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id is not",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "parent id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902-01",
                "parent id is not",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
                "exactly four",
            ),
            (
                "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version is not",
            ),
        ];
        for (text, reason) in cases {
            let error = text.parse::<TraceContext>().unwrap_err().to_string();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
        // A later version may add fields; its first four are read.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert_eq!(later.parse::<TraceContext>().unwrap().to_string(), HEADER);
    }

    #[test]
    fn span_ids_are_derived_the_same_way_every_time_and_differ_by_place() {
        let first = span_id_for("00f067aa0ba902b7", &chat_place("d1", 0, 0, 1));
        // FNV-1a of `00f067aa0ba902b7/chat/d1/0/0/1`, big-endian: pinned, so
        // records exported by a later build keep their ids.
        assert_eq!(hex(&first), "0fe56664055bd414");
        // Hashed in parts, the same id, large numbers too.
        assert_eq!(first, chat_span_id("00f067aa0ba902b7", "d1", 0, 0, 1));
        assert_eq!(
            span_id_for("00f067aa0ba902b7", &chat_place("d-2", 12, 3, u32::MAX)),
            chat_span_id("00f067aa0ba902b7", "d-2", 12, 3, u32::MAX)
        );
        assert_eq!(
            span_id_for("00f067aa0ba902b7", "call/17"),
            Place::new("00f067aa0ba902b7")
                .text("/call/")
                .number(17)
                .id()
        );
        assert_eq!(
            first,
            span_id_for("00f067aa0ba902b7", &chat_place("d1", 0, 0, 1))
        );
        assert_ne!(
            first,
            span_id_for("00f067aa0ba902b7", &chat_place("d1", 0, 0, 2))
        );
        assert_ne!(
            first,
            span_id_for("1111111111111111", &chat_place("d1", 0, 0, 1))
        );
    }

    #[tokio::test]
    async fn a_run_continues_its_parent_and_a_nested_run_its_runner() {
        let parent: TraceContext = HEADER.parse().unwrap();
        let (outer, nested) = continuing(parent, async { run_starting() }).await;
        let outer = outer.unwrap();
        assert!(!nested);
        assert_eq!(outer.trace_id, parent.trace_id());
        assert_eq!(outer.parent_span_id, Some(parent.span_id()));
        let (inner, nested) = in_run(Some(&outer), async { run_starting() }).await;
        assert!(nested);
        assert_eq!(inner.unwrap().parent_span_id, Some(outer.span_id));
        // Each attempt of a model call goes out under its own span.
        // (`in_chat` reads the run's trace when it is called: inside the run,
        // as the agent loop calls it.)
        let sent = in_run(Some(&outer), async {
            in_chat("d1", 0, 0, async {
                [provider_request().unwrap(), provider_request().unwrap()]
            })
            .await
        })
        .await;
        let second = chat_place("d1", 0, 0, 2);
        let expected = outer
            .context()
            .unwrap()
            .with_span(span_id_for(outer.span_id_text(&mut [0; 16]), &second));
        assert_eq!(sent[1], expected.header());
        assert_eq!(std::str::from_utf8(&sent[1]).unwrap(), expected.to_string());
        assert_ne!(sent[0], sent[1]);
    }

    #[test]
    fn a_run_trace_is_written_as_hex_and_read_back_the_same() {
        let link: TraceContext = HEADER.parse().unwrap();
        let trace = RunTrace {
            trace_id: from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            span_id: from_hex("b7ad6b7169203331").unwrap(),
            parent_span_id: Some(from_hex("00f067aa0ba902b7").unwrap()),
            link: Some(link),
            sampled: true,
        };
        let json = serde_json::to_value(trace).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "trace_id": "0af7651916cd43dd8448eb211c80319c",
                "span_id": "b7ad6b7169203331",
                "parent_span_id": "00f067aa0ba902b7",
                "link": HEADER,
                "sampled": true,
            })
        );
        assert_eq!(serde_json::from_value::<RunTrace>(json).unwrap(), trace);
        // Read from text too (a record's line), the optional fields absent
        // or null.
        let bare: RunTrace = serde_json::from_str(
            r#"{"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331", "parent_span_id": null, "sampled": false}"#,
        )
        .unwrap();
        assert_eq!((bare.parent_span_id, bare.link), (None, None));
        assert_eq!(
            serde_json::to_string(&bare).unwrap(),
            r#"{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","sampled":false}"#
        );
        // What does not read is refused, saying what was expected.
        for (field, value, expected) in [
            (
                "trace_id",
                "0AF7651916CD43DD8448EB211C80319C",
                "32 lower-case hex digits",
            ),
            ("span_id", "b7ad6b71692033", "16 lower-case hex digits"),
            ("parent_span_id", "xyz", "16 lower-case hex digits"),
            (
                "link",
                "00-0af7651916cd43dd8448eb211c80319c",
                "bad traceparent",
            ),
        ] {
            let mut json = serde_json::to_value(trace).unwrap();
            json[field] = value.into();
            let error = serde_json::from_value::<RunTrace>(json)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{field}: {error}");
        }
    }

    #[test]
    fn new_trace_ids_start_with_their_time_and_end_random() {
        let before = chrono::Utc::now().timestamp_millis() as u64;
        let ids: Vec<[u8; 16]> = (0..1000).map(|_| new_trace_id()).collect();
        let after = chrono::Utc::now().timestamp_millis() as u64;
        let millis = |id: &[u8; 16]| {
            let mut bytes = [0u8; 8];
            bytes[2..].copy_from_slice(&id[..6]);
            u64::from_be_bytes(bytes)
        };
        for pair in ids.windows(2) {
            assert!(millis(&pair[0]) <= millis(&pair[1]));
        }
        assert!(before <= millis(&ids[0]) && millis(&ids[999]) <= after);
        let tails: std::collections::HashSet<[u8; 8]> =
            ids.iter().map(|id| id[8..].try_into().unwrap()).collect();
        assert_eq!(tails.len(), ids.len());
        // A root context and a run's new trace take such ids.
        let root = TraceContext::new_root();
        assert!(millis(&root.trace_id()) >= before);
    }

    #[tokio::test]
    async fn without_a_context_or_tracing_a_run_has_no_trace() {
        assert_eq!(run_starting(), (None, false));
        assert_eq!(provider_request(), None);
    }
}
