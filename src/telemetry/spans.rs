//! A session record as spans, by the GenAI semantic conventions: the run
//! (`invoke_workflow {tactic}`), each agent call (`invoke_agent {agent}`),
//! each request to a model, retries and repairs each their own
//! (`chat {model}`), and each tool the model called (`execute_tool
//! {name}`), lllm's own attributes under `lllm.*`. Times are the record's:
//! the run's and each call's start and end; a request starts where the one
//! before it ended (with its wait), and a round of tools fills the time
//! between the request that asked for it and the next (records keep no
//! time per tool).
//!
//! Span ids are the record's: the run's span is `trace.span_id`, every
//! other one is derived from it and its place
//! (`crate::trace_context::Place`), as the `traceparent` of a
//! request was when it went out.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_proto::tonic::trace::v1::span;
use opentelemetry_semantic_conventions::attribute as semconv;
use serde_json::Value;

use super::wire::{self, Attributes};
use crate::SessionRecord;
use crate::agent::{AgentCallSession, InvokeTrace};
use crate::tactic::RunState;
use crate::trace_context::{Place, chat_span_id};

/// The spans of one record as they are made: whether they hold content,
/// the attributes of the span being made, and the finished spans, in the
/// order they were made, encoded for the exporter's queue.
pub(super) struct Spans {
    /// Whether they hold content.
    pub(super) content: bool,
    /// The next span's attributes, written as they are added.
    attributes: Attributes,
    /// The spans made so far.
    pub(super) out: wire::Encoded,
}

/// One span to make: its id, name, kind, times, link and error; its
/// attributes are the ones written to [`Spans`] since the last span.
struct Planned<'a> {
    span_id: [u8; 8],
    /// Its operation and what it acted on: `("chat", "gpt-4o")`.
    name: (&'a str, &'a str),
    kind: span::SpanKind,
    start: SystemTime,
    end: SystemTime,
    link: Option<wire::Link>,
    error: Option<&'a str>,
}

/// A span's parent: its id, and whether it is another process's (the
/// caller of a served run).
#[derive(Clone, Copy)]
pub(super) struct Parent {
    pub(super) span_id: SpanId,
    pub(super) remote: bool,
}

