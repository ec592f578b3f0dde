//! The metrics of finished runs, by the GenAI semantic conventions:
//! `gen_ai.client.token.usage` and `gen_ai.client.operation.duration` per
//! request sent, plus lllm's `lllm.cost` (USD) and `lllm.tasks` (runs by
//! outcome), sent over OTLP by the SDK's periodic reader
//! (`OTEL_METRIC_EXPORT_INTERVAL`) and at shutdown.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_semantic_conventions::{attribute as semconv, metric as names};

use crate::SessionRecord;
use crate::tactic::RunState;

pub(super) struct Metrics {
    provider: SdkMeterProvider,
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
    cost: Counter<f64>,
    tasks: Counter<u64>,
}

impl Metrics {
    pub(super) fn new(
        protocol: super::Protocol,
        client: super::Client,
        runtime: &tokio::runtime::Handle,
        resource: Resource,
        scope: opentelemetry::InstrumentationScope,
    ) -> Result<Metrics, String> {
        let built = match protocol {
            super::Protocol::HttpProtobuf => opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build(),
            #[cfg(feature = "otel-grpc")]
            super::Protocol::Grpc => {
                let _entered = runtime.enter();
                let builder = opentelemetry_otlp::MetricExporter::builder().with_tonic();
                super::grpc::with_tls(
                    builder,
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
                )
                .build()
            }
            #[cfg(not(feature = "otel-grpc"))]
            super::Protocol::Grpc => {
                return Err(
                    "OpenTelemetry metrics: gRPC export needs the `otel-grpc` feature".into(),
                );
            }
        };
        let exporter = InRuntime {
            inner: built.map_err(|error| format!("OpenTelemetry metrics: {error}"))?,
            runtime: runtime.clone(),
        };
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter).build())
            .with_resource(resource)
            .build();
        let meter = provider.meter_with_scope(scope);
        // The buckets the conventions advise for each.
        let tokens = meter
            .u64_histogram(names::GEN_AI_CLIENT_TOKEN_USAGE)
            .with_unit("{token}")
            .with_description("Tokens of each request and reply")
            .with_boundaries(vec![
                1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
                4194304.0, 16777216.0, 67108864.0,
            ])
            .build();
        let duration = meter
            .f64_histogram(names::GEN_AI_CLIENT_OPERATION_DURATION)
            .with_unit("s")
            .with_description("Seconds from a request to its reply or error")
            .with_boundaries(vec![
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
                81.92,
            ])
            .build();
        let cost = meter
            .f64_counter("lllm.cost")
            .with_unit("USD")
            .with_description("What the runs' requests cost, where the price is known")
            .build();
        let tasks = meter
            .u64_counter("lllm.tasks")
            .with_unit("{task}")
            .with_description("Finished runs by tactic and outcome")
            .build();
        Ok(Metrics {
            provider,
            tokens,
            duration,
            cost,
            tasks,
        })
    }

    /// Adds a finished run (expanded) to the metrics.
    pub(super) fn record(&self, record: &SessionRecord) {
        let state = match record.state {
            RunState::Success => "success",
            RunState::Failure => "failure",
            RunState::Skipped => "skipped",
        };
        let tactic = KeyValue::new("lllm.tactic", record.tactic.name.clone());
        self.tasks
            .add(1, &[tactic.clone(), KeyValue::new("lllm.state", state)]);
        self.requests(record);
    }

    fn requests(&self, record: &SessionRecord) {
        for call in &record.agent_calls {
            let (provider, _) = call.model.split_once('/').unwrap_or(("", &call.model));
            for invoke in call.invokes.iter().filter(|invoke| !invoke.cached) {
                // One attribute set per request, grown in place: the
                // duration's, then the reply's model and each token type.
                let mut attributes = Vec::with_capacity(6);
                attributes.extend([
                    KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "chat"),
                    KeyValue::new(semconv::GEN_AI_PROVIDER_NAME, provider.to_string()),
                    KeyValue::new(semconv::GEN_AI_REQUEST_MODEL, invoke.request.model.clone()),
                ]);
                if let Some(error) = &invoke.error {
                    let kind = super::spans::error_type(error);
                    attributes.push(KeyValue::new(semconv::ERROR_TYPE, kind));
                }
                self.duration
                    .record(invoke.latency_ms as f64 / 1000.0, &attributes);
                let Some(reply) = &invoke.response else {
                    continue;
                };
                if let Some(model) = &reply.model {
                    attributes.push(KeyValue::new(semconv::GEN_AI_RESPONSE_MODEL, model.clone()));
                }
                let cost = crate::dialog::InvokeCost::from_usage(&reply.usage);
                attributes.push(KeyValue::new(semconv::GEN_AI_TOKEN_TYPE, "input"));
                self.tokens.record(cost.prompt_tokens, &attributes);
                if let Some(kind) = attributes.last_mut() {
                    *kind = KeyValue::new(semconv::GEN_AI_TOKEN_TYPE, "output");
                }
                self.tokens.record(cost.completion_tokens, &attributes);
            }
            if let Some(cost) = call.cost.cost.filter(|cost| *cost > 0.0) {
                let attributes = [
                    KeyValue::new("lllm.tactic", record.tactic.name.clone()),
                    KeyValue::new(semconv::GEN_AI_REQUEST_MODEL, call.model.clone()),
                ];
                self.cost.add(cost, &attributes);
            }
        }
        for session in &record.sub_tactic_sessions {
            self.requests(session);
        }
    }

    pub(super) fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

/// The OTLP metric exporter, its export run in the exporter's runtime (as
/// the spans' is: `super::InRuntime`).
struct InRuntime<E> {
    inner: E,
    runtime: tokio::runtime::Handle,
}

impl<E: PushMetricExporter> PushMetricExporter for InRuntime<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        super::InRuntime::new(&self.runtime, self.inner.export(metrics)).await
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
