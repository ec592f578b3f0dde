//! A run, or a `ccall`'s runs, as a `Stream` of [`Event`]s: what the event
//! model (`crate::event`) looks like from the tactic's side. This file owns
//! the streams and each run's closing event (`result` or `error`, made from
//! its record); the events before it come from the flow and the agent loop.
//!
//! A single run is driven by its stream (nothing is spawned: the run goes
//! on only while the stream is polled, and dropping the stream drops the
//! run). A `ccall`'s runs are spawned tasks (`calls::Runs`), which wait for
//! room in the shared queue when the consumer falls behind.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::calls::{Runs, run_caught};
use super::record::{RunState, SessionRecord};
use super::{Tactic, Task};
use crate::event::{Emitter, Event, EventKind, Queue};

impl Tactic {
    /// Runs one task as a stream of [`Event`]s: text as it streams in, each
    /// model request started and finished (usage, cost, latency), tool
    /// calls and their results, repairs, retries, waits and sub-tactics,
    /// and last exactly one `result` or `error` event. The stream is
    /// `'static` and `Send`: move it into a spawned task or an HTTP
    /// response. The run goes on only while the stream is polled (a slow
    /// consumer slows the run; nothing piles up) and dropping the stream
    /// stops it. [`Events::record`] holds the run's record once the stream
    /// has ended.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use futures_util::StreamExt;
    /// use lllm::{EventKind, Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// let mut events = tactic.events("ping");
    /// let mut kinds = Vec::new();
    /// while let Some(event) = events.next().await {
    ///     kinds.push(event.kind.name());
    ///     if let EventKind::Result { delivery, .. } = &event.kind {
    ///         assert_eq!(delivery, "ping");
    ///     }
    /// }
    /// assert_eq!(
    ///     kinds,
    ///     ["model_call_started", "text_delta", "model_call_finished", "result"]
    /// );
    /// assert!(events.record().is_some_and(|record| record.delivery.as_deref() == Some("ping")));
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self, task: impl Into<Task>) -> Events {
        let task = task.into();
        let tactic = self.clone();
        let id = task.id.clone();
        Events::new(self, id.as_deref(), |events| {
            Box::pin(run_caught(tactic, task, Some(events)))
        })
    }

    /// [`Tactic::events`] until `interrupt` completes: the run stops there
    /// and its closing event is an `error` (`interrupted`), as
    /// [`Tactic::run_until`] stops; [`Events::record`] is then in its
    /// compact, written form (what `lllm run --events` writes).
    pub fn events_until(
        &self,
        task: impl Into<Task>,
        interrupt: impl Future<Output = ()> + Send + 'static,
    ) -> Events {
        let task = Box::new(task.into());
        let tactic = self.clone();
        let id = task.id.clone();
        Events::new(self, id.as_deref(), |events| {
            Box::pin(async move { super::flow::run(&tactic, task, Some(events), interrupt).await })
        })
    }
}

/// The emitter of one task's run into `queue`: scrubbed of `tactic`'s
/// secrets, tagged with the task's `index` in a `ccall` and its `id`.
pub(super) fn task_emitter(
    tactic: &Tactic,
    queue: &Arc<Queue>,
    index: Option<usize>,
    id: Option<&str>,
) -> Emitter {
    let mut metadata = Map::new();
    if let Some(index) = index {
        metadata.insert("task_index".into(), Value::from(index));
    }
    if let Some(id) = id {
        metadata.insert("task_id".into(), Value::from(id));
    }
    Emitter::queue(queue.clone(), tactic.runtime.secrets.clone(), metadata)
}

/// A run's closing event, from its record.
fn closing(record: &SessionRecord) -> EventKind {
    let state = record.state.name().to_string();
    let session_id = record.session_id.clone();
    let usage = record.cost.clone();
    let cost = usage.cost;
    match (&record.state, &record.delivery) {
        (RunState::Success, Some(delivery)) => EventKind::Result {
            delivery: delivery.clone(),
            state,
            session_id,
            cost,
            usage,
        },
        _ => EventKind::Error {
            message: record
                .error
                .clone()
                .unwrap_or_else(|| "the run failed".into()),
            state,
            session_id,
            cost,
            usage,
        },
    }
}

/// The events of one run, as they happen: [`Tactic::events`].
#[must_use = "streams do nothing unless polled"]
pub struct Events {
    queue: Arc<Queue>,
    emitter: Emitter,
    run: Option<BoxFuture<'static, SessionRecord>>,
    /// Boxed: a stream of events is held while its run lasts, and a record
    /// inline is 1.3 KB of it.
    record: Option<Box<SessionRecord>>,
}

