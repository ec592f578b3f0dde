//! OpenTelemetry export end to end (issue 31): the real `lllm` against an
//! `lllm-mock` provider, sending to an OTLP receiver each test starts
//! (tests/common/otlp.rs; HTTP, or gRPC). Span names, attributes, parent and child, trace
//! context through `lllm serve` and onward to the provider, content only
//! when asked for, no secret anywhere, a batch's traces, a dead collector,
//! and `lllm logs export --otlp` with the records' own times.

mod common;

use common::otlp::{Receiver, Span};
use common::serve::{Served, block, records};
use common::{MockServer, Test, closed_port};
use serde_json::Value;

const KEY: &str = "sk-planted-key-5521";
const HEADER_SECRET: &str = "hdr-planted-secret-7734";
const URL_PASSWORD: &str = "url-planted-pass-9918";
const TASK: &str = "Count the words: one two three";
const REPLY: &str = "There are three words.";

/// A one-agent tactic with a command tool, on the mock at `base_url`
/// (with credentials in the URL), its key and a custom header secret.
fn tactic(base_url: &str) -> String {
    let with_password = base_url.replacen("http://", &format!("http://user:{URL_PASSWORD}@"), 1);
    format!(
        r#"tactic_type: counter
global:
  model_name: local/test-model
agent_configs:
  - name: assistant
    system_prompt: "You count."
    tools: [word_count]
providers:
  local: {{api: openai, base_url: "{with_password}", api_key_env: TEST_KEY, headers: {{X-Custom: {HEADER_SECRET}}}, retry_base_ms: 1, retry_cap_ms: 5}}
tools:
  - name: word_count
    description: Count words
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    command: [echo, "3"]
"#
    )
}

const SCRIPT: &str = r#"replies:
  - tool_calls: [{id: call_1, name: word_count, arguments: {text: "one two three"}}]
    usage: {prompt_tokens: 20, completion_tokens: 5}
  - text: "There are three words."
    usage: {prompt_tokens: 30, completion_tokens: 6}
default: {text: ok}
"#;

/// A test dir with the tactic on a fresh mock, exporting to `receiver`.
fn setup(receiver: &Receiver) -> (Test, MockServer) {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), SCRIPT);
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .env("TEST_KEY", KEY)
        .env("LLLM_HOME", "home")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-collector=collector-token")
        .env("OTEL_SERVICE_NAME", "counting-service");
    (test, server)
}

fn named<'s>(spans: &'s [Span], prefix: &str) -> Vec<&'s Span> {
    spans
        .iter()
        .filter(|span| span.name.starts_with(prefix))
        .collect()
}

/// No request the receiver got holds a secret, in any form.
#[track_caller]
fn no_secrets(receiver: &Receiver) {
    for request in receiver.requests() {
        let body = String::from_utf8_lossy(&request.body);
        for secret in [KEY, HEADER_SECRET, URL_PASSWORD] {
            assert!(!body.contains(secret), "{secret} reached the collector");
        }
    }
}

