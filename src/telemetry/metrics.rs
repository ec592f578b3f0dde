//! The metrics of finished runs, by the GenAI semantic conventions:
//! `gen_ai.client.token.usage` and `gen_ai.client.operation.duration` per
//! request sent, plus lllm's `lllm.cost` (USD) and `lllm.tasks` (runs by
//! outcome), sent over OTLP every `OTEL_METRIC_EXPORT_INTERVAL` and at
//! shutdown.
//!
//! Aggregated here, not by the SDK's meter: the SDK hashes each
//! measurement's attribute set (SipHash over every key and value, after
//! making them `KeyValue`s) to find its series, about 2,000 instructions a
//! measurement and 10,900 a batch task, a fifth of what export cost a task
//! (callgrind, docs/benchmarks.md, "Telemetry"). Here a finished run takes
//! one lock and finds each series by comparing its few strings, and the
//! series become opentelemetry-proto's messages, encoded by prost, only
//! when they are sent. What the SDK did that is kept: explicit-bucket
//! histograms with the conventions' buckets, min and max; monotonic sums;
//! cumulative temporality, or delta where
//! `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` asks for it; at most
//! 2,000 series a metric, the rest in one marked `otel.metric.overflow`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1 as proto;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_semantic_conventions::{attribute as semconv, metric as names};

use super::export::{Sender, Signal};
use crate::SessionRecord;
use crate::tactic::RunState;

/// The most series a metric keeps (the SDK's default cardinality limit);
/// measurements of any other go to one overflow series.
const MAX_SERIES: usize = 2000;

/// `gen_ai.client.token.usage`'s buckets, as the conventions advise.
const TOKEN_BOUNDS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// `gen_ai.client.operation.duration`'s buckets (seconds), as the
/// conventions advise.
const DURATION_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// How sums and histograms are reported over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Temporality {
    /// Since the process started (the default).
    Cumulative,
    /// Since the export before (`delta`, and `lowmemory`, which is delta
    /// for every instrument lllm has).
    Delta,
}

impl Temporality {
    /// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, as the SDK reads
    /// it: a value it does not know is cumulative.
    fn read(variable: &impl Fn(&str) -> Option<String>) -> Temporality {
        match variable("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")
            .map(|value| value.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("delta" | "lowmemory") => Temporality::Delta,
            _ => Temporality::Cumulative,
        }
    }

    fn proto(self) -> i32 {
        match self {
            Temporality::Cumulative => proto::AggregationTemporality::Cumulative as i32,
            Temporality::Delta => proto::AggregationTemporality::Delta as i32,
        }
    }
}

/// An explicit-bucket histogram's state.
#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    /// One per bucket: `bounds.len() + 1`.
    counts: Box<[u64]>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            counts: vec![0; bounds.len() + 1].into_boxed_slice(),
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Counts `value`: bucket `i` holds the values in `(bounds[i-1], bounds[i]]`.
    fn record(&mut self, bounds: &[f64], value: f64) {
        let bucket = bounds.partition_point(|bound| *bound < value);
        self.counts[bucket] += 1;
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }
}

/// One series: its attributes' values (in the order of its table's
/// names; `None` leaves an attribute out) and its state.
#[derive(Debug)]
struct Series<V> {
    hash: u64,
    values: Box<[Option<Box<str>>]>,
    state: V,
}

/// A metric's series. A run's measurements find theirs by a hash of the
/// values and then the values themselves: a handful of short strings.
#[derive(Debug)]
struct Table<V> {
    names: &'static [&'static str],
    series: Vec<Series<V>>,
    /// The measurements of series past [`MAX_SERIES`].
    overflow: Option<V>,
}

