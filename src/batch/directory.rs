//! The output directory as a whole: who writes it and which run it holds.
//! `output` owns the files inside; this module owns the two that guard them.
//!
//! - `.lock`: an OS file lock (`flock`) held for the whole run, so two
//!   `lllm batch` never write one directory at once (the second would cut
//!   lines the first had committed, or both would run, and pay for, the same
//!   tasks). The holder writes its pid, host and start time into the file for
//!   the error the second one shows. The lock belongs to the open file, so it
//!   ends with its process however that ends: a lock file left by a killed run
//!   does not block the next one. The file itself stays (deleting it would let
//!   a third process lock a new file while a second still holds the old one).
//! - `batch.json`: which run the directory holds — the task file (as given and
//!   its SHA-256) and the shard — so a `--resume` with another shard is
//!   refused instead of mixing two shards' tasks in one directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::shard::{Requested, Shard};
use crate::sha256::Sha256;

pub const LOCK: &str = ".lock";
pub const IDENTITY: &str = "batch.json";
const IDENTITY_FORMAT: &str = "lllm.batch/1";

/// The directory's lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct Lock {
    _file: File,
    /// The directory, when this run created it.
    created: Option<PathBuf>,
}

impl Lock {
    /// For a run refused before anything was sent (exit 2): a directory this
    /// run created goes away again, with the lock file and `batch.json` it
    /// wrote, so a refused command leaves nothing behind. Removed while the
    /// lock is still held, so no other run can be writing it. A directory
    /// that existed before stays as it is.
    pub fn discard(self) {
        if let Some(dir) = &self.created {
            let _ = std::fs::remove_file(dir.join(IDENTITY));
            let _ = std::fs::remove_file(dir.join(LOCK));
            let _ = std::fs::remove_file(dir.join(super::formats::DEFAULT_TACTIC_FILE));
            // The Batch API journal, opened before pre-flight, holds nothing
            // when nothing was sent.
            let journal = dir.join(crate::provider::batch_api::journal::FILE);
            if std::fs::metadata(&journal).is_ok_and(|meta| meta.len() == 0) {
                let _ = std::fs::remove_file(journal);
            }
            // Fails, and keeps the directory, if anything else is in it.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Who holds a lock, as the holder wrote it.
#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    pid: u32,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
}

/// Creates `dir` if needed and locks it for this process. `Err` is the one
/// line to show: the directory is held by another run, or cannot be written.
pub fn lock(dir: &Path) -> Result<Lock, String> {
    let cannot = |error: std::io::Error| format!("cannot write to `{}`: {error}", dir.display());
    let created = (!dir.exists()).then(|| dir.to_path_buf());
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let path = dir.join(LOCK);
    // Written below (the holder): never through a link planted at its name.
    let mut file = crate::file::open_in_place(
        &path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
    .map_err(cannot)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match serde_json::from_str::<Holder>(&text) {
                Ok(holder) => {
                    let mut who = format!("pid {}", holder.pid);
                    if let Some(host) = holder.host {
                        who.push_str(&format!(" on `{host}`"));
                    }
                    if let Some(started) = holder.started_at {
                        who.push_str(&format!(", started {started}"));
                    }
                    who
                }
                // The holder locked it a moment ago and is still writing its pid.
                Err(_) => "a process that is just starting".to_string(),
            };
            return Err(format!(
                "`{}` is being written by another `lllm batch` or `lllm merge` ({holder}); two runs must not \
                 write one directory; hint: wait for it to finish (then `--resume`), or choose \
                 another `-o` directory",
                dir.display()
            ));
        }
        Err(std::fs::TryLockError::Error(error)) => return Err(cannot(error)),
    }
    let holder = Holder {
        pid: std::process::id(),
        host: host_name(),
        started_at: Some(crate::time::timestamp()),
    };
    let text = serde_json::to_string(&holder).unwrap_or_default() + "\n";
    file.set_len(0)
        .and_then(|()| file.write_all(text.as_bytes()))
        .map_err(cannot)?;
    Ok(Lock {
        _file: file,
        created,
    })
}

/// This machine's name, when the system says it (jobs on a cluster share
/// directories across hosts, and a pid alone does not say where to look).
fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

/// `batch.json`: the run a directory holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub format: String,
    /// The TASKS file as the command line named it.
    pub tasks: String,
    pub tasks_sha256: String,
    /// `K/N`, or `null` for the whole file.
    pub shard: Option<String>,
    /// `--tactic` as the command line named it, when given: `lllm eval`
    /// rescores with its `asserts` (absent in directories of older runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tactic: Option<String>,
}

