//! One typed event stream for every live consumer (issue 29): the library's
//! [`Tactic::events`](crate::Tactic::events) and
//! [`Ccall::events`](crate::tactic::Ccall::events), `lllm run --events`, the
//! text sink of `lllm run --stream` and, later, the server's `/stream`.
//!
//! This file owns the event's shape and how events travel: an [`Event`] is
//! upstream lllm-core 0.2's `TacticEvent` envelope (`{"id", "timestamp",
//! "kind", "data", "metadata"}`) with our own kinds ([`EventKind`]); the
//! agent loop (`agent::call`) and the flow (`tactic::flow`) say what happens
//! through an `Emitter`, which scrubs every text of the run's secrets and
//! hands the event to its consumer: a bounded `Queue` that a stream drains,
//! or the old text callback, which sees only the text. Turning a run into a
//! `Stream`, and its closing event, is the tactic layer's (`tactic::events`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dialog::InvokeCost;
use crate::redact::Secrets;

/// One thing that happened in a run, as it happened.
///
/// Its JSON form is upstream lllm-core 0.2's `TacticEvent`, so upstream's
/// Python client (`RemoteTactic.aevents`) reads our streams: `id` (a UUID),
/// `timestamp` (seconds since the Unix epoch), `kind` and `data` (one of
/// [`EventKind`]'s variants, its name in snake_case and its fields), and
/// `metadata` (which task of a `ccall` the event belongs to:
/// `task_index`, `task_id`). A run's last event is always exactly one
/// [`EventKind::Result`] or [`EventKind::Error`]. Every text in an event is
/// scrubbed of the tactic's secrets, as its record is.
///
/// ```
/// use lllm::{Event, EventKind};
///
/// let line = r#"{"id": "0192", "timestamp": 1764284400.5, "kind": "tool_call",
///     "data": {"agent": "a", "dialog": "main", "call_id": "c1", "name": "add",
///              "arguments": {"x": 1}},
///     "metadata": {}}"#;
/// let event: Event = serde_json::from_str(line).unwrap();
/// let EventKind::ToolCall { name, .. } = &event.kind else { panic!("{event:?}") };
/// assert_eq!(name, "add");
/// assert_eq!(event.kind.name(), "tool_call");
/// // And back: the same envelope.
/// let json = serde_json::to_value(&event).unwrap();
/// assert_eq!(json["kind"], "tool_call");
/// assert_eq!(json["data"]["arguments"]["x"], 1);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unique per event: a UUID (v7, so ids sort by when events were made).
    pub id: String,
    /// When it happened, in seconds since the Unix epoch.
    pub timestamp: f64,
    /// What happened (`kind` and `data` in JSON).
    #[serde(flatten)]
    pub kind: EventKind,
    /// Which task it belongs to in a `ccall` (`task_index`, and `task_id`
    /// when the task has one); a single run's events name its `task_id`
    /// when it has one, else carry nothing here.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// What an [`Event`] says happened. In JSON, `kind` is the variant's name in