impl<V> Table<V> {
    fn new(names: &'static [&'static str]) -> Table<V> {
        Table {
            names,
            series: Vec::new(),
            overflow: None,
        }
    }

    /// The state of the series of `values` (one per name), made by `new`
    /// when it is the first of its series.
    fn entry(&mut self, values: &[Option<&str>], new: impl FnOnce() -> V) -> &mut V {
        debug_assert_eq!(values.len(), self.names.len());
        let hash = hash(values);
        let found = self.series.iter().position(|series| {
            series.hash == hash
                && series
                    .values
                    .iter()
                    .map(Option::as_deref)
                    .eq(values.iter().copied())
        });
        if let Some(index) = found {
            return &mut self.series[index].state;
        }
        if self.series.len() >= MAX_SERIES {
            return self.overflow.get_or_insert_with(new);
        }
        self.series.push(Series {
            hash,
            values: values.iter().map(|value| value.map(Box::from)).collect(),
            state: new(),
        });
        &mut self.series.last_mut().expect("just pushed").state
    }

    /// Each series' attributes and state; the overflow series last.
    fn points(&self) -> impl Iterator<Item = (Vec<KeyValue>, &V)> {
        let series = self.series.iter().map(|series| {
            let attributes = self
                .names
                .iter()
                .zip(series.values.iter())
                .filter_map(|(name, value)| Some(string(name, value.as_deref()?)))
                .collect();
            (attributes, &series.state)
        });
        let overflow = self.overflow.iter().map(|state| {
            let marked = KeyValue {
                key: "otel.metric.overflow".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::BoolValue(true)),
                }),
                ..KeyValue::default()
            };
            (vec![marked], state)
        });
        series.chain(overflow)
    }

    fn is_empty(&self) -> bool {
        self.series.is_empty() && self.overflow.is_none()
    }
}