impl Identity {
    pub fn new(tasks: &Path, tasks_sha256: String, shard: Option<Shard>) -> Identity {
        Identity {
            format: IDENTITY_FORMAT.to_string(),
            tasks: tasks.display().to_string(),
            tasks_sha256,
            shard: shard.map(|shard| shard.to_string()),
            tactic: None,
        }
    }

    /// The same identity naming the run's `--tactic`.
    pub fn with_tactic(mut self, tactic: Option<&Path>) -> Identity {
        self.tactic = tactic.map(|path| path.display().to_string());
        self
    }

    /// What the directory holds, in words: `shard 3/8 of `tasks.jsonl``.
    fn describe(&self) -> String {
        match &self.shard {
            Some(shard) => format!("shard {shard} of `{}`", self.tasks),
            None => format!("the whole of `{}` (no shard)", self.tasks),
        }
    }
}

/// Reads `batch.json`; `None` when there is none (a fresh directory, or one
/// written by an lllm that did not record it).
pub fn read_identity(dir: &Path) -> Result<Option<Identity>, String> {
    let path = dir.join(IDENTITY);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read `{}`: {error}", path.display())),
    };
    serde_json::from_str(&text).map(Some).map_err(|error| {
        format!(
            "`{}` is not what `lllm batch` writes ({error}); hint: restore it, or choose \
             another `-o` directory",
            path.display()
        )
    })
}

/// Writes `batch.json` atomically (a temporary file, then a rename).
pub fn write_identity(dir: &Path, identity: &Identity) -> Result<(), (PathBuf, std::io::Error)> {
    let path = dir.join(IDENTITY);
    let text = serde_json::to_string_pretty(identity).unwrap_or_default() + "\n";
    crate::file::atomic::write(&path, text.as_bytes()).map_err(|error| (path, error))
}

/// The SHA-256 of a file, in hex, read in blocks.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    // Read more than once (digest, pre-flight, run): a regular file only, and
    // never an open that waits for a pipe's writer.
    let (mut file, _) = crate::file::open_regular(path)?;
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; 1 << 16];
    loop {
        let read = file.read(&mut block)?;
        if read == 0 {
            break;
        }
        hasher.update(&block[..read]);
    }
    Ok(crate::provider::digest::hex(&hasher.finalize()))
}

