//! The Batch API journal, `DIR/batch-api.jsonl`: what was submitted (each
//! request's custom_id and digest, written before the submission is sent),
//! the batch it became, each answer as it was fetched, and how the batch
//! ended. One JSON line per event, appended and flushed; `--resume` reads it
//! back so that no request is submitted twice and no answer is paid twice.
//!
//! Answers are not kept in memory: the index holds where each answer line
//! starts, and an answer is read back when a call claims it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::service::Answer;
use crate::provider::ProviderError;

/// The journal's file name in the output directory.
pub const FILE: &str = "batch-api.jsonl";

/// One request of a submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Its id in the provider's batch.
    pub custom_id: String,
    /// SHA-256 of the endpoint and the exact body.
    pub digest: String,
}

/// One line of the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// About to be sent (written first: a submission without a `Batch`
    /// line may or may not exist at the provider).
    Submission {
        /// lllm's id of the submission (the OpenAI batch's metadata holds it).
        submission: String,
        /// The service (`Service::key`: provider name and base URL).
        service: String,
        /// The endpoint the requests go to.
        endpoint: String,
        /// When it was written, seconds since the epoch.
        submitted_at: i64,
        /// Its requests.
        requests: Vec<Request>,
    },
    /// The provider accepted it as this batch.
    Batch {
        /// lllm's id of the submission.
        submission: String,
        /// The provider's batch id.
        batch_id: String,
    },
    /// The answer to one request, as fetched.
    Answer {
        /// The request.
        custom_id: String,
        /// The reply body, when it succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply: Option<Value>,
        /// Why it did not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ProviderError>,
    },
    /// Every answer of the batch is above.
    Ended {
        /// lllm's id of the submission.
        submission: String,
        /// The batch's last state.
        state: String,
    },
    /// Never sent, or lost (the reason says which): its requests are free to
    /// go in another submission.
    Abandoned {
        /// lllm's id of the submission.
        submission: String,
        /// Why.
        reason: String,
    },
    /// Cancelled at Ctrl-C (`--cancel-on-interrupt`): its requests without
    /// an answer are free to go in another submission.
    Cancelled {
        /// lllm's id of the submission.
        submission: String,
    },
}

/// A submission as the journal tells it.
#[derive(Debug, Clone)]
pub struct Submission {
    /// lllm's id of it.
    pub id: String,
    /// `Service::key`.
    pub service: String,
    /// When it was written, seconds since the epoch.
    pub submitted_at: i64,
    /// Its requests.
    pub requests: Vec<Request>,
    /// The provider's batch, once known.
    pub batch_id: Option<String>,
    /// Whether every answer is in the journal.
    pub ended: bool,
    /// Whether it was abandoned or cancelled.
    pub dropped: bool,
}

/// The open journal: the file, appended to, and where each answer is.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Where the next line starts.
    end: u64,
    /// Where each answer line starts, by custom_id.
    answers: HashMap<String, u64>,
}

impl Journal {
    /// Opens (creates) the journal in `directory` and reads what it holds:
    /// the submissions, in order. A torn last line (a kill in the middle of
    /// a write) is cut off.
    pub fn open(directory: &Path) -> std::io::Result<(Journal, Vec<Submission>)> {
        let path = directory.join(FILE);
        let mut file = crate::file::open_in_place(
            &path,
            std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .append(true),
        )?;
        let mut submissions: Vec<Submission> = Vec::new();
        let mut answers = HashMap::new();
        let mut offset = 0u64;
        let mut whole = 0u64;
        {
            let mut reader = BufReader::new(&mut file);
            reader.seek(SeekFrom::Start(0))?;
            let mut line = Vec::new();
            loop {
                line.clear();
                let read = reader.read_until(b'\n', &mut line)? as u64;
                if read == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                let start = offset;
                offset += read;
                whole = offset;
                let Ok(entry) = serde_json::from_slice::<Entry>(&line) else {
                    continue;
                };
                let find = |submissions: &mut Vec<Submission>, id: &str| {
                    submissions.iter_mut().rposition(|known| known.id == id)
                };
                match entry {
                    Entry::Submission {
                        submission,
                        service,
                        submitted_at,
                        requests,
                        ..
                    } => submissions.push(Submission {
                        id: submission,
                        service,
                        submitted_at,
                        requests,
                        batch_id: None,
                        ended: false,
                        dropped: false,
                    }),
                    Entry::Batch {
                        submission,
                        batch_id,
                    } => {
                        if let Some(index) = find(&mut submissions, &submission) {
                            submissions[index].batch_id = Some(batch_id);
                        }
                    }
                    Entry::Answer { custom_id, .. } => {
                        answers.insert(custom_id, start);
                    }
                    Entry::Ended { submission, .. } => {
                        if let Some(index) = find(&mut submissions, &submission) {
                            submissions[index].ended = true;
                        }
                    }
                    Entry::Abandoned { submission, .. } | Entry::Cancelled { submission } => {
                        if let Some(index) = find(&mut submissions, &submission) {
                            submissions[index].dropped = true;
                        }
                    }
                }
            }
        }
        if file.metadata()?.len() > whole {
            file.set_len(whole)?;
        }
        Ok((
            Journal {
                path,
                file,
                end: whole,
                answers,
            },
            submissions,
        ))
    }