/// snake_case and `data` holds its fields.
///
/// Within one model request the order is: `model_call_started`, its
/// `text_delta`s (streamed replies only), then `retry` (the attempt failed,
/// another follows: a `model_call_started` with the next attempt number) or
/// `model_call_finished`; then the reply's `tool_call`s, their
/// `tool_result`s (each after its call), or a `repair`.
///
/// New kinds may come (the enum is `non_exhaustive`): a consumer matches the
/// kinds it wants and passes over the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A piece of a reply's text as it streams in.
    TextDelta {
        /// The agent answering.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The new text.
        text: String,
    },
    /// An attempt of a request to a model was sent (or is waiting to be,
    /// behind the provider's limits).
    ModelCallStarted {
        /// The agent asking.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The model, as configured (`provider/model`).
        model: String,
        /// The tool round of the call (0 for its first request).
        step: u32,
        /// Which repair of the round this is (0 for the round's request).
        repair: u32,
        /// Which attempt (1-based; more after a `retry`).
        attempt: u32,
    },
    /// A request came back (or failed for good).
    ModelCallFinished {
        /// The agent that asked.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The model, as configured.
        model: String,
        /// The tool round.
        step: u32,
        /// Which repair of the round.
        repair: u32,
        /// How many attempts it took.
        attempts: u32,
        /// The reply's tokens and prices (zero when it failed).
        usage: InvokeCost,
        /// What the reply cost in USD; `None` when the model's price is unknown.
        cost: Option<f64>,
        /// How long the answering attempt took, in milliseconds.
        latency_ms: u64,
        /// Whether the reply came from the response cache (nothing was sent).
        cached: bool,
        /// Why the model stopped (`stop`, `tool_calls`, `length`), when it said.
        finish_reason: Option<String>,
        /// Why the request failed, when it did.
        error: Option<String>,
    },
    /// The model asked for a tool.
    ToolCall {
        /// The agent whose reply asked.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The call's id, as the model gave it (its `tool_result` has the same).
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments, as the model gave them (empty when they were not
        /// a JSON object).
        arguments: Map<String, Value>,
    },
    /// A tool call was answered.
    ToolResult {
        /// The agent whose reply asked.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The id of the `tool_call` this answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// What the tool returned, when it succeeded.
        result: Option<String>,
        /// Why it did not run or failed, when it did (the model reads it).
        error: Option<String>,
    },
    /// A reply did not parse; it goes back to the model for repair.
    Repair {
        /// The agent whose reply failed.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The tool round.
        step: u32,
        /// Which repair this is (1 for the first).
        repair: u32,
        /// Why the reply did not parse.
        error: String,
    },
    /// An attempt failed and is tried again after `wait_ms`.
    Retry {
        /// The agent asking.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The model, as configured.
        model: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Why it failed.
        error: String,
        /// How long the call waits before the next attempt, in milliseconds.
        wait_ms: u64,
    },
    /// A request waited before it could be sent: the provider's concurrency
    /// cap, its rate limit, or everyone's back-off after a 429.
    Wait {
        /// The agent asking.
        agent: String,
        /// Its dialog the call is on.
        dialog: String,
        /// The model, as configured.
        model: String,
        /// `concurrency`, `rate_limit`, `back_off` or `retry`.
        reason: String,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },
    /// A step that runs another tactic started.
    SubTacticStarted {
        /// The step's name.
        step: String,
        /// The tactic it runs.
        tactic: String,
    },
    /// A sub-tactic's run ended.
    SubTacticFinished {
        /// The step's name.
        step: String,
        /// The tactic it ran.
        tactic: String,
        /// `success` or `failure`.
        state: String,
        /// What it cost in USD, when every price is known.
        cost: Option<f64>,
        /// Its tokens and prices, summed.
        usage: InvokeCost,
        /// Why it failed, when it did.
        error: Option<String>,
    },
    /// An event a served tactic sent that is none of ours (upstream
    /// lllm-core's free-form kinds, such as `message`), read by
    /// [`RemoteTactic::events`](crate::remote::RemoteTactic::events): its
    /// kind and data as sent.
    Remote {
        /// The kind the server named.
        kind: String,
        /// Its data, as sent.
        data: Value,
    },
    /// The run delivered: the last event of a successful run.
    Result {
        /// The answer.
        delivery: String,
        /// `success`.
        state: String,
        /// The run's session id (its record's name in the store).
        session_id: String,
        /// What the run cost in USD, when every price is known.
        cost: Option<f64>,
        /// Its tokens and prices, summed.
        usage: InvokeCost,
    },
    /// The run failed: the last event of a failed run.
    Error {
        /// Why (upstream's error events carry `data.message` too).
        message: String,
        /// `failure` (or `skipped`).
        state: String,
        /// The run's session id, when it got as far as having one.
        session_id: String,
        /// What the run cost in USD until it failed, when every price is known.
        cost: Option<f64>,
        /// Its tokens and prices, summed.
        usage: InvokeCost,
    },
}