/// FNV-1a over the values, each ended by a byte no string holds alone.
fn hash(values: &[Option<&str>]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut add = |byte: u8| {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for value in values {
        match value {
            Some(text) => text.bytes().for_each(&mut add),
            None => add(0xfe),
        }
        add(0xff);
    }
    hash
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

/// The attributes of a request's duration.
const DURATION_NAMES: &[&str] = &[
    semconv::GEN_AI_OPERATION_NAME,
    semconv::GEN_AI_PROVIDER_NAME,
    semconv::GEN_AI_REQUEST_MODEL,
    semconv::ERROR_TYPE,
];

/// The attributes of a reply's tokens (each count also has its
/// `gen_ai.token.type`).
const TOKEN_NAMES: &[&str] = &[
    semconv::GEN_AI_OPERATION_NAME,
    semconv::GEN_AI_PROVIDER_NAME,
    semconv::GEN_AI_REQUEST_MODEL,
    semconv::ERROR_TYPE,
    semconv::GEN_AI_RESPONSE_MODEL,
];

const COST_NAMES: &[&str] = &["lllm.tactic", semconv::GEN_AI_REQUEST_MODEL];

const TASK_NAMES: &[&str] = &["lllm.tactic", "lllm.state"];

/// Every metric's series since the last export (delta) or the start.
#[derive(Debug)]
struct Aggregates {
    /// When these began: the process's start, or the export before (delta).
    start: SystemTime,
    durations: Table<Histogram>,
    /// Input and output tokens.
    tokens: Table<[Histogram; 2]>,
    cost: Table<f64>,
    tasks: Table<u64>,
}

impl Aggregates {
    fn new(start: SystemTime) -> Aggregates {
        Aggregates {
            start,
            durations: Table::new(DURATION_NAMES),
            tokens: Table::new(TOKEN_NAMES),
            cost: Table::new(COST_NAMES),
            tasks: Table::new(TASK_NAMES),
        }
    }

    fn is_empty(&self) -> bool {
        self.durations.is_empty()
            && self.tokens.is_empty()
            && self.cost.is_empty()
            && self.tasks.is_empty()
    }

    /// Adds a finished run (expanded).
    fn record(&mut self, record: &SessionRecord) {
        let state = match record.state {
            RunState::Success => "success",
            RunState::Failure => "failure",
            RunState::Skipped => "skipped",
        };
        *self
            .tasks
            .entry(&[Some(&record.tactic.name), Some(state)], || 0) += 1;
        self.requests(record);
    }

    fn requests(&mut self, record: &SessionRecord) {
        for call in &record.agent_calls {
            let (provider, _) = call.model.split_once('/').unwrap_or(("", &call.model));
            for invoke in call.invokes.iter().filter(|invoke| !invoke.cached) {
                let error = invoke.error.as_ref().map(super::spans::error_type);
                let (model, error) = (Some(invoke.request.model.as_str()), error.as_deref());
                self.durations
                    .entry(&[Some("chat"), Some(provider), model, error], || {
                        Histogram::new(DURATION_BOUNDS)
                    })
                    .record(DURATION_BOUNDS, invoke.latency_ms as f64 / 1000.0);
                let Some(reply) = &invoke.response else {
                    continue;
                };
                let values = [
                    Some("chat"),
                    Some(provider),
                    model,
                    error,
                    reply.model.as_deref(),
                ];
                let cost = crate::dialog::InvokeCost::from_usage(&reply.usage);
                let [input, output] = self.tokens.entry(&values, || {
                    [Histogram::new(TOKEN_BOUNDS), Histogram::new(TOKEN_BOUNDS)]
                });
                input.record(TOKEN_BOUNDS, cost.prompt_tokens as f64);
                output.record(TOKEN_BOUNDS, cost.completion_tokens as f64);
            }
            if let Some(cost) = call.cost.cost.filter(|cost| *cost > 0.0) {
                let values = [Some(record.tactic.name.as_str()), Some(call.model.as_str())];
                *self.cost.entry(&values, || 0.0) += cost;
            }
        }
        for session in &record.sub_tactic_sessions {
            self.requests(session);
        }
    }

    /// The metrics as OTLP's messages, at `now`.
    fn metrics(&self, now: SystemTime, temporality: Temporality) -> Vec<proto::Metric> {
        let (start, time) = (nanos(self.start), nanos(now));
        let histogram = |attributes: Vec<KeyValue>, bounds: &[f64], state: &Histogram| {
            proto::HistogramDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: state.count,
                sum: Some(state.sum),
                bucket_counts: state.counts.to_vec(),
                explicit_bounds: bounds.to_vec(),
                min: (state.count > 0).then_some(state.min),
                max: (state.count > 0).then_some(state.max),
                ..proto::HistogramDataPoint::default()
            }
        };
        let sum = |attributes: Vec<KeyValue>, value: proto::number_data_point::Value| {
            proto::NumberDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                value: Some(value),
                ..proto::NumberDataPoint::default()
            }
        };
        let histograms = |data_points| {
            proto::metric::Data::Histogram(proto::Histogram {
                data_points,
                aggregation_temporality: temporality.proto(),
            })
        };
        let sums = |data_points| {
            proto::metric::Data::Sum(proto::Sum {
                data_points,
                aggregation_temporality: temporality.proto(),
                is_monotonic: true,
            })
        };
        let metric = |name: &str, unit: &str, description: &str, data| proto::Metric {
            name: name.into(),
            unit: unit.into(),
            description: description.into(),
            data: Some(data),
            ..proto::Metric::default()
        };
        let mut metrics = Vec::new();
        if !self.durations.is_empty() {
            let points = self.durations.points();
            metrics.push(metric(
                names::GEN_AI_CLIENT_OPERATION_DURATION,
                "s",
                "Seconds from a request to its reply or error",
                histograms(
                    points
                        .map(|(attributes, state)| histogram(attributes, DURATION_BOUNDS, state))
                        .collect(),
                ),
            ));
        }
        if !self.tokens.is_empty() {
            let mut data_points = Vec::new();
            for (attributes, [input, output]) in self.tokens.points() {
                for (kind, state) in [("input", input), ("output", output)] {
                    let mut attributes = attributes.clone();
                    attributes.push(string(semconv::GEN_AI_TOKEN_TYPE, kind));
                    data_points.push(histogram(attributes, TOKEN_BOUNDS, state));
                }
            }
            metrics.push(metric(
                names::GEN_AI_CLIENT_TOKEN_USAGE,
                "{token}",
                "Tokens of each request and reply",
                histograms(data_points),
            ));
        }
        if !self.cost.is_empty() {
            metrics.push(metric(
                "lllm.cost",
                "USD",
                "What the runs' requests cost, where the price is known",
                sums(
                    self.cost
                        .points()
                        .map(|(attributes, cost)| {
                            sum(attributes, proto::number_data_point::Value::AsDouble(*cost))
                        })
                        .collect(),
                ),
            ));
        }
        if !self.tasks.is_empty() {
            metrics.push(metric(
                "lllm.tasks",
                "{task}",
                "Finished runs by tactic and outcome",
                sums(
                    self.tasks
                        .points()
                        .map(|(attributes, tasks)| {
                            // Saturated: no count of runs reaches i64's end.
                            let tasks = i64::try_from(*tasks).unwrap_or(i64::MAX);
                            sum(attributes, proto::number_data_point::Value::AsInt(tasks))
                        })
                        .collect(),
                ),
            ));
        }
        metrics
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// What the export task shares with the runs.
struct Shared {
    aggregates: Mutex<Aggregates>,
    temporality: Temporality,
    resource: Resource,
    scope: InstrumentationScope,
    scope_schema: String,
}

impl Shared {
    /// The request of everything aggregated so far (its sums reset when
    /// delta), or `None` when there is nothing to send.
    fn request(&self) -> Option<ExportMetricsServiceRequest> {
        let now = SystemTime::now();
        let metrics = {
            let mut aggregates = self
                .aggregates
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if aggregates.is_empty() {
                return None;
            }
            let metrics = aggregates.metrics(now, self.temporality);
            if self.temporality == Temporality::Delta {
                *aggregates = Aggregates::new(now);
            }
            metrics
        };
        Some(ExportMetricsServiceRequest {
            resource_metrics: vec![proto::ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![proto::ScopeMetrics {
                    scope: Some(self.scope.clone()),
                    metrics,
                    schema_url: self.scope_schema.clone(),
                }],
                schema_url: String::new(),
            }],
        })
    }
}

/// The metrics of this process's runs, and the task on the exporter's
/// runtime that sends them.
pub(super) struct Metrics {
    shared: Arc<Shared>,
    flushes: tokio::sync::mpsc::UnboundedSender<std::sync::mpsc::SyncSender<()>>,
    timeout: Duration,
}

/// The longest `OTEL_METRIC_EXPORT_INTERVAL` and `OTEL_METRIC_EXPORT_TIMEOUT`: a day.
const MAX_MILLIS: u64 = 86_400_000;

impl Metrics {
    /// Starts the export task on `runtime`, sending over `protocol` where
    /// the variables say, every `OTEL_METRIC_EXPORT_INTERVAL` (60 s).
    pub(super) fn new(
        protocol: super::Protocol,
        variable: impl Fn(&str) -> Option<String>,
        client: &super::Client,
        runtime: &tokio::runtime::Handle,
        resource: &opentelemetry_sdk::Resource,
        scope: &opentelemetry::InstrumentationScope,
        failures: Arc<super::Failures>,
    ) -> Result<Metrics, String> {
        let sender = Sender::new(Signal::Metrics, protocol, &variable, client, runtime)?;
        let millis = |name: &str, default: u64| {
            let set = variable(name)
                .and_then(|value| value.trim().parse::<u64>().ok())
                .filter(|millis| *millis > 0);
            Duration::from_millis(set.unwrap_or(default).min(MAX_MILLIS))
        };
        let interval = millis("OTEL_METRIC_EXPORT_INTERVAL", 60_000);
        let timeout = millis("OTEL_METRIC_EXPORT_TIMEOUT", 30_000);
        let shared = Arc::new(Shared {
            aggregates: Mutex::new(Aggregates::new(SystemTime::now())),
            temporality: Temporality::read(&variable),
            resource: resource_message(resource),
            scope: (scope, None).into(),
            scope_schema: scope.schema_url().unwrap_or_default().to_string(),
        });
        let (flushes, mut flush_asked) =
            tokio::sync::mpsc::unbounded_channel::<std::sync::mpsc::SyncSender<()>>();
        let task = Arc::clone(&shared);
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let flushed = tokio::select! {
                    _ = ticks.tick() => None,
                    asked = flush_asked.recv() => match asked {
                        Some(done) => Some(done),
                        None => return,
                    },
                };
                if let Some(request) = task.request() {
                    let sent = tokio::time::timeout(timeout, sender.send_metrics(request)).await;
                    let error = match sent {
                        Ok(Ok(())) => None,
                        Ok(Err(error)) => Some(error),
                        Err(_) => Some(format!(
                            "no answer in {} ms (OTEL_METRIC_EXPORT_TIMEOUT)",
                            timeout.as_millis()
                        )),
                    };
                    // Said once, spans' failures and the metrics' together.
                    if let Some(error) = error
                        && !failures.said.swap(true, std::sync::atomic::Ordering::Relaxed)
                    {
                        crate::report::warn(&format!(
                            "OpenTelemetry: the collector did not take metrics ({}); the runs go on",
                            crate::provider::trace::shown(&error, &Default::default(), 300)
                        ));
                    }
                }
                if let Some(done) = flushed {
                    let _ = done.send(());
                }
            }
        });
        Ok(Metrics {
            shared,
            flushes,
            timeout,
        })
    }

    /// Adds a finished run (expanded) to the metrics.
    pub(super) fn record(&self, record: &SessionRecord) {
        self.shared
            .aggregates
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .record(record);
    }

    /// Sends what was aggregated and waits for it, at most the export's
    /// timeout.
    pub(super) fn shutdown(&self) {
        let (done, sent) = std::sync::mpsc::sync_channel(1);
        if self.flushes.send(done).is_ok() {
            let _ = sent.recv_timeout(self.timeout);
        }
    }
}

