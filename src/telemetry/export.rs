//! The spans' way to the collector: a bounded queue the runs add to, and
//! one task on the exporter's thread that takes batches from it, puts the
//! resource and scope around them (an `ExportTraceServiceRequest`,
//! `telemetry::wire`), and sends it over HTTP/protobuf (`POST …/v1/traces`)
//! or gRPC (opentelemetry-proto's tonic client, given the request read back
//! into its messages).
//!
//! This takes the place of the SDK's batch span processor and
//! opentelemetry-otlp's span exporter: the spans are written as protobuf
//! directly from the record (`telemetry::spans`, `telemetry::wire`), not
//! made as the SDK's span data that the crate then converted one by one and
//! prost encoded (docs/benchmarks.md, "Telemetry"; docs/decisions.md,
//! "OpenTelemetry: spans written as protobuf from the record"). What is
//! here is the batching and the standard variables' reading the processor
//! and the exporter did: `OTEL_BSP_SCHEDULE_DELAY`,
//! `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//! `OTEL_BSP_EXPORT_TIMEOUT`, and each signal's endpoint, headers, timeout
//! and compression, the signal's own variable over the general one. The
//! metrics (`telemetry::metrics`) go out through the same [`Sender`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
#[cfg(any(test, feature = "otel-grpc"))]
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::wire::{Encoded, Envelope};
use super::{Failures, Protocol};

/// How spans are batched, from the variables every SDK's batch span
/// processor reads (and its defaults).
#[derive(Debug, Clone, Copy)]
pub(super) struct Batching {
    /// At most this long between exports (`OTEL_BSP_SCHEDULE_DELAY`, 5 s).
    pub(super) delay: Duration,
    /// Spans queued or being sent, at most (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048).
    pub(super) queue_size: u64,
    /// Spans in one request, at most; a queue this long is sent at once
    /// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512, no more than the queue).
    pub(super) batch_size: usize,
    /// How long one export may take (`OTEL_BSP_EXPORT_TIMEOUT`, 30 s).
    pub(super) timeout: Duration,
}

/// The most spans `OTEL_BSP_MAX_QUEUE_SIZE` may queue.
const MAX_QUEUE: u64 = 1 << 20;

/// The longest `OTEL_BSP_SCHEDULE_DELAY` and `OTEL_BSP_EXPORT_TIMEOUT`: an hour.
const MAX_MILLIS: u64 = 3_600_000;

impl Batching {
    pub(super) fn read(variable: impl Fn(&str) -> Option<String>) -> Batching {
        let number = |name: &str| {
            variable(name)
                .and_then(|value| value.trim().parse::<u64>().ok())
                .filter(|value| *value > 0)
        };
        // Clamped: a queue of a million spans at most (a few hundred MB),
        // and an hour at most between exports or for one.
        let millis = |name: &str, default: u64| {
            Duration::from_millis(number(name).unwrap_or(default).min(MAX_MILLIS))
        };
        let queue_size = number("OTEL_BSP_MAX_QUEUE_SIZE")
            .unwrap_or(2048)
            .min(MAX_QUEUE);
        let batch_size = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
            .unwrap_or(512)
            .min(queue_size);
        Batching {
            delay: millis("OTEL_BSP_SCHEDULE_DELAY", 5000),
            queue_size,
            batch_size: batch_size as usize,
            timeout: millis("OTEL_BSP_EXPORT_TIMEOUT", 30_000),
        }
    }
}

#[cfg(test)]
pub(super) type TestAnswer =
    Box<dyn Fn(&ExportTraceServiceRequest) -> Result<(), String> + Send + Sync>;

/// Which of OTLP's signals a sender carries: its variables
/// (`OTEL_EXPORTER_OTLP_{TRACES,METRICS}_*`), its path over HTTP and its
/// gRPC service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    /// As in the variables' names: `TRACES`.
    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        }
    }

    /// As in the paths and messages: `traces`.
    fn lower(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }
}

/// Where a signal goes and how.
pub(super) enum Sender {
    /// `POST` to the URL with the headers, the body `application/x-protobuf`.
    Http {
        client: reqwest::Client,
        url: String,
        headers: reqwest::header::HeaderMap,
        /// Each request's (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else the general one).
        timeout: Duration,
    },
    /// The collector's gRPC service of the signal, on this channel, the
    /// headers as metadata.
    #[cfg(feature = "otel-grpc")]
    Grpc {
        channel: tonic::transport::Channel,
        metadata: tonic::metadata::MetadataMap,
    },
    /// A test's collector: given each request, it answers; `early`: its
    /// batches are encoded where they are filled, as over HTTP.
    #[cfg(test)]
    Test { answer: TestAnswer, early: bool },
}

