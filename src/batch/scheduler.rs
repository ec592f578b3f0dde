//! The run: task lines streamed from the file's copy a second time
//! (pre-flight has validated them; `snapshot`), each started as a tokio task
//! once a `-j` slot is free; results appended as tasks finish. At most `-j`
//! tasks exist at any moment, however long the file, and a task keeps its
//! slot until the writer has its lines on disk (`writer`): `-j` also bounds
//! the tasks paid for and not yet written. A failed write stops the run
//! like a second Ctrl-C: no task starts, running ones are cancelled.
//!
//! Stopping: `--fail-fast` (at the first failed task) and a second Ctrl-C or
//! the end of the grace period cancel in-flight tasks; the budget and a first
//! Ctrl-C only stop scheduling. `--max-cost` is kept call by call
//! (`provider::budget`): a task one of whose calls the budget refused ends
//! `skipped`, and no task starts after that. Tasks that will not run because
//! of fail-fast or the budget get a `skipped` result with the reason; after
//! Ctrl-C the unstarted ones are left without a result, for `--resume`.
//!
//! A task that panics (a bug) is caught at its own future: it gets a `failure`
//! result saying so, and the run goes on.
//!
//! Fewer than `-j` tasks run while a provider of the task's tactic sends
//! fewer requests at once (its `max_concurrency`, its server's slots, its
//! adaptive limit, a back-off after 429s: `Tactic::provider_limit`): the
//! tasks past it would only wait, in the limiter or in the server's queue,
//! with their time counting against the request timeout, while tasks in file
//! order wait here instead. The progress line says so.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::output::{Brief, Encoded, Lost, ResultLine, TaskState, WriteFailure, Writer};
use super::preflight::{Plan, Selector};
use super::progress::{Reporter, Snapshot};
use super::reasons::Reasons;
use super::summary::Totals;
use super::tasks::{self, Task};
use crate::provider::batch_api::{BatchApi, Running};
use crate::provider::breaker::{Breakers, Claim};
use crate::provider::budget::{CostBudget, REFUSED_CODE};
use crate::provider::limit::Waiting;
use crate::provider::watch::{self as calls, Notice, Notices, Watch};
use crate::redact::{Scrub, Scrubber};
use crate::tactic::{RunState, Tactic};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    FailFast,
    Budget,
    Interrupted,
    WriteFailed,
    /// A provider stayed down past `--max-outage` (`provider::breaker`).
    Outage,
}

impl Reason {
    pub fn text(self) -> &'static str {
        match self {
            Reason::FailFast => "cancelled by --fail-fast after a failed task",
            Reason::Budget => "--max-cost budget reached",
            Reason::Interrupted => "interrupted",
            Reason::WriteFailed => "cancelled: the output could not be written",
            Reason::Outage => "a provider stayed unreachable past --max-outage",
        }
    }
}

/// Whether new tasks start, and whether running ones go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Running,
    /// No new task starts; running ones finish.
    Drain(Reason),
    /// Running tasks are cancelled too.
    Cancel(Reason),
}

impl Stop {
    pub fn reason(self) -> Option<Reason> {
        match self {
            Stop::Running => None,
            Stop::Drain(reason) | Stop::Cancel(reason) => Some(reason),
        }
    }
}

/// What the run's tasks share.
pub struct Shared {
    writer: Writer,
    totals: Mutex<Totals>,
    /// Why this run's failed tasks failed.
    reasons: Mutex<Reasons>,
    budget: Option<Arc<CostBudget>>,
    /// Shared with the writer, which stops the run when a write fails.
    pub stop: Arc<watch::Sender<Stop>>,
    /// Tasks started and not yet ended.
    in_flight: AtomicU64,
    /// Notified when a task ends (a running task's place frees).
    task_ended: Notify,
    /// Why fewer than `-j` tasks run, while the scheduler holds one back.
    held: Mutex<Option<String>>,
    /// A line that could not be encoded (a bug), and lines the writer did
    /// not take (its thread is gone).
    write_error: Mutex<Option<std::io::Error>>,
    unsent: Mutex<Lost>,
    fail_fast: bool,
    /// `--via batch-api`: what the run waits on when its calls are in a
    /// provider batch.
    batch_api: std::sync::OnceLock<Arc<BatchApi>>,
    /// Every secret the run's tactics know: a result line is scrubbed of
    /// them as records are (one without a record carries its task's
    /// arguments and tags).
    secrets: crate::redact::Secrets,
    /// The providers' circuit breakers (`None`: calls never wait on one).
    breakers: Option<Arc<Breakers>>,
    /// Told what each task's calls wait on: keeps the latest retry.
    notices: Notices,
    /// The latest retry's reason and when it came, for progress lines.
    last_retry: Arc<Mutex<Option<(Instant, String)>>>,
    /// Scores finished tasks (`None`: no tactic or line has assertions).
    grader: Option<Arc<super::grade::Grader>>,
    /// The scored tasks this run wrote.
    scores: Mutex<crate::eval::Tally>,
    /// The batch's span, when runs are traced: each task's run is a trace
    /// of its own that links to it (docs/telemetry.md, "Batches").
    trace_link: Option<crate::trace_context::TraceContext>,
}

