//! Calls from code: `call` (one task, its text), `bcall` (many, results in
//! input order), `try_bcall` (many, the first failure cancels the rest) and
//! `ccall` (many, a `Stream` of results as they finish).
//!
//! Their contracts are futures' `join_all`, `try_join_all` and
//! `buffer_unordered`, on tokio: each run is a spawned task in one `JoinSet`
//! with at most `concurrency` in flight, the tasks pulled from the caller's
//! iterator only when a slot is free (memory stays flat for 100k tasks), and
//! dropping what holds the set aborts the runs still going. The runs of one
//! tactic share its providers — their concurrency, rpm and tpm limiters —
//! its MCP servers (started once, by the first run or by `Tactic::start`)
//! and its price table; each run's cost is in its record.
//!
//! Resume, shards, budgets and output files stay with `lllm batch`
//! (`crate::batch`); this file knows nothing of files. Like every run, these
//! need a tokio runtime: poll them inside one (`#[tokio::main]`).

use std::future::IntoFuture;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, Stream};
use tokio::task::JoinSet;

use super::record::{self, RunState, SessionRecord, TacticInfo};
use super::{Tactic, Task};

/// The concurrency of `bcall`, `try_bcall` and `ccall` when neither
/// `.concurrency(n)` nor the tactic's `max_workers` sets it (the default of
/// `lllm batch -j`).
pub const DEFAULT_CONCURRENCY: usize = 16;

/// A run that failed, with its whole session record (every agent call, the
/// cost spent): a failure loses nothing. Shown as the record's error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use lllm::{Registry, Tactic};
///
/// // A scripted permanent error (HTTP 400) fails the run's only call.
/// let yaml = "agent_configs: [{name: a, model_name: mock/script}]\nproviders: {mock: {script: s.yaml}}";
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("s.yaml"), "replies: [{fault: {status: 400}}]").unwrap();
/// let tactic = Tactic::from_yaml(yaml, dir.path(), &Registry::new()).unwrap();
/// let error = tactic.call("hi").await.unwrap_err();
/// assert!(error.to_string().contains("400"), "{error}");
/// assert_eq!(error.record().agent_calls.len(), 1);
/// # }
/// ```
pub struct RunError {
    record: Box<SessionRecord>,
}

impl RunError {
    /// The failed run's session record.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// The failed run's session record, taken out.
    pub fn into_record(self) -> SessionRecord {
        *self.record
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.record.error.as_deref().unwrap_or("the run failed"))
    }
}

impl std::fmt::Debug for RunError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunError")
            .field("error", &self.record.error)
            .field("session_id", &self.record.session_id)
            .field("task_id", &self.record.task_id)
            .finish_non_exhaustive()
    }
}

impl std::error::Error for RunError {}

/// A record as a call's result: the delivery of a successful run, or the
/// record itself as the error.
pub(crate) fn outcome(record: SessionRecord) -> Result<String, RunError> {
    match (&record.state, &record.delivery) {
        (RunState::Success, Some(delivery)) => Ok(delivery.clone()),
        _ => Err(RunError {
            record: Box::new(record),
        }),
    }
}