/// The shard this run is, given what the command line asks and what the
/// directory holds (`recorded`), or the one line that refuses it.
///
/// A shard the command line names must be the directory's: continuing
/// another shard's directory would run that shard's tasks into it, and the
/// shards' outputs would no longer concatenate into the whole run. A job
/// array that cannot tell its shard (a resubmitted element) continues the
/// directory's shard when it is one of the same N shards of the same file.
pub fn settle_shard(
    dir: &Path,
    requested: &Requested,
    recorded: Option<&Identity>,
    tasks_sha256: &str,
) -> Result<Option<Shard>, String> {
    let dir_name = dir.display();
    let shard = match requested {
        Requested::Whole => None,
        Requested::Given(shard) => Some(*shard),
        Requested::Unknown {
            count,
            reason,
            guess,
        } => {
            let recorded_shard = recorded
                .and_then(|identity| identity.shard.as_deref())
                .and_then(|text| Shard::parse(text).ok())
                .filter(|shard| shard.count == *count);
            return match (recorded_shard, recorded) {
                (Some(shard), Some(identity)) if identity.tasks_sha256 == tasks_sha256 => {
                    crate::report::warn(&format!(
                        "{reason}; continuing shard {shard} recorded in `{dir_name}`"
                    ));
                    Ok(Some(shard))
                }
                (Some(shard), _) => Err(format!(
                    "{reason}; `{dir_name}` holds shard {shard} of another task file; hint: \
                     pass `--shard K/{count}`"
                )),
                (None, _) => {
                    let hint = match guess {
                        Some(guess) => format!(
                            "pass `--shard {guess}` if the array was `--array=0-{}`, or the \
                             `--shard K/{count}` this element ran as",
                            count - 1
                        ),
                        None => format!("pass the `--shard K/{count}` this element ran as"),
                    };
                    Err(format!("{reason}; hint: {hint}"))
                }
            };
        }
    };
    let Some(identity) = recorded else {
        return Ok(shard);
    };
    if identity.shard != shard.map(|shard| shard.to_string()) {
        let this_run = match shard {
            Some(shard) => format!("shard {shard}"),
            None => "the whole file".to_string(),
        };
        let flag = match &identity.shard {
            Some(recorded) => format!("pass `--shard {recorded}`"),
            None => "drop `--shard`/`--shards`".to_string(),
        };
        return Err(format!(
            "`{dir_name}` holds {}, and this run is {this_run}; hint: {flag} to continue it, or \
             choose another `-o` directory",
            identity.describe()
        ));
    }
    if identity.tasks_sha256 != tasks_sha256 {
        crate::report::warn(&format!(
            "`{}` changed since the run in `{dir_name}` began (its SHA-256 differs); continuing \
             with the file as it is now",
            identity.tasks
        ));
    }
    Ok(shard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_a_released_one_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let first = lock(&out).unwrap();
        let error = lock(&out).unwrap_err();
        assert!(
            error.contains(&format!("pid {}", std::process::id())),
            "{error}"
        );
        assert!(error.contains("another `lllm batch`"), "{error}");
        drop(first);
        // The file stays; the lock went with its holder.
        assert!(out.join(LOCK).exists());
        let _again = lock(&out).unwrap();
        // A directory that cannot be made is one line naming it.
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let error = lock(&dir.path().join("file/out")).unwrap_err();
        assert!(error.starts_with("cannot write to `"), "{error}");
    }

    #[track_caller]
    fn settle(
        requested: Requested,
        recorded: Option<(&str, Option<&str>)>,
    ) -> Result<Option<String>, String> {
        let identity = recorded.map(|(sha, shard)| Identity {
            format: IDENTITY_FORMAT.into(),
            tasks: "tasks.jsonl".into(),
            tasks_sha256: sha.into(),
            shard: shard.map(str::to_string),
            tactic: None,
        });
        settle_shard(Path::new("out"), &requested, identity.as_ref(), "aaa")
            .map(|shard| shard.map(|shard| shard.to_string()))
    }

    #[test]
    fn a_resume_continues_only_its_own_shard() {
        let three = Requested::Given(Shard { index: 3, count: 8 });
        assert_eq!(settle(three.clone(), None), Ok(Some("3/8".into())));
        assert_eq!(
            settle(three.clone(), Some(("aaa", Some("3/8")))),
            Ok(Some("3/8".into()))
        );
        let error = settle(Requested::Whole, Some(("aaa", Some("3/8")))).unwrap_err();
        assert_eq!(
            error,
            "`out` holds shard 3/8 of `tasks.jsonl`, and this run is the whole file; hint: \
             pass `--shard 3/8` to continue it, or choose another `-o` directory"
        );
        let error = settle(three.clone(), Some(("aaa", None))).unwrap_err();
        assert!(error.contains("drop `--shard`"), "{error}");
        let error = settle(three, Some(("aaa", Some("2/8")))).unwrap_err();
        assert!(error.contains("pass `--shard 2/8`"), "{error}");
        // Another digest is a warning, not a refusal (a fixed line, then --resume).
        assert_eq!(settle(Requested::Whole, Some(("bbb", None))), Ok(None));
    }

    #[test]
    fn an_array_that_cannot_tell_continues_the_recorded_shard() {
        let unknown = Requested::Unknown {
            count: 8,
            reason: "resubmitted".into(),
            guess: Some(Shard { index: 3, count: 8 }),
        };
        assert_eq!(
            settle(unknown.clone(), Some(("aaa", Some("3/8")))),
            Ok(Some("3/8".into()))
        );
        let error = settle(unknown.clone(), None).unwrap_err();
        assert!(
            error.contains("`--shard 3/8` if the array was `--array=0-7`"),
            "{error}"
        );
        let error = settle(unknown.clone(), Some(("bbb", Some("3/8")))).unwrap_err();
        assert!(error.contains("another task file"), "{error}");
        // A recorded shard of another N does not count.
        assert!(settle(unknown, Some(("aaa", Some("3/4")))).is_err());
    }
}