impl EventKind {
    /// The kind's name, as `kind` says it in JSON (`tool_call`, `result`, …).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::TextDelta { .. } => "text_delta",
            EventKind::ModelCallStarted { .. } => "model_call_started",
            EventKind::ModelCallFinished { .. } => "model_call_finished",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolResult { .. } => "tool_result",
            EventKind::Repair { .. } => "repair",
            EventKind::Retry { .. } => "retry",
            EventKind::Wait { .. } => "wait",
            EventKind::SubTacticStarted { .. } => "sub_tactic_started",
            EventKind::SubTacticFinished { .. } => "sub_tactic_finished",
            EventKind::Remote { .. } => "remote",
            EventKind::Result { .. } => "result",
            EventKind::Error { .. } => "error",
        }
    }

    /// Whether this is a run's closing event (`result` or `error`).
    pub fn is_closing(&self) -> bool {
        matches!(self, EventKind::Result { .. } | EventKind::Error { .. })
    }

    /// Every text the event carries, without `secrets`.
    fn scrub(&mut self, secrets: &Secrets) {
        let mut texts: Vec<&mut String> = Vec::new();
        let mut optional: Vec<&mut Option<String>> = Vec::new();
        match self {
            EventKind::TextDelta { text, .. } => texts.push(text),
            EventKind::ModelCallStarted { .. } | EventKind::SubTacticStarted { .. } => {}
            EventKind::ModelCallFinished {
                finish_reason,
                error,
                ..
            } => optional.extend([finish_reason, error]),
            EventKind::ToolCall { arguments, .. } => {
                secrets.scrub_map(arguments);
            }
            EventKind::ToolResult { result, error, .. } => optional.extend([result, error]),
            EventKind::Repair { error, .. } | EventKind::Retry { error, .. } => texts.push(error),
            EventKind::Wait { .. } | EventKind::Remote { .. } => {}
            EventKind::SubTacticFinished { error, .. } => optional.push(error),
            EventKind::Result { delivery, .. } => texts.push(delivery),
            EventKind::Error { message, .. } => texts.push(message),
        }
        for text in texts.into_iter().chain(optional.into_iter().flatten()) {
            secrets.scrub_string(text);
        }
    }
}

impl Event {
    /// A new event of `kind`, stamped now, with no metadata.
    pub fn new(kind: EventKind) -> Event {
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        Event {
            id: uuid::Uuid::now_v7().to_string(),
            timestamp,
            kind,
            metadata: Map::new(),
        }
    }
}

/// The most events a stream holds for a consumer that has not read them.
/// A run that would add more waits at its next model request or tool call
/// until the consumer catches up (see [`Queue`]).
pub(crate) const QUEUE_CAPACITY: usize = 256;

/// The events of one stream that its consumer has not read yet.
///
/// Bounded because producers wait: before each model request and each
/// round of tool calls the run awaits [`Queue::room`], so a slow consumer
/// pauses the run rather than growing the queue. Between two such points a
/// run adds a bounded number of events (a request's retries, a reply's tool
/// calls — at most `MAX_TOOL_CALLS_PER_REPLY` — and its streamed text, which
/// the run holds in memory as the reply anyway), so the queue never holds
/// much more than [`QUEUE_CAPACITY`] per run in flight. Nothing is ever
/// dropped, the closing event least of all.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    room: tokio::sync::Notify,
}

#[derive(Default)]
struct QueueState {
    events: VecDeque<Event>,
    /// The consumer waiting for the next event.
    consumer: Option<Waker>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `event` at the end and wakes the consumer.
    pub(crate) fn push(&self, event: Event) {
        let consumer = {
            let mut state = self.lock();
            state.events.push_back(event);
            state.consumer.take()
        };
        if let Some(consumer) = consumer {
            consumer.wake();
        }
    }

