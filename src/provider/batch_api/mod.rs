//! `lllm batch --via batch-api`: every model call of a batch goes through
//! the provider's Batch API, at its batch price (issue 15).
//!
//! [`BatchApiProvider`] stands in for an OpenAI or Anthropic provider: its
//! `invoke` builds the exact body that provider would send (its own request
//! building) and hands it to [`BatchApi`], which holds the call until every
//! running task of the batch is waiting on a model call (or the gather
//! window passes), then submits the waiting calls as one provider batch per
//! service, endpoint and model, polls it with back-off, and wakes each call
//! with its answer, read by the provider's own reply parsing. So a
//! single-turn tactic takes one submission, and a multi-turn one (tools,
//! repairs, flows) advances one call per round. An errored or expired
//! request fails its call like a provider error; the agent's retry loop
//! (`max_llm_recall`) tries it again in the next round.
//!
//! The journal (`journal`) makes it resumable: each submission's custom_ids
//! and request digests are written before it is sent, then its batch id and
//! answers. On `--resume` the tasks run their loops again; a call whose
//! digest was submitted before is answered from the journal, or waits on the
//! batch still in flight, and is never submitted again. The scheduler tells
//! [`BatchApi`] how many tasks run (`task_started`) and whether more are
//! being started (`scheduling`); the HTTP is `service`'s.

pub mod journal;
mod provider;
mod resume;
pub mod service;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use super::ProviderError;
use journal::{Entry, Journal, Request};
pub use provider::{BATCH_USAGE_KEY, BatchApiProvider, digest};
use service::{Answer, Api, Service, Status};

/// The most requests one provider batch takes (OpenAI's limit; Anthropic's
/// is 100,000).
const MAX_REQUESTS: usize = 50_000;
/// The most bytes of bodies one provider batch takes (under OpenAI's 200 MB
/// file and Anthropic's 256 MB request).
const MAX_BYTES: usize = 180 << 20;
/// Retrievals of a batch in a row that may fail transiently before its
/// calls fail (with the wait doubling to `--poll-max`, about 40 minutes at
/// the defaults).
const MAX_POLL_FAILURES: u32 = 25;
/// Attempts at a Batch API request that failed transiently (a submission, a
/// retrieval, a download), with the poll back-off between them.
const ATTEMPTS: u32 = 5;

/// How `--via batch-api` submits and polls.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The wait between the first two retrievals of a batch (the first is
    /// right after its creation; `--poll-interval`).
    pub poll_interval: Duration,
    /// The longest wait between two retrievals: the wait doubles up to it
    /// (`--poll-max`).
    pub poll_max: Duration,
    /// How long calls wait for the other running tasks to call too before
    /// they are submitted anyway (`--gather-window`).
    pub gather_window: Duration,
    /// Cancel the provider batches in flight at Ctrl-C
    /// (`--cancel-on-interrupt`); by default they keep running and
    /// `--resume` picks them up.
    pub cancel_on_interrupt: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            poll_interval: Duration::from_secs(5),
            poll_max: Duration::from_secs(120),
            gather_window: Duration::from_secs(10),
            cancel_on_interrupt: false,
        }
    }
}

/// Reports what the Batch API work is doing: a line and whether it is a
/// warning (a failure, a batch left running) or a progress event (a batch
/// submitted, its state changed).
pub type Notes = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// A call waiting to be submitted.
struct Pending {
    service: Arc<Service>,
    endpoint: &'static str,
    model: String,
    body: Value,
    digest: String,
    reply: oneshot::Sender<Answer>,
}

/// What an ended batch answered.
struct Fetched {
    /// Its last state.
    state: String,
    /// The answers it has, by custom_id.
    answers: Vec<(String, Answer)>,
    /// The answer of a request it has none for.
    missing: ProviderError,
}

/// A provider batch this process polls.
struct InFlight {
    service: Arc<Service>,
    batch_id: String,
}

