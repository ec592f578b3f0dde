//! One served call's run, as a session of its own: spawned, so that it
//! ends with its record written however the caller behaves. The caller's
//! side holds a `Cancel`; when it is dropped before the run ends (the
//! client disconnected, its connection and so the handler or the response
//! body were dropped) the run is interrupted and recorded as cancelled. The
//! per-request deadline interrupts it the same way. The run holds its slot
//! of the concurrency limit until its record is written, which is what a
//! shutdown waits for (`routes::State::drain`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use futures_util::StreamExt;
use futures_util::future::Either;
use lllm::tactic::SessionRecord;
use lllm::{Event, EventKind, Tactic, Task};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use crate::routes::State;

/// How a run ended, besides its record's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It ran to its end (success or failure).
    Finished,
    /// Its caller went away.
    Cancelled,
    /// The request's deadline passed.
    Timeout,
}

const FINISHED: u8 = 0;
const CANCELLED: u8 = 1;
const TIMEOUT: u8 = 2;

/// A finished run.
pub struct Finished {
    /// Its record, as written.
    pub record: SessionRecord,
    /// How it ended.
    pub ending: Ending,
}

/// Dropping it cancels the run, unless it is over.
pub struct Cancel(#[allow(dead_code)] oneshot::Sender<()>);

/// A run under way: its events (a streamed call's), its end, its cancel.
pub struct Started {
    /// The run's events, the closing one last (sent once the record is
    /// written); `None` for a call that is answered at the end. Boxed: a
    /// channel holds its slots in blocks of 32, and 32 events inline took
    /// about 10 KB of every stream in flight.
    pub events: Option<mpsc::Receiver<Box<Event>>>,
    /// The run's end.
    pub done: oneshot::Receiver<Finished>,
    /// The caller's hold on the run.
    pub cancel: Cancel,
}

/// Events a streamed run may have ahead of its consumer; more wait in the
/// tactic's own queue, and the run waits for room (`lllm::event`).
const CHANNEL: usize = 64;

/// Starts `task` on `tactic`, holding `permit` until its record is written.
pub fn start(
    state: Arc<State>,
    tactic: Tactic,
    mut task: Task,
    permit: OwnedSemaphorePermit,
    streamed: bool,
    trace: Option<lllm::trace_context::TraceContext>,
) -> Started {
    for (key, value) in &state.tags {
        task.tags
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    for (key, value) in &state.metadata {
        task.metadata
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    let (cancel, cancelled) = oneshot::channel::<()>();
    let (done_sender, done) = oneshot::channel();
    let (events_sender, events) = match streamed {
        true => {
            let (sender, receiver) = mpsc::channel(CHANNEL);
            (Some(sender), Some(receiver))
        }
        false => (None, None),
    };
    let ending = Arc::new(AtomicU8::new(FINISHED));
    let deadline = state.limits.timeout;
    // Boxed, as the task below: each future the run nests in keeps its own
    // slot for what it was handed (rustc does not share them), so a task
    // of 456 bytes and an interrupt of 176, handed down five levels, were
    // about 3 KB of every run in flight.
    let interrupt = Box::pin({
        let ending = ending.clone();
        async move {
            tokio::select! {
                _ = cancelled => ending.store(CANCELLED, Ordering::SeqCst),
                () = tokio::time::sleep(deadline) => ending.store(TIMEOUT, Ordering::SeqCst),
            }
        }
    });
    let task = Box::new(task);
    state.running.fetch_add(1, Ordering::SeqCst);
    let session = Session {
        config: tactic.config.clone(),
        state,
        permit,
        ending,
        deadline,
        trace,
        done: done_sender,
    };
    // A task of its own for each kind of run, so that a stream's does not
    // keep room for an answered call's run beside its own (which the
    // stream of events holds boxed), nor the other way round.
    match events_sender {
        Some(sender) => spawn(session, move || async move {
            forward(&tactic, task, interrupt, &sender).await
        }),
        None => spawn(session, move || async move {
            (tactic.run_until(*task, None, interrupt).await, None)
        }),
    }
    Started {
        events,
        done,
        cancel: Cancel(cancel),
    }
}

/// Counts a run in `State::running` while it lives.
struct Running(Arc<State>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a run's task holds beside the run.
struct Session {
    /// The served tactic's config (its name, for the metrics).
    config: Arc<lllm::config::TacticConfig>,
    state: Arc<State>,
    permit: OwnedSemaphorePermit,
    ending: Arc<AtomicU8>,
    deadline: std::time::Duration,
    trace: Option<lllm::trace_context::TraceContext>,
    done: oneshot::Sender<Finished>,
}

/// A run's end: its record, and a stream's closing event with its sender.
type Ran = (
    SessionRecord,
    Option<(mpsc::Sender<Box<Event>>, Box<Event>)>,
);

/// Spawns the run that `make` makes, then writes its record, counts it and
/// answers (a stream with its closing event). The run is made inside the
/// task: a future handed to it whole would be kept twice, as what the task
/// was given and as what it awaits.
fn spawn<M, F>(session: Session, make: M)
where
    M: FnOnce() -> F + Send + 'static,
    F: std::future::Future<Output = Ran> + Send,
{
    // Boxed: tokio moves an unboxed future by value on its way into the
    // task and at each change of the task's stage (lllm::batch::scheduler).
    tokio::spawn(Box::pin(async move {
        let Session {
            config,
            state,
            permit,
            ending,
            deadline,
            trace,
            done,
        } = session;
        // Dropped in reverse: the slot is free before the run stops counting.
        let _running = Running(state.clone());
        let _permit = permit;
        let run = make();
        // A caller's `traceparent`: the run is a child of its span. (One
        // future either way, made before the await: awaiting in each arm
        // kept room for both.)
        let run = match trace {
            Some(parent) => Either::Left(lllm::trace_context::continuing(parent, run)),
            None => Either::Right(run),
        };
        let (mut record, closing) = run.await;
        let ending = match ending.load(Ordering::SeqCst) {
            CANCELLED => Ending::Cancelled,
            TIMEOUT => Ending::Timeout,
            _ => Ending::Finished,
        };
        let why = match ending {
            Ending::Finished => None,
            Ending::Cancelled => Some("cancelled: the client disconnected".to_string()),
            Ending::Timeout => Some(format!(
                "the request's deadline of {} s passed",
                deadline.as_secs()
            )),
        };
        if let Some(why) = &why {
            record.error = Some(why.clone());
        }
        state.write_record(&record).await;
        // Counted before the caller is answered, so that its answer is in
        // the next scrape.
        state.metrics.session(&config.name, ending, &record);
        if let Some((sender, mut closing)) = closing {
            if let (Some(why), EventKind::Error { message, .. }) = (&why, &mut closing.kind) {
                *message = why.clone();
            }
            let _ = sender.send(closing).await;
        }
        let _ = done.send(Finished { record, ending });
    }));
}

/// Runs `task` as events, each sent on `sender` but the closing one, which
/// is handed back (with the sender) to be sent once the record is written.
/// (The task and the closing event boxed: this future lives as long as the
/// stream, and each inline was about 400 bytes of it.)
async fn forward(
    tactic: &Tactic,
    task: Box<Task>,
    interrupt: impl std::future::Future<Output = ()> + Send + 'static,
    sender: &mpsc::Sender<Box<Event>>,
) -> Ran {
    let mut events = tactic.events_until(*task, interrupt);
    let mut closing = None;
    let mut listening = true;
    while let Some(event) = events.next().await {
        if event.kind.is_closing() {
            closing = Some(Box::new(event));
        } else if listening && sender.send(Box::new(event)).await.is_err() {
            // The caller went away: its `Cancel` interrupts the run, whose
            // events are still drained to its end.
            listening = false;
        }
    }
    let record = events
        .into_record()
        .expect("an event stream that ended holds its record");
    (record, closing.map(|event| (sender.clone(), event)))
}
