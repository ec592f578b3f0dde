//! Remote calls on record (issue 30): every call a run makes to a served
//! tactic — a flow step's `/run`, a tactic tool's `/run`, the `/info` a
//! tactic tool's parameters came from — is kept in the run's session record
//! as a [`RemoteCall`] (the request sent, the answer, the ids), and `lllm
//! replay --rerun` serves those answers again instead of calling the URL, so
//! a re-run needs no server.
//!
//! Both travel in task-local scopes, as `mock::script`'s positions do: a
//! run's calls are collected by `logged` around the run (each sub-tactic's
//! run has its own), and a re-run's answers are served by `replaying`
//! around the build and the run. What a call is and how it is sent is
//! `client`'s.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::TacticInfo;
use super::answer::{RemoteAnswer, read_answer};
use super::client::{RemoteTactic, envelope, new_request_id};
use crate::tactic::Task;

/// One call a run made to a served tactic, as its session record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteCall {
    /// Who called: the flow step's name, or `tool NAME` for a tactic tool.
    pub by: String,
    /// The served tactic's URL (normalised, without the route).
    pub url: String,
    /// The route: `run` or `info`.
    pub route: String,
    /// The request sent (`{"input", "context"}`); `null` for `info`.
    pub request: Value,
    /// The answer's body as it came; `null` when there was none.
    pub answer: Value,
    /// The request's id (sent in the envelope's context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The server's session id of the run, when it sent one (`lllm serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Why the call failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub latency_ms: u64,
}

/// How long loading a tactic waits for a served tactic's contract.
const CONTRACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The remote calls of one run, as they end, and the sessions of the
/// tactic tools it ran (local files: they nest in its record).
#[derive(Clone, Default)]
pub(crate) struct Log(
    Arc<Mutex<Vec<RemoteCall>>>,
    Arc<Mutex<Vec<crate::SessionRecord>>>,
);

impl Log {
    /// A log that starts with `calls` (a tactic's contracts read at load).
    pub fn starting_with(calls: &[RemoteCall]) -> Log {
        Log(Arc::new(Mutex::new(calls.to_vec())), Arc::default())
    }

    /// The sessions of the tactic tools that ran, taken out.
    pub fn take_sessions(&self) -> Vec<crate::SessionRecord> {
        std::mem::take(
            &mut *self
                .1
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// `work` with its remote calls collected here (not those of the
    /// sub-tactics it runs: each has its own log).
    pub fn scope<T>(&self, work: impl Future<Output = T>) -> impl Future<Output = T> {
        LOG.scope(self.clone(), work)
    }

    /// The calls collected, taken out.
    pub fn take(&self) -> Vec<RemoteCall> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

tokio::task_local! {
    static LOG: Log;
    static REPLAY: Arc<Replay>;
}

fn log(call: RemoteCall) {
    let _ = LOG.try_with(|log| {
        log.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(call);
    });
}

/// Puts the session of a tactic tool's run on the running tactic's record
/// (among its sub-tactic sessions).
pub(crate) fn log_session(record: crate::SessionRecord) {
    let _ = LOG.try_with(|log| {
        log.1
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record);
    });
}

/// The recorded remote calls a re-run is answered from.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    calls: Mutex<Vec<RemoteCall>>,
    divergence: Mutex<Option<String>>,
    served: Mutex<usize>,
}

impl Replay {
    /// Serves `calls` (a record's, sub-sessions' included).
    pub fn new(calls: Vec<RemoteCall>) -> Replay {
        Replay {
            calls: Mutex::new(calls),
            ..Replay::default()
        }
    }

    /// The first remote call of the re-run the record had no answer for.
    pub fn divergence(&self) -> Option<String> {
        self.divergence
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// How many remote `run` calls were answered from the record.
    pub fn served(&self) -> usize {
        *self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Recorded `run` calls the re-run did not make.
    pub fn remaining(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|call| call.route == "run")
            .count()
    }

    fn diverge(&self, message: String) -> String {
        self.divergence
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_insert(message)
            .clone()
    }

    /// The recorded `run` of `url` with the same input, taken out.
    fn take_run(&self, url: &str, input: &Value) -> Option<RemoteCall> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = calls.iter().position(|call| {
            call.route == "run" && call.url == url && call.request.get("input") == Some(input)
        })?;
        *self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
        Some(calls.remove(at))
    }

    /// The recorded `info` of `url` (it may serve several builds).
    fn info(&self, url: &str) -> Option<RemoteCall> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .find(|call| call.route == "info" && call.url == url)
            .cloned()
    }
}

