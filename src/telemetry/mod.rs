//! OpenTelemetry export (feature `otel`; docs/telemetry.md): each finished
//! run's record becomes spans by the GenAI semantic conventions (version
//! [`SEMCONV_VERSION`](crate::telemetry::SEMCONV_VERSION)) and metrics, sent over OTLP (HTTP/protobuf, or
//! gRPC with the `otel-grpc` feature) to the
//! endpoint the standard `OTEL_*` variables name. Live export and export
//! from stored records (`lllm logs export --otlp`) are one conversion
//! (`telemetry::spans`), so a record gives the same spans, ids included, either way.
//!
//! Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces or metrics
//! endpoint of its own) is set; `OTEL_SDK_DISABLED=true` wins. Nothing is
//! sent anywhere else, and a redirect is not followed. The SDK reads the
//! rest of the standard variables itself (sampler, resource, service name,
//! the metrics' endpoint, headers and timeout); `telemetry::export` reads
//! the traces' (and the batch processor's queue, size and delay).
//!
//! The exporter never holds up a run: spans wait in a bounded queue and go
//! out from the exporter's own thread; a collector that fails costs the
//! spans it did not take, said once on stderr.

// The GenAI names of `opentelemetry-semantic-conventions` are deprecated
// as "moved to the GenAI conventions' own repository", which has made no
// release yet; its advice until then is to use these (the same names).
mod export;
#[allow(deprecated)]
mod metrics;
#[allow(deprecated)]
mod spans;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};

use crate::SessionRecord;

/// The version of the OpenTelemetry semantic conventions the spans and
/// metrics follow: the GenAI conventions as that release has them (the
/// last core release holding them; they move to a repository of their own).
pub const SEMCONV_VERSION: &str = "1.42.0";

/// The instrumentation scope's name.
const SCOPE: &str = "lllm";

/// How a signal goes to the collector: `OTEL_EXPORTER_OTLP_PROTOCOL`, or
/// the signal's own `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` /
/// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, which wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `http/protobuf`, the default: `POST {endpoint}/v1/traces` (port 4318).
    #[default]
    HttpProtobuf,
    /// `grpc`: the collector's gRPC services at the endpoint as it is
    /// (`http://localhost:4317` when none is named); the `otel-grpc` feature.
    Grpc,
}

/// What the standard variables ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Export traces (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set, `OTEL_TRACES_EXPORTER` not `none`).
    pub traces: bool,
    /// Export metrics (the endpoint or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
    /// set, `OTEL_METRICS_EXPORTER` not `none`).
    pub metrics: bool,
    /// Message content, tool arguments and results go into spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
    pub capture_content: bool,
    /// How traces are sent.
    pub traces_protocol: Protocol,
    /// How metrics are sent.
    pub metrics_protocol: Protocol,
}