/// How long a retry's reason stays on the progress line.
const RETRY_SHOWN: Duration = Duration::from_secs(10);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub fn new(writer: Writer, budget: Option<Arc<CostBudget>>, fail_fast: bool) -> Shared {
        let stop = Arc::new(watch::Sender::new(Stop::Running));
        // A failed write stops the run at once: no task starts after it, and
        // the running ones are cancelled (they could not be written either).
        let stopped_by_writer = stop.clone();
        writer.when_failed(move || {
            request_stop(&stopped_by_writer, Stop::Cancel(Reason::WriteFailed));
        });
        let last_retry: Arc<Mutex<Option<(Instant, String)>>> = Arc::default();
        let kept = last_retry.clone();
        // A batch says nothing per call (sixteen tasks retrying at once
        // would flood the terminal): the latest retry's reason goes on the
        // progress line instead.
        let notices: Notices = Arc::new(move |notice: &Notice<'_>| {
            if let Notice::Retry { target, error, .. } = notice {
                let reason = format!("{}: {}", target.provider, calls::reason(error));
                *lock(&kept) = Some((Instant::now(), reason));
            }
        });
        Shared {
            writer,
            totals: Mutex::new(Totals::default()),
            reasons: Mutex::new(Reasons::default()),
            budget,
            stop,
            in_flight: AtomicU64::new(0),
            task_ended: Notify::new(),
            held: Mutex::new(None),
            write_error: Mutex::new(None),
            unsent: Mutex::new(Lost::default()),
            fail_fast,
            batch_api: std::sync::OnceLock::new(),
            secrets: crate::redact::Secrets::new(),
            breakers: None,
            notices,
            last_retry,
            grader: None,
            scores: Mutex::new(crate::eval::Tally::default()),
            trace_link: None,
        }
    }

    /// Finished tasks are scored by `grader` (issue 32).
    pub fn with_grader(mut self, grader: Arc<super::grade::Grader>) -> Shared {
        self.grader = Some(grader);
        self
    }

    /// The scored tasks this run wrote.
    pub fn scores(&self) -> crate::eval::Tally {
        lock(&self.scores).clone()
    }

    /// Each task's run links to the batch's span `link`.
    pub fn with_trace_link(mut self, link: Option<crate::trace_context::TraceContext>) -> Shared {
        self.trace_link = link;
        self
    }

    /// Calls wait on `breakers`, and tasks of a provider that is down wait
    /// to start (`provider::breaker`).
    pub fn with_breakers(mut self, breakers: Arc<Breakers>) -> Shared {
        self.breakers = Some(breakers);
        self
    }

    /// Result lines are scrubbed of the secrets of every tactic in `tactics`.
    pub fn scrubbing<'t>(mut self, tactics: impl IntoIterator<Item = &'t Tactic>) -> Shared {
        for tactic in tactics {
            self.secrets.extend(tactic.secrets());
        }
        self
    }

    /// Shows what `hub` waits on in progress lines.
    pub fn set_batch_api(&self, hub: Arc<BatchApi>) {
        let _ = self.batch_api.set(hub);
    }

    pub fn totals(&self) -> Totals {
        *lock(&self.totals)
    }

    /// Why the tasks this run wrote as failed failed.
    pub fn reasons(&self) -> Reasons {
        lock(&self.reasons).clone()
    }

    /// Writes what is queued; the first write error, if any, with every
    /// task whose lines are not on disk.
    pub fn finish_writing(&self) -> Result<(), WriteFailure> {
        let finished = self.writer.finish();
        let unsent = std::mem::take(&mut *lock(&self.unsent));
        match (lock(&self.write_error).take(), finished) {
            (Some(source), finished) => {
                let mut lost = unsent;
                if let Err(failure) = finished {
                    lost.merge(failure.lost);
                }
                Err(WriteFailure {
                    file: super::output::RESULTS,
                    source,
                    lost,
                })
            }
            (None, Err(mut failure)) => {
                failure.lost.merge(unsent);
                Err(failure)
            }
            (None, Ok(())) => Ok(()),
        }
    }

    /// Stops as asked, unless already stopped harder.
    pub fn request_stop(&self, stop: Stop) {
        request_stop(&self.stop, stop);
    }

    /// Appends one result (and its record); `slot`, the task's `-j` permit,
    /// is released once they are on disk. A write error stops the run.
    fn record(
        &self,
        result: &ResultLine,
        record: Option<&crate::tactic::SessionRecord>,
        slot: Option<OwnedSemaphorePermit>,
    ) {
        // A line made from a record holds what the record holds, scrubbed
        // where the run made it; one without a record is scrubbed here.
        let mut scrubbed = None;
        if record.is_none() && !self.secrets.is_empty() {
            let mut line = result.clone();
            if line.scrub(&mut Scrubber::new(&self.secrets)) {
                scrubbed = Some(line);
            }
        }
        let result = scrubbed.as_ref().unwrap_or(result);
        let encoded = Encoded::new(result, record);
        #[cfg(feature = "store")]
        let encoded = match (record, self.writer.indexes()) {
            (Some(record), true) => encoded.map(|encoded| encoded.with_entry(record)),
            _ => encoded,
        };
        let encoded = match (encoded, slot) {
            (Ok(encoded), Some(slot)) => encoded.holding(slot),
            (Ok(encoded), None) => encoded,
            (Err(error), _) => {
                lock(&self.write_error).get_or_insert(std::io::Error::other(error));
                self.request_stop(Stop::Cancel(Reason::WriteFailed));
                return;
            }
        };
        if let Err(unsent) = self.writer.send(encoded) {
            lock(&self.unsent).merge(unsent);
            lock(&self.write_error)
                .get_or_insert_with(|| std::io::Error::other("the output writer stopped"));
            self.request_stop(Stop::Cancel(Reason::WriteFailed));
            return;
        }
        lock(&self.totals).add(&Brief::from(result));
        if let Some(pass) = result.pass {
            lock(&self.scores).add(
                &result.id,
                result.repeat_of.as_deref(),
                result.score.unwrap_or(0.0),
                pass,
            );
        }
        if result.state == TaskState::Failure {
            lock(&self.reasons).add(&result.id, result.error.as_deref());
        }
    }

    pub fn snapshot(&self, total: u64, started: Instant, tactics: &[Arc<Tactic>]) -> Snapshot {
        let waiting = if self
            .budget
            .as_ref()
            .is_some_and(|budget| budget.is_waiting())
        {
            Some("budget")
        } else if let Some(waiting) = self.batch_api.get().and_then(|hub| hub.waiting()) {
            Some(waiting)
        } else {
            tactics
                .iter()
                .find_map(|tactic| tactic.waiting())
                .map(|waiting| match waiting {
                    Waiting::RateLimit => "rate limit",
                    Waiting::BackOff => "back-off after a 429",
                    Waiting::Retry => "back-off before retrying",
                    Waiting::Concurrency => "provider concurrency",
                })
        };
        let retrying = lock(&self.last_retry)
            .as_ref()
            .filter(|(when, _)| when.elapsed() < RETRY_SHOWN)
            .map(|(_, reason)| reason.clone());
        Snapshot {
            total,
            done: self.totals(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
            waiting,
            paused: self
                .breakers
                .as_ref()
                .and_then(|breakers| breakers.paused()),
            retrying,
            held: lock(&self.held).clone(),
        }
    }
}