/// Runs `work` (a re-run) with every remote call answered from `replay`.
// Not an `async fn`, which would hold `work` twice (`watch::scope`).
pub(crate) fn replaying<T>(
    replay: Arc<Replay>,
    work: impl Future<Output = T>,
) -> impl Future<Output = T> {
    REPLAY.scope(replay, work)
}

/// `build` (a re-run's tactic) with every remote contract read from `replay`.
pub(crate) fn replaying_sync<T>(replay: Arc<Replay>, build: impl FnOnce() -> T) -> T {
    REPLAY.sync_scope(replay, build)
}

/// Every remote call of `record`, its sub-sessions' included.
pub(crate) fn recorded(record: &crate::SessionRecord) -> Vec<RemoteCall> {
    let mut calls = record.remote_calls.clone();
    for sub in &record.sub_tactic_sessions {
        calls.extend(recorded(sub));
    }
    calls
}

fn millis(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs `task` on `remote` for `by` (a step, a tool), on record; in a
/// re-run, the recorded answer to the same input instead. The error is the
/// line the step or the model reads.
pub(crate) async fn run(
    remote: &RemoteTactic,
    by: &str,
    task: &Task,
) -> Result<RemoteAnswer, String> {
    let url = remote.url().to_string();
    if let Ok(replay) = REPLAY.try_with(Arc::clone) {
        let input = super::task_input(task);
        let Some(call) = replay.take_run(&url, &input) else {
            return Err(replay.diverge(format!(
                "{by}: the re-run calls `{url}` with an input the record has no answer for: {}",
                crate::redact::echo(&input.to_string())
            )));
        };
        log(call.clone());
        if let Some(error) = call.error {
            return Err(error);
        }
        let sent = call.request_id.clone().unwrap_or_default();
        return read_answer(&url, call.answer, &sent).map_err(|error| error.to_string());
    }
    if remote.dry_run {
        return Err(format!("dry run: the call to `{url}/run` was not sent"));
    }
    let request_id = new_request_id();
    let request = envelope(task, &request_id);
    let started = Instant::now();
    let outcome = remote.run_envelope(&request).await;
    let (answer, error, session_id) = match &outcome {
        Ok(answer) => (answer.body.clone(), None, answer.session_id.clone()),
        Err(error) => (Value::Null, Some(error.to_string()), None),
    };
    log(RemoteCall {
        by: by.to_string(),
        url,
        route: "run".into(),
        request,
        answer,
        request_id: Some(request_id),
        session_id,
        error,
        latency_ms: millis(started),
    });
    outcome.map_err(|error| error.to_string())
}

/// The contract of `remote`, read while a tactic loads (no runtime needed:
/// the call runs on a thread of its own); in a re-run's build, the recorded
/// one. The call, as the record keeps it, comes with it.
pub(crate) fn info_now(
    remote: &RemoteTactic,
    by: &str,
) -> Result<(TacticInfo, RemoteCall), String> {
    let url = remote.url().to_string();
    if let Ok(replay) = REPLAY.try_with(Arc::clone) {
        let Some(call) = replay.info(&url) else {
            return Err(format!(
                "{by}: the record has no contract of `{url}` (was it recorded by this lllm?)"
            ));
        };
        let info = serde_json::from_value(call.answer.clone()).map_err(|error| {
            format!("{by}: the recorded contract of `{url}` does not read: {error}")
        })?;
        return Ok((info, call));
    }
    let remote = remote.clone();
    let started = Instant::now();
    let fetched = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| format!("cannot start a runtime to read `{url}`: {error}"))?;
                // A client of its own: the shared one's connections belong
                // to the runtime that made them.
                // A load waits for a contract at most this long, not a run's time.
                let remote = remote
                    .fresh()
                    .map_err(|error| error.to_string())?
                    .timeout(CONTRACT_TIMEOUT);
                runtime
                    .block_on(remote.info_with_body())
                    .map_err(|error| format!("{by}: cannot read its contract: {error}"))
            })
            .join()
            .unwrap_or_else(|_| Err(format!("{by}: reading the contract of `{url}` failed")))
    })?;
    let (info, body) = fetched;
    let call = RemoteCall {
        by: by.to_string(),
        url,
        route: "info".into(),
        request: Value::Null,
        answer: body,
        request_id: None,
        session_id: None,
        error: None,
        latency_ms: millis(started),
    };
    Ok((info, call))
}