#[test]
fn a_run_sends_genai_spans_parent_to_child_without_content_or_secrets() {
    let receiver = Receiver::start();
    let (test, server) = setup(&receiver);
    let output = test.run(&["run", "t.yaml", "--task", TASK, "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, format!("{REPLY}\n"));
    // A short run flushes before it exits: everything is there already.
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
    let [run] = named(&spans, "invoke_workflow ")[..] else {
        panic!("one run span: {names:?}");
    };
    let [agent] = named(&spans, "invoke_agent ")[..] else {
        panic!("one agent span: {names:?}");
    };
    let chats = named(&spans, "chat ");
    let [tool] = named(&spans, "execute_tool ")[..] else {
        panic!("one tool span: {names:?}");
    };
    assert_eq!(run.name, "invoke_workflow counter");
    assert_eq!(agent.name, "invoke_agent assistant");
    assert_eq!(tool.name, "execute_tool word_count");
    assert_eq!(chats.len(), 2, "{names:?}");
    assert!(chats.iter().all(|chat| chat.name == "chat test-model"));

    // One trace, parent to child: run → agent → chats and tool.
    assert!(spans.iter().all(|span| span.trace_id == run.trace_id));
    assert_eq!(run.parent_span_id, "");
    assert_eq!(agent.parent_span_id, run.span_id);
    assert!(
        chats
            .iter()
            .all(|chat| chat.parent_span_id == agent.span_id)
    );
    assert_eq!(tool.parent_span_id, agent.span_id);
    // The tool ran between the two requests.
    assert!(chats[0].end_unix_nano <= tool.start_unix_nano);
    assert!(tool.end_unix_nano <= chats[1].start_unix_nano + 1_000_000);
    assert!(
        run.start_unix_nano <= agent.start_unix_nano && agent.end_unix_nano <= run.end_unix_nano
    );

    // The conventions' attributes, and lllm's own.
    let first = chats[0];
    assert_eq!(first.kind, 3, "a client span");
    assert_eq!(first.attribute("gen_ai.operation.name"), Some("chat"));
    assert_eq!(first.attribute("gen_ai.provider.name"), Some("local"));
    assert_eq!(first.attribute("gen_ai.request.model"), Some("test-model"));
    assert_eq!(first.attribute("gen_ai.usage.input_tokens"), Some("20"));
    assert_eq!(first.attribute("gen_ai.usage.output_tokens"), Some("5"));
    assert_eq!(
        first.attribute("gen_ai.response.finish_reasons"),
        Some("tool_calls")
    );
    assert_eq!(agent.attribute("gen_ai.agent.name"), Some("assistant"));
    assert_eq!(agent.attribute("lllm.tool_rounds"), Some("1"));
    assert_eq!(tool.attribute("gen_ai.tool.name"), Some("word_count"));
    assert_eq!(tool.attribute("gen_ai.tool.call.id"), Some("call_1"));
    assert_eq!(
        run.attribute("gen_ai.operation.name"),
        Some("invoke_workflow")
    );
    assert_eq!(run.attribute("lllm.state"), Some("success"));
    assert_eq!(run.attribute("lllm.invokes"), Some("2"));
    assert_eq!(
        run.resource.get("service.name").map(String::as_str),
        Some("counting-service")
    );
    let record = test.read_json("record.json");
    assert_eq!(
        run.attribute("lllm.session_id"),
        record["session_id"].as_str()
    );

    // The record keeps the trace, with the run's own span.
    assert_eq!(record["trace"]["trace_id"], run.trace_id.as_str());
    assert_eq!(record["trace"]["span_id"], run.span_id.as_str());

    // Each request went to the provider under its own chat span.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for (request, chat) in requests.iter().zip(&chats) {
        assert_eq!(
            request["traceparent"],
            format!("00-{}-{}-01", chat.trace_id, chat.span_id).as_str()
        );
    }

    // No content unless asked for: no task, no reply, no tool arguments.
    for span in &spans {
        for key in span.attributes.keys() {
            assert!(
                !key.contains("messages") && !key.contains("arguments") && !key.contains("result"),
                "{key} on {}",
                span.name
            );
        }
    }
    for request in receiver.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(!body.contains(TASK) && !body.contains(REPLY) && !body.contains("one two three"));
        // The variables' headers went to the collector.
        assert_eq!(
            request.headers.get("x-collector").map(String::as_str),
            Some("collector-token")
        );
    }
    no_secrets(&receiver);

    // Metrics by the same conventions, and lllm's.
    let metrics = receiver.metric_names();
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "lllm.tasks",
    ] {
        assert!(
            metrics.iter().any(|metric| metric == name),
            "{name} in {metrics:?}"
        );
    }
    // With their values: one run, its two requests, by the resource.
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let (service, tasks) = receiver.metric("lllm.tasks").unwrap();
    assert_eq!(service.as_deref(), Some("counting-service"));
    let Some(Data::Sum(tasks)) = tasks.data else {
        panic!("lllm.tasks is a sum: {tasks:?}");
    };
    assert!(tasks.is_monotonic);
    assert_eq!(tasks.data_points.len(), 1, "{tasks:?}");
    assert_eq!(tasks.data_points[0].value, Some(Value::AsInt(1)));
    let (_, durations) = receiver.metric("gen_ai.client.operation.duration").unwrap();
    assert_eq!(durations.unit, "s");
    let Some(Data::Histogram(durations)) = durations.data else {
        panic!("the duration is a histogram: {durations:?}");
    };
    let counted: u64 = durations.data_points.iter().map(|point| point.count).sum();
    assert_eq!(counted, 2, "{durations:?}");

    // `lllm logs --trace` finds the session by its trace id.
    let listed = test.run(&["logs", "--trace", &run.trace_id.to_uppercase(), "--json"]);
    listed.expect_code(0);
    let lines = listed.json_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["session_id"], record["session_id"]);
    let other = test.run(&[
        "logs",
        "--trace",
        "0af7651916cd43dd8448eb211c80319c",
        "--json",
    ]);
    assert_eq!(other.expect_code(0).stdout, "");
    let bad = test.run(&["logs", "--trace", "xyz"]);
    bad.expect_code(2);
    assert!(
        bad.stderr
            .contains("--trace `xyz`: a trace id is 32 hex digits"),
        "{}",
        bad.stderr
    );
}