impl Events {
    /// The stream of the run of task `id`, which `run` makes given its emitter.
    fn new(
        tactic: &Tactic,
        id: Option<&str>,
        run: impl FnOnce(Emitter) -> BoxFuture<'static, SessionRecord>,
    ) -> Events {
        let queue = Arc::new(Queue::default());
        let emitter = task_emitter(tactic, &queue, None, id);
        Events {
            run: Some(run(emitter.clone())),
            queue,
            emitter,
            record: None,
        }
    }

    /// The run's session record, once the stream has ended (after its
    /// closing event).
    pub fn record(&self) -> Option<&SessionRecord> {
        self.record.as_deref()
    }

    /// The run's session record, taken out, once the stream has ended.
    pub fn into_record(self) -> Option<SessionRecord> {
        self.record.map(|record| *record)
    }
}

impl Stream for Events {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Event>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.queue.pop(context) {
                return Poll::Ready(Some(event));
            }
            let Some(run) = this.run.as_mut() else {
                return Poll::Ready(None);
            };
            match run.as_mut().poll(context) {
                Poll::Ready(record) => {
                    this.run = None;
                    this.emitter.emit(closing(&record));
                    this.record = Some(Box::new(record));
                }
                // What the run said while it was polled, before it waits.
                Poll::Pending => {
                    return this
                        .queue
                        .pop(context)
                        .map_or(Poll::Pending, |event| Poll::Ready(Some(event)));
                }
            }
        }
    }
}

/// The events of a `ccall`'s runs, as they happen, each tagged with its
/// task: [`Ccall::events`](super::Ccall::events).
#[must_use = "streams do nothing unless polled"]
pub struct CcallEvents<'a> {
    runs: Runs<'a>,
    queue: Arc<Queue>,
    /// Every run has finished (its closing event is queued).
    finished: bool,
}

impl<'a> CcallEvents<'a> {
    pub(super) fn new(runs: Runs<'a>, queue: Arc<Queue>) -> CcallEvents<'a> {
        CcallEvents {
            runs,
            queue,
            finished: false,
        }
    }

    /// At most `concurrency` runs at once; 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> CcallEvents<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }
}

impl Stream for CcallEvents<'_> {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Event>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.queue.pop(context) {
                return Poll::Ready(Some(event));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match this.runs.poll_next_record(context) {
                // Its run has ended: every event of it is queued already.
                Poll::Ready(Some((index, record))) => {
                    let tactic = this.runs.tactic();
                    task_emitter(tactic, &this.queue, Some(index), record.task_id.as_deref())
                        .emit(closing(&record));
                }
                Poll::Ready(None) => this.finished = true,
                Poll::Pending => {
                    return this
                        .queue
                        .pop(context)
                        .map_or(Poll::Pending, |event| Poll::Ready(Some(event)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::event::QUEUE_CAPACITY;

    #[tokio::test(flavor = "current_thread")]
    async fn a_consumer_that_stops_reading_holds_the_runs_back_and_loses_nothing() {
        const TASKS: usize = 200;
        let tactic = Tactic::from_yaml(
            "agent_configs: [{name: echo, model_name: mock/echo}]",
            "/nonexistent",
            &crate::Registry::new(),
        )
        .unwrap();
        let tasks = (0..TASKS).map(|number| format!("task {number}"));
        let mut events = tactic.ccall(tasks).concurrency(TASKS).events();
        // One read starts every run; then the consumer reads nothing while
        // the runs go as far as they can.
        let first = events.next().await.unwrap();
        for _ in 0..1_000 {
            tokio::task::yield_now().await;
        }
        // Each run says 3 things before its closing event: unbounded, the
        // queue would hold them all.
        let waiting = events.queue.len();
        assert!(waiting >= QUEUE_CAPACITY - 1, "{waiting}");
        assert!(
            waiting < 3 * TASKS - 1,
            "the runs went on regardless: {waiting}"
        );
        // Reading on, every event of every run comes, each run's closing last.
        let rest: Vec<Event> = events.collect().await;
        let closing = rest.iter().filter(|event| event.kind.is_closing()).count();
        assert_eq!(closing, TASKS);
        assert_eq!(1 + rest.len(), 4 * TASKS, "{}", first.kind.name());
    }
}