    /// The oldest unread event; with none, `context`'s task is woken by
    /// the next [`push`](Queue::push).
    pub(crate) fn pop(&self, context: &mut Context<'_>) -> Option<Event> {
        let (event, room) = {
            let mut state = self.lock();
            let event = state.events.pop_front();
            if event.is_none() {
                state.consumer = Some(context.waker().clone());
            }
            (event, state.events.len() < QUEUE_CAPACITY)
        };
        if room {
            self.room.notify_waiters();
        }
        event
    }

    /// How many events wait for the consumer.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Waits until the queue holds fewer than [`QUEUE_CAPACITY`] events.
    pub(crate) async fn room(&self) {
        loop {
            // Made before the check: a `notify_waiters` in between still counts.
            let freed = self.room.notified();
            if self.lock().events.len() < QUEUE_CAPACITY {
                return;
            }
            freed.await;
        }
    }
}

/// The old text callback (`Agent::set_text_sink`, `Tactic::run_streaming`):
/// a consumer of the same events that sees only the streamed text.
pub(crate) type TextCallback = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
enum Consumer {
    Queue(Arc<Queue>),
    /// Text only, and only the final turn's (the flow hands it to the last
    /// step alone), as `lllm run --stream` has always shown it.
    Text(TextCallback),
}

/// How a run says what happens: every event goes through one of these to
/// its consumer, scrubbed of `secrets` and tagged with `metadata`.
#[derive(Clone)]
pub(crate) struct Emitter {
    consumer: Consumer,
    secrets: Arc<Secrets>,
    metadata: Arc<Map<String, Value>>,
}

impl Emitter {
    /// Events into `queue`, without `secrets`, each tagged with `metadata`.
    pub(crate) fn queue(
        queue: Arc<Queue>,
        secrets: Arc<Secrets>,
        metadata: Map<String, Value>,
    ) -> Emitter {
        Emitter {
            consumer: Consumer::Queue(queue),
            secrets,
            metadata: Arc::new(metadata),
        }
    }

    /// The streamed text only, handed to `callback` (which the providers'
    /// scrubbing already kept free of secrets, `provider::scrub`).
    pub(crate) fn text(callback: TextCallback) -> Emitter {
        Emitter {
            consumer: Consumer::Text(callback),
            secrets: Arc::new(Secrets::new()),
            metadata: Arc::new(Map::new()),
        }
    }

    /// Whether only the final turn's text is wanted (the flow hands this
    /// emitter to its last step alone, and to no programmed flow).
    pub(crate) fn final_turn_only(&self) -> bool {
        matches!(self.consumer, Consumer::Text(_))
    }

    /// Says `kind` happened.
    pub(crate) fn emit(&self, mut kind: EventKind) {
        match &self.consumer {
            Consumer::Text(callback) => {
                if let EventKind::TextDelta { text, .. } = &kind {
                    callback(text);
                }
            }
            Consumer::Queue(queue) => {
                kind.scrub(&self.secrets);
                let mut event = Event::new(kind);
                event.metadata = Map::clone(&self.metadata);
                queue.push(event);
            }
        }
    }

    /// A piece of streamed text of `agent`'s call on `dialog`. An empty
    /// piece (a new attempt starts, `provider::TextSink`) reaches only the
    /// text callback; the event stream says so with its `retry` and
    /// `model_call_started` events.
    pub(crate) fn text_delta(&self, agent: &str, dialog: &str, text: &str) {
        match &self.consumer {
            Consumer::Text(callback) => callback(text),
            Consumer::Queue(_) if text.is_empty() => {}
            Consumer::Queue(_) => self.emit(EventKind::TextDelta {
                agent: agent.to_string(),
                dialog: dialog.to_string(),
                text: text.to_string(),
            }),
        }
    }

