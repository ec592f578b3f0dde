//! The run: task lines streamed from the file a second time (pre-flight has
//! validated them), each started as a tokio task once a `-j` slot and, with
//! `--max-cost`, its budget reservation are free; results appended as tasks
//! finish. At most `-j` tasks exist at any moment, however long the file.
//!
//! Stopping: `--fail-fast` (at the first failed task) and a second Ctrl-C or
//! the end of the grace period cancel in-flight tasks; the budget and a first
//! Ctrl-C only stop scheduling. Tasks that will not run because of fail-fast
//! or the budget get a `skipped` result with the reason; after Ctrl-C the
//! unstarted ones are left without a result, for `--resume`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::budget::{Budget, Reservation};
use super::output::{Brief, Encoded, ResultLine, TaskState, Writer};
use super::preflight::{Plan, Selector};
use super::progress::{Reporter, Snapshot};
use super::summary::Totals;
use super::tasks::{self, Lines, Task};
use crate::provider::limit::Waiting;
use crate::tactic::{RunState, Tactic};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    FailFast,
    Budget,
    Interrupted,
    WriteFailed,
}

impl Reason {
    pub fn text(self) -> &'static str {
        match self {
            Reason::FailFast => "cancelled by --fail-fast after a failed task",
            Reason::Budget => "--max-cost budget reached",
            Reason::Interrupted => "interrupted",
            Reason::WriteFailed => "cancelled: the output could not be written",
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
    /// Whether the writer still takes lines (false after a write error).
    writing: AtomicBool,
    totals: Mutex<Totals>,
    budget: Option<Mutex<Budget>>,
    /// A task ended (a budget reservation may have been freed).
    settled: Notify,
    pub stop: watch::Sender<Stop>,
    in_flight: AtomicU64,
    waiting_for_budget: AtomicBool,
    write_error: Mutex<Option<std::io::Error>>,
    fail_fast: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub fn new(writer: Writer, budget: Option<Budget>, fail_fast: bool) -> Shared {
        Shared {
            writer,
            writing: AtomicBool::new(true),
            totals: Mutex::new(Totals::default()),
            budget: budget.map(Mutex::new),
            settled: Notify::new(),
            stop: watch::Sender::new(Stop::Running),
            in_flight: AtomicU64::new(0),
            waiting_for_budget: AtomicBool::new(false),
            write_error: Mutex::new(None),
            fail_fast,
        }
    }

    pub fn totals(&self) -> Totals {
        *lock(&self.totals)
    }

    /// Writes what is queued; the first write error, if any.
    pub fn finish_writing(&self) -> std::io::Result<()> {
        let finished = self.writer.finish();
        match lock(&self.write_error).take() {
            Some(error) => Err(error),
            None => finished,
        }
    }

    /// Stops as asked, unless already stopped harder.
    pub fn request_stop(&self, stop: Stop) {
        self.stop.send_if_modified(|current| {
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

    /// Appends one result (and its record); a write error stops the run.
    fn record(&self, result: &ResultLine, record: Option<&crate::tactic::SessionRecord>) {
        let sent = match Encoded::new(result, record) {
            Ok(encoded) => self.writing.load(Ordering::Relaxed) && self.writer.send(encoded),
            Err(error) => {
                lock(&self.write_error).get_or_insert(std::io::Error::other(error));
                false
            }
        };
        if !sent {
            self.writing.store(false, Ordering::Relaxed);
            self.request_stop(Stop::Cancel(Reason::WriteFailed));
            return;
        }
        lock(&self.totals).add(&Brief::from(result));
    }

    pub fn snapshot(&self, total: u64, started: Instant, tactics: &[Arc<Tactic>]) -> Snapshot {
        let waiting = if self.waiting_for_budget.load(Ordering::Relaxed) {
            Some("budget")
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
        Snapshot {
            total,
            done: self.totals(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
            waiting,
        }
    }
}

/// Everything the run reads.
pub struct Run<'a> {
    pub tasks_file: &'a Path,
    pub default_tactic: Option<&'a Path>,
    pub tactics: &'a HashMap<PathBuf, Arc<Tactic>>,
    pub plan: &'a Plan,
    pub selector: Selector,
    pub done: &'a (dyn Fn(&str) -> bool + Sync),
    pub concurrency: usize,
}

/// Runs every selected task; returns when all have a result or the run stopped.
pub async fn run(run: Run<'_>, shared: Arc<Shared>) -> std::io::Result<()> {
    let tasks_dir = run.tasks_file.parent().unwrap_or(Path::new(""));
    let default = run
        .default_tactic
        .and_then(|path| run.tactics.get(&super::tactics::key(path)).cloned());
    // A line's `tactic` as written → the tactic (one path lookup per distinct text).
    let mut line_tactics: HashMap<String, Option<Arc<Tactic>>> = HashMap::new();
    let slots = Arc::new(Semaphore::new(run.concurrency.max(1)));
    let mut running = JoinSet::new();
    let mut stop = shared.stop.subscribe();
    let mut selector = run.selector;
    let mut lines = Lines::open(run.tasks_file)?;
    while let Some(line) = lines.next_line() {
        let (number, text) = line.map_err(std::io::Error::other)?;
        let parsed = tasks::parse_line(text, number);
        let task = match parsed {
            Ok(None) => continue,
            Ok(Some(task)) => Some(task),
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
        if (run.done)(&id) {
            continue;
        }
        while running.try_join_next().is_some() {}
        let current = *shared.stop.borrow();
        if let Some(reason) = current.reason() {
            if reason == Reason::Interrupted || reason == Reason::WriteFailed {
                break;
            }
            shared.record(&ResultLine::skipped(id, reason.text()), None);
            continue;
        }
        let (task, tactic) = match (task, run.plan.invalid.get(&number)) {
            (Some(task), None) => {
                let tactic = match &task.tactic {
                    None => default.clone(),
                    Some(path) => line_tactics
                        .entry(path.clone())
                        .or_insert_with(|| {
                            let key = super::tactics::key(&tasks_dir.join(path));
                            run.tactics.get(&key).cloned()
                        })
                        .clone(),
                };
                match tactic {
                    Some(tactic) => (task, tactic),
                    None => {
                        let result = ResultLine::invalid(id, "no tactic for this line");
                        shared.record(&result, None);
                        continue;
                    }
                }
            }
            (_, invalid) => {
                let problem = invalid.map_or("invalid task line", |(_, problem)| problem);
                let result = ResultLine::invalid(id, &format!("line {number}: {problem}"));
                shared.record(&result, None);
                continue;
            }
        };
        let Some((permit, reservation)) = admit(&shared, &slots, &mut stop).await else {
            // Stopped while waiting: account for this task like the ones after it.
            let reason = shared.stop.borrow().reason();
            if let Some(reason @ (Reason::FailFast | Reason::Budget)) = reason {
                shared.record(&ResultLine::skipped(task.id, reason.text()), None);
                continue;
            }
            break;
        };
        running.spawn(run_task(shared.clone(), tactic, task, permit, reservation));
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

/// Waits for a slot and a budget reservation; `None` when the run stops first.
async fn admit(
    shared: &Shared,
    slots: &Arc<Semaphore>,
    stop: &mut watch::Receiver<Stop>,
) -> Option<(OwnedSemaphorePermit, f64)> {
    let permit = tokio::select! {
        biased;
        _ = stop.wait_for(|stop| *stop != Stop::Running) => return None,
        permit = slots.clone().acquire_owned() => permit.ok()?,
    };
    let Some(budget) = &shared.budget else {
        return Some((permit, 0.0));
    };
    loop {
        let settled = shared.settled.notified();
        tokio::pin!(settled);
        settled.as_mut().enable();
        match lock(budget).reserve() {
            Reservation::Granted(amount) => {
                shared.waiting_for_budget.store(false, Ordering::Relaxed);
                return Some((permit, amount));
            }
            Reservation::Exhausted => {
                shared.waiting_for_budget.store(false, Ordering::Relaxed);
                shared.request_stop(Stop::Drain(Reason::Budget));
                return None;
            }
            Reservation::Wait => shared.waiting_for_budget.store(true, Ordering::Relaxed),
        }
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop != Stop::Running) => return None,
            _ = &mut settled => {}
        }
    }
}

/// One task: run it (unless cancelled), record it, free its slot and budget.
async fn run_task(
    shared: Arc<Shared>,
    tactic: Arc<Tactic>,
    task: Task,
    permit: OwnedSemaphorePermit,
    reservation: f64,
) {
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    let mut stop = shared.stop.subscribe();
    let id = task.id;
    // A cancelled task still leaves its record: every agent call that had
    // finished, so what it spent is on disk and counted.
    let cancelled = AtomicBool::new(false);
    let cancel = async {
        let _ = stop.wait_for(|stop| matches!(stop, Stop::Cancel(_))).await;
        cancelled.store(true, Ordering::SeqCst);
    };
    // Boxed: the run's state is kilobytes, and a task's future is moved on
    // its way into the runtime (a copy each time) unless it stays small.
    let record = Box::pin(tactic.run_until(task.input, None, cancel)).await;
    let mut result = ResultLine::from_record(id, &record);
    if cancelled.load(Ordering::SeqCst) {
        let reason = shared.stop.borrow().reason().unwrap_or(Reason::Interrupted);
        result.state = TaskState::Skipped;
        result.error = Some(reason.text().to_string());
        result.delivery = None;
    } else if record.state == RunState::Failure && shared.fail_fast {
        shared.request_stop(Stop::Cancel(Reason::FailFast));
    }
    shared.record(&result, Some(&record));
    let cost = Some(record.cost.cost.unwrap_or(0.0));
    if let Some(budget) = &shared.budget {
        lock(budget).settle(reservation, cost);
    }
    shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
    shared.settled.notify_waiters();
}

/// Ctrl-C (or SIGTERM): stop scheduling, give running tasks `grace` to finish
/// (a second signal ends it at once), then cancel them.
pub async fn watch_signals(shared: Arc<Shared>, grace: Duration, reporter: Arc<dyn Reporter>) {
    if signal().await.is_err() {
        return;
    }
    shared.request_stop(Stop::Drain(Reason::Interrupted));
    let in_flight = shared.in_flight.load(Ordering::Relaxed);
    reporter.note(&format!(
        "interrupted: waiting up to {} s for {in_flight} running task(s); press Ctrl-C again to stop now",
        grace.as_secs()
    ));
    tokio::select! {
        _ = tokio::time::sleep(grace) => {}
        _ = signal() => {}
    }
    shared.request_stop(Stop::Cancel(Reason::Interrupted));
}

#[cfg(unix)]
async fn signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = terminate.recv() => Ok(()),
    }
}

#[cfg(not(unix))]
async fn signal() -> std::io::Result<()> {
    tokio::signal::ctrl_c().await
}