#[derive(Default)]
struct State {
    /// Tasks of the batch running now.
    running: usize,
    /// Whether the scheduler is starting more tasks.
    scheduling: bool,
    pending: Vec<Pending>,
    /// When the oldest pending call came.
    first_pending: Option<Instant>,
    /// Calls submitted (in this run or an earlier one) and not answered.
    awaiting: HashMap<String, oneshot::Sender<Answer>>,
    /// Digest → custom_ids submitted before with that digest, not claimed
    /// by a call of this run yet, in submission order.
    claimable: HashMap<String, VecDeque<String>>,
    /// Batches being polled, by submission.
    in_flight: BTreeMap<String, InFlight>,
}

/// The collector: gathers the calls of a batch's tasks, submits them as
/// provider batches, polls them and answers the calls. One per `lllm
/// batch` run; see the module's documentation.
pub struct BatchApi {
    settings: Settings,
    journal: Mutex<Journal>,
    state: Mutex<State>,
    changed: Notify,
    services: Mutex<BTreeMap<String, Arc<Service>>>,
    /// Submissions of an earlier run to poll or find again at `start`.
    unfinished: Mutex<Vec<journal::Submission>>,
    /// The batch ids the journal names: a lost submission is never taken
    /// for one of them.
    known_batches: Mutex<std::collections::BTreeSet<String>>,
    notes: Mutex<Option<Notes>>,
    pollers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts a running task until dropped (`BatchApi::task_started`).
pub struct Running(Arc<BatchApi>);

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.0.state).running -= 1;
        self.0.changed.notify_one();
    }
}

impl BatchApi {
    /// Opens the journal in `directory`. Without `resume`, a journal that
    /// holds submissions is an error (they belong to a run `--resume`
    /// continues); with it, what the journal holds is read back.
    pub fn open(directory: &Path, settings: Settings, resume: bool) -> Result<BatchApi, String> {
        let path = directory.join(journal::FILE);
        let holds = std::fs::metadata(&path).is_ok_and(|meta| meta.len() > 0);
        if holds && !resume {
            return Err(format!(
                "`{}` holds the Batch API submissions of an earlier run; hint: pass `--resume` \
                 to continue it (its batches are answered, not submitted again), or choose \
                 another `-o` directory",
                path.display()
            ));
        }
        let (journal, submissions) = Journal::open(directory)
            .map_err(|error| format!("cannot open `{}`: {error}", path.display()))?;
        let mut state = State::default();
        let mut unfinished = Vec::new();
        let known_batches = submissions
            .iter()
            .filter_map(|submission| submission.batch_id.clone())
            .collect();
        for submission in submissions {
            for request in &submission.requests {
                // A dropped submission's requests without an answer were
                // never answered, and an ended one's answer that is missing
                // was lost (a write that failed): they may be submitted
                // again. Only an unfinished submission's requests wait for
                // answers to come.
                let finished = submission.dropped || submission.ended;
                if finished && !journal.has_answer(&request.custom_id) {
                    continue;
                }
                state
                    .claimable
                    .entry(request.digest.clone())
                    .or_default()
                    .push_back(request.custom_id.clone());
            }
            if !submission.ended && !submission.dropped {
                unfinished.push(submission);
            }
        }
        Ok(BatchApi {
            settings,
            journal: Mutex::new(journal),
            state: Mutex::new(state),
            changed: Notify::new(),
            services: Mutex::new(BTreeMap::new()),
            unfinished: Mutex::new(unfinished),
            known_batches: Mutex::new(known_batches),
            notes: Mutex::new(None),
            pollers: Mutex::new(Vec::new()),
        })
    }

    /// Where progress notes go (the batch's reporter).
    pub fn set_notes(&self, notes: Notes) {
        *lock(&self.notes) = Some(notes);
    }

    /// A warning.
    fn note(&self, text: &str) {
        self.tell(text, true);
    }

    /// A progress event.
    fn event(&self, text: &str) {
        self.tell(text, false);
    }

    fn tell(&self, text: &str, warning: bool) {
        let notes = lock(&self.notes).clone();
        match notes {
            Some(notes) => notes(text, warning),
            None if warning => crate::report::warn(text),
            None => {}
        }
    }