    /// The journal's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` as one line, written through to the file.
    pub fn append(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        if let Entry::Answer { custom_id, .. } = entry {
            self.answers.insert(custom_id.clone(), self.end);
        }
        self.end += line.len() as u64;
        Ok(())
    }

    /// Whether the answer to `custom_id` is in the journal.
    pub fn has_answer(&self, custom_id: &str) -> bool {
        self.answers.contains_key(custom_id)
    }

    /// The answer to `custom_id`, read back from the file.
    pub fn answer(&self, custom_id: &str) -> Option<Answer> {
        let offset = *self.answers.get(custom_id)?;
        let mut file = File::open(&self.path).ok()?;
        file.seek(SeekFrom::Start(offset)).ok()?;
        let mut line = Vec::new();
        BufReader::new(file.take(u64::MAX))
            .read_until(b'\n', &mut line)
            .ok()?;
        match serde_json::from_slice(&line).ok()? {
            Entry::Answer {
                reply: Some(reply), ..
            } => Some(Ok(reply)),
            Entry::Answer {
                error: Some(error), ..
            } => Some(Err(error)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_journal_reads_back_what_it_was_told_and_cuts_a_torn_line() {
        let directory = tempfile::tempdir().unwrap();
        let (mut journal, submissions) = Journal::open(directory.path()).unwrap();
        assert!(submissions.is_empty());
        let request = |custom_id: &str| Request {
            custom_id: custom_id.into(),
            digest: format!("d-{custom_id}"),
        };
        for entry in [
            Entry::Submission {
                submission: "s1".into(),
                service: "openai x".into(),
                endpoint: "/v1/chat/completions".into(),
                submitted_at: 7,
                requests: vec![request("s1-0"), request("s1-1")],
            },
            Entry::Batch {
                submission: "s1".into(),
                batch_id: "batch_1".into(),
            },
            Entry::Answer {
                custom_id: "s1-0".into(),
                reply: Some(json!({"ok": true})),
                error: None,
            },
            Entry::Answer {
                custom_id: "s1-1".into(),
                reply: None,
                error: Some(ProviderError::transient("expired")),
            },
            Entry::Submission {
                submission: "s2".into(),
                service: "openai x".into(),
                endpoint: "/v1/chat/completions".into(),
                submitted_at: 8,
                requests: vec![request("s2-0")],
            },
        ] {
            journal.append(&entry).unwrap();
        }
        drop(journal);
        let path = directory.path().join(FILE);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"type\":\"ended\",\"subm").unwrap();
        drop(file);

        let (journal, submissions) = Journal::open(directory.path()).unwrap();
        assert_eq!(submissions.len(), 2);
        assert_eq!(submissions[0].batch_id.as_deref(), Some("batch_1"));
        assert!(!submissions[0].ended, "the torn line is not read");
        assert_eq!(submissions[1].batch_id, None);
        assert_eq!(
            journal.answer("s1-0").unwrap().unwrap(),
            json!({"ok": true})
        );
        assert_eq!(
            journal.answer("s1-1").unwrap().unwrap_err().message,
            "expired"
        );
        assert!(journal.answer("s2-0").is_none());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("\"submitted_at\":8,\"requests\":[{\"custom_id\":\"s2-0\",\"digest\":\"d-s2-0\"}]}\n"), "{text}");
    }
}