/// Nanoseconds since the Unix epoch, as OTLP's times are.
fn nanos(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

impl Spans {
    pub(super) fn new(content: bool) -> Spans {
        // Room for a run of a few spans without growing (a batch task's
        // three take about 1.5 KB).
        Spans {
            content,
            attributes: Attributes::with_capacity(1024),
            out: wire::Encoded::with_capacity(4096, 8),
        }
    }

    /// The bytes its buffers have room for.
    pub(super) fn capacity(&self) -> usize {
        self.attributes.capacity() + self.out.capacity()
    }

    /// Forgets the spans made, keeping the room they took.
    pub(super) fn clear(&mut self) {
        self.attributes.clear();
        self.out.clear();
    }

    /// Makes `planned`, with the attributes written since the last span, a
    /// finished span of `trace_id` under `parent`, encoded directly from
    /// the record (which holds every id and time already).
    fn emit(&mut self, trace_id: TraceId, planned: Planned<'_>, parent: Option<Parent>) -> Parent {
        self.out.push(&wire::Fields {
            trace_id: trace_id.to_bytes(),
            span_id: planned.span_id,
            parent_span_id: parent.map(|parent| parent.span_id.to_bytes()),
            flags: wire::flags(true, parent.is_some_and(|parent| parent.remote)),
            name: planned.name,
            kind: planned.kind,
            start_nanos: nanos(planned.start),
            end_nanos: nanos(planned.end),
            attributes: &self.attributes,
            link: planned.link.as_ref(),
            error: planned.error,
        });
        self.attributes.clear();
        Parent {
            span_id: SpanId::from_bytes(planned.span_id),
            remote: false,
        }
    }
}

/// The trace of `record` (expanded) as ids: the trace, the run's span, and
/// the span it continues (another process's); `None` when the record has
/// none that reads.
pub(super) fn ids(record: &SessionRecord) -> Option<(TraceId, [u8; 8], Option<Parent>)> {
    let trace = record.trace.as_ref()?;
    let trace_id = TraceId::from_bytes(trace.trace_id);
    let run_span = trace.span_id;
    let parent = trace.parent_span_id.map(|parent| Parent {
        span_id: SpanId::from_bytes(parent),
        remote: true,
    });
    Some((trace_id, run_span, parent))
}

impl Spans {
    /// Makes the spans of `record` (expanded); `parent` is the span of the
    /// run that holds it (for a sub-tactic's session), `None` for a whole
    /// run (whose parent, if any, is the one its trace names).
    pub(super) fn record(&mut self, record: &SessionRecord, parent: Option<Parent>) {
        let Some((trace_id, run_span, continued)) = ids(record) else {
            return;
        };
        let Some(trace) = &record.trace else {
            return;
        };
        let parent = parent.or(continued);
        run(self, record, trace, trace_id, run_span, parent);
    }
}

fn run(
    spans: &mut Spans,
    record: &SessionRecord,
    trace: &crate::trace_context::RunTrace,
    trace_id: TraceId,
    run_span: [u8; 8],
    parent: Option<Parent>,
) {
    let content = spans.content;
    let link = trace.link.map(|link| wire::Link {
        trace_id: link.trace_id(),
        span_id: link.span_id(),
        flags: wire::flags(link.sampled(), true),
    });
    let started = time(&record.started_at);
    let ended = time(&record.ended_at).max(started);
    let name = &record.tactic.name;
    let attributes = &mut spans.attributes;
    attributes.str(semconv::GEN_AI_OPERATION_NAME, "invoke_workflow");
    attributes.str(semconv::GEN_AI_WORKFLOW_NAME, name);
    attributes.str(semconv::GEN_AI_CONVERSATION_ID, &record.session_id);
    attributes.str("lllm.session_id", &record.session_id);
    attributes.str("lllm.tactic.path", &record.tactic.path);
    attributes.str("lllm.state", state_word(record.state));
    attributes.int("lllm.invokes", record.invoke_count() as i64);
    attributes.int("lllm.retries", record.retry_count() as i64);
    attributes.int("lllm.repairs", repairs(record) as i64);
    attributes.bool("lllm.cost_known", record.cost_known);
    push_cost(attributes, &record.cost);
    if let Some(task_id) = &record.task_id {
        attributes.str("lllm.task_id", task_id);
    }
    if let Some(model) = &record.model {
        attributes.str(semconv::GEN_AI_REQUEST_MODEL, model);
    }
    for (key, value) in &record.tags {
        attributes.str(&format!("lllm.tag.{key}"), &text_of(value));
    }
    if !record.remote_calls.is_empty() {
        attributes.int("lllm.remote_calls", record.remote_calls.len() as i64);
    }
    if record.state != RunState::Success {
        attributes.str(semconv::ERROR_TYPE, state_word(record.state));
    }
    if content {
        attributes.str(
            semconv::GEN_AI_INPUT_MESSAGES,
            &messages_json(&[("user", text_of(&record.task))]),
        );
        if let Some(delivery) = &record.delivery {
            attributes.str(
                semconv::GEN_AI_OUTPUT_MESSAGES,
                &messages_json(&[("assistant", delivery.clone())]),
            );
        }
    }
    let run = Planned {
        span_id: run_span,
        name: ("invoke_workflow", name),
        kind: span::SpanKind::Internal,
        start: started,
        end: ended,
        link,
        error: record
            .error
            .as_deref()
            .filter(|_| record.state != RunState::Success),
    };
    let run = spans.emit(trace_id, run, parent);
    let mut text = [0; 16];
    let run_span_text = trace.span_id_text(&mut text);
    for (index, call) in record.agent_calls.iter().enumerate() {
        agent_call(spans, trace_id, run_span_text, index, call, run);
    }
    for session in &record.sub_tactic_sessions {
        spans.record(session, Some(run));
    }
}

/// An agent call and what it did: its requests and tool rounds.
fn agent_call(
    spans: &mut Spans,
    trace_id: TraceId,
    run_span: &str,
    index: usize,
    call: &AgentCallSession,
    parent: Parent,
) {
    let content = spans.content;
    let started = time(&call.started_at);
    let ended = call
        .ended_at
        .as_deref()
        .map(time)
        .unwrap_or(started + Duration::from_millis(call.latency_ms))
        .max(started);
    let (provider, model) = split_model(&call.model);
    let attributes = &mut spans.attributes;
    attributes.str(semconv::GEN_AI_OPERATION_NAME, "invoke_agent");
    attributes.str(semconv::GEN_AI_AGENT_NAME, &call.agent);
    attributes.str(semconv::GEN_AI_PROVIDER_NAME, provider);
    attributes.str(semconv::GEN_AI_REQUEST_MODEL, model);
    attributes.str("lllm.dialog", &call.dialog_alias);
    attributes.int("lllm.invokes", call.invoke_count() as i64);
    attributes.int("lllm.retries", call.retry_count() as i64);
    attributes.int("lllm.repairs", call.exception_retry_count() as i64);
    attributes.int("lllm.tool_rounds", call.interrupts.len() as i64);
    push_cost(attributes, &call.cost);
    if call.error.is_some() {
        attributes.str(semconv::ERROR_TYPE, "failure");
    }
    let planned = Planned {
        span_id: Place::new(run_span)
            .text("/call/")
            .number(index as u64)
            .id(),
        name: ("invoke_agent", &call.agent),
        kind: span::SpanKind::Internal,
        start: started,
        end: ended,
        link: None,
        error: call.error.as_deref(),
    };
    let call_span = spans.emit(trace_id, planned, Some(parent));
    // Requests one after another; a tool round between the request that
    // asked for it and the next request of the call.
    let busy: u64 = call
        .invokes
        .iter()
        .map(|invoke| invoke.latency_ms + invoke.waited_ms)
        .sum();
    let total = ended.duration_since(started).unwrap_or_default();
    let rounds = call.interrupts.len() as u32;
    let tool_time = total
        .saturating_sub(Duration::from_millis(busy))
        .checked_div(rounds.max(1))
        .unwrap_or_default();
    let mut cursor = started;
    for (position, invoke) in call.invokes.iter().enumerate() {
        let end = cursor + Duration::from_millis(invoke.latency_ms);
        chat(
            spans,
            trace_id,
            run_span,
            call,
            invoke,
            (cursor, end),
            call_span,
        );
        cursor = end + Duration::from_millis(invoke.waited_ms);
        // The round of tools this request asked for runs after its last
        // attempt, before the next tool round's first request.
        let next_step = call.invokes.get(position + 1).map(|next| next.step);
        let round_follows = match next_step {
            Some(step) => step != invoke.step,
            None => invoke.response.is_some(),
        };
        let round = call
            .interrupts
            .iter()
            .find(|round| round.step == invoke.step);
        if let (true, Some(round)) = (round_follows, round) {
            let round_end = (cursor + tool_time).min(ended.max(cursor));
            for (number, tool) in round.calls.iter().enumerate() {
                tool_attributes(&mut spans.attributes, tool, content);
                let planned = Planned {
                    span_id: Place::new(run_span)
                        .text("/tool/")
                        .text(&call.dialog_id)
                        .text("/")
                        .number(round.step.into())
                        .text("/")
                        .number(number as u64)
                        .id(),
                    name: ("execute_tool", &tool.name),
                    kind: span::SpanKind::Internal,
                    start: cursor,
                    end: round_end,
                    link: None,
                    error: tool.error_message.as_deref(),
                };
                spans.emit(trace_id, planned, Some(call_span));
            }
            cursor = round_end;
        }
    }
}

/// An `execute_tool` span's attributes; its arguments and result only with `content`.
fn tool_attributes(attributes: &mut Attributes, tool: &crate::dialog::FunctionCall, content: bool) {
    attributes.str(semconv::GEN_AI_OPERATION_NAME, "execute_tool");
    attributes.str(semconv::GEN_AI_TOOL_NAME, &tool.name);
    attributes.str(semconv::GEN_AI_TOOL_CALL_ID, &tool.id);
    attributes.str(semconv::GEN_AI_TOOL_TYPE, "function");
    if tool.error_message.is_some() {
        attributes.str(semconv::ERROR_TYPE, "tool_error");
    }
    if content {
        let arguments = Value::Object(tool.arguments.clone()).to_string();
        attributes.str(semconv::GEN_AI_TOOL_CALL_ARGUMENTS, &arguments);
        let result = tool
            .result
            .as_ref()
            .map(text_of)
            .or_else(|| tool.error_message.clone());
        if let Some(result) = result {
            attributes.str(semconv::GEN_AI_TOOL_CALL_RESULT, &result);
        }
    }
}

/// One request to the model (one attempt), from `start` to `end`.
fn chat(
    spans: &mut Spans,
    trace_id: TraceId,
    run_span: &str,
    call: &AgentCallSession,
    invoke: &InvokeTrace,
    (start, end): (SystemTime, SystemTime),
    parent: Parent,
) {
    let content = spans.content;
    let (provider, _) = split_model(&call.model);
    let request = &invoke.request;
    let attributes = &mut spans.attributes;
    attributes.str(semconv::GEN_AI_OPERATION_NAME, "chat");
    attributes.str(semconv::GEN_AI_PROVIDER_NAME, provider);
    attributes.str(semconv::GEN_AI_REQUEST_MODEL, &request.model);
    attributes.int("lllm.attempt", i64::from(invoke.attempt));
    attributes.int("lllm.step", i64::from(invoke.step));
    if invoke.repair > 0 {
        attributes.int("lllm.repair", i64::from(invoke.repair));
    }
    if invoke.cached {
        attributes.bool("lllm.cached", true);
    }
    if invoke.waited_ms > 0 {
        attributes.int("lllm.waited_ms", invoke.waited_ms as i64);
    }
    // The settings the request had (a few), not a look-up of each the
    // conventions name (eight).
    for (setting, value) in &request.model_args {
        let key = match setting.as_str() {
            "temperature" => semconv::GEN_AI_REQUEST_TEMPERATURE,
            "top_p" => semconv::GEN_AI_REQUEST_TOP_P,
            "top_k" => semconv::GEN_AI_REQUEST_TOP_K,
            "max_tokens" | "max_completion_tokens" => semconv::GEN_AI_REQUEST_MAX_TOKENS,
            "frequency_penalty" => semconv::GEN_AI_REQUEST_FREQUENCY_PENALTY,
            "presence_penalty" => semconv::GEN_AI_REQUEST_PRESENCE_PENALTY,
            "seed" => semconv::GEN_AI_REQUEST_SEED,
            _ => continue,
        };
        match value {
            Value::Number(number) if number.is_i64() => {
                attributes.int(key, number.as_i64().unwrap_or_default());
            }
            Value::Number(number) => {
                attributes.double(key, number.as_f64().unwrap_or_default());
            }
            _ => {}
        }
    }
    if let Some(reply) = &invoke.response {
        let cost = crate::dialog::InvokeCost::from_usage(&reply.usage);
        attributes.int(
            semconv::GEN_AI_USAGE_INPUT_TOKENS,
            cost.prompt_tokens as i64,
        );
        attributes.int(
            semconv::GEN_AI_USAGE_OUTPUT_TOKENS,
            cost.completion_tokens as i64,
        );
        if cost.cached_prompt_tokens > 0 {
            attributes.int(
                semconv::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                cost.cached_prompt_tokens as i64,
            );
        }
        if let Some(model) = &reply.model {
            attributes.str(semconv::GEN_AI_RESPONSE_MODEL, model);
        }
        // The reply's metadata is a few entries: read in one pass, not
        // looked up by hashing each name.
        let (mut response_id, mut id, mut finish_reason) = (None, None, None);
        for (key, value) in &reply.metadata {
            let Value::String(value) = value else {
                continue;
            };
            match key.as_str() {
                "response_id" => response_id = Some(value),
                "id" => id = Some(value),
                "finish_reason" => finish_reason = Some(value),
                _ => {}
            }
        }
        if let Some(id) = response_id.or(id) {
            attributes.str(semconv::GEN_AI_RESPONSE_ID, id);
        }
        if let Some(reason) = finish_reason {
            attributes.strings(semconv::GEN_AI_RESPONSE_FINISH_REASONS, &[reason]);
        }
        if content {
            let mut message = serde_json::json!({
                "role": "assistant",
                "parts": [{"type": "text", "content": reply.content}],
            });
            for tool in &reply.function_calls {
                if let Some(parts) = message["parts"].as_array_mut() {
                    parts.push(serde_json::json!({
                        "type": "tool_call", "id": tool.id, "name": tool.name,
                        "arguments": tool.arguments,
                    }));
                }
            }
            attributes.str(
                semconv::GEN_AI_OUTPUT_MESSAGES,
                &Value::Array(vec![message]).to_string(),
            );
        }
    }
    if let Some(parse_error) = &invoke.parse_error {
        attributes.str("lllm.parse_error", parse_error);
    }
    let error = invoke.error.as_ref().map(|error| {
        attributes.str(semconv::ERROR_TYPE, &error_type(error));
        error.to_string()
    });
    let planned = Planned {
        span_id: chat_span_id(
            run_span,
            &request.dialog_id,
            invoke.step,
            invoke.repair,
            invoke.attempt,
        ),
        name: ("chat", &request.model),
        kind: span::SpanKind::Client,
        start,
        end: end.max(start),
        link: None,
        error: error.as_deref(),
    };
    spans.emit(trace_id, planned, Some(parent));
}

/// The span of a whole batch: each task's trace links to it.
pub struct BatchSpan {
    traces: std::sync::Arc<super::Traces>,
    tactic: String,
    start: SystemTime,
    trace: crate::trace_context::TraceContext,
}

impl std::fmt::Debug for BatchSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSpan")
            .field("trace", &self.trace)
            .finish()
    }
}