/// Sets `stop` as asked, unless it is already stopped harder.
fn request_stop(sender: &watch::Sender<Stop>, stop: Stop) {
    sender.send_if_modified(|current| {
        let harder = matches!(
            (*current, stop),
            (Stop::Running, _) | (Stop::Drain(_), Stop::Cancel(_))
        );
        if harder {
            *current = stop;
        }
        harder
    });
}

/// Everything the run reads.
pub struct Run<'a> {
    /// The TASKS file, as named (for line tactics' paths).
    pub tasks_file: &'a Path,
    /// Its lines, as pre-flight read them.
    pub snapshot: &'a super::snapshot::Snapshot,
    /// Reads the file's lines in its format.
    pub reader: &'a super::formats::LineReader,
    pub default_tactic: Option<&'a Path>,
    /// The tactic of lines that name a model but no tactic (no `--tactic`).
    pub fallback_tactic: Option<&'a Path>,
    /// Built tactics by file and model (`tactics::Key`: the canonical path,
    /// and `--model`, else the line's model).
    pub tactics: &'a HashMap<super::tactics::Key, Arc<Tactic>>,
    /// `--model`: the model every tactic was built for, when given.
    pub model: Option<&'a str>,
    pub plan: &'a Plan,
    pub selector: Selector,
    pub done: &'a (dyn Fn(&str) -> bool + Sync),
    pub concurrency: usize,
    /// Tags and metadata of the whole batch, added to each task's.
    pub labels: &'a super::Labels,
    /// `--via batch-api`: told how many tasks run and whether more are
    /// starting, so it submits when every running task waits on a call.
    pub batch_api: Option<Arc<BatchApi>>,
    /// `--repeat`: runs of each line (1: once, under its own id).
    pub repeat: u32,
}