#[test]
fn content_is_sent_only_when_asked_for_and_secrets_never() {
    let receiver = Receiver::start();
    let (test, _server) = setup(&receiver);
    let test = test.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    test.run(&["run", "t.yaml", "--task", TASK]).expect_code(0);
    let spans = receiver.spans();
    let run = named(&spans, "invoke_workflow ")[0];
    assert!(
        run.attribute("gen_ai.input.messages")
            .unwrap()
            .contains(TASK)
    );
    assert!(
        run.attribute("gen_ai.output.messages")
            .unwrap()
            .contains(REPLY)
    );
    let tool = named(&spans, "execute_tool ")[0];
    assert_eq!(
        tool.attribute("gen_ai.tool.call.arguments"),
        Some(r#"{"text":"one two three"}"#)
    );
    assert_eq!(tool.attribute("gen_ai.tool.call.result"), Some("3"));
    let chats = named(&spans, "chat ");
    let asked: Value =
        serde_json::from_str(chats[0].attribute("gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(asked[0]["parts"][1]["name"], "word_count");
    no_secrets(&receiver);
}

#[test]
fn a_served_call_continues_the_callers_traceparent() {
    let receiver = Receiver::start();
    let (test, server) = setup(&receiver);
    // Spans go out a moment after each run, not only at shutdown.
    let test = test.env("OTEL_BSP_SCHEDULE_DELAY", "50");
    let served = Served::start(&test, &["t.yaml"]);
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let (status, text) = block(async {
        let client = reqwest::Client::new();
        let answer = client
            .post(format!("{}/tactics/counter/run", served.url))
            .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
            .header("content-type", "application/json")
            .body(format!(r#"{{"input": "{TASK}"}}"#))
            .send()
            .await
            .unwrap();
        (answer.status(), answer.text().await.unwrap())
    });
    assert_eq!(status, 200, "{text}\n{}", served.stderr());
    let spans = receiver.wait_for("the served run's spans", |spans| {
        !named(spans, "invoke_workflow ").is_empty()
    });
    let run = named(&spans, "invoke_workflow ")[0];
    assert_eq!(run.trace_id, caller_trace);
    assert_eq!(run.parent_span_id, caller_span);
    // Onward to the provider, in the caller's trace.
    for request in server.requests() {
        let sent = request["traceparent"].as_str().unwrap();
        assert!(sent.starts_with(&format!("00-{caller_trace}-")), "{sent}");
    }
    let mut found = Vec::new();
    served.eventually("the record", || {
        found = records(&test.path("home/sessions"));
        !found.is_empty()
    });
    assert_eq!(found[0]["trace"]["trace_id"], caller_trace);
    assert_eq!(found[0]["trace"]["parent_span_id"], caller_span);

    // A traceparent that does not read is ignored: the run is a trace of
    // its own (W3C trace context), not a refused call.
    let (status, text) = block(async {
        let client = reqwest::Client::new();
        let answer = client
            .post(format!("{}/tactics/counter/run", served.url))
            .header("traceparent", "00-not-a-trace-01")
            .header("content-type", "application/json")
            .body(r#"{"input": "again"}"#)
            .send()
            .await
            .unwrap();
        (answer.status(), answer.text().await.unwrap())
    });
    assert_eq!(status, 200, "{text}");
    let spans = receiver.wait_for("the second run's spans", |spans| {
        named(spans, "invoke_workflow ").len() == 2
    });
    let second = named(&spans, "invoke_workflow ")[1];
    assert_ne!(second.trace_id, caller_trace);
    assert_eq!(second.parent_span_id, "");
    no_secrets(&receiver);
}

#[test]
fn a_batch_is_one_trace_per_task_linked_to_the_batch_span() {
    let receiver = Receiver::start();
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let yaml = tactic(&server.base_url()).replace("    tools: [word_count]\n", "");
    let tasks: String = (0..4)
        .map(|n| format!("{{\"id\": \"t{n}\", \"task\": \"task {n}\"}}\n"))
        .collect();
    let test = test
        .file("t.yaml", &yaml)
        .file("tasks.jsonl", &tasks)
        .env("TEST_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url);
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let spans = receiver.spans();
    let [batch] = named(&spans, "batch ")[..] else {
        panic!("one batch span");
    };
    let runs = named(&spans, "invoke_workflow ");
    assert_eq!(runs.len(), 4);
    let mut traces: Vec<&str> = runs.iter().map(|run| run.trace_id.as_str()).collect();
    traces.sort();
    traces.dedup();
    assert_eq!(traces.len(), 4, "a trace per task");
    let link = format!("{}-{}", batch.trace_id, batch.span_id);
    for run in &runs {
        assert_ne!(run.trace_id, batch.trace_id);
        assert_eq!(run.links, std::slice::from_ref(&link));
    }
    let mut ids: Vec<&str> = runs
        .iter()
        .map(|run| run.attribute("lllm.task_id").unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["t0", "t1", "t2", "t3"]);
    assert_eq!(batch.attribute("lllm.succeeded"), Some("4"));
}

#[test]
fn a_dead_collector_costs_spans_said_once_never_tasks() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let yaml = tactic(&server.base_url()).replace("    tools: [word_count]\n", "");
    let tasks: String = (0..20)
        .map(|n| format!("{{\"id\": \"t{n}\", \"task\": \"task {n}\"}}\n"))
        .collect();
    let test = test
        .file("t.yaml", &yaml)
        .file("tasks.jsonl", &tasks)
        .env("TEST_KEY", KEY)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{}", closed_port()),
        );
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(0);
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], 20, "{summary}");
    let told = output
        .stderr
        .matches("the collector did not take spans")
        .count();
    assert_eq!(told, 1, "{}", output.stderr);
    // The metrics, sent at the end, fail too: the one line said it already.
    assert!(
        !output.stderr.contains("did not take metrics"),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("the runs were not affected"),
        "{}",
        output.stderr
    );
}

#[test]
fn logs_export_sends_stored_sessions_with_their_own_times() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), SCRIPT);
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .env("TEST_KEY", KEY)
        .env("LLLM_HOME", "home");
    // Run with no exporter: the record has no trace.
    test.run(&["run", "t.yaml", "--task", TASK, "--record", "record.json"])
        .expect_code(0);
    let record = test.read_json("record.json");
    assert_eq!(record.get("trace"), None);
    let receiver = Receiver::start();
    let test = test.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url);
    let output = test.run(&["logs", "export", "--otlp", "--tactic", "counter"]);
    output.expect_code(0);
    assert!(
        output.stdout.starts_with("exported 1 session"),
        "{}",
        output.stdout
    );
    let spans = receiver.spans();
    let run = named(&spans, "invoke_workflow ")[0];
    let started =
        chrono::DateTime::parse_from_rfc3339(record["started_at"].as_str().unwrap()).unwrap();
    let ended = chrono::DateTime::parse_from_rfc3339(record["ended_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        run.start_unix_nano as i64,
        started.timestamp_nanos_opt().unwrap()
    );
    assert_eq!(
        run.end_unix_nano as i64,
        ended.timestamp_nanos_opt().unwrap()
    );
    assert_eq!(named(&spans, "chat ").len(), 2);
    assert_eq!(named(&spans, "execute_tool ").len(), 1);
    // Exported again: the same trace and span ids (derived from the session).
    test.run(&["logs", "export", "--otlp"]).expect_code(0);
    let again: Vec<Span> = receiver.spans().into_iter().skip(spans.len()).collect();
    let rerun = named(&again, "invoke_workflow ")[0];
    assert_eq!(
        (&rerun.trace_id, &rerun.span_id),
        (&run.trace_id, &run.span_id)
    );
    no_secrets(&receiver);

    // Without an endpoint: one line, exit 2.
    let bare = Test::new().env("LLLM_HOME", test.path("home").to_str().unwrap());
    let refused = bare.run(&["logs", "export", "--otlp"]);
    refused.expect_code(2);
    assert!(
        refused
            .stderr
            .contains("no endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{}",
        refused.stderr
    );
}

#[test]
fn the_standard_variables_turn_it_off_and_a_protocol_it_lacks_is_refused() {
    let receiver = Receiver::start();
    let (test, _server) = setup(&receiver);
    let disabled = test.env("OTEL_SDK_DISABLED", "true");
    disabled
        .run(&["run", "t.yaml", "--task", TASK, "--record", "record.json"])
        .expect_code(0);
    assert!(receiver.requests().is_empty());
    assert_eq!(disabled.read_json("record.json").get("trace"), None);

    let (test, server) = setup(&receiver);
    let json = test.env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json");
    let output = json.run(&["run", "t.yaml", "--task", TASK]);
    output.expect_code(2);
    assert!(
        output.stderr.contains(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json: lllm exports over `http/protobuf` (port 4318) or `grpc` (port 4317)"
        ),
        "{}",
        output.stderr
    );
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[test]
fn grpc_export_sends_the_same_spans_with_the_headers_as_metadata() {
    let receiver = Receiver::start_grpc();
    let (test, _server) = setup(&receiver);
    let test = test.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let output = test.run(&["run", "t.yaml", "--task", TASK, "--record", "record.json"]);
    output.expect_code(0);
    assert!(
        !output.stderr.contains("OpenTelemetry"),
        "{}",
        output.stderr
    );
    // Flushed before the run exited, over gRPC to the endpoint as it is.
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
    let [run] = named(&spans, "invoke_workflow ")[..] else {
        panic!("one run span: {names:?}");
    };
    let [agent] = named(&spans, "invoke_agent ")[..] else {
        panic!("one agent span: {names:?}");
    };
    let chats = named(&spans, "chat ");
    let [tool] = named(&spans, "execute_tool ")[..] else {
        panic!("one tool span: {names:?}");
    };
    assert_eq!(run.name, "invoke_workflow counter");
    assert_eq!(chats.len(), 2, "{names:?}");
    assert!(spans.iter().all(|span| span.trace_id == run.trace_id));
    assert_eq!(run.parent_span_id, "");
    assert_eq!(agent.parent_span_id, run.span_id);
    assert!(
        chats
            .iter()
            .all(|chat| chat.parent_span_id == agent.span_id)
    );
    assert_eq!(tool.parent_span_id, agent.span_id);
    assert_eq!(chats[0].attribute("gen_ai.usage.input_tokens"), Some("20"));
    assert_eq!(
        run.resource.get("service.name").map(String::as_str),
        Some("counting-service")
    );
    let record = test.read_json("record.json");
    assert_eq!(record["trace"]["trace_id"], run.trace_id.as_str());
    // Metrics went the same way; every call carried the headers as metadata.
    assert!(
        receiver
            .metric_names()
            .iter()
            .any(|name| name == "gen_ai.client.token.usage")
    );
    let requests = receiver.requests();
    assert!(requests.iter().any(|request| request.path == "/v1/metrics"));
    for request in &requests {
        assert_eq!(
            request.headers.get("x-collector").map(String::as_str),
            Some("collector-token"),
            "{:?}",
            request.headers
        );
        let headers = format!("{:?}", request.headers);
        for secret in [KEY, HEADER_SECRET, URL_PASSWORD] {
            assert!(!headers.contains(secret), "{secret} in the metadata");
        }
    }
    no_secrets(&receiver);
}

#[test]
fn each_signal_takes_its_own_protocol_and_endpoint_over_the_general_ones() {
    // Traces over gRPC to their own endpoint, metrics over HTTP to theirs;
    // the general variables name neither.
    let grpc = Receiver::start_grpc();
    let http = Receiver::start();
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), SCRIPT);
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .env("TEST_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &grpc.url)
        .env(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            &format!("{}/v1/metrics", http.url),
        );
    test.run(&["run", "t.yaml", "--task", TASK]).expect_code(0);
    assert_eq!(named(&grpc.spans(), "invoke_workflow ").len(), 1);
    assert!(grpc.metric_names().is_empty());
    assert!(http.spans().is_empty());
    assert!(
        http.metric_names()
            .iter()
            .any(|name| name == "gen_ai.client.token.usage")
    );
}

#[test]
fn a_dead_grpc_collector_costs_spans_said_once_never_tasks() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let yaml = tactic(&server.base_url()).replace("    tools: [word_count]\n", "");
    let tasks: String = (0..20)
        .map(|n| format!("{{\"id\": \"t{n}\", \"task\": \"task {n}\"}}\n"))
        .collect();
    let test = test
        .file("t.yaml", &yaml)
        .file("tasks.jsonl", &tasks)
        .env("TEST_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_BSP_SCHEDULE_DELAY", "10")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{}", closed_port()),
        );
    let started = std::time::Instant::now();
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(0);
    // Nothing waits on the collector for long: a generous bound that only
    // a run held up by it (a timeout per export) would pass.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], 20, "{summary}");
    let told = output
        .stderr
        .matches("the collector did not take spans")
        .count();
    assert_eq!(told, 1, "{}", output.stderr);
    assert!(
        output.stderr.contains("the runs were not affected"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_call_to_a_served_tactic_carries_the_trace_onward() {
    let receiver = Receiver::start();
    let (test, _server) = setup(&receiver);
    let test = test.env("OTEL_BSP_SCHEDULE_DELAY", "50");
    let served = Served::start(&test, &["t.yaml"]);
    let caller = format!(
        r#"tactic_type: desk
global: {{model_name: mock/echo}}
agent_configs: [{{name: writer}}]
flow:
  - step: count
    tactic: {}/tactics/counter
"#,
        served.url
    );
    let test = test.file("desk.yaml", &caller);
    test.run(&["run", "desk.yaml", "--task", TASK])
        .expect_code(0);
    let spans = receiver.wait_for("both runs' spans", |spans| {
        named(spans, "invoke_workflow ").len() == 2
    });
    let desk = spans
        .iter()
        .find(|span| span.name == "invoke_workflow desk")
        .unwrap();
    let counter = spans
        .iter()
        .find(|span| span.name == "invoke_workflow counter")
        .unwrap();
    // The served run is a child of the calling run, in its trace.
    assert_eq!(counter.trace_id, desk.trace_id);
    assert_eq!(counter.parent_span_id, desk.span_id);
    assert_eq!(desk.attribute("lllm.remote_calls"), Some("1"));
    no_secrets(&receiver);
}