/// The SDK's resource (from the standard variables) as OTLP's message.
fn resource_message(resource: &opentelemetry_sdk::Resource) -> Resource {
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    let attributes = ResourceAttributesWithSchema::from(resource);
    Resource {
        attributes: attributes.attributes.0,
        ..Resource::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_on_a_bound_is_counted_in_the_bucket_it_ends() {
        let bounds = &[1.0, 4.0];
        let mut histogram = Histogram::new(bounds);
        for value in [0.0, 1.0, 1.5, 4.0, 4.5, 100.0] {
            histogram.record(bounds, value);
        }
        assert_eq!(&*histogram.counts, &[2, 2, 2]);
        assert_eq!((histogram.count, histogram.sum), (6, 111.0));
        assert_eq!((histogram.min, histogram.max), (0.0, 100.0));
    }

    #[test]
    fn a_series_is_found_by_its_values_and_those_past_the_limit_overflow() {
        let mut table: Table<u64> = Table::new(TASK_NAMES);
        *table.entry(&[Some("a"), Some("success")], || 0) += 1;
        *table.entry(&[Some("a"), Some("success")], || 0) += 1;
        *table.entry(&[Some("a"), None], || 0) += 1;
        // The same bytes split differently are another series.
        *table.entry(&[Some("as"), Some("uccess")], || 0) += 1;
        let points: Vec<(Vec<KeyValue>, u64)> = table
            .points()
            .map(|(attributes, count)| (attributes, *count))
            .collect();
        assert_eq!(points.len(), 3);
        assert_eq!(points[0].1, 2);
        assert_eq!(
            points[1].0,
            vec![string("lllm.tactic", "a")],
            "an absent value is no attribute"
        );
        for index in 0..MAX_SERIES {
            *table.entry(&[Some(&index.to_string()), None], || 0) += 1;
        }
        assert_eq!(table.series.len(), MAX_SERIES);
        assert_eq!(table.overflow, Some(3));
        let (marked, count) = table.points().last().unwrap();
        assert_eq!(marked[0].key, "otel.metric.overflow");
        assert_eq!(*count, 3);
    }

    #[test]
    fn the_temporality_is_the_variables_and_cumulative_by_default() {
        let with = |value: &'static str| {
            Temporality::read(&move |name: &str| {
                (name == "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")
                    .then(|| value.to_string())
            })
        };
        assert_eq!(with("Delta"), Temporality::Delta);
        assert_eq!(with("lowmemory"), Temporality::Delta);
        assert_eq!(with("cumulative"), Temporality::Cumulative);
        assert_eq!(with("sideways"), Temporality::Cumulative);
    }

    fn shared(temporality: Temporality) -> Shared {
        Shared {
            aggregates: Mutex::new(Aggregates::new(SystemTime::UNIX_EPOCH)),
            temporality,
            resource: Resource::default(),
            scope: InstrumentationScope {
                name: "lllm".into(),
                ..InstrumentationScope::default()
            },
            scope_schema: String::new(),
        }
    }

    fn histogram_points(metric: &proto::Metric) -> &[proto::HistogramDataPoint] {
        match &metric.data {
            Some(proto::metric::Data::Histogram(histogram)) => &histogram.data_points,
            other => panic!("not a histogram: {other:?}"),
        }
    }

    fn sum_points(metric: &proto::Metric) -> (&[proto::NumberDataPoint], i32, bool) {
        match &metric.data {
            Some(proto::metric::Data::Sum(sum)) => (
                &sum.data_points,
                sum.aggregation_temporality,
                sum.is_monotonic,
            ),
            other => panic!("not a sum: {other:?}"),
        }
    }

    fn attribute<'a>(point: &'a [KeyValue], key: &str) -> Option<&'a str> {
        point.iter().find(|pair| pair.key == key).and_then(|pair| {
            match pair.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(text) => Some(text.as_str()),
                _ => None,
            }
        })
    }

    #[test]
    fn runs_become_the_conventions_metrics_summed_over_time_or_since_the_last_export() {
        let record = super::super::tests::finished_run();
        let requests = record.agent_calls[0].invokes.len() as u64;
        let shared = shared(Temporality::Cumulative);
        for _ in 0..2 {
            shared.aggregates.lock().unwrap().record(&record);
        }
        let request = shared.request().expect("something to send");
        let scope = &request.resource_metrics[0].scope_metrics[0];
        let metric = |name: &str| {
            scope
                .metrics
                .iter()
                .find(|metric| metric.name == name)
                .unwrap_or_else(|| panic!("{name} in {:?}", scope.metrics))
        };
        let durations = histogram_points(metric("gen_ai.client.operation.duration"));
        assert_eq!(durations.len(), 1);
        assert_eq!(durations[0].count, 2 * requests);
        assert_eq!(durations[0].bucket_counts.len(), DURATION_BOUNDS.len() + 1);
        assert_eq!(durations[0].bucket_counts.iter().sum::<u64>(), 2 * requests);
        assert_eq!(
            attribute(&durations[0].attributes, "gen_ai.operation.name"),
            Some("chat")
        );
        assert_eq!(
            attribute(&durations[0].attributes, "gen_ai.provider.name"),
            Some("mock")
        );
        assert_eq!(
            attribute(&durations[0].attributes, "gen_ai.request.model"),
            Some("echo")
        );
        assert_eq!(attribute(&durations[0].attributes, "error.type"), None);
        let tokens = histogram_points(metric("gen_ai.client.token.usage"));
        let kinds: Vec<_> = tokens
            .iter()
            .map(|point| attribute(&point.attributes, "gen_ai.token.type"))
            .collect();
        assert_eq!(kinds, [Some("input"), Some("output")]);
        let usage = crate::dialog::InvokeCost::from_usage(
            &record.agent_calls[0].invokes[0]
                .response
                .as_ref()
                .unwrap()
                .usage,
        );
        assert_eq!(tokens[0].sum, Some(2.0 * usage.prompt_tokens as f64));
        assert_eq!(tokens[1].sum, Some(2.0 * usage.completion_tokens as f64));
        let (tasks, temporality, monotonic) = sum_points(metric("lllm.tasks"));
        assert_eq!(
            tasks[0].value,
            Some(proto::number_data_point::Value::AsInt(2))
        );
        assert_eq!(
            attribute(&tasks[0].attributes, "lllm.state"),
            Some("success")
        );
        assert_eq!(attribute(&tasks[0].attributes, "lllm.tactic"), Some("echo"));
        assert_eq!(
            temporality,
            proto::AggregationTemporality::Cumulative as i32
        );
        assert!(monotonic);
        assert_eq!(tasks[0].start_time_unix_nano, 0);
        assert!(tasks[0].time_unix_nano > 0);
        // Cumulative: the next export says the same again.
        let again = shared.request().expect("still there");
        assert_eq!(
            again.resource_metrics[0].scope_metrics[0].metrics.len(),
            scope.metrics.len()
        );

        let shared = super::tests::shared(Temporality::Delta);
        shared.aggregates.lock().unwrap().record(&record);
        let first = shared.request().expect("one run");
        let metrics = &first.resource_metrics[0].scope_metrics[0].metrics;
        let tasks = metrics
            .iter()
            .find(|metric| metric.name == "lllm.tasks")
            .unwrap();
        let (points, temporality, _) = sum_points(tasks);
        assert_eq!(temporality, proto::AggregationTemporality::Delta as i32);
        assert_eq!(
            points[0].value,
            Some(proto::number_data_point::Value::AsInt(1))
        );
        // Delta: nothing since the last export is nothing to send, and the
        // next one starts where that one ended.
        assert!(shared.request().is_none());
        shared.aggregates.lock().unwrap().record(&record);
        let second = shared.request().expect("one more run");
        let metrics = &second.resource_metrics[0].scope_metrics[0].metrics;
        let tasks = metrics
            .iter()
            .find(|metric| metric.name == "lllm.tasks")
            .unwrap();
        let (points, _, _) = sum_points(tasks);
        assert_eq!(
            points[0].value,
            Some(proto::number_data_point::Value::AsInt(1))
        );
        assert!(points[0].start_time_unix_nano > 0);
    }
}
