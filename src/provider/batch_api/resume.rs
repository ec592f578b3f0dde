//! Picking up an earlier run's provider batches at the start of a
//! `--resume`: batches the journal names are polled again; a submission
//! whose batch id was never written down (a kill between creating the batch
//! and journaling it) is looked for at the provider, or counted as never
//! sent. The rest of the collector is `BatchApi`'s (`mod.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::journal::{self, Entry};
use super::service::{Answer, Api, Service};
use super::{BatchApi, lock, retrying};
use crate::provider::ProviderError;

impl BatchApi {
    /// Picks up the batches of an earlier run: those with an id are polled
    /// again; a submission whose batch id was never written down is looked
    /// for at the provider (`recover`). Then runs the collector until the
    /// returned task is aborted.
    pub async fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let unfinished = std::mem::take(&mut *lock(&self.unfinished));
        let mut orphans = Vec::new();
        for submission in unfinished {
            let service = lock(&self.services).get(&submission.service).cloned();
            let Some(service) = service else {
                self.note(&format!(
                    "batch-api: submission {} was made to `{}`, which no tactic of this run \
                     uses; its requests are sent again if asked",
                    submission.id, submission.service
                ));
                self.abandon(&submission, "its service is not used by this run");
                continue;
            };
            match submission.batch_id.clone() {
                Some(batch_id) => self.poll_again(service, &submission, batch_id),
                None => orphans.push((service, submission)),
            }
        }
        if !orphans.is_empty() {
            self.recover(orphans).await;
        }
        let hub = self.clone();
        tokio::spawn(async move { hub.collect().await })
    }

    /// Polls a batch of an earlier run again.
    fn poll_again(
        self: &Arc<Self>,
        service: Arc<Service>,
        submission: &journal::Submission,
        batch_id: String,
    ) {
        self.event(&format!(
            "batch-api: {} batch {batch_id} of an earlier run ({} requests) is polled again",
            service.provider,
            submission.requests.len()
        ));
        let custom_ids = submission
            .requests
            .iter()
            .map(|request| request.custom_id.clone())
            .collect();
        let hub = self.clone();
        let id = submission.id.clone();
        let poller = tokio::spawn(async move {
            hub.poll(service, id, batch_id, custom_ids).await;
        });
        lock(&self.pollers).push(poller);
    }

    /// Finds the batches of submissions whose batch id was never written
    /// down (a kill between creating a batch and journaling it). An OpenAI
    /// batch is found by the submission id in its metadata, and polled
    /// again. Anthropic batches carry nothing of ours: every batch created
    /// since the earliest such submission that the journal does not name is
    /// waited for until it ends, and its results' custom_ids (`{submission}-
    /// {n}`) say whose it is. A submission no batch turns out to hold was
    /// never sent: its requests go out again.
    async fn recover(self: &Arc<Self>, orphans: Vec<(Arc<Service>, journal::Submission)>) {
        let mut anthropic: BTreeMap<String, (Arc<Service>, Vec<journal::Submission>)> =
            BTreeMap::new();
        for (service, submission) in orphans {
            if service.api == Api::Anthropic {
                anthropic
                    .entry(service.key.clone())
                    .or_insert_with(|| (service.clone(), Vec::new()))
                    .1
                    .push(submission);
                continue;
            }
            let known = lock(&self.known_batches).clone();
            let found = retrying(&self.settings, || {
                service.candidates(&submission.id, submission.submitted_at, &known)
            })
            .await;
            match found.as_deref() {
                Ok([batch_id, ..]) => {
                    lock(&self.known_batches).insert(batch_id.clone());
                    self.write(&Entry::Batch {
                        submission: submission.id.clone(),
                        batch_id: batch_id.clone(),
                    });
                    self.poll_again(service, &submission, batch_id.clone());
                }
                Ok([]) => self.abandon(&submission, "no batch was found at the provider"),
                Err(error) => {
                    let reason = format!("cannot look for its batch: {error}");
                    self.abandon(&submission, &reason);
                }
            }
        }
        for (service, submissions) in anthropic.into_values() {
            self.recover_anthropic(&service, submissions).await;
        }
    }

    /// `recover` for the Anthropic submissions of one service.
    async fn recover_anthropic(
        self: &Arc<Self>,
        service: &Arc<Service>,
        mut submissions: Vec<journal::Submission>,
    ) {
        let since = submissions
            .iter()
            .map(|submission| submission.submitted_at)
            .min()
            .unwrap_or_default();
        let known = lock(&self.known_batches).clone();
        let candidates =
            match retrying(&self.settings, || service.candidates("", since, &known)).await {
                Ok(candidates) => candidates,
                Err(error) => {
                    for submission in &submissions {
                        let reason = format!("cannot look for its batch: {error}");
                        self.abandon(submission, &reason);
                    }
                    return;
                }
            };
        if !candidates.is_empty() {
            self.event(&format!(
                "batch-api: {} to {} {} cut off before their batch id was \
                 written down; waiting for the {} created since to end, to tell \
                 which are lllm's",
                crate::words::count(submissions.len() as u64, "submission", "submissions"),
                service.provider,
                if submissions.len() == 1 {
                    "was"
                } else {
                    "were"
                },
                crate::words::count(candidates.len() as u64, "batch", "batches")
            ));
        }
        for batch_id in candidates {
            let answers = match self.wait_ended(service, &batch_id).await {
                Ok(status) => {
                    retrying(&self.settings, || service.results(&batch_id, &status)).await
                }
                Err(error) => Err(error),
            };
            let Ok(answers) = answers else {
                continue;
            };
            let owner = answers.first().and_then(|(custom_id, _)| {
                let (submission, _) = custom_id.rsplit_once('-')?;
                submissions.iter().position(|known| known.id == submission)
            });
            let Some(owner) = owner else {
                continue;
            };
            let submission = submissions.remove(owner);
            lock(&self.known_batches).insert(batch_id.clone());
            self.write(&Entry::Batch {
                submission: submission.id.clone(),
                batch_id: batch_id.clone(),
            });
            let mut answered: HashMap<String, Answer> = answers.into_iter().collect();
            for request in &submission.requests {
                let answer = answered.remove(&request.custom_id).unwrap_or_else(|| {
                    Err(ProviderError::transient(format!(
                        "batch {batch_id} ended without an answer to this request"
                    )))
                });
                self.answer(&request.custom_id, answer);
            }
            self.write(&Entry::Ended {
                submission: submission.id.clone(),
                state: "ended".into(),
            });
        }
        for submission in &submissions {
            self.abandon(submission, "no batch was found at the provider");
        }
    }
}