impl Sender {
    /// The sender of `signal` that `protocol` asks for, its endpoint,
    /// headers and timeout from the standard variables (`variable`), with
    /// `client` for HTTP.
    pub(super) fn new(
        signal: Signal,
        protocol: Protocol,
        variable: impl Fn(&str) -> Option<String>,
        client: &super::Client,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Sender, String> {
        let read = |name: &str| variable(name).filter(|value| !value.trim().is_empty());
        let own_or_general = |name: &str| {
            let own = format!("OTEL_EXPORTER_OTLP_{}_{name}", signal.upper());
            match read(&own) {
                Some(value) => Some((own, value)),
                None => {
                    let general = format!("OTEL_EXPORTER_OTLP_{name}");
                    read(&general).map(|value| (general, value))
                }
            }
        };
        if let Some((name, compression)) = own_or_general("COMPRESSION")
            && !compression.trim().eq_ignore_ascii_case("none")
        {
            return Err(format!(
                "{name}={}: lllm sends {} uncompressed (`none`)",
                crate::redact::terminal_line(compression.trim()),
                match signal {
                    Signal::Traces => "spans",
                    Signal::Metrics => "metrics",
                }
            ));
        }
        let headers = headers(own_or_general("HEADERS").map(|(_, value)| value).as_deref());
        let timeout = own_or_general("TIMEOUT")
            .and_then(|(_, millis)| millis.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        let own_endpoint = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper());
        match protocol {
            Protocol::HttpProtobuf => {
                let path = signal.lower();
                let (url, name) = match (read(&own_endpoint), read("OTEL_EXPORTER_OTLP_ENDPOINT")) {
                    (Some(url), _) => (url.trim().to_string(), own_endpoint.as_str()),
                    (None, Some(base)) => {
                        let base = base.trim();
                        let base = base.strip_suffix('/').unwrap_or(base);
                        (format!("{base}/v1/{path}"), "OTEL_EXPORTER_OTLP_ENDPOINT")
                    }
                    (None, None) => (format!("http://localhost:4318/v1/{path}"), ""),
                };
                if let Err(error) = reqwest::Url::parse(&url) {
                    return Err(format!(
                        "{name}: not an endpoint URL ({error}); it is to be like http://localhost:4318"
                    ));
                }
                Ok(Sender::Http {
                    client: client.client.clone(),
                    url,
                    headers,
                    timeout,
                })
            }
            #[cfg(feature = "otel-grpc")]
            Protocol::Grpc => {
                let endpoint = read(&own_endpoint)
                    .or_else(|| read("OTEL_EXPORTER_OTLP_ENDPOINT"))
                    .unwrap_or_else(|| "http://localhost:4317".into());
                let insecure = own_or_general("INSECURE")
                    .map(|(_, value)| value)
                    .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
                let endpoint = endpoint.trim();
                let tls = super::grpc::uses_tls(endpoint, insecure);
                let uri = if endpoint.contains("://") {
                    endpoint.to_string()
                } else if tls {
                    format!("https://{endpoint}")
                } else {
                    format!("http://{endpoint}")
                };
                let bad = |error: &dyn std::fmt::Display| {
                    format!(
                        "OpenTelemetry {}: the gRPC endpoint does not read ({error})",
                        signal.lower()
                    )
                };
                let mut channel = tonic::transport::Endpoint::from_shared(uri)
                    .map_err(|error| bad(&error))?
                    .timeout(timeout);
                if tls {
                    channel = channel
                        .tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots())
                        .map_err(|error| bad(&error))?;
                }
                // The channel starts its task on the exporter's runtime.
                let channel = {
                    let _entered = runtime.enter();
                    channel.connect_lazy()
                };
                Ok(Sender::Grpc {
                    channel,
                    metadata: tonic::metadata::MetadataMap::from_headers(headers),
                })
            }
            #[cfg(not(feature = "otel-grpc"))]
            Protocol::Grpc => {
                let _ = (runtime, timeout, own_endpoint);
                Err(format!(
                    "OpenTelemetry {}: gRPC export needs the `otel-grpc` feature",
                    signal.lower()
                ))
            }
        }
    }

    /// Whether a batch is best encoded where it was filled: over HTTP the
    /// body is the encoded request, made (and the spans freed) on the
    /// thread that made the spans; tonic encodes its own.
    fn encodes_early(&self) -> bool {
        match self {
            Sender::Http { .. } => true,
            #[cfg(feature = "otel-grpc")]
            Sender::Grpc { .. } => false,
            #[cfg(test)]
            Sender::Test { early, .. } => *early,
        }
    }