impl Tactic {
    /// Runs one task and returns its delivery; a failed run is a [`RunError`]
    /// holding its record. [`Tactic::run`] gives the record either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// assert_eq!(tactic.call("ping").await?, "ping");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call(&self, task: impl Into<Task>) -> Result<String, RunError> {
        outcome(self.records.keep(self.run(task.into()).await).await)
    }

    /// Runs one task like [`call`](Tactic::call), writing its record as
    /// `call` does, and gives the record (success or not) instead of the
    /// delivery: `bcall(..).records()` for one task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Records, Registry, Tactic};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?
    /// .with_records(Records::dir(dir.path()));
    /// let record = tactic.call_record("ping").await;
    /// assert_eq!(record.delivery.as_deref(), Some("ping"));
    /// assert!(Records::dir(dir.path()).file_for(&record).unwrap().is_file());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_record(&self, task: impl Into<Task>) -> SessionRecord {
        self.records.keep(self.run(task.into()).await).await
    }

    /// This tactic with its verbs' session records written to `records`
    /// instead of the session store (see [`Records`](crate::Records)): a
    /// directory, another store, or nowhere. `run` writes none either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Records, Registry, Tactic};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// tactic.clone().with_records(Records::none()).call("not kept").await?;
    /// tactic.with_records(Records::dir(dir.path())).call("kept").await?;
    /// assert_eq!(std::fs::read_dir(dir.path())?.count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_records(mut self, records: super::records::Records) -> Tactic {
        self.records = records;
        self
    }

    /// Runs many tasks and gives every result in input order (futures'
    /// `join_all`). Await it; `.concurrency(n)` sets how many run at once,
    /// `.records()` gives the session records instead.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// let results = tactic.bcall(["a", "b", "c"]).concurrency(2).await;
    /// let texts: Vec<String> = results.into_iter().collect::<Result<_, _>>()?;
    /// assert_eq!(texts, ["a", "b", "c"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn bcall<'a, I>(&self, tasks: I) -> Bcall<'a>
    where
        I: IntoIterator,
        I::Item: Into<Task> + 'a,
        I::IntoIter: Send + 'a,
    {
        Bcall {
            runs: Runs::new(self, tasks),
        }
    }

    /// Runs many tasks and gives every delivery in input order, or the first
    /// failure: it cancels the runs still going and starts no more (futures'
    /// `try_join_all`; `lllm batch --fail-fast`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// let texts = tactic.try_bcall(["a", "b"]).await?;
    /// assert_eq!(texts, ["a", "b"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_bcall<'a, I>(&self, tasks: I) -> TryBcall<'a>
    where
        I: IntoIterator,
        I::Item: Into<Task> + 'a,
        I::IntoIter: Send + 'a,
    {
        TryBcall {
            runs: Runs::new(self, tasks),
        }
    }

    /// Runs many tasks and yields `(index, result)` as each finishes (futures'
    /// `buffer_unordered`); `index` is the task's place in `tasks`. Dropping
    /// the stream aborts the runs still going. With `'static` tasks (owned
    /// values, not borrows) the stream is `'static` and can move into a
    /// spawned task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use futures_util::StreamExt;
    /// use lllm::{Registry, Tactic};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// let tasks = (0..10).map(|number| format!("task {number}"));
    /// let mut finished = tactic.ccall(tasks).concurrency(4);
    /// let mut seen = 0;
    /// while let Some((index, result)) = finished.next().await {
    ///     assert_eq!(result?, format!("task {index}"));
    ///     seen += 1;
    /// }
    /// assert_eq!(seen, 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ccall<'a, I>(&self, tasks: I) -> Ccall<'a>
    where
        I: IntoIterator,
        I::Item: Into<Task> + 'a,
        I::IntoIter: Send + 'a,
    {
        Ccall {
            runs: Runs::new(self, tasks),
        }
    }

    /// How many runs `bcall`, `try_bcall` and `ccall` keep in flight unless
    /// told otherwise: the tactic's `max_workers` (checked at load: 1 to
    /// 100,000), else [`DEFAULT_CONCURRENCY`].
    pub fn default_concurrency(&self) -> usize {
        self.config.max_workers.unwrap_or(DEFAULT_CONCURRENCY)
    }
}

/// The engine under `bcall`, `try_bcall` and `ccall`: runs in one `JoinSet`,
/// at most `concurrency` at once, tasks pulled when a slot frees.
pub(super) struct Runs<'a> {
    tactic: Tactic,
    tasks: Box<dyn Iterator<Item = Task> + Send + 'a>,
    /// The index the next task pulled gets.
    next_index: usize,
    /// No task is left in `tasks`.
    exhausted: bool,
    concurrency: usize,
    running: JoinSet<(usize, SessionRecord)>,
    /// Where each run says what happens, tagged with its task
    /// ([`Ccall::events`]); `None`: nowhere.
    events: Option<std::sync::Arc<crate::event::Queue>>,
    /// Where each run's record is written as it finishes.
    records: super::records::Records,
}

impl<'a> Runs<'a> {
    fn new<I>(tactic: &Tactic, tasks: I) -> Runs<'a>
    where
        I: IntoIterator,
        I::Item: Into<Task> + 'a,
        I::IntoIter: Send + 'a,
    {
        Runs {
            tactic: tactic.clone(),
            tasks: Box::new(tasks.into_iter().map(Into::into)),
            next_index: 0,
            exhausted: false,
            concurrency: tactic.default_concurrency(),
            running: JoinSet::new(),
            events: None,
            records: tactic.records.clone(),
        }
    }