impl BatchSpan {
    pub(super) fn start(traces: std::sync::Arc<super::Traces>, name: &str) -> BatchSpan {
        let root = crate::trace_context::TraceContext::new_root();
        let sampled = traces.sampled(None, TraceId::from_bytes(root.trace_id()), "batch");
        let trace =
            crate::trace_context::TraceContext::new(root.trace_id(), root.span_id(), sampled)
                .unwrap_or(root);
        BatchSpan {
            traces,
            tactic: name.to_string(),
            start: SystemTime::now(),
            trace,
        }
    }

    /// The context each task's run links to ([`crate::trace_context::linked`]).
    pub fn link(&self) -> crate::trace_context::TraceContext {
        self.trace
    }

    /// Ends the batch's span, with what the batch did.
    pub fn end(self, attributes: Vec<opentelemetry::KeyValue>) {
        if !self.trace.sampled() {
            return;
        }
        let mut spans = Spans::new(false);
        spans.attributes.str("lllm.tactic", &self.tactic);
        for pair in &attributes {
            spans.attributes.value(pair.key.as_str(), &pair.value);
        }
        let planned = Planned {
            span_id: self.trace.span_id(),
            name: ("batch", &self.tactic),
            kind: span::SpanKind::Internal,
            start: self.start,
            end: SystemTime::now().max(self.start),
            link: None,
            error: None,
        };
        spans.emit(TraceId::from_bytes(self.trace.trace_id()), planned, None);
        self.traces.send(&spans.out);
    }
}

