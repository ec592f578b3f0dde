//! An OTLP receiver for the telemetry tests: a listener on 127.0.0.1 that
//! takes `POST /v1/traces` and `/v1/metrics` (protobuf), answers 200, and
//! keeps each request, decoded with `opentelemetry-proto`. Plain HTTP/1.1
//! on threads, so it runs beside the `lllm` it receives from; or, with
//! [`Receiver::start_grpc`], the collector's gRPC services (opentelemetry-proto's,
//! served by tonic on a runtime of its own), each call kept as the same
//! request would be over HTTP, its metadata as the headers.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use prost::Message as _;

/// One request as it came: path, headers (lower-case names), body.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A span as the tests read it: ids in hex, attributes as text.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub kind: i32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: BTreeMap<String, String>,
    /// `trace_id-span_id` of each link.
    pub links: Vec<String>,
    pub status_code: i32,
    pub status_message: String,
    /// The resource's attributes.
    pub resource: BTreeMap<String, String>,
}

impl Span {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// The gRPC server's: stops it when the receiver is dropped.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The collector's two gRPC services, keeping what they are sent.
#[derive(Clone)]
struct Collector {
    received: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    fn keep(&self, path: &str, metadata: &tonic::metadata::MetadataMap, body: Vec<u8>) {
        let headers = metadata
            .clone()
            .into_headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        self.received.lock().unwrap().push(Received {
            path: path.to_string(),
            headers,
            body,
        });
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(
            "/v1/traces",
            request.metadata(),
            request.get_ref().encode_to_vec(),
        );
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.keep(
            "/v1/metrics",
            request.metadata(),
            request.get_ref().encode_to_vec(),
        );
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Receiver {
            url,
            received,
            stop: None,
        }
    }

    /// An OTLP/gRPC receiver: the collector's trace and metrics services on
    /// 127.0.0.1, served until the receiver is dropped.
    pub fn start_grpc() -> Receiver {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let collector = Collector {
            received: received.clone(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let server = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(collector.clone()))
                .add_service(MetricsServiceServer::new(collector))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stopped.await;
                    },
                );
            runtime.block_on(server).expect("the gRPC receiver");
        });
        Receiver {
            url,
            received,
            stop: Some(stop),
        }
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every span received so far, in the order they came.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        for request in self.requests() {
            if request.path != "/v1/traces" {
                continue;
            }
            let decoded = ExportTraceServiceRequest::decode(request.body.as_slice())
                .expect("an OTLP trace request");
            for resource_spans in decoded.resource_spans {
                let resource = resource_spans
                    .resource
                    .map(|resource| attributes(&resource.attributes))
                    .unwrap_or_default();
                for scope_spans in resource_spans.scope_spans {
                    for span in scope_spans.spans {
                        let status = span.status.clone().unwrap_or_default();
                        spans.push(Span {
                            name: span.name,
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_span_id: hex(&span.parent_span_id),
                            kind: span.kind,
                            start_unix_nano: span.start_time_unix_nano,
                            end_unix_nano: span.end_time_unix_nano,
                            attributes: attributes(&span.attributes),
                            links: span
                                .links
                                .iter()
                                .map(|link| {
                                    format!("{}-{}", hex(&link.trace_id), hex(&link.span_id))
                                })
                                .collect(),
                            status_code: status.code,
                            status_message: status.message,
                            resource: resource.clone(),
                        });
                    }
                }
            }
        }
        spans
    }

    /// Every metric received so far, in order, each with the `service.name`
    /// of the resource that sent it.
    pub fn metrics(&self) -> Vec<(Option<String>, Metric)> {
        let mut metrics = Vec::new();
        for request in self.requests() {
            if request.path != "/v1/metrics" {
                continue;
            }
            let decoded = ExportMetricsServiceRequest::decode(request.body.as_slice())
                .expect("an OTLP metrics request");
            for resource_metrics in decoded.resource_metrics {
                let service = resource_metrics
                    .resource
                    .and_then(|resource| attributes(&resource.attributes).remove("service.name"));
                for scope in resource_metrics.scope_metrics {
                    metrics.extend(
                        scope
                            .metrics
                            .into_iter()
                            .map(|metric| (service.clone(), metric)),
                    );
                }
            }
        }
        metrics
    }

    /// The names of the metrics received so far.
    pub fn metric_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .metrics()
            .into_iter()
            .map(|(_, metric)| metric.name)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The last `name` metric received, and the `service.name` of the
    /// resource that sent it.
    pub fn metric(&self, name: &str) -> Option<(Option<String>, Metric)> {
        self.metrics()
            .into_iter()
            .rev()
            .find(|(_, metric)| metric.name == name)
    }

    /// Waits until `check` holds of the spans received (a minute at most).
    #[track_caller]
    pub fn wait_for(&self, what: &str, check: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if check(&spans) {
                return spans;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
                panic!("{what}: not within a minute; spans received: {names:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn attributes(
    pairs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            (
                pair.key.clone(),
                pair.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

/// An attribute's value as text: strings as they are, arrays joined by `,`.
fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::DoubleValue(number)) => number.to_string(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(any_value::Value::ArrayValue(array)) => {
            array.values.iter().map(text).collect::<Vec<_>>().join(",")
        }
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Requests on one connection until it closes.
fn serve(stream: TcpStream, kept: &Mutex<Vec<Received>>) {
    let mut writer = stream.try_clone().expect("clone stream");
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|length| length.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        kept.lock().unwrap().push(Received {
            path,
            headers,
            body,
        });
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