    /// Waits until the consumer has room for more events (see [`Queue`]).
    pub(crate) async fn room(&self) {
        if let Consumer::Queue(queue) = &self.consumer {
            queue.room().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_result() -> EventKind {
        EventKind::ToolResult {
            agent: "a".into(),
            dialog: "main".into(),
            call_id: "c1".into(),
            name: "lookup".into(),
            result: Some("the key is sk-secret-0123".into()),
            error: None,
        }
    }

    #[test]
    fn the_json_form_is_upstreams_tactic_event_envelope() {
        let event = Event::new(tool_result());
        let json = serde_json::to_value(&event).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["id", "timestamp", "kind", "data", "metadata"]);
        assert_eq!(json["kind"], "tool_result");
        assert_eq!(json["data"]["call_id"], "c1");
        assert!(json["timestamp"].as_f64().unwrap() > 1.7e9);
        // Upstream's `token_value`: no whitespace, `/`, `:`, `\`, `;` or `%`.
        let id = json["id"].as_str().unwrap();
        assert!(!id.contains([' ', '/', ':', '\\', ';', '%']), "{id}");
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
        assert_eq!(back.kind.name(), "tool_result");
    }

    #[test]
    fn every_kind_name_is_the_one_json_writes() {
        let usage = InvokeCost::default();
        let kinds = [
            EventKind::SubTacticStarted {
                step: "s".into(),
                tactic: "t".into(),
            },
            EventKind::Error {
                message: "m".into(),
                state: "failure".into(),
                session_id: "x".into(),
                cost: None,
                usage,
            },
            tool_result(),
        ];
        for kind in kinds {
            let json = serde_json::to_value(Event::new(kind.clone())).unwrap();
            assert_eq!(json["kind"], kind.name());
        }
    }

    #[test]
    fn an_emitter_scrubs_tags_and_queues() {
        let queue = Arc::new(Queue::default());
        let mut secrets = Secrets::new();
        secrets.add("sk-secret-0123");
        let mut metadata = Map::new();
        metadata.insert("task_index".into(), Value::from(3));
        let emitter = Emitter::queue(queue.clone(), Arc::new(secrets), metadata);
        emitter.emit(tool_result());
        emitter.text_delta("a", "main", "");
        emitter.text_delta("a", "main", "hi");
        let waker = futures_util::task::noop_waker();
        let mut context = Context::from_waker(&waker);
        let first = queue.pop(&mut context).unwrap();
        let EventKind::ToolResult { result, .. } = &first.kind else {
            panic!("{first:?}")
        };
        assert!(
            !result.as_deref().unwrap().contains("sk-secret"),
            "{result:?}"
        );
        assert_eq!(first.metadata["task_index"], 3);
        let second = queue.pop(&mut context).unwrap();
        assert_eq!(
            second.kind.name(),
            "text_delta",
            "the empty piece is no event"
        );
        assert!(queue.pop(&mut context).is_none());
    }

    #[tokio::test]
    async fn a_full_queue_holds_producers_until_the_consumer_reads() {
        let queue = Arc::new(Queue::default());
        for _ in 0..QUEUE_CAPACITY {
            queue.push(Event::new(tool_result()));
        }
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a full queue has no room");
        let waker = futures_util::task::noop_waker();
        assert!(queue.pop(&mut Context::from_waker(&waker)).is_some());
        waiting.await.unwrap();
    }

    #[test]
    fn a_text_callback_sees_only_the_text() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let kept = seen.clone();
        let emitter = Emitter::text(Arc::new(move |text: &str| {
            kept.lock().unwrap().push(text.to_string())
        }));
        emitter.emit(tool_result());
        emitter.text_delta("a", "main", "");
        emitter.text_delta("a", "main", "hi");
        assert!(emitter.final_turn_only());
        assert_eq!(*seen.lock().unwrap(), ["", "hi"]);
    }
}