    /// Makes `service` known, so batches of an earlier run on it can be
    /// polled again (by the first service registered under its key), and
    /// returns it for its provider: two tactics that name one provider and
    /// URL with different keys each submit with their own.
    pub fn register(&self, service: Service) -> Arc<Service> {
        let service = Arc::new(service);
        lock(&self.services)
            .entry(service.key.clone())
            .or_insert_with(|| service.clone());
        service
    }

    /// Counts a task as running until the guard is dropped.
    pub fn task_started(self: &Arc<Self>) -> Running {
        lock(&self.state).running += 1;
        Running(self.clone())
    }

    /// Whether the scheduler is starting tasks (calls wait for them).
    pub fn scheduling(&self, starting: bool) {
        lock(&self.state).scheduling = starting;
        self.changed.notify_one();
    }

    /// What the batch is waiting on, for progress lines.
    pub fn waiting(&self) -> Option<&'static str> {
        let state = lock(&self.state);
        if !state.in_flight.is_empty() {
            Some("provider batch")
        } else if !state.pending.is_empty() {
            Some("gathering calls for a provider batch")
        } else {
            None
        }
    }

    /// Counts `submission` as never sent: its requests may go again.
    fn abandon(&self, submission: &journal::Submission, reason: &str) {
        self.write(&Entry::Abandoned {
            submission: submission.id.clone(),
            reason: reason.to_string(),
        });
        let journal = lock(&self.journal);
        let mut state = lock(&self.state);
        for request in &submission.requests {
            if journal.has_answer(&request.custom_id) {
                continue;
            }
            if let Some(queue) = state.claimable.get_mut(&request.digest) {
                queue.retain(|custom_id| *custom_id != request.custom_id);
            }
        }
    }

    /// Writes `entry`; a journal that cannot be written is reported (the
    /// run goes on, but `--resume` may then submit those requests again).
    fn write(&self, entry: &Entry) {
        let mut journal = lock(&self.journal);
        if let Err(error) = journal.append(entry) {
            let path = journal.path().display().to_string();
            drop(journal);
            self.note(&format!("batch-api: cannot write `{path}`: {error}"));
        }
    }

    /// At the end of the run: stops polling. Batches still in flight (the
    /// run was interrupted, or stopped by `--fail-fast` or the budget) keep
    /// running at the provider and `--resume` picks them up; after Ctrl-C
    /// with `cancel_on_interrupt` they are cancelled instead.
    pub async fn finish(&self, interrupted: bool) {
        for poller in lock(&self.pollers).drain(..) {
            poller.abort();
        }
        let in_flight: Vec<(String, Arc<Service>, String)> = lock(&self.state)
            .in_flight
            .iter()
            .map(|(submission, batch)| {
                (
                    submission.clone(),
                    batch.service.clone(),
                    batch.batch_id.clone(),
                )
            })
            .collect();
        if in_flight.is_empty() {
            return;
        }
        if !(interrupted && self.settings.cancel_on_interrupt) {
            self.note(&format!(
                "batch-api: {} {} running; `--resume` picks them up",
                crate::words::count(in_flight.len() as u64, "provider batch", "provider batches"),
                if in_flight.len() == 1 {
                    "keeps"
                } else {
                    "keep"
                }
            ));
            return;
        }
        for (submission, service, batch_id) in in_flight {
            match service.cancel(&batch_id).await {
                Ok(()) => {
                    self.write(&Entry::Cancelled { submission });
                    self.note(&format!(
                        "batch-api: cancelled {} batch {batch_id}",
                        service.provider
                    ));
                }
                Err(error) => self.note(&format!(
                    "batch-api: cannot cancel {} batch {batch_id}: {error}",
                    service.provider
                )),
            }
        }
    }

    /// One model call: answered from the journal, or by the batch in flight
    /// that holds it, or submitted in the next round.
    async fn call(
        &self,
        service: &Arc<Service>,
        endpoint: &'static str,
        model: &str,
        body: Value,
        digest: String,
    ) -> Answer {
        let receiver = {
            let journal = lock(&self.journal);
            let mut state = lock(&self.state);
            let claimed = state
                .claimable
                .get_mut(&digest)
                .and_then(VecDeque::pop_front);
            let (sender, receiver) = oneshot::channel();
            match claimed {
                Some(custom_id) if journal.has_answer(&custom_id) => {
                    drop(state);
                    return journal.answer(&custom_id).unwrap_or_else(|| {
                        Err(ProviderError::transient(
                            "the journal's answer to this request cannot be read",
                        ))
                    });
                }
                Some(custom_id) => {
                    state.awaiting.insert(custom_id, sender);
                }
                None => {
                    state.first_pending.get_or_insert_with(Instant::now);
                    state.pending.push(Pending {
                        service: service.clone(),
                        endpoint,
                        model: model.to_string(),
                        body,
                        digest,
                        reply: sender,
                    });
                }
            }
            receiver
        };
        self.changed.notify_one();
        receiver.await.unwrap_or_else(|_| {
            Err(ProviderError::transient(
                "the Batch API collector stopped before answering",
            ))
        })
    }

    /// The collector: submits the pending calls whenever every running task
    /// waits on a call (or the gather window passed).
    async fn collect(self: Arc<Self>) {
        loop {
            let notified = self.changed.notified();
            let deadline = {
                let mut state = lock(&self.state);
                state.pending.retain(|pending| !pending.reply.is_closed());
                state.awaiting.retain(|_, sender| !sender.is_closed());
                if state.pending.is_empty() {
                    state.first_pending = None;
                }
                match state.first_pending {
                    _ if state.pending.is_empty() => None,
                    Some(first) => {
                        let waiting = state.pending.len() + state.awaiting.len();
                        let gathered = !state.scheduling && waiting >= state.running;
                        let deadline = first + self.settings.gather_window;
                        if gathered || Instant::now() >= deadline {
                            let pending = std::mem::take(&mut state.pending);
                            state.first_pending = None;
                            drop(state);
                            self.submit_all(pending);
                            continue;
                        }
                        Some(deadline)
                    }
                    None => None,
                }
            };
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(deadline.into()) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Groups calls by service, endpoint and model (one model per OpenAI
    /// batch), splits groups at the batch limits, and submits each.
    fn submit_all(self: &Arc<Self>, pending: Vec<Pending>) {
        // A service by its address: equal keys may carry different credentials.
        type Group = (usize, &'static str, String);
        let mut groups: BTreeMap<Group, Vec<Pending>> = BTreeMap::new();
        for call in pending {
            let model = match call.service.api {
                Api::OpenAi => call.model.clone(),
                Api::Anthropic => String::new(),
            };
            let service = Arc::as_ptr(&call.service) as usize;
            groups
                .entry((service, call.endpoint, model))
                .or_default()
                .push(call);
        }
        for (_, calls) in groups {
            let mut chunk = Vec::new();
            let mut bytes = 0;
            for call in calls {
                let size = call.body.to_string().len();
                if !chunk.is_empty() && (chunk.len() >= MAX_REQUESTS || bytes + size > MAX_BYTES) {
                    let hub = self.clone();
                    let calls = std::mem::take(&mut chunk);
                    tokio::spawn(async move { hub.submit(calls).await });
                    bytes = 0;
                }
                bytes += size;
                chunk.push(call);
            }
            let hub = self.clone();
            tokio::spawn(async move { hub.submit(chunk).await });
        }
    }

    /// Journals, submits and polls one provider batch.
    async fn submit(self: Arc<Self>, calls: Vec<Pending>) {
        let Some(first) = calls.first() else {
            return;
        };
        let (service, endpoint) = (first.service.clone(), first.endpoint);
        let submission = uuid::Uuid::now_v7().simple().to_string();
        let mut requests = Vec::with_capacity(calls.len());
        let mut bodies = Vec::with_capacity(calls.len());
        let mut custom_ids = Vec::with_capacity(calls.len());
        {
            let mut state = lock(&self.state);
            for (index, call) in calls.into_iter().enumerate() {
                let custom_id = format!("{submission}-{index}");
                requests.push(Request {
                    custom_id: custom_id.clone(),
                    digest: call.digest,
                });
                bodies.push((custom_id.clone(), call.body));
                custom_ids.push(custom_id.clone());
                state.awaiting.insert(custom_id, call.reply);
            }
        }
        let submitted_at = chrono::Utc::now().timestamp();
        let entry = Entry::Submission {
            submission: submission.clone(),
            service: service.key.clone(),
            endpoint: endpoint.to_string(),
            submitted_at,
            requests,
        };
        let written = lock(&self.journal).append(&entry);
        if let Err(error) = written {
            // Not sent: without its line a resumed run would send it again.
            let path = lock(&self.journal).path().display().to_string();
            let error = ProviderError::permanent(format!(
                "cannot write the Batch API journal `{path}`: {error}; nothing was submitted"
            ));
            self.answer_all(&custom_ids, &Err(error));
            return;
        }
        let submitted = retrying(&self.settings, || {
            service.submit(&submission, submitted_at, endpoint, &bodies)
        })
        .await;
        drop(bodies);
        match submitted {
            Ok(batch_id) => {
                self.write(&Entry::Batch {
                    submission: submission.clone(),
                    batch_id: batch_id.clone(),
                });
                self.event(&format!(
                    "batch-api: submitted {} batch {batch_id} ({} requests to {endpoint})",
                    service.provider,
                    custom_ids.len()
                ));
                self.poll(service, submission, batch_id, custom_ids).await;
            }
            Err(error) => {
                self.write(&Entry::Abandoned {
                    submission,
                    reason: error.to_string(),
                });
                self.note(&format!(
                    "batch-api: cannot submit a {} batch: {error}",
                    service.provider
                ));
                self.answer_all(&custom_ids, &Err(error));
            }
        }
    }

    /// Polls a batch with back-off until it ends, then answers its calls.
    async fn poll(
        self: Arc<Self>,
        service: Arc<Service>,
        submission: String,
        batch_id: String,
        custom_ids: Vec<String>,
    ) {
        lock(&self.state).in_flight.insert(
            submission.clone(),
            InFlight {
                service: service.clone(),
                batch_id: batch_id.clone(),
            },
        );
        let status = self.wait_ended(&service, &batch_id).await;
        let answers = match status {
            Ok(status) => self.fetch(&service, &batch_id, &status).await,
            Err(error) => Err(error),
        };
        match answers {
            Ok(Fetched {
                state,
                answers,
                missing,
            }) => {
                let mut answered: HashMap<String, Answer> = answers.into_iter().collect();
                for custom_id in &custom_ids {
                    let answer = answered
                        .remove(custom_id)
                        .unwrap_or_else(|| Err(missing.clone()));
                    self.answer(custom_id, answer);
                }
                self.write(&Entry::Ended {
                    submission: submission.clone(),
                    state,
                });
            }
            Err(error) => {
                // Not journaled: `--resume` polls this batch again.
                self.note(&format!(
                    "batch-api: cannot read {} batch {batch_id}: {error}",
                    service.provider
                ));
                self.answer_all(&custom_ids, &Err(error));
            }
        }
        lock(&self.state).in_flight.remove(&submission);
    }

    /// Retrieves a batch, with back-off, until it ends; each change of its
    /// state is a progress note. A batch in a state lllm does not know is
    /// waited for until its completion window and an hour more have passed
    /// since its creation (`Status::overdue`), then given up with a
    /// permanent error: never polled forever.
    async fn wait_ended(&self, service: &Service, batch_id: &str) -> Result<Status, ProviderError> {
        let mut wait = self.settings.poll_interval;
        let mut last = String::new();
        let mut failures = 0;
        let mut unknown_since: Option<i64> = None;
        loop {
            match service.retrieve(batch_id).await {
                Ok(status) => {
                    if status.state != last {
                        self.event(&format!(
                            "batch-api: {} batch {batch_id}: {}",
                            service.provider, status.state
                        ));
                        last = status.state.clone();
                    }
                    if status.ended {
                        return Ok(status);
                    }
                    let now = chrono::Utc::now().timestamp();
                    if status.known {
                        unknown_since = None;
                    } else if status.overdue(now, *unknown_since.get_or_insert(now)) {
                        return Err(overdue(batch_id, &status, now));
                    }
                    failures = 0;
                }
                // A provider out of reach for that long fails the calls
                // (the batch stays in the journal: `--resume` polls it again).
                Err(error) if error.is_retryable() && failures + 1 < MAX_POLL_FAILURES => {
                    failures += 1;
                }
                Err(error) => return Err(error),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.settings.poll_max.max(self.settings.poll_interval));
        }
    }

    /// The answers of an ended batch. A batch refused as a whole (OpenAI's
    /// `failed`) answers every request with why.
    async fn fetch(
        &self,
        service: &Service,
        batch_id: &str,
        status: &Status,
    ) -> Result<Fetched, ProviderError> {
        if status.state == "failed" {
            let reason = status.errors.as_deref().unwrap_or("no reason given");
            let mut error = ProviderError::permanent(format!(
                "{} refused batch {batch_id}: {reason}",
                service.provider
            ));
            error.code = Some("batch_failed".into());
            return Ok(Fetched {
                state: status.state.clone(),
                answers: Vec::new(),
                missing: error,
            });
        }
        let answers = retrying(&self.settings, || service.results(batch_id, status)).await?;
        let mut missing = ProviderError::transient(format!(
            "batch {batch_id} ended ({}) without an answer to this request",
            status.state
        ));
        missing.code = Some("batch_no_answer".into());
        Ok(Fetched {
            state: status.state.clone(),
            answers,
            missing,
        })
    }

    /// Journals `answer` and wakes the call waiting for it.
    fn answer(&self, custom_id: &str, answer: Answer) {
        let entry = match &answer {
            Ok(reply) => Entry::Answer {
                custom_id: custom_id.to_string(),
                reply: Some(reply.clone()),
                error: None,
            },
            Err(error) => Entry::Answer {
                custom_id: custom_id.to_string(),
                reply: None,
                error: Some(error.clone()),
            },
        };
        self.write(&entry);
        if let Some(sender) = lock(&self.state).awaiting.remove(custom_id) {
            let _ = sender.send(answer);
        }
    }

    /// Answers every call of `custom_ids` with `answer`, without journaling.
    fn answer_all(&self, custom_ids: &[String], answer: &Answer) {
        let mut state = lock(&self.state);
        for custom_id in custom_ids {
            if let Some(sender) = state.awaiting.remove(custom_id) {
                let _ = sender.send(answer.clone());
            }
        }
    }
}

/// Why the calls of a batch given up in a state lllm does not know fail:
/// permanent (sending them again could pay twice if the batch runs after
/// all); the batch stays in the journal, so `--resume` looks at it again.
fn overdue(batch_id: &str, status: &Status, now: i64) -> ProviderError {
    let since = match status.created_at {
        Some(created) => format!(
            "{} hours after its creation",
            now.saturating_sub(created) / 3600
        ),
        None => "for more than a day".into(),
    };
    let mut error = ProviderError::permanent(format!(
        "batch {batch_id} is `{}`, a state lllm does not know, {since}: past its {}-hour \
         completion window and {} more, its requests fail (`--resume` looks at it again)",
        status.state,
        service::COMPLETION_WINDOW_S / 3600,
        crate::words::count((service::PAST_WINDOW_S / 3600) as u64, "hour", "hours"),
    ));
    error.code = Some("batch_unknown_state".into());
    error
}

/// `attempt` up to `ATTEMPTS` times while it fails transiently, waiting the
/// poll interval (doubling) in between.
async fn retrying<T, F, Fut>(settings: &Settings, mut attempt: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ProviderError>>,
{
    let mut wait = settings.poll_interval;
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(error) if error.is_retryable() && tries < ATTEMPTS => {
                tokio::time::sleep(error.retry_after.unwrap_or(wait)).await;
                wait = (wait * 2).min(settings.poll_max.max(settings.poll_interval));
                tries += 1;
            }
            result => return result,
        }
    }
}