/// A line's `tactic` as written, and the model its tactic is built for.
type LineTactic = (Option<String>, Option<String>);

/// The task of line `number` with its tactic; `None` when the line is
/// recorded as invalid instead (it does not parse, pre-flight found a
/// problem in it, or no tactic was built for it). `line_tactics` keeps the
/// tactic of each `tactic` as written and model (one path lookup per
/// distinct pair).
fn line_tactic(
    run: &Run<'_>,
    shared: &Shared,
    line_tactics: &mut HashMap<LineTactic, Option<Arc<Tactic>>>,
    tasks_dir: &Path,
    (number, id, task): (usize, String, Option<Task>),
) -> Option<(Task, Arc<Tactic>)> {
    match (task, run.plan.invalid.get(&number)) {
        (Some(task), None) => {
            let model = run
                .model
                .map(str::to_string)
                .or_else(|| task.input.model.clone());
            let tactic = line_tactics
                .entry((task.tactic.clone(), model.clone()))
                .or_insert_with(|| {
                    let path = tasks::tactic_path(
                        &task,
                        tasks_dir,
                        run.default_tactic,
                        run.fallback_tactic,
                    )?;
                    let key = (super::tactics::key(&path), model);
                    run.tactics.get(&key).cloned()
                })
                .clone();
            match tactic {
                Some(tactic) => Some((task, tactic)),
                None => {
                    let result =
                        ResultLine::invalid(id, "no tactic for this line").with_task(&task.input);
                    shared.record(&result, None, None);
                    None
                }
            }
        }
        (task, invalid) => {
            let problem = invalid.map_or("invalid task line", |(_, problem)| problem);
            let mut result = ResultLine::invalid(id, &format!("line {number}: {problem}"));
            if let Some(task) = &task {
                result = result.with_task(&task.input);
            }
            shared.record(&result, None, None);
            None
        }
    }
}