    /// Sends one batch; `Err` says why the collector did not take it.
    async fn send(&self, batch: Batch, envelope: &Envelope) -> Result<(), String> {
        match self {
            Sender::Http {
                client,
                url,
                headers,
                timeout,
            } => {
                let body = match batch {
                    Batch::Encoded { body, .. } => body,
                    Batch::Spans(spans) => envelope.request(&spans),
                };
                post(client, url, headers, *timeout, body).await
            }
            #[cfg(feature = "otel-grpc")]
            Sender::Grpc { channel, metadata } => {
                use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
                let Batch::Spans(spans) = batch else {
                    return Err("an encoded batch for gRPC".into());
                };
                // tonic sends messages: the request is read back into
                // opentelemetry-proto's (the exporter's thread's work).
                let request: ExportTraceServiceRequest =
                    prost::Message::decode(envelope.request(&spans).as_slice())
                        .map_err(|error| format!("a span did not encode: {error}"))?;
                TraceServiceClient::new(channel.clone())
                    .export(grpc::call(request, metadata))
                    .await
                    .map(|_| ())
                    .map_err(grpc::refused)
            }
            #[cfg(test)]
            Sender::Test { answer, .. } => {
                let body = match batch {
                    Batch::Spans(spans) => envelope.request(&spans),
                    Batch::Encoded { body, .. } => body,
                };
                let request: ExportTraceServiceRequest =
                    prost::Message::decode(body.as_slice()).map_err(|error| error.to_string())?;
                answer(&request)
            }
        }
    }

    /// Sends one metrics request; `Err` says why the collector did not take it.
    pub(super) async fn send_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<(), String> {
        match self {
            Sender::Http {
                client,
                url,
                headers,
                timeout,
            } => {
                let body = prost::Message::encode_to_vec(&request);
                post(client, url, headers, *timeout, body).await
            }
            #[cfg(feature = "otel-grpc")]
            Sender::Grpc { channel, metadata } => {
                use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
                MetricsServiceClient::new(channel.clone())
                    .export(grpc::call(request, metadata))
                    .await
                    .map(|_| ())
                    .map_err(grpc::refused)
            }
            #[cfg(test)]
            Sender::Test { .. } => Err("a test's sender takes spans only".into()),
        }
    }
}

/// `POST`s a protobuf body to `url`.
async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &reqwest::header::HeaderMap,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<(), String> {
    let reply = client
        .post(url)
        .headers(headers.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .timeout(timeout)
        .body(body)
        .send()
        .await
        // Where it went, the URL's credentials and query hidden.
        .map_err(|error| {
            format!(
                "{}: {}",
                crate::redact::place(url),
                with_causes(&error.without_url())
            )
        })?;
    let status = reply.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("{} answered {status}", crate::redact::place(url)))
    }
}

/// A gRPC export's call and its answer, for either signal's client.
#[cfg(feature = "otel-grpc")]
mod grpc {
    /// `request` with the headers as its metadata.
    pub(super) fn call<T>(
        request: T,
        metadata: &tonic::metadata::MetadataMap,
    ) -> tonic::Request<T> {
        let mut call = tonic::Request::new(request);
        *call.metadata_mut() = metadata.clone();
        call
    }

    /// Why the collector did not take it: the status's code and message.
    pub(super) fn refused(status: tonic::Status) -> String {
        format!("{}: {}", status.code(), status.message())
    }
}

/// An error and its causes on one line (reqwest's own says only which
/// request failed; the cause says why: refused, a timeout).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        line.push_str(": ");
        line.push_str(&inner.to_string());
        cause = inner.source();
    }
    line
}