    /// The tactic the runs run.
    pub(super) fn tactic(&self) -> &Tactic {
        &self.tactic
    }

    /// At most `concurrency` runs at once; 0 is taken as 1.
    pub(super) fn set_concurrency(&mut self, concurrency: usize) {
        self.concurrency = concurrency.max(1);
    }

    /// Starts runs until `concurrency` are in flight or the tasks run out.
    fn fill(&mut self) {
        while !self.exhausted && self.running.len() < self.concurrency {
            let Some(task) = self.tasks.next() else {
                self.exhausted = true;
                break;
            };
            let index = self.next_index;
            self.next_index += 1;
            let tactic = self.tactic.clone();
            let events = self.events.as_ref().map(|queue| {
                super::events::task_emitter(&tactic, queue, Some(index), task.id.as_deref())
            });
            let records = self.records.clone();
            // Boxed: tokio moves an unboxed future by value several times
            // on its way into the task and out (see `batch::scheduler`).
            self.running.spawn(Box::pin(async move {
                let record = run_caught(tactic, task, events).await;
                (index, records.keep(record).await)
            }));
        }
    }

    /// The next run to finish, `None` once every task has run.
    pub(super) fn poll_next_record(
        &mut self,
        context: &mut Context<'_>,
    ) -> Poll<Option<(usize, SessionRecord)>> {
        loop {
            self.fill();
            match self.running.poll_join_next(context) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Ok(finished))) => return Poll::Ready(Some(finished)),
                // Not ours to abort (we only abort by dropping the set), and
                // panics are caught in the run: the runtime is shutting down.
                Poll::Ready(Some(Err(_))) => continue,
            }
        }
    }

    async fn next_record(&mut self) -> Option<(usize, SessionRecord)> {
        std::future::poll_fn(|context| self.poll_next_record(context)).await
    }
}

/// Runs `task`; a panic (a bug in lllm or in a registered extension) ends
/// this run only, as a failure record saying so.
/// With `events`, the run says what happens there.
pub(super) async fn run_caught(
    tactic: Tactic,
    task: Task,
    events: Option<crate::event::Emitter>,
) -> SessionRecord {
    let copy = task.clone();
    match AssertUnwindSafe(tactic.run_with_events(task, events))
        .catch_unwind()
        .await
    {
        Ok(record) => record,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            failed_record(
                &tactic,
                copy,
                format!(
                    "internal error: the run panicked ({message}); this is a bug, please report it"
                ),
            )
        }
    }
}

/// The record of a run that ended before any agent call.
fn failed_record(tactic: &Tactic, task: Task, error: String) -> SessionRecord {
    let now = record::timestamp();
    let mut record = SessionRecord {
        format: record::FORMAT.to_string(),
        session_id: record::new_session_id(),
        tactic: TacticInfo {
            name: tactic.config.name.clone(),
            path: tactic.config.path.display().to_string(),
            config: tactic.recorded_config.clone(),
            model: tactic.config.model_override.clone(),
            model_args: tactic.config.model_args_override.clone(),
            body: tactic
                .program
                .as_ref()
                .map(|flow| format!("rust:{}", flow.name())),
            output_schema: tactic
                .output
                .as_ref()
                .and_then(|output| output.schema.clone()),
        },
        task_id: task.id,
        task: task.task,
        args: task.args,
        tags: task.tags,
        metadata: task.metadata,
        model: task.model,
        model_args: task.model_args,
        messages: task.messages,
        attachments: task.attachments,
        started_at: now.clone(),
        ended_at: now,
        latency_ms: 0,
        state: RunState::Failure,
        delivery: None,
        error: Some(error),
        prompts: tactic.recorded_prompts.clone(),
        steps: Vec::new(),
        dialogs: Vec::new(),
        agent_calls: Vec::new(),
        sub_tactic_sessions: Vec::new(),
        remote_calls: Vec::new(),
        trace: None,
        shared: None,
        cost: crate::dialog::InvokeCost::default(),
        cost_known: true,
    };
    // As every run's record: the task it was given, without the secrets.
    record.scrub_own(&mut crate::redact::Scrubber::new(&tactic.runtime.secrets));
    record
}