impl Settings {
    /// The settings `variable` gives (the process's environment in
    /// [`Telemetry::from_env`]); `Ok(None)` when nothing is to be exported,
    /// `Err` with one line when a variable asks for what this build cannot
    /// do (`http/json`, or `grpc` without the `otel-grpc` feature).
    pub fn read(variable: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>, String> {
        let set = |name: &str| variable(name).is_some_and(|value| !value.trim().is_empty());
        let is = |name: &str, wanted: &str| {
            variable(name).is_some_and(|value| value.trim().eq_ignore_ascii_case(wanted))
        };
        if is("OTEL_SDK_DISABLED", "true") {
            return Ok(None);
        }
        let base = set("OTEL_EXPORTER_OTLP_ENDPOINT");
        let traces = (base || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            && !is("OTEL_TRACES_EXPORTER", "none");
        let metrics = (base || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
            && !is("OTEL_METRICS_EXPORTER", "none");
        if !traces && !metrics {
            return Ok(None);
        }
        let mut protocols = [Protocol::default(); 3];
        for (protocol, name) in protocols.iter_mut().zip([
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ]) {
            let Some(value) = variable(name).filter(|value| !value.trim().is_empty()) else {
                continue;
            };
            *protocol = match value.trim() {
                "http/protobuf" => Protocol::HttpProtobuf,
                "grpc" if cfg!(feature = "otel-grpc") => Protocol::Grpc,
                "grpc" => {
                    return Err(format!(
                        "{name}=grpc: this program was built without gRPC export (the lllm library's `otel-grpc` feature); `http/protobuf` works, on port 4318"
                    ));
                }
                other => {
                    return Err(format!(
                        "{name}={}: lllm exports over `http/protobuf` (port 4318) or `grpc` (port 4317)",
                        crate::redact::terminal_line(other)
                    ));
                }
            };
        }
        let [all, traces_protocol, metrics_protocol] = protocols;
        let own = |name: &str, protocol: Protocol| if set(name) { protocol } else { all };
        Ok(Some(Settings {
            traces,
            metrics,
            capture_content: is("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
            traces_protocol: own("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", traces_protocol),
            metrics_protocol: own("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", metrics_protocol),
        }))
    }
}

/// The exporter of this process: spans and metrics over OTLP. Built by
/// [`Telemetry::from_env`]; [`Telemetry::install`] makes it the one every
/// finished run goes to; [`Telemetry::shutdown`] (or dropping the last
/// handle) sends what is queued.
pub struct Telemetry {
    settings: Settings,
    traces: Option<Arc<Traces>>,
    metrics: Option<metrics::Metrics>,
    failures: Arc<Failures>,
    // The exporter's requests run here, away from the program's runtime:
    // the SDK's threads wait on them, and a program's runtime may be
    // shutting down (or single-threaded) when it flushes.
    runtime: Option<Runtime>,
    shut: AtomicBool,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Where a run's spans go: the exporter's bounded queue, and its task
/// that sends ([`export`]), given each run's spans. The spans are written
/// as OTLP protobuf from the record directly ([`wire`]), not through a
/// tracer nor as the SDK's span data: the record holds every id and time
/// already, and a tracer's spans (a context, a live span and its lock, the
/// processor's hooks, per span) and the crate's conversion of span data
/// cost a batch more than the export itself.
struct Traces {
    exporter: export::Exporter,
    /// The sampler the variables name (`OTEL_TRACES_SAMPLER`, read by the SDK).
    sampler: Box<dyn ShouldSample>,
    failures: Arc<Failures>,
    /// The queue's size (`OTEL_BSP_MAX_QUEUE_SIZE`).
    queue_size: u64,
}

impl Traces {
    /// Whether a trace is sampled: the sampler asked once for the span at
    /// its root in this process (a run, a batch), whose spans all follow it.
    fn sampled(&self, parent: Option<(SpanId, bool)>, trace_id: TraceId, name: &str) -> bool {
        let parent = parent.map(|(span_id, sampled)| {
            opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
                trace_id,
                span_id,
                if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                },
                true,
                TraceState::NONE,
            ))
        });
        let result = self.sampler.should_sample(
            parent.as_ref(),
            trace_id,
            name,
            &SpanKind::Internal,
            &[],
            &[],
        );
        result.decision == SamplingDecision::RecordAndSample
    }

    /// Makes and queues the spans of `record` (expanded), when sampled.
    fn export(&self, record: &SessionRecord, content: bool) {
        let Some((trace_id, _, parent)) = spans::ids(record) else {
            return;
        };
        let caller_sampled = record.trace.as_ref().is_some_and(|trace| trace.sampled);
        let parent = parent.map(|parent| (parent.span_id, caller_sampled));
        // The built-in samplers read the ids and the parent, not the name.
        if !self.sampled(parent, trace_id, "invoke_workflow") {
            return;
        }
        // A thread's buffers are kept from one run to the next (a batch
        // task's spans took two allocations of a few KB, and their frees,
        // about 1,500 instructions), unless a run made them large.
        thread_local! {
            static BUFFERS: std::cell::Cell<Option<spans::Spans>> =
                const { std::cell::Cell::new(None) };
        }
        let mut spans = BUFFERS.take().unwrap_or_else(|| spans::Spans::new(content));
        spans.content = content;
        spans.record(record, None);
        self.send(&spans.out);
        if spans.capacity() <= 64 * 1024 {
            spans.clear();
            BUFFERS.set(Some(spans));
        }
    }

    /// Into the exporter's queue. A full queue (spans sent and not yet
    /// exported past its size) is a collector that does not keep up: the
    /// spans are dropped, counted, and export is down at once.
    fn send(&self, spans: &wire::Encoded) {
        let count = spans.len() as u64;
        let pending = self.failures.pending.fetch_add(count, Ordering::Relaxed) + count;
        if pending > self.queue_size {
            self.failures.pending.fetch_sub(count, Ordering::Relaxed);
            self.failures.failed(count);
            return;
        }
        self.exporter.add(spans);
    }
}

static GLOBAL: RwLock<Option<Arc<Telemetry>>> = RwLock::new(None);

impl Telemetry {
    /// The exporter the process's `OTEL_*` variables ask for; `Ok(None)`
    /// when they ask for none.
    pub fn from_env() -> Result<Option<Telemetry>, String> {
        let Some(settings) = Settings::read(|name| std::env::var(name).ok())? else {
            return Ok(None);
        };
        Telemetry::new(settings).map(Some)
    }

    /// An exporter with `settings`, the endpoints and the rest from the
    /// standard variables.
    pub fn new(settings: Settings) -> Result<Telemetry, String> {
        let runtime = Runtime::start()?;
        let client = Client::new()?;
        let failures = Arc::new(Failures::default());
        let resource = resource();
        let traces = if settings.traces {
            let variable = |name: &str| std::env::var(name).ok();
            let sender = export::Sender::new(
                export::Signal::Traces,
                settings.traces_protocol,
                variable,
                &client,
                &runtime.handle,
            )?;
            let batching = export::Batching::read(variable);
            let exporter = export::Exporter::start(
                sender,
                wire::Envelope::from_sdk(&resource, &scope()),
                batching,
                Arc::clone(&failures),
                &runtime.handle,
            );
            Some(Arc::new(Traces {
                exporter,
                sampler: opentelemetry_sdk::trace::Config::default().sampler,
                failures: Arc::clone(&failures),
                queue_size: batching.queue_size,
            }))
        } else {
            None
        };
        let metrics = if settings.metrics {
            Some(metrics::Metrics::new(
                settings.metrics_protocol,
                |name: &str| std::env::var(name).ok(),
                &client,
                &runtime.handle,
                &resource,
                &scope(),
                Arc::clone(&failures),
            )?)
        } else {
            None
        };
        Ok(Telemetry {
            settings,
            traces,
            metrics,
            failures,
            runtime: Some(runtime),
            shut: AtomicBool::new(false),
        })
    }

    /// Makes this the exporter every finished run goes to, and makes runs
    /// start traces of their own ([`crate::trace_context::enable`]). The
    /// handle returned flushes and shuts it down when dropped.
    pub fn install(self) -> Installed {
        let telemetry = Arc::new(self);
        if telemetry.traces.is_some() {
            crate::trace_context::enable();
        }
        crate::tactic::on_finished(Some(finished));
        *GLOBAL
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::clone(&telemetry));
        Installed(telemetry)
    }

    /// What the variables asked for.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sends `record` (a finished run's, or one read from the store) as
    /// spans with its own timestamps and ids, and adds it to the metrics.
    pub fn export(&self, record: &SessionRecord) {
        // While the collector is down, a run's spans and metrics are not
        // even made: one atomic load (a clock read only while down).
        if self.traces.is_some() && self.failures.down() {
            self.failures.unsent_runs.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let expanded;
        let record = if needs_expanding(record) || lacks_trace(record) {
            let mut copy = record.clone();
            copy.expand();
            derive_trace(&mut copy, None);
            expanded = copy;
            &expanded
        } else {
            record
        };
        if let Some(traces) = &self.traces {
            traces.export(record, self.settings.capture_content);
        }
        if let Some(metrics) = &self.metrics {
            metrics.record(record);
        }
    }

    /// A span for a whole batch: each task's trace links to it. `None` when
    /// traces are off.
    pub fn batch_span(&self, name: &str) -> Option<BatchSpan> {
        let traces = self.traces.as_ref()?;
        Some(spans::BatchSpan::start(Arc::clone(traces), name))
    }

    /// Sends everything queued and stops the exporter (at most once; a
    /// second call does nothing). Says, once, how many spans a collector
    /// did not take.
    pub fn shutdown(&self) {
        if self.shut.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(traces) = &self.traces {
            traces.exporter.flush();
        }
        if let Some(metrics) = &self.metrics {
            metrics.shutdown();
        }
        let lost = self.failures.spans.load(Ordering::Relaxed);
        let unsent = self.failures.unsent_runs.load(Ordering::Relaxed);
        if lost > 0 || unsent > 0 {
            crate::report::warn(&format!(
                "OpenTelemetry: the collector did not take {}, and {} went unsent while it was down (the runs were not affected)",
                crate::words::count(lost, "span", "spans"),
                crate::words::count(unsent, "run's spans", "runs' spans")
            ));
        }
    }

    /// How many spans the collector did not take so far.
    pub fn dropped_spans(&self) -> u64 {
        self.failures.spans.load(Ordering::Relaxed)
    }
}

/// OTLP over gRPC (feature `otel-grpc`): opentelemetry-proto's tonic
/// clients (`export::Sender`). The endpoint is used as it is (gRPC has no
/// `/v1/traces` path), `http://localhost:4317` when none is named; the
/// headers variables become the requests' metadata; an `https` endpoint
/// (or one without a scheme, unless `…_INSECURE=true`) is TLS on rustls
/// with the webpki roots, as the providers' requests are.
#[cfg(feature = "otel-grpc")]
mod grpc {
    /// Whether a gRPC endpoint is TLS: `https://…`, or no scheme and not
    /// insecure (the OTLP exporter specification's rule).
    pub(super) fn uses_tls(endpoint: &str, insecure: bool) -> bool {
        let endpoint = endpoint.trim();
        match endpoint.split_once("://") {
            Some((scheme, _)) if !scheme.contains(['/', '?', '#']) => {
                scheme.eq_ignore_ascii_case("https")
            }
            _ => !insecure,
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(runtime) = self.runtime.take() {
            runtime.stop();
        }
    }
}

pub use spans::BatchSpan;

/// The installed exporter ([`Telemetry::install`]): flushes and shuts it
/// down when dropped, and takes it out of use.
#[derive(Debug)]
pub struct Installed(Arc<Telemetry>);

impl Installed {
    /// The exporter.
    pub fn telemetry(&self) -> &Telemetry {
        &self.0
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        crate::trace_context::disable();
        crate::tactic::on_finished(None);
        *GLOBAL
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        self.0.shutdown();
    }
}

/// The installed exporter, if any.
pub fn installed() -> Option<Arc<Telemetry>> {
    GLOBAL
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// A run finished (its record scrubbed): to the installed exporter, if any.
fn finished(record: &SessionRecord) {
    if let Some(telemetry) = installed() {
        telemetry.export(record);
    }
}

/// Whether a record, or one of its sub-tactic sessions, has no trace (a run
/// made with no exporter on and no `traceparent`).
fn lacks_trace(record: &SessionRecord) -> bool {
    record.trace.is_none() || record.sub_tactic_sessions.iter().any(lacks_trace)
}

/// Gives a record without a trace one derived from its session id (the
/// same every time: exporting it twice gives one trace), its sub-tactic
/// sessions children of its span.
fn derive_trace(record: &mut SessionRecord, parent: Option<&crate::trace_context::RunTrace>) {
    if record.trace.is_none() {
        let digest = crate::sha256::Sha256::digest(record.session_id.as_bytes());
        let (mut trace_id, mut span_id) = ([0; 16], [0; 8]);
        trace_id.copy_from_slice(&digest[..16]);
        span_id.copy_from_slice(&digest[16..24]);
        record.trace = Some(crate::trace_context::RunTrace {
            trace_id: parent.map_or(trace_id, |parent| parent.trace_id),
            span_id,
            parent_span_id: parent.map(|parent| parent.span_id),
            link: None,
            sampled: true,
        });
    }
    let own = record.trace;
    for session in &mut record.sub_tactic_sessions {
        derive_trace(session, own.as_ref());
    }
}

/// Whether a record is in its written form (replies held by their dialogs).
fn needs_expanding(record: &SessionRecord) -> bool {
    record.shared.is_some()
        || record
            .agent_calls
            .iter()
            .flat_map(|call| &call.invokes)
            .any(|invoke| invoke.response_in_dialog)
        || record.sub_tactic_sessions.iter().any(needs_expanding)
}

/// The instrumentation scope, all of it static text (each span holds a copy).
fn scope() -> InstrumentationScope {
    const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.42.0";
    InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(SCHEMA_URL)
        .build()
}

/// The SDK's resource (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`),
/// the service named `lllm` when neither names it.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    let builder = if named {
        builder
    } else {
        builder.with_service_name("lllm")
    };
    builder
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Spans the collector did not take, and whether that was said; while
/// it is down (after a failed export, for a while that doubles with each
/// failure in a row, up to [`DOWN_MAX`]), runs' spans are not made at all,
/// so a dead collector costs a batch next to nothing.
#[derive(Debug)]
struct Failures {
    spans: AtomicU64,
    said: AtomicBool,
    /// Failed exports in a row.
    in_a_row: AtomicU64,
    /// Until when (milliseconds since the Unix epoch) the collector is taken to be down.
    down_until: AtomicU64,
    /// Runs whose spans were not made while it was down.
    unsent_runs: AtomicU64,
    /// Spans handed to the processor and not yet exported (or failed).
    pending: AtomicU64,
    /// How long it is down after a first failure ([`DOWN_FIRST`]).
    first: Duration,
}

impl Default for Failures {
    fn default() -> Self {
        Failures::down_first_for(DOWN_FIRST)
    }
}

/// How long a collector is taken to be down after its first failure, and at most.
const DOWN_FIRST: Duration = Duration::from_secs(5);
const DOWN_MAX: Duration = Duration::from_secs(300);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

impl Failures {
    fn down_first_for(first: Duration) -> Failures {
        Failures {
            spans: AtomicU64::new(0),
            said: AtomicBool::new(false),
            in_a_row: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
            unsent_runs: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            first,
        }
    }

    /// One atomic load while up; the clock is read only while down.
    fn down(&self) -> bool {
        let until = self.down_until.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    fn failed(&self, spans: u64) {
        self.spans.fetch_add(spans, Ordering::Relaxed);
        let in_a_row = self.in_a_row.fetch_add(1, Ordering::Relaxed).min(16);
        let wait = self.first.saturating_mul(1 << in_a_row).min(DOWN_MAX);
        self.down_until
            .store(now_ms() + wait.as_millis() as u64, Ordering::Relaxed);
    }

    fn took(&self) {
        self.in_a_row.store(0, Ordering::Relaxed);
        self.down_until.store(0, Ordering::Relaxed);
    }
}

/// A thread with a small runtime of its own, where the exporter's HTTP
/// requests run.
#[derive(Debug)]
struct Runtime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Runtime {
    fn start() -> Result<Runtime, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| {
                format!("OpenTelemetry: cannot start the exporter's runtime: {error}")
            })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("lllm-otel".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|error| {
                format!("OpenTelemetry: cannot start the exporter's thread: {error}")
            })?;
        Ok(Runtime {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The exporter's HTTP client: our reqwest, on the exporter's runtime,
/// following no redirect (nothing goes where the user did not say).
#[derive(Debug, Clone)]
struct Client {
    client: reqwest::Client,
}

impl Client {
    fn new() -> Result<Client, String> {
        let timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
            .ok()
            .and_then(|millis| millis.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()
            .map_err(|error| format!("OpenTelemetry: cannot build the HTTP client: {error}"))?;
        Ok(Client { client })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        let pairs: HashMap<String, String> = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        Settings::read(|name| pairs.get(name).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_is_named_and_disabled_wins() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(read(&[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        let on = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")])
            .unwrap()
            .unwrap();
        assert!(on.traces && on.metrics && !on.capture_content);
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(read(&disabled), Ok(None));
        let traces_only = read(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/v1/traces")])
            .unwrap()
            .unwrap();
        assert!(traces_only.traces && !traces_only.metrics);
        let no_metrics = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ];
        let settings = read(&no_metrics).unwrap().unwrap();
        assert!(settings.traces && !settings.metrics && settings.capture_content);
    }

    #[test]
    fn the_protocol_is_the_signals_own_else_the_general_one_and_http_json_is_refused() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317");
        let plain = read(&[endpoint]).unwrap().unwrap();
        assert_eq!(
            (plain.traces_protocol, plain.metrics_protocol),
            (Protocol::HttpProtobuf, Protocol::HttpProtobuf)
        );
        let json = [endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")];
        let error = read(&json).unwrap_err();
        assert!(
            error.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=http/json: lllm exports over `http/protobuf` (port 4318) or `grpc`"),
            "{error}"
        );
        let proto = [endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
        assert!(read(&proto).unwrap().is_some());
        let grpc = [endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        let mixed = [
            endpoint,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ];
        let traces_only = [endpoint, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")];
        if cfg!(feature = "otel-grpc") {
            let all = read(&grpc).unwrap().unwrap();
            assert_eq!(
                (all.traces_protocol, all.metrics_protocol),
                (Protocol::Grpc, Protocol::Grpc)
            );
            let mixed = read(&mixed).unwrap().unwrap();
            assert_eq!(
                (mixed.traces_protocol, mixed.metrics_protocol),
                (Protocol::Grpc, Protocol::HttpProtobuf)
            );
            let own = read(&traces_only).unwrap().unwrap();
            assert_eq!(
                (own.traces_protocol, own.metrics_protocol),
                (Protocol::Grpc, Protocol::HttpProtobuf)
            );
        } else {
            let error = read(&grpc).unwrap_err();
            assert!(
                error.starts_with(
                    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: this program was built without gRPC export"
                ),
                "{error}"
            );
        }
    }

    #[cfg(feature = "otel-grpc")]
    #[test]
    fn a_grpc_endpoint_is_tls_when_https_or_without_a_scheme_and_not_insecure() {
        assert!(grpc::uses_tls("https://collector:4317", false));
        assert!(grpc::uses_tls("HTTPS://collector:4317", true));
        assert!(!grpc::uses_tls("http://localhost:4317", false));
        assert!(grpc::uses_tls("collector:4317", false));
        assert!(!grpc::uses_tls("collector:4317", true));
    }

    #[test]
    fn the_scopes_schema_is_the_pinned_conventions_version() {
        let scope = scope();
        assert_eq!(
            scope.schema_url(),
            Some(format!("https://opentelemetry.io/schemas/{SEMCONV_VERSION}").as_str())
        );
    }

    #[test]
    fn a_collector_is_down_for_longer_after_each_failure_in_a_row_and_up_when_it_takes() {
        let failures = Failures::default();
        assert!(!failures.down());
        failures.failed(10);
        assert!(failures.down());
        let first = failures.down_until.load(Ordering::Relaxed) - now_ms();
        assert!(first <= DOWN_FIRST.as_millis() as u64);
        failures.failed(5);
        let second = failures.down_until.load(Ordering::Relaxed) - now_ms();
        assert!(second > DOWN_FIRST.as_millis() as u64, "{second}");
        for _ in 0..40 {
            failures.failed(1);
        }
        let longest = failures.down_until.load(Ordering::Relaxed) - now_ms();
        assert!(longest <= DOWN_MAX.as_millis() as u64);
        assert_eq!(failures.spans.load(Ordering::Relaxed), 55);
        failures.took();
        assert!(!failures.down());
    }

    /// An exporter of spans only, to a collector that takes nothing
    /// (counting the spans it is given), exporting when flushed, down for
    /// an hour after a first failure (no test here waits on a clock), with
    /// a queue of `queue_size`.
    fn refused(queue_size: u64) -> (Telemetry, Arc<AtomicU64>) {
        collector(queue_size, 512, false, false)
    }

    /// An exporter of spans only, to a collector that takes them (`takes`)
    /// or not, counting the spans it is given; `batch_size` spans make a
    /// batch (encoded where it is filled with `early`), else exported when
    /// flushed only; down for an hour after a first failure.
    fn collector(
        queue_size: u64,
        batch_size: usize,
        early: bool,
        takes: bool,
    ) -> (Telemetry, Arc<AtomicU64>) {
        let runtime = Runtime::start().unwrap();
        let failures = Arc::new(Failures::down_first_for(Duration::from_secs(3600)));
        let given = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&given);
        let answer: export::TestAnswer = Box::new(move |request| {
            let spans: usize = request
                .resource_spans
                .iter()
                .flat_map(|resource| &resource.scope_spans)
                .map(|scope| scope.spans.len())
                .sum();
            counted.fetch_add(spans as u64, Ordering::Relaxed);
            if takes {
                Ok(())
            } else {
                Err("connection refused".into())
            }
        });
        let sender = export::Sender::Test { answer, early };
        let batching = export::Batching {
            delay: Duration::from_secs(3600),
            queue_size,
            batch_size,
            timeout: Duration::from_secs(30),
        };
        let exporter = export::Exporter::start(
            sender,
            wire::Envelope::from_sdk(&resource(), &scope()),
            batching,
            Arc::clone(&failures),
            &runtime.handle,
        );
        let traces = Traces {
            exporter,
            sampler: Box::new(opentelemetry_sdk::trace::Sampler::AlwaysOn),
            failures: Arc::clone(&failures),
            queue_size,
        };
        let telemetry = Telemetry {
            settings: Settings {
                traces: true,
                metrics: false,
                capture_content: false,
                traces_protocol: Protocol::HttpProtobuf,
                metrics_protocol: Protocol::HttpProtobuf,
            },
            traces: Some(Arc::new(traces)),
            metrics: None,
            failures,
            runtime: Some(runtime),
            shut: AtomicBool::new(false),
        };
        (telemetry, given)
    }

    /// A finished run's record: a workflow span and a request's.
    pub(super) fn finished_run() -> SessionRecord {
        let yaml = "tactic_type: echo\nagent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]\n";
        let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tactic.run("hello".into()))
    }

    #[test]
    fn a_failed_export_puts_export_down_at_once_and_no_span_is_made_while_down() {
        let (telemetry, given) = refused(2048);
        let failures = Arc::clone(&telemetry.failures);
        let record = finished_run();
        telemetry.export(&record);
        let made = failures.pending.load(Ordering::Relaxed);
        assert!(made >= 2, "{made}");
        assert!(!failures.down());
        let traces = telemetry.traces.as_ref().unwrap();
        // One export, refused once (no retry): down at once.
        traces.exporter.flush();
        assert_eq!(given.load(Ordering::Relaxed), made);
        assert!(failures.down());
        assert_eq!(failures.in_a_row.load(Ordering::Relaxed), 1);
        assert_eq!(failures.spans.load(Ordering::Relaxed), made);
        assert_eq!(failures.pending.load(Ordering::Relaxed), 0);
        // While down, runs' spans are not made: none queued, none given.
        for _ in 0..3 {
            telemetry.export(&record);
        }
        assert_eq!(failures.pending.load(Ordering::Relaxed), 0);
        traces.exporter.flush();
        assert_eq!(given.load(Ordering::Relaxed), made);
        assert_eq!(failures.unsent_runs.load(Ordering::Relaxed), 3);
        assert_eq!(telemetry.dropped_spans(), made);
        // Up again (a later export taken), spans are made again.
        failures.took();
        telemetry.export(&record);
        assert_eq!(failures.pending.load(Ordering::Relaxed), made);
    }

    #[test]
    fn a_full_queue_drops_the_spans_and_puts_export_down_at_once() {
        let (telemetry, given) = refused(1);
        let failures = Arc::clone(&telemetry.failures);
        let record = finished_run();
        telemetry.export(&record);
        assert!(failures.down());
        let lost = failures.spans.load(Ordering::Relaxed);
        assert!(lost >= 2, "{lost}");
        assert_eq!(failures.pending.load(Ordering::Relaxed), 0);
        telemetry.export(&record);
        assert_eq!(failures.unsent_runs.load(Ordering::Relaxed), 1);
        telemetry.traces.as_ref().unwrap().exporter.flush();
        assert_eq!(given.load(Ordering::Relaxed), 0);
        assert_eq!(failures.spans.load(Ordering::Relaxed), lost);
    }

    #[test]
    fn a_full_batch_is_encoded_where_it_was_filled_and_every_span_arrives_once() {
        let record = finished_run();
        // A run's spans, counted where nothing is sent before a flush.
        let (counting, _) = collector(2048, 512, false, true);
        counting.export(&record);
        let per_run = counting.failures.pending.load(Ordering::Relaxed);
        assert!(per_run >= 2, "{per_run}");
        for early in [true, false] {
            let (telemetry, given) = collector(2048, 2, early, true);
            for _ in 0..5 {
                telemetry.export(&record);
            }
            let failures = Arc::clone(&telemetry.failures);
            let made = 5 * per_run;
            telemetry.traces.as_ref().unwrap().exporter.flush();
            assert_eq!(given.load(Ordering::Relaxed), made, "early: {early}");
            assert_eq!(failures.pending.load(Ordering::Relaxed), 0);
            assert_eq!(telemetry.dropped_spans(), 0);
        }
    }
}