/// Runs every selected task; returns when all have a result or the run stopped.
pub async fn run(run: Run<'_>, shared: Arc<Shared>) -> std::io::Result<()> {
    let tasks_dir = run.tasks_file.parent().unwrap_or(Path::new(""));
    // A line's `tactic` as written and its model → the tactic (one path
    // lookup per distinct pair).
    let mut line_tactics: HashMap<LineTactic, Option<Arc<Tactic>>> = HashMap::new();
    let slots = Arc::new(Semaphore::new(run.concurrency.max(1)));
    let mut running = JoinSet::new();
    let mut stop = shared.stop.subscribe();
    let mut selector = run.selector.clone();
    let mut lines = run.snapshot.lines();
    // The providers each tactic uses (by the tactic's address), for the breakers.
    let mut providers: HashMap<usize, Arc<[String]>> = HashMap::new();
    let scheduling = |starting: bool| {
        if let Some(hub) = &run.batch_api {
            hub.scheduling(starting);
        }
    };
    scheduling(true);
    'lines: while let Some(line) = lines.next_line() {
        let (number, text) = line.map_err(std::io::Error::other)?;
        let parsed = run.reader.parse(text, number);
        let task = match parsed {
            Ok(None) => continue,
            Ok(Some(mut task)) => {
                run.labels.apply(&mut task.input);
                Some(task)
            }
            Err(_) => None,
        };
        let id = task
            .as_ref()
            .map_or_else(|| format!("line-{number}"), |task| task.id.clone());
        if !selector.select(&id) {
            if selector.full() {
                break;
            }
            continue;
        }
        for (id, task) in repeated_runs(id, task, run.repeat) {
            if (run.done)(&id) {
                continue;
            }
            while running.try_join_next().is_some() {}
            let current = *shared.stop.borrow();
            if let Some(reason) = current.reason() {
                if reason == Reason::Interrupted || reason == Reason::WriteFailed {
                    break 'lines;
                }
                let mut result = ResultLine::skipped(id, reason.text());
                if let Some(task) = &task {
                    result = result.with_task(&task.input);
                    result.repeat_of = task.repeat_of.clone();
                }
                shared.record(&result, None, None);
                continue;
            }
            let Some((task, tactic)) = line_tactic(
                &run,
                &shared,
                &mut line_tactics,
                tasks_dir,
                (number, id, task),
            ) else {
                continue;
            };
            // Waiting for a slot, the scheduler starts no task: the calls of the
            // running ones need not wait for more.
            let full = slots.available_permits() == 0;
            if full {
                scheduling(false);
            }
            let admitted = admit(&shared, &slots, &mut stop, (&tactic, run.concurrency)).await;
            if full {
                scheduling(true);
            }
            let admitted = match (admitted, &shared.breakers) {
                (Some(permit), Some(breakers)) => {
                    let names = providers
                        .entry(Arc::as_ptr(&tactic) as usize)
                        .or_insert_with(|| tactic.provider_names().into())
                        .clone();
                    gate(&shared, breakers, &names, &mut stop)
                        .await
                        .map(|claims| (permit, claims))
                }
                (permit, _) => permit.map(|permit| (permit, Vec::new())),
            };
            let Some((permit, claims)) = admitted else {
                // Stopped while waiting: account for this task like the ones after it.
                let reason = shared.stop.borrow().reason();
                if let Some(reason @ (Reason::FailFast | Reason::Budget | Reason::Outage)) = reason
                {
                    let result = ResultLine::skipped(task.id, reason.text()).with_task(&task.input);
                    shared.record(&result, None, None);
                    continue;
                }
                break 'lines;
            };
            let counted = run.batch_api.as_ref().map(|hub| hub.task_started());
            let started = Started::new(&shared);
            // Boxed before it is handed over: tokio moves a future by value
            // through `spawn`, into its task cell and at each change of the
            // task's stage, and this one is about 11 KB (callgrind: eight
            // such copies a task, ~90 KB of `memcpy`); a box moves as a pointer.
            running.spawn(Box::pin(run_task(
                started,
                tactic,
                task,
                (permit, counted, claims),
            )));
        }
    }
    scheduling(false);
    while running.join_next().await.is_some() {}
    Ok(())
}

/// The runs of a line: itself, or under `--repeat N` (N ≥ 2) N copies
/// with ids `ID#1` … `ID#N`, each knowing the id it repeats.
fn repeated_runs(id: String, task: Option<Task>, repeat: u32) -> Vec<(String, Option<Task>)> {
    if repeat <= 1 {
        return vec![(id, task)];
    }
    super::ids::repeated(&id, repeat)
        .map(|run| {
            let run = run.into_owned();
            let task = task.clone().map(|mut task| {
                task.id = run.clone();
                task.input.id = Some(run.clone());
                task.repeat_of = Some(id.clone());
                task
            });
            (run, task)
        })
        .collect()
}

/// Waits for a slot, and for the tactic's providers to have room for
/// another task (`within_provider_limit`); `None` when the run stops first
/// (or the budget is spent: a task would only be refused its first call).
async fn admit(
    shared: &Shared,
    slots: &Arc<Semaphore>,
    stop: &mut watch::Receiver<Stop>,
    (tactic, concurrency): (&Tactic, usize),
) -> Option<OwnedSemaphorePermit> {
    let permit = tokio::select! {
        biased;
        _ = stop.wait_for(|stop| *stop != Stop::Running) => return None,
        permit = slots.clone().acquire_owned() => permit.ok()?,
    };
    if !within_provider_limit(shared, tactic, concurrency, stop).await {
        return None;
    }
    // A slot freed by a failed write comes after the stop it caused.
    if *shared.stop.borrow() != Stop::Running {
        return None;
    }
    if shared
        .budget
        .as_ref()
        .is_some_and(|budget| budget.is_spent() || budget.refused() > 0)
    {
        shared.request_stop(Stop::Drain(Reason::Budget));
        return None;
    }
    Some(permit)
}

/// Before a task of the providers `names` starts: waits while one of them
/// is down (`Breakers::gate`); the probes it is started for, or `None`
/// when the run stops first or a provider was given up on (which stops it).
async fn gate(
    shared: &Shared,
    breakers: &Breakers,
    names: &[String],
    stop: &mut watch::Receiver<Stop>,
) -> Option<Vec<Claim>> {
    let gated = tokio::select! {
        biased;
        _ = stop.wait_for(|stop| *stop != Stop::Running) => return None,
        gated = breakers.gate(names) => gated,
    };
    match gated {
        Ok(claims) => Some(claims),
        Err(_) => {
            shared.request_stop(Stop::Drain(Reason::Outage));
            None
        }
    }
}