/// Every record, in input order.
async fn all_records(mut runs: Runs<'_>) -> Vec<SessionRecord> {
    let mut records: Vec<Option<SessionRecord>> = Vec::new();
    while let Some((index, record)) = runs.next_record().await {
        if records.len() <= index {
            records.resize_with(index + 1, || None);
        }
        records[index] = Some(record);
    }
    // Every index below `next_index` finished once (a run that the runtime
    // dropped while shutting down has no record and no place).
    records.into_iter().flatten().collect()
}

/// Many runs, every result in input order: [`Tactic::bcall`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Bcall<'a> {
    runs: Runs<'a>,
}

impl<'a> Bcall<'a> {
    /// At most `concurrency` runs at once (default:
    /// [`Tactic::default_concurrency`]); 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> Bcall<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }

    /// Writes these runs' records to `records` instead of where the
    /// tactic's go ([`Tactic::with_records`]).
    pub fn write_records(mut self, records: super::records::Records) -> Bcall<'a> {
        self.runs.records = records;
        self
    }

    /// Gives each run's session record instead of its delivery, in input order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic, Task};
    ///
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: echo, model_name: mock/echo}]",
    ///     ".",
    ///     &Registry::new(),
    /// )?;
    /// let records = tactic.bcall([Task::new("a").id("first")]).records().await;
    /// assert_eq!(records[0].task_id.as_deref(), Some("first"));
    /// assert_eq!(records[0].delivery.as_deref(), Some("a"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn records(self) -> BcallRecords<'a> {
        BcallRecords { runs: self.runs }
    }
}

impl<'a> IntoFuture for Bcall<'a> {
    type Output = Vec<Result<String, RunError>>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            all_records(self.runs)
                .await
                .into_iter()
                .map(outcome)
                .collect()
        })
    }
}

/// [`Bcall`] giving session records: [`Bcall::records`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct BcallRecords<'a> {
    runs: Runs<'a>,
}

impl<'a> BcallRecords<'a> {
    /// At most `concurrency` runs at once; 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> BcallRecords<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }

    /// Writes these runs' records to `records` instead of where the
    /// tactic's go ([`Tactic::with_records`]).
    pub fn write_records(mut self, records: super::records::Records) -> BcallRecords<'a> {
        self.runs.records = records;
        self
    }
}

impl<'a> IntoFuture for BcallRecords<'a> {
    type Output = Vec<SessionRecord>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(all_records(self.runs))
    }
}

/// Many runs, failing fast: [`Tactic::try_bcall`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct TryBcall<'a> {
    runs: Runs<'a>,
}

impl<'a> TryBcall<'a> {
    /// At most `concurrency` runs at once; 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> TryBcall<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }

    /// Writes these runs' records to `records` instead of where the
    /// tactic's go ([`Tactic::with_records`]).
    pub fn write_records(mut self, records: super::records::Records) -> TryBcall<'a> {
        self.runs.records = records;
        self
    }
}

impl<'a> IntoFuture for TryBcall<'a> {
    type Output = Result<Vec<String>, RunError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let mut runs = self.runs;
            let mut deliveries: Vec<Option<String>> = Vec::new();
            while let Some((index, record)) = runs.next_record().await {
                // An error returns here: `runs` is dropped with its `JoinSet`,
                // which aborts every run still going; no task is pulled again.
                let delivery = outcome(record)?;
                if deliveries.len() <= index {
                    deliveries.resize_with(index + 1, || None);
                }
                deliveries[index] = Some(delivery);
            }
            Ok(deliveries.into_iter().flatten().collect())
        })
    }
}

/// Results as runs finish: [`Tactic::ccall`]. A `Stream` of
/// `(index, Result<String, RunError>)`; dropping it aborts what still runs.
#[must_use = "streams do nothing unless polled"]
pub struct Ccall<'a> {
    runs: Runs<'a>,
}

impl<'a> Ccall<'a> {
    /// At most `concurrency` runs at once (default:
    /// [`Tactic::default_concurrency`]); 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> Ccall<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }

    /// Writes these runs' records to `records` instead of where the
    /// tactic's go ([`Tactic::with_records`]).
    pub fn write_records(mut self, records: super::records::Records) -> Ccall<'a> {
        self.runs.records = records;
        self
    }

    /// Yields `(index, SessionRecord)` instead, as runs finish.
    pub fn records(self) -> CcallRecords<'a> {
        CcallRecords { runs: self.runs }
    }

    /// Yields every run's [`Event`](crate::Event)s instead, as they happen,
    /// each tagged with its task (`metadata.task_index`, and
    /// `metadata.task_id` when the task has one); each task's last event is
    /// its `result` or `error`. Dropping the stream aborts what still runs.
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
    /// let events: Vec<_> = tactic.ccall(["a", "b"]).events().collect().await;
    /// let results = events.iter().filter(|event| event.kind.is_closing());
    /// assert_eq!(results.count(), 2, "one closing event per task");
    /// assert!(events.iter().all(|event| event.metadata["task_index"].is_u64()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(mut self) -> super::CcallEvents<'a> {
        let queue = std::sync::Arc::default();
        self.runs.events = Some(std::sync::Arc::clone(&queue));
        super::events::CcallEvents::new(self.runs, queue)
    }
}

impl Stream for Ccall<'_> {
    type Item = (usize, Result<String, RunError>);

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .runs
            .poll_next_record(context)
            .map(|finished| finished.map(|(index, record)| (index, outcome(record))))
    }
}

/// [`Ccall`] yielding session records: [`Ccall::records`].
#[must_use = "streams do nothing unless polled"]
pub struct CcallRecords<'a> {
    runs: Runs<'a>,
}

impl<'a> CcallRecords<'a> {
    /// At most `concurrency` runs at once; 0 is taken as 1.
    pub fn concurrency(mut self, concurrency: usize) -> CcallRecords<'a> {
        self.runs.set_concurrency(concurrency);
        self
    }

    /// Writes these runs' records to `records` instead of where the
    /// tactic's go ([`Tactic::with_records`]).
    pub fn write_records(mut self, records: super::records::Records) -> CcallRecords<'a> {
        self.runs.records = records;
        self
    }
}

impl Stream for CcallRecords<'_> {
    type Item = (usize, SessionRecord);

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().runs.poll_next_record(context)
    }
}

// The handles move into spawned tasks: keep them `Send` (and the owned
// forms `'static`).
const _: fn() = || {
    fn send_static<T: Send + 'static>() {}
    send_static::<Tactic>();
    send_static::<Ccall<'static>>();
    send_static::<CcallRecords<'static>>();
    send_static::<super::CcallEvents<'static>>();
    send_static::<super::Events>();
    send_static::<Bcall<'static>>();
    send_static::<TryBcall<'static>>();
    send_static::<RunError>();
    fn sync<T: Sync>() {}
    sync::<Tactic>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(max_workers: &str, expected: usize) {
        let yaml = format!("agent_configs: [{{name: a, model_name: mock/echo}}]\n{max_workers}");
        let tactic = Tactic::from_yaml(&yaml, "/nonexistent", &crate::Registry::new()).unwrap();
        assert_eq!(tactic.default_concurrency(), expected, "{max_workers}");
    }

    #[test]
    fn the_default_concurrency_is_max_workers() {
        case("", DEFAULT_CONCURRENCY);
        case("max_workers: 3", 3);
        case("max_workers: null", DEFAULT_CONCURRENCY);
        let zero = "agent_configs: [{name: a, model_name: mock/echo}]\nmax_workers: 0";
        let error = Tactic::from_yaml(zero, "/nonexistent", &crate::Registry::new()).unwrap_err();
        assert!(error.to_string().contains("max_workers"), "{error}");
    }

    #[tokio::test]
    async fn borrowed_tasks_and_a_concurrency_of_zero_work() {
        let tactic = Tactic::from_yaml(
            "agent_configs: [{name: a, model_name: mock/echo}]",
            "/nonexistent",
            &crate::Registry::new(),
        )
        .unwrap();
        let documents = vec![String::from("one"), String::from("two")];
        let texts = tactic
            .try_bcall(documents.iter().map(String::as_str))
            .concurrency(0)
            .await
            .unwrap();
        assert_eq!(texts, documents);
        let none: Vec<&str> = Vec::new();
        assert!(tactic.bcall(none).await.is_empty());
    }
}