/// `OTEL_EXPORTER_OTLP_HEADERS`' form, `key=value,key2=value2`, the values
/// percent-decoded, as the SDKs read it; a pair that is not a header is
/// left out.
fn headers(text: Option<&str>) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    for pair in text.unwrap_or_default().split_terminator(',') {
        let Some((key, value)) = pair.trim().split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        if key.is_empty() || value.is_empty() {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(key.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
    headers
}

/// The queue and the task that empties it.
pub(super) struct Exporter {
    queue: Arc<Queue>,
    flushes: tokio::sync::mpsc::UnboundedSender<std::sync::mpsc::SyncSender<()>>,
    timeout: Duration,
    failures: Arc<Failures>,
    /// Full batches encoded where they were filled (HTTP), to be sent.
    encoded: Option<(Arc<Envelope>, tokio::sync::mpsc::UnboundedSender<Batch>)>,
}

/// Spans on their way: as messages, or a request encoded already.
enum Batch {
    Spans(Encoded),
    Encoded { body: Vec<u8>, count: u64 },
}

impl Batch {
    fn count(&self) -> u64 {
        match self {
            Batch::Spans(spans) => spans.len() as u64,
            Batch::Encoded { count, .. } => *count,
        }
    }
}

struct Queue {
    spans: Mutex<Encoded>,
    wake: tokio::sync::Notify,
    batch_size: usize,
}

impl Queue {
    /// Up to a batch of the spans queued, the oldest first.
    fn take(&self) -> Encoded {
        self.spans
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take_front(self.batch_size)
    }
}

impl Exporter {
    /// Starts the task on `runtime`: it sends a batch when one is full,
    /// every `batching.delay`, and everything when flushed.
    pub(super) fn start(
        sender: Sender,
        envelope: Envelope,
        batching: Batching,
        failures: Arc<Failures>,
        runtime: &tokio::runtime::Handle,
    ) -> Exporter {
        let queue = Arc::new(Queue {
            spans: Mutex::new(Encoded::default()),
            wake: tokio::sync::Notify::new(),
            batch_size: batching.batch_size.max(1),
        });
        let (flushes, mut flush_asked) =
            tokio::sync::mpsc::unbounded_channel::<std::sync::mpsc::SyncSender<()>>();
        let (encoded, mut encoded_ready) = tokio::sync::mpsc::unbounded_channel::<Batch>();
        let envelope = Arc::new(envelope);
        let encoded = sender
            .encodes_early()
            .then(|| (Arc::clone(&envelope), encoded));
        let task = Task {
            queue: Arc::clone(&queue),
            sender,
            envelope,
            failures: Arc::clone(&failures),
            timeout: batching.timeout,
        };
        runtime.spawn(async move {
            loop {
                let flushed = tokio::select! {
                    () = tokio::time::sleep(batching.delay) => None,
                    () = task.queue.wake.notified() => None,
                    Some(batch) = encoded_ready.recv() => {
                        task.send(batch).await;
                        continue;
                    }
                    asked = flush_asked.recv() => match asked {
                        Some(done) => Some(done),
                        None => return,
                    },
                };
                // What was encoded already is older than what is queued.
                while let Ok(batch) = encoded_ready.try_recv() {
                    task.send(batch).await;
                }
                task.send_queued().await;
                if let Some(done) = flushed {
                    let _ = done.send(());
                }
            }
        });
        Exporter {
            queue,
            flushes,
            timeout: batching.timeout,
            failures,
            encoded,
        }
    }

    /// Adds finished spans to the queue (its bound is the caller's, see
    /// `Traces::send`). A full batch's request is made here, over HTTP (by
    /// the thread that wrote the spans, whose buffer it then frees: glibc
    /// frees another thread's memory at a cost), or else wakes the task.
    pub(super) fn add(&self, spans: &Encoded) {
        let full = {
            let mut queued = self
                .queue
                .spans
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queued.extend_from(spans);
            if queued.len() < self.queue.batch_size {
                return;
            }
            let Some(encoded) = &self.encoded else {
                drop(queued);
                self.queue.wake.notify_one();
                return;
            };
            (queued.take_front(self.queue.batch_size), encoded)
        };
        let (spans, (envelope, encoded)) = full;
        let count = spans.len() as u64;
        let body = envelope.request(&spans);
        let _ = encoded.send(Batch::Encoded { body, count });
    }

    /// Sends everything queued and waits until it is sent (or failed), at
    /// most the export timeout for each batch.
    pub(super) fn flush(&self) {
        let (done, sent) = std::sync::mpsc::sync_channel(1);
        if self.flushes.send(done).is_err() {
            return;
        }
        // Every span not yet through: queued, encoded or in flight.
        let pending = self.failures.pending.load(Ordering::Relaxed) as usize;
        let batches = pending.div_ceil(self.queue.batch_size).max(1) as u32;
        let _ = sent.recv_timeout(self.timeout.saturating_mul(batches));
    }
}

/// The exporter's task: the queue, where it goes, and what failed.
struct Task {
    queue: Arc<Queue>,
    sender: Sender,
    envelope: Arc<Envelope>,
    failures: Arc<Failures>,
    timeout: Duration,
}

impl Task {
    /// Sends the queue's spans, a batch at a time, until it is empty.
    async fn send_queued(&self) {
        loop {
            let spans = self.queue.take();
            if spans.is_empty() {
                return;
            }
            self.send(Batch::Spans(spans)).await;
        }
    }

    /// Sends one batch, and counts what the collector did with it.
    async fn send(&self, batch: Batch) {
        let count = batch.count();
        let sent = self.sender.send(batch, &self.envelope);
        let outcome = match tokio::time::timeout(self.timeout, sent).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!(
                "no answer in {} ms (OTEL_BSP_EXPORT_TIMEOUT)",
                self.timeout.as_millis()
            )),
        };
        self.failures.pending.fetch_sub(count, Ordering::Relaxed);
        match outcome {
            Ok(()) => self.failures.took(),
            Err(error) => {
                self.failures.failed(count);
                if !self.failures.said.swap(true, Ordering::Relaxed) {
                    crate::report::warn(&format!(
                        "OpenTelemetry: the collector did not take spans ({}); they are dropped, the runs go on",
                        crate::provider::trace::shown(&error, &Default::default(), 300)
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: HashMap<String, String> = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        move |name| pairs.get(name).cloned()
    }

    #[test]
    fn batching_reads_the_processors_variables_and_a_batch_is_no_bigger_than_the_queue() {
        let defaults = Batching::read(from(&[]));
        assert_eq!(defaults.delay, Duration::from_secs(5));
        assert_eq!((defaults.queue_size, defaults.batch_size), (2048, 512));
        assert_eq!(defaults.timeout, Duration::from_secs(30));
        let set = Batching::read(from(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "400"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "nonsense"),
        ]));
        assert_eq!(set.delay, Duration::from_millis(10));
        assert_eq!((set.queue_size, set.batch_size), (100, 100));
        assert_eq!(set.timeout, Duration::from_secs(30));
        let huge = Batching::read(from(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "18446744073709551615"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "18446744073709551615"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "18446744073709551615"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "99999999999"),
        ]));
        assert_eq!(huge.delay, Duration::from_secs(3600));
        assert_eq!(huge.queue_size, MAX_QUEUE);
        assert_eq!(huge.batch_size as u64, MAX_QUEUE);
        assert_eq!(huge.timeout, Duration::from_secs(3600));
    }

    #[tokio::test]
    async fn a_collector_that_refuses_is_named_without_the_urls_credentials() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = vec![0u8; 65536];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let envelope = Envelope::new(
            &Default::default(),
            String::new(),
            &Default::default(),
            String::new(),
        );
        let refusing = format!("http://user:s3cret@127.0.0.1:{port}/v1/traces?key=k3y");
        // A port nothing listens on: the transport's error names no secret either.
        let closed = "http://user:s3cret@127.0.0.1:9/v1/traces?key=k3y".to_string();
        for url in [refusing, closed] {
            let sender = Sender::Http {
                client: reqwest::Client::new(),
                url,
                headers: reqwest::header::HeaderMap::new(),
                timeout: Duration::from_secs(30),
            };
            let error = sender
                .send(Batch::Spans(Encoded::default()), &envelope)
                .await
                .unwrap_err();
            assert!(error.contains("127.0.0.1"), "{error}");
            assert!(
                !error.contains("s3cret") && !error.contains("k3y"),
                "{error}"
            );
        }
    }

    #[test]
    fn headers_are_read_as_the_sdks_read_them() {
        let headers = headers(Some(
            "x-collector=collector-token, authorization=Basic%20YWJj,=empty,novalue=,broken",
        ));
        assert_eq!(headers.len(), 2, "{headers:?}");
        assert_eq!(headers["x-collector"], "collector-token");
        assert_eq!(headers["authorization"], "Basic YWJj");
    }

    fn sender(pairs: &[(&str, &str)]) -> Result<Sender, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = super::super::Client::new().unwrap();
        Sender::new(
            Signal::Traces,
            Protocol::HttpProtobuf,
            from(pairs),
            &client,
            runtime.handle(),
        )
    }

    #[test]
    fn the_traces_endpoint_is_taken_as_it_is_and_the_general_one_gets_the_signals_path() {
        let url = |pairs: &[(&str, &str)]| match sender(pairs).unwrap() {
            Sender::Http { url, .. } => url,
            _ => unreachable!(),
        };
        assert_eq!(
            url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/")]),
            "http://h:4318/v1/traces"
        );
        assert_eq!(
            url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/base")]),
            "http://h:4318/base/v1/traces"
        );
        assert_eq!(
            url(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom"),
            ]),
            "http://t:9/custom"
        );
        let error = sender(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")])
            .err()
            .unwrap();
        assert!(
            error.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: not an endpoint URL"),
            "{error}"
        );
        let error = sender(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"),
        ])
        .err()
        .unwrap();
        assert_eq!(
            error,
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip: lllm sends spans uncompressed (`none`)"
        );
        assert!(
            sender(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ])
            .is_ok()
        );
    }
}