/// How long the scheduler waits, at most, before it looks at a provider's
/// limit again when no task ended (an adaptive limit grows between ends).
const RECHECK: Duration = Duration::from_millis(250);

/// Waits while the running tasks fill what the tactic's most limited
/// provider sends at once, when that is less than `concurrency` (`-j`),
/// saying so in the progress line; `false` when the run stops first.
async fn within_provider_limit(
    shared: &Shared,
    tactic: &Tactic,
    concurrency: usize,
    stop: &mut watch::Receiver<Stop>,
) -> bool {
    loop {
        // Made before looking, so that no task's end is missed.
        let ended = shared.task_ended.notified();
        let running = shared.in_flight.load(Ordering::Relaxed);
        let held = tactic
            .provider_limit()
            .filter(|(_, limit)| limit.requests < concurrency && running >= limit.requests as u64);
        let Some((provider, limit)) = held else {
            *lock(&shared.held) = None;
            return true;
        };
        *lock(&shared.held) = Some(format!(
            "{running} of {concurrency} running: {}",
            limit.describe(provider)
        ));
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop != Stop::Running) => {
                *lock(&shared.held) = None;
                return false;
            }
            _ = ended => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// A task counted as running from its spawn to its end, whichever way it
/// ends (a panic included).
struct Started {
    shared: Arc<Shared>,
}

impl Started {
    fn new(shared: &Arc<Shared>) -> Started {
        shared.in_flight.fetch_add(1, Ordering::Relaxed);
        Started {
            shared: shared.clone(),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.shared.task_ended.notify_waiters();
    }
}

/// One task: run it (unless cancelled), record it; its slot is freed once
/// its lines are on disk.
async fn run_task(
    started: Started,
    tactic: Arc<Tactic>,
    task: Task,
    (slot, counted, claims): (OwnedSemaphorePermit, Option<Running>, Vec<Claim>),
) {
    let shared = started.shared.clone();
    let current = *shared.stop.borrow();
    if let Stop::Cancel(reason) = current {
        // Cancelled between its admission and its start: nothing was sent.
        let result = ResultLine::skipped(task.id, reason.text()).with_task(&task.input);
        shared.record(&result, None, Some(slot));
        return;
    }
    let mut stop = shared.stop.subscribe();
    let id = task.id;
    let repeat_of = task.repeat_of;
    // What its graders are given, kept when it has assertions: its line's
    // own, and (for graders that run something) its task, arguments and
    // tags, which the run takes.
    let grading = shared.grader.as_ref().and_then(|_| {
        let line = task.assertions.clone();
        let items = line.iter().flat_map(|line| &line.items);
        if tactic.config.asserts.is_empty() && line.is_none() {
            return None;
        }
        let graded = tactic
            .config
            .asserts
            .iter()
            .chain(items)
            .any(|item| item.kind.is_graded());
        let input = graded.then(|| {
            (
                task.input.task.clone(),
                task.input.args.clone(),
                task.input.tags.clone(),
            )
        });
        Some((input, line))
    });
    // A cancelled task still leaves its record: every agent call that had
    // finished, so what it spent is on disk and counted.
    let cancelled = AtomicBool::new(false);
    let cancel = async {
        let _ = stop.wait_for(|stop| matches!(stop, Stop::Cancel(_))).await;
        cancelled.store(true, Ordering::SeqCst);
    };
    // Boxed: the run's state is kilobytes, and a task's future is moved on
    // its way into the runtime (a copy each time) unless it stays small.
    // A panic (a bug: nothing a user or a server sends should cause one)
    // ends this task only, as a failure, instead of losing its result.
    // Its calls tell the progress line their retries, and wait on the
    // breakers of providers that are down.
    let mut calls_watch = Watch::with_notices(shared.notices.clone()).retries_only();
    if let Some(breakers) = &shared.breakers {
        calls_watch = calls_watch.with_breakers(breakers.clone(), claims);
    }
    let run = crate::trace_context::linked_to(
        shared.trace_link,
        tactic.run_until(task.input, None, cancel),
    );
    let run = Box::pin(calls::scope(Arc::new(calls_watch), run));
    let outcome = AssertUnwindSafe(run).catch_unwind().await;
    // No call of this task is made from here on (`--via batch-api` counts it out).
    drop(counted);
    let record = match outcome {
        Ok(record) => record,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            let text = format!(
                "internal error: the task panicked ({message}); this is a bug in lllm, please \
                 report it; the task's record is lost, and `--retry-errors` runs it again"
            );
            shared.record(&ResultLine::invalid(id, &text), None, Some(slot));
            return;
        }
    };
    let cancelled = cancelled
        .load(Ordering::SeqCst)
        .then(|| shared.stop.borrow().reason().unwrap_or(Reason::Interrupted));
    if cancelled.is_none() {
        if refused_calls(&record) > 0 {
            // The budget refused a call: no other task starts.
            shared.request_stop(Stop::Drain(Reason::Budget));
        } else if record.state == RunState::Failure && shared.fail_fast {
            shared.request_stop(Stop::Cancel(Reason::FailFast));
        }
    }
    let mut record = record;
    settle(&mut record, cancelled);
    let mut result = result_of(id, &record);
    result.repeat_of = repeat_of;
    if let (Some(grader), Some((input, line))) = (&shared.grader, grading) {
        // Only a grader that runs something has words from outside the
        // run; the checks' reasons are made of the assertion and of what
        // the record holds, scrubbed already.
        let runs_graders = input.is_some();
        let (task, args, tags) = input.unwrap_or_default();
        let graded = super::grade::Graded {
            id: &result.id,
            task: &task,
            args: &args,
            tags: &tags,
            expected: line.as_ref().and_then(|line| line.expected.as_ref()),
        };
        let scored = grader
            .grade(&tactic.config.asserts, line.as_deref(), &graded, &result)
            .await;
        result = result.with_scores(scored);
        // A grader's reason (a judge's words, a program's output) is
        // scrubbed of the run's secrets, as the record is.
        if runs_graders && !shared.secrets.is_empty() {
            let mut scrubber = crate::redact::Scrubber::new(&shared.secrets);
            let assertions =
                (tactic.config.asserts.iter()).chain(line.iter().flat_map(|line| &line.items));
            for (score, assertion) in result.scores.iter_mut().flatten().zip(assertions) {
                if assertion.kind.is_graded() {
                    crate::redact::Scrub::scrub(&mut score.reason, &mut scrubber);
                }
            }
        }
    }
    shared.record(&result, Some(&record), Some(slot));
    drop(started);
}

/// How a task's run ended, `cancelled` for what stopped it in flight: the
/// one rule for a task that just ran and for one whose result line
/// `--resume` rebuilds from its record (`rebuild`).
///
/// A cancelled task, and one with a call the budget did not send, ends
/// `skipped` (no delivery), like the tasks the run keeps from starting:
/// `--resume` runs it again. The record says so itself (issue 27: its
/// `failure` was what `lllm logs` showed of a task `results.jsonl` called
/// `skipped`), so every reader of either agrees.
pub fn settle(record: &mut crate::tactic::SessionRecord, cancelled: Option<Reason>) {
    if let Some(reason) = cancelled {
        record.state = RunState::Skipped;
        record.error = Some(reason.text().to_string());
        record.delivery = None;
    } else if record.state == RunState::Failure && refused_calls(record) > 0 {
        record.state = RunState::Skipped;
        record.error = Some(format!(
            "{}: {}",
            Reason::Budget.text(),
            record.error.as_deref().unwrap_or_default()
        ));
        record.delivery = None;
    }
}

/// A task's result line from its [settled](settle) record: calls the budget
/// refused were never sent, and are not counted.
pub fn result_of(id: String, record: &crate::tactic::SessionRecord) -> ResultLine {
    let mut result = ResultLine::from_record(id, record);
    result.calls = result.calls.saturating_sub(refused_calls(record));
    result
}

/// Calls of a record the budget refused (recorded as invokes, never sent).
fn refused_calls(record: &crate::tactic::SessionRecord) -> u64 {
    let own = record
        .agent_calls
        .iter()
        .flat_map(|call| &call.invokes)
        .filter(|invoke| {
            invoke
                .error
                .as_ref()
                .is_some_and(|error| error.code.as_deref() == Some(REFUSED_CODE))
        })
        .count() as u64;
    own + record
        .sub_tactic_sessions
        .iter()
        .map(refused_calls)
        .sum::<u64>()
}

/// Ctrl-C (or SIGTERM): stop scheduling, give running tasks `grace` to finish
/// (a second signal ends it at once), then cancel them.
pub async fn watch_signals(shared: Arc<Shared>, grace: Duration, reporter: Arc<dyn Reporter>) {
    if stop_signal().await.is_err() {
        return;
    }
    shared.request_stop(Stop::Drain(Reason::Interrupted));
    let in_flight = shared.in_flight.load(Ordering::Relaxed);
    reporter.note(&format!(
        "interrupted: waiting up to {} s for {}; press Ctrl-C again to stop now",
        grace.as_secs(),
        crate::words::count(in_flight, "running task", "running tasks")
    ));
    tokio::select! {
        _ = tokio::time::sleep(grace) => {}
        _ = stop_signal() => {}
    }
    shared.request_stop(Stop::Cancel(Reason::Interrupted));
}

/// Completes at Ctrl-C or SIGTERM (what `kill`, Slurm at its time limit,
/// Kubernetes and `docker stop` send): both stop a run the same way.
/// Both handlers are installed when this is called, not when the future is
/// first polled: a signal in between (a tool already started, the future not
/// yet awaited) would otherwise kill the process instead of stopping the run.
pub fn stop_signal() -> impl std::future::Future<Output = std::io::Result<()>> {
    #[cfg(unix)]
    let (interrupt, terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut interrupt, mut terminate) = (interrupt?, terminate?);
            tokio::select! {
                _ = interrupt.recv() => Ok(()),
                _ = terminate.recv() => Ok(()),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::batch::output::TaskState;
    use crate::dialog::{Message, Role};
    use crate::provider::{ChatRequest, Provider, ProviderError};

    /// Echoes the task, and panics (a stand-in for any bug) on `boom`.
    struct PanicsOnBoom;

    impl Provider for PanicsOnBoom {
        fn invoke<'a>(
            &'a self,
            request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            let text = request
                .messages
                .last()
                .map(|message| message.content.clone())
                .unwrap_or_default();
            Box::pin(async move {
                tokio::task::yield_now().await;
                assert!(text != "boom", "a bug in a provider");
                Ok(Message::new(Role::Assistant, "a", text))
            })
        }
    }

    #[tokio::test]
    async fn a_task_that_panics_gets_a_failure_result_and_the_others_run() {
        let dir = tempfile::tempdir().unwrap();
        let tactic_path = dir.path().join("t.yaml");
        std::fs::write(
            &tactic_path,
            "tactic_type: t\nglobal: {model_name: mock/echo}\nagent_configs:\n  - {name: a}\n",
        )
        .unwrap();
        let tasks_file = dir.path().join("tasks.jsonl");
        std::fs::write(&tasks_file, "\"fine\"\n\"boom\"\n\"fine too\"\n").unwrap();
        let config = crate::config::load(&tactic_path).unwrap();
        let tactic =
            Tactic::build_replaying(config, Arc::new(PanicsOnBoom), &crate::Registry::new())
                .unwrap();
        let tactics = HashMap::from([(
            (super::super::tactics::key(&tactic_path), None),
            Arc::new(tactic),
        )]);
        let plan = Plan {
            problems: Vec::new(),
            invalid: HashMap::new(),
            in_run: 3,
            to_run: 3,
            line_assertions: false,
        };
        let writer = Writer::open(&dir.path().join("out")).unwrap();
        let shared = Arc::new(Shared::new(writer, None, false));
        let snapshot = super::super::snapshot::Snapshot::take(&tasks_file, dir.path()).unwrap();
        let ran = run(
            Run {
                tasks_file: &tasks_file,
                snapshot: &snapshot,
                reader: &super::super::formats::LineReader::for_file(
                    &tasks_file,
                    None,
                    &crate::dialog::AttachmentScope::default(),
                )
                .unwrap(),
                default_tactic: Some(&tactic_path),
                fallback_tactic: None,
                tactics: &tactics,
                model: None,
                plan: &plan,
                selector: Selector::new(None, None),
                done: &|_| false,
                concurrency: 2,
                labels: &crate::batch::Labels::default(),
                batch_api: None,
                repeat: 1,
            },
            shared.clone(),
        )
        .await;
        ran.unwrap();
        shared.finish_writing().unwrap();
        assert_eq!(shared.in_flight.load(Ordering::Relaxed), 0);
        let text = std::fs::read_to_string(dir.path().join("out/results.jsonl")).unwrap();
        let results: HashMap<String, ResultLine> = text
            .lines()
            .map(|line| serde_json::from_str::<ResultLine>(line).unwrap())
            .map(|result| (result.id.clone(), result))
            .collect();
        assert_eq!(results.len(), 3);
        let boom = &results["line-2"];
        assert_eq!(boom.state, TaskState::Failure);
        let error = boom.error.as_deref().unwrap();
        assert!(
            error.starts_with("internal error: the task panicked (a bug in a provider)"),
            "{error}"
        );
        assert_eq!(results["line-1"].state, TaskState::Success);
        assert_eq!(results["line-3"].delivery.as_deref(), Some("fine too"));
    }
}