/// `openai/gpt-4o` as (`openai`, `gpt-4o`); a model without a provider is
/// its own.
fn split_model(model: &str) -> (&str, &str) {
    model.split_once('/').unwrap_or(("", model))
}

fn state_word(state: RunState) -> &'static str {
    match state {
        RunState::Success => "success",
        RunState::Failure => "failure",
        RunState::Skipped => "skipped",
    }
}

fn repairs(record: &SessionRecord) -> usize {
    record
        .agent_calls
        .iter()
        .map(AgentCallSession::exception_retry_count)
        .sum::<usize>()
        + record
            .sub_tactic_sessions
            .iter()
            .map(repairs)
            .sum::<usize>()
}

/// A JSON value as an attribute's text: a string as it is, else as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Messages in the conventions' shape (`[{role, parts: [{type: text, content}]}]`), as JSON text.
fn messages_json(messages: &[(&str, String)]) -> String {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, text)| serde_json::json!({"role": role, "parts": [{"type": "text", "content": text}]}))
        .collect();
    Value::Array(messages).to_string()
}

/// A record's timestamp (RFC 3339); the epoch when it does not read.
fn time(text: &str) -> SystemTime {
    crate::time::parse_timestamp(text).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A provider error's `error.type`: the HTTP status when the server
/// answered, else how the retry loop read it.
pub(super) fn error_type(error: &crate::provider::ProviderError) -> String {
    match (error.status, error.kind) {
        (Some(status), _) => status.to_string(),
        (None, crate::provider::ErrorKind::RateLimit) => "rate_limit".into(),
        (None, crate::provider::ErrorKind::Transient) => "transient".into(),
        (None, crate::provider::ErrorKind::Permanent) => "permanent".into(),
    }
}

/// A span's tokens (`gen_ai.usage.*`) and, when priced, its cost in USD.
fn push_cost(attributes: &mut Attributes, cost: &crate::dialog::InvokeCost) {
    attributes.int(
        semconv::GEN_AI_USAGE_INPUT_TOKENS,
        cost.prompt_tokens as i64,
    );
    attributes.int(
        semconv::GEN_AI_USAGE_OUTPUT_TOKENS,
        cost.completion_tokens as i64,
    );
    if let Some(usd) = cost.cost {
        attributes.double("lllm.cost_usd", usd);
    }
}
