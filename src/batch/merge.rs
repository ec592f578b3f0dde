//! `lllm merge DIR... -o DIR`: the output directories of one task file's
//! shards (or of any batches of it) made into one directory, as if a single
//! unsharded `lllm batch` had written it. Nothing is run and nothing is sent:
//! only files are read and written.
//!
//! - **Inputs.** Each DIR holds a `results.jsonl` (else it is refused) and
//!   may hold `sessions.jsonl` (or `sessions.jsonl.zst`: `--compress`) and
//!   `batch.json`. Every line of both files is
//!   checked before anything is written: a line that is not a result (or not a
//!   session record with a `session_id`) is one error naming `file:line`.
//!   An input a running batch holds is refused; the merge holds a shared lock
//!   on each input's `.lock` while it reads, so no batch starts on one.
//! - **Within one DIR** a later result line for an id wins, as for `--resume`.
//! - **Across DIRs** (an id in several inputs, "duplicated"): a `success`
//!   beats a `failure`, which beats a `skipped`; between equals the one whose
//!   session ended last wins (a result without a record counts as oldest), and
//!   then the one in the later DIR on the command line. Every duplicate is
//!   reported with the DIR that won.
//! - **Missing ids** are checkable when every input's `batch.json` names the
//!   same task file digest and that file is found (at `tasks` given to
//!   [`merge`], else at the path `batch.json` recorded) with that digest: an id
//!   of the file with no result in any input is missing. Without the file,
//!   shards of one `N` still tell which shards `K/N` no input holds.
//! - **Output.** `results.jsonl`: the winning line of each id, in input
//!   order; `sessions.jsonl` (`sessions.jsonl.zst` when `compress` is asked,
//!   whatever the inputs' forms): every record of every input (each is a run that
//!   happened), with the winners of duplicated ids last, so `lllm replay
//!   --id TASK` shows the winner; `summary.json` in the shape a batch writes
//!   (counts by the winners, spend over every input line, `this_run` empty:
//!   the merge ran nothing); `batch.json` naming the whole task file (no
//!   shard) when the inputs agree on one, so `lllm batch --resume` on the
//!   merged DIR runs exactly the missing tasks; `merge.json` listing the
//!   inputs. Each file is written to a temporary name and renamed, so a crash
//!   leaves no half file.
//! - **The output DIR** is locked (`.lock`, as `lllm batch` does): two merges
//!   (or a batch and a merge) never write it at once. It must not be one of
//!   the inputs, and it must be new, empty, or an earlier merge's output (it
//!   holds `merge.json`), which is replaced; a batch's own directory is refused.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::directory::{self, Identity};
use super::output::{Brief, RESULTS, ResultLine, SUMMARY, SessionsFile, TaskState};
use super::shard::Shard;
use super::summary::{Summary, Totals};
use crate::error::{Error, Result};

/// The file naming a merged directory's inputs.
pub const MERGE: &str = "merge.json";
const MERGE_FORMAT: &str = "lllm.merge/1";

/// An id found in several inputs, and which input's result was kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Duplicate {
    /// The task id.
    pub id: String,
    /// Every input holding the id, in command-line order.
    pub inputs: Vec<PathBuf>,
    /// The input whose result won.
    pub kept: PathBuf,
    /// The winning result's state.
    pub state: TaskState,
}

/// Whether missing ids could be checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "check")]
pub enum Missing {
    /// Checked against the task file: these ids have no result (in file order).
    Checked { tasks: PathBuf, ids: Vec<String> },
    /// Not checkable, and why; `shards` lists the shards `K/N` no input
    /// holds, when the inputs are shards of one `N`.
    Unchecked { reason: String, shards: Vec<String> },
}

/// What a merge did.
#[derive(Debug, Clone, Serialize)]
pub struct Merged {
    /// Distinct ids in the merged `results.jsonl`.
    pub ids: u64,
    /// Session records written.
    pub sessions: u64,
    pub duplicates: Vec<Duplicate>,
    pub missing: Missing,
    /// The `summary.json` written.
    pub summary: Summary,
}

/// `merge.json`: what a merged directory was made from.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    format: String,
    inputs: Vec<String>,
    merged_at: String,
}

/// One input's winning line for an id: the line as read, and what the merge
/// decides by (not the parsed delivery, so a large merge holds each text once).
struct Candidate {
    input: usize,
    line: String,
    brief: Brief,
    session_id: Option<String>,
}

/// What is kept of a session line: enough to order and place it.
#[derive(Deserialize)]
struct SessionHead {
    session_id: String,
    #[serde(default)]
    ended_at: Option<String>,
}

/// Merges the batch directories `inputs` into `output` (see the module
/// documentation for the rules). `tasks`: the task file to check missing ids
/// against, instead of the path the inputs' `batch.json` recorded.
///
/// `Err(Error::Usage)` (exit 2) for a problem found before anything is
/// written: no input, an input that is not a batch directory, a bad line
/// (`file:line: …`), an output that is an input, a batch's directory, a
/// directory holding anything but an earlier merge, or held by another run.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let shard = |name: &str, lines: &str| -> std::io::Result<std::path::PathBuf> {
///     let path = dir.path().join(name);
///     std::fs::create_dir(&path)?;
///     std::fs::write(path.join("results.jsonl"), lines)?;
///     Ok(path)
/// };
/// let a = shard("a", "{\"id\":\"1\",\"state\":\"success\",\"delivery\":\"x\",\"error\":null,\"cost\":0.0,\"session_id\":null}\n")?;
/// let b = shard("b", "{\"id\":\"2\",\"state\":\"failure\",\"delivery\":null,\"error\":\"no\",\"cost\":0.0,\"session_id\":null}\n")?;
/// let merged = lllm::batch::merge::merge(&[a, b], &dir.path().join("all"), None, false)?;
/// assert_eq!((merged.ids, merged.summary.success, merged.summary.failure), (2, 1, 1));
/// assert!(dir.path().join("all/summary.json").exists());
/// # Ok(())
/// # }
/// ```
pub fn merge(
    inputs: &[PathBuf],
    output: &Path,
    tasks: Option<&Path>,
    compress: bool,
) -> Result<Merged> {
    let started = Instant::now();
    check_paths(inputs, output)?;
    // Held while the inputs are read: none is being written meanwhile.
    let _readers = inputs
        .iter()
        .map(|input| read_lock(input))
        .collect::<Result<Vec<_>>>()?;
    // Before the lock, so a refused directory gets no `.lock` file either;
    // again under it (`merge_locked`), where nothing can change it.
    check_output(output)?;
    let lock = directory::lock(output).map_err(Error::Usage)?;
    let merged = merge_locked(inputs, output, tasks, compress, started);
    if merged.is_err() {
        // Refused before writing: a directory this merge created goes again.
        lock.discard();
    }
    merged
}

fn usage(text: String) -> Error {
    Error::Usage(text)
}

/// Inputs that are batch directories, and an output that is none of them.
fn check_paths(inputs: &[PathBuf], output: &Path) -> Result<()> {
    if inputs.is_empty() {
        return Err(usage("`lllm merge` needs at least one DIR to merge".into()));
    }
    let output_real = crate::file::same::real_path(output);
    let mut seen = std::collections::HashSet::new();
    for input in inputs {
        if !input.join(RESULTS).is_file() {
            return Err(usage(format!(
                "`{}` is not a batch directory (it has no `{RESULTS}`)",
                input.display()
            )));
        }
        let real = std::fs::canonicalize(input).ok();
        if !seen.insert(real.clone()) {
            return Err(usage(format!(
                "`{}` is given twice; hint: name each directory once",
                input.display()
            )));
        }
        if real == output_real {
            return Err(usage(format!(
                "`-o {}` is one of the directories to merge; hint: merge into a new directory",
                output.display()
            )));
        }
    }
    Ok(())
}

/// A shared lock on an input's `.lock` (taken without writing to it), so a
/// batch still writing the input is refused instead of read half-done, and
/// none starts on it during the merge. `None` when it has no lock file.
fn read_lock(input: &Path) -> Result<Option<File>> {
    let file = match File::open(input.join(directory::LOCK)) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(usage(format!("cannot read `{}`: {error}", input.display())));
        }
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(usage(format!(
            "`{}` is being written by a running `lllm batch`; hint: wait for it to finish, \
             then merge",
            input.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => Err(usage(format!(
            "cannot lock `{}`: {error}",
            input.join(directory::LOCK).display()
        ))),
    }
}

/// The output is new, empty (but for the lock this merge holds), or an
/// earlier merge's (it holds `merge.json`), which is replaced. A batch's own
/// directory, or one holding anything else, is refused: the merge's files
/// would be mixed with what is there, or replace it (issue 26: a directory
/// of the user's notes was merged into).
fn check_output(output: &Path) -> Result<()> {
    if output.join(MERGE).exists() {
        return Ok(());
    }
    if output.join(RESULTS).exists() {
        return Err(usage(format!(
            "`{}` holds a batch's results (not an earlier merge's); hint: merge into a new \
             directory",
            output.display()
        )));
    }
    let entries = match std::fs::read_dir(output) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(usage(format!(
                "cannot read `{}`: {error}",
                output.display()
            )));
        }
    };
    let mut held: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != directory::LOCK)
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    held.sort();
    let count = held.len();
    let mut named: Vec<String> = held
        .iter()
        .take(3)
        .map(|name| format!("`{}`", crate::redact::echo(name)))
        .collect();
    if count > named.len() {
        named.push(format!("{} more", count - named.len()));
    }
    Err(usage(format!(
        "`{}` is not empty and holds no earlier merge (no `{MERGE}`; it holds {}); hint: \
         merge into a new or empty directory",
        output.display(),
        named.join(", ")
    )))
}

fn merge_locked(
    inputs: &[PathBuf],
    output: &Path,
    tasks: Option<&Path>,
    compress: bool,
    started: Instant,
) -> Result<Merged> {
    check_output(output)?;
    let identities = inputs
        .iter()
        .map(|input| directory::read_identity(input).map_err(usage))
        .collect::<Result<Vec<_>>>()?;
    let records = inputs
        .iter()
        .map(|input| SessionsFile::path_in(input).map_err(usage))
        .collect::<Result<Vec<_>>>()?;
    let (ended, sessions) = session_ends(&records)?;
    let (winners, order, spent, duplicates) = read_results(inputs, &ended)?;
    let missing = missing_ids(inputs, &identities, tasks, &winners)?;

    // Everything is read and checked: now write.
    let (results, summary) = merged_results(&order, &winners, &missing, &spent, started);
    let last: std::collections::HashSet<&str> = duplicates
        .iter()
        .filter_map(|duplicate| winners[&duplicate.id].session_id.as_deref())
        .collect();
    write_sessions(output, &records, compress, &last)?;
    write_atomic(output, RESULTS, |file| file.write_all(&results))?;
    write_whole_identity(output, &identities)?;
    write_atomic(output, SUMMARY, |file| {
        let text = serde_json::to_string_pretty(&summary).unwrap_or_default();
        writeln!(file, "{text}")
    })?;
    let record = Record {
        format: MERGE_FORMAT.into(),
        inputs: inputs
            .iter()
            .map(|input| input.display().to_string())
            .collect(),
        merged_at: crate::time::timestamp(),
    };
    write_atomic(output, MERGE, |file| {
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        writeln!(file, "{text}")
    })?;
    // Inputs written with `--output-format openai`: the merged directory
    // gets the OpenAI files too, over the winners.
    if inputs
        .iter()
        .any(|input| input.join(super::openai_output::OUTPUT).is_file())
    {
        super::openai_output::write(output).map_err(|source| Error::Write {
            path: output
                .join(super::openai_output::OUTPUT)
                .display()
                .to_string(),
            source,
        })?;
    }
    Ok(Merged {
        ids: order.len() as u64,
        sessions,
        duplicates,
        missing,
        summary,
    })
}

/// Every session's end by its id, to order duplicates, and how many
/// sessions the inputs' records hold; read (and checked) before anything is
/// written.
fn session_ends(records: &[Option<PathBuf>]) -> Result<(HashMap<String, String>, u64)> {
    let mut ended: HashMap<String, String> = HashMap::new();
    let mut sessions = 0u64;
    for path in records.iter().flatten() {
        for_each_line(path, |place, line| {
            let head: SessionHead = serde_json::from_str(line)
                .map_err(|error| format!("{place}: not a session record: {}", one_line(&error)))?;
            sessions += 1;
            if let Some(end) = head.ended_at {
                ended.insert(head.session_id, end);
            }
            Ok(())
        })?;
    }
    Ok((ended, sessions))
}

/// The merged `results.jsonl` (the winners' lines in `order`) and its
/// summary; with `missing` ids checked, they count among the tasks.
fn merged_results(
    order: &[String],
    winners: &HashMap<String, Candidate>,
    missing: &Missing,
    spent: &Totals,
    started: Instant,
) -> (Vec<u8>, Summary) {
    let mut latest = Totals::default();
    let mut reasons = super::reasons::Reasons::default();
    let mut scores = crate::eval::Tally::default();
    let mut results = Vec::new();
    for id in order {
        let candidate = &winners[id];
        latest.add(&candidate.brief);
        if let Some((id, pass, score, repeat_of)) = super::output::scored_of_line(&candidate.line) {
            scores.add(&id, repeat_of.as_deref(), score, pass);
        }
        if candidate.brief.state == super::output::TaskState::Failure {
            reasons.add(
                id,
                super::reasons::error_of_line(&candidate.line).as_deref(),
            );
        }
        results.extend_from_slice(candidate.line.as_bytes());
        results.push(b'\n');
    }
    let total = match missing {
        Missing::Checked { ids, .. } => order.len() + ids.len(),
        Missing::Unchecked { .. } => order.len(),
    } as u64;
    let mut summary = Summary::new(
        total,
        &latest,
        spent,
        &Totals::default(),
        started.elapsed().as_secs_f64(),
    )
    .with_reasons(&reasons);
    summary.shard = None;
    summary.scores = scores.summary(None);
    (results, summary)
}

/// Writes the merged records: every input's sessions, those of the
/// duplicates' winners (`last`) after the rest, in the form `compress`
/// asks for; a file of the other form an earlier merge wrote is removed.
fn write_sessions(
    output: &Path,
    records: &[Option<PathBuf>],
    compress: bool,
    last: &std::collections::HashSet<&str>,
) -> Result<()> {
    let form = SessionsFile::new(compress);
    write_atomic(output, form.name, |file| {
        // Lines gathered into frames of `jsonl::FRAME` bytes (written as they
        // are when not compressed).
        let mut writer = crate::jsonl::FrameWriter::to(file, form.form, 0)?;
        let mut chunk = Vec::with_capacity(crate::jsonl::FRAME + (1 << 16));
        let mut add = |chunk: &mut Vec<u8>, line: &str| {
            chunk.extend_from_slice(line.as_bytes());
            chunk.push(b'\n');
            if chunk.len() >= crate::jsonl::FRAME {
                writer.write(chunk)?;
                chunk.clear();
            }
            std::io::Result::Ok(())
        };
        let mut deferred = Vec::new();
        for path in records.iter().flatten() {
            for_each_line(path, |_, line| {
                let head: SessionHead = serde_json::from_str(line).map_err(|e| e.to_string())?;
                if last.contains(head.session_id.as_str()) {
                    deferred.push(line.to_string());
                } else {
                    add(&mut chunk, line).map_err(|e| e.to_string())?;
                }
                Ok(())
            })
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        }
        for line in deferred {
            add(&mut chunk, &line)?;
        }
        writer.write(&chunk)
    })?;
    // An earlier merge into this directory may have written the other form.
    let other = SessionsFile::new(!compress).name;
    if let Err(source) = std::fs::remove_file(output.join(other))
        && source.kind() != std::io::ErrorKind::NotFound
    {
        return Err(Error::Write {
            path: output.join(other).display().to_string(),
            source,
        });
    }
    Ok(())
}

/// Writes `batch.json` when every input ran the same task file (a merge of
/// its shards is that file's whole run).
fn write_whole_identity(output: &Path, identities: &[Option<Identity>]) -> Result<()> {
    let whole = identities.first().cloned().flatten().filter(|first| {
        identities.iter().all(|identity| {
            identity
                .as_ref()
                .is_some_and(|identity| identity.tasks_sha256 == first.tasks_sha256)
        })
    });
    if let Some(first) = whole {
        let identity = Identity::new(Path::new(&first.tasks), first.tasks_sha256, None)
            .with_tactic(first.tactic.as_deref().map(Path::new));
        directory::write_identity(output, &identity).map_err(|(path, source)| Error::Write {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(())
}

type Results = (
    HashMap<String, Candidate>,
    Vec<String>,
    Totals,
    Vec<Duplicate>,
);

/// The winning result of every id, the ids in input order, the spend over
/// every line, and the duplicated ids.
fn read_results(inputs: &[PathBuf], ended: &HashMap<String, String>) -> Result<Results> {
    let mut winners: HashMap<String, Candidate> = HashMap::new();
    let mut order = Vec::new();
    let mut spent = Totals::default();
    let mut holders: HashMap<String, Vec<usize>> = HashMap::new();
    for (index, input) in inputs.iter().enumerate() {
        // Within one input a later line wins, as for `--resume`.
        let mut own: HashMap<String, Candidate> = HashMap::new();
        let mut own_order = Vec::new();
        for_each_line(&input.join(RESULTS), |place, line| {
            let result: ResultLine = serde_json::from_str(line)
                .map_err(|error| format!("{place}: not a result line: {}", one_line(&error)))?;
            let brief = Brief::from(&result);
            spent.add(&brief);
            if !own.contains_key(&result.id) {
                own_order.push(result.id.clone());
            }
            let candidate = Candidate {
                input: index,
                line: line.to_string(),
                brief,
                session_id: result.session_id,
            };
            own.insert(result.id, candidate);
            Ok(())
        })?;
        for id in own_order {
            let candidate = own.remove(&id).expect("every id in the order has a line");
            holders.entry(id.clone()).or_default().push(index);
            match winners.get(&id) {
                None => {
                    order.push(id.clone());
                    winners.insert(id, candidate);
                }
                Some(current) if rank(&candidate, ended) >= rank(current, ended) => {
                    winners.insert(id, candidate);
                }
                Some(_) => {}
            }
        }
    }
    let duplicates = order
        .iter()
        .filter(|id| holders[*id].len() > 1)
        .map(|id| Duplicate {
            id: id.clone(),
            inputs: holders[id].iter().map(|i| inputs[*i].clone()).collect(),
            kept: inputs[winners[id].input].clone(),
            state: winners[id].brief.state,
        })
        .collect();
    Ok((winners, order, spent, duplicates))
}

/// Which of an id's results wins: the state first, then the session's end
/// (RFC 3339 in UTC, so text order is time order), then the later input.
fn rank<'a>(candidate: &'a Candidate, ended: &'a HashMap<String, String>) -> (u8, &'a str, usize) {
    let state = match candidate.brief.state {
        TaskState::Success => 2,
        TaskState::Failure => 1,
        TaskState::Skipped => 0,
    };
    let end = candidate
        .session_id
        .as_ref()
        .and_then(|session| ended.get(session))
        .map_or("", String::as_str);
    (state, end, candidate.input)
}

/// The ids of the task file with no result, when that can be known.
fn missing_ids(
    inputs: &[PathBuf],
    identities: &[Option<Identity>],
    tasks: Option<&Path>,
    winners: &HashMap<String, Candidate>,
) -> Result<Missing> {
    let unchecked = |reason: String| {
        Ok(Missing::Unchecked {
            reason,
            shards: absent_shards(identities),
        })
    };
    let digests: BTreeSet<&str> = identities
        .iter()
        .flatten()
        .map(|identity| identity.tasks_sha256.as_str())
        .collect();
    if let Some(index) = identities.iter().position(Option::is_none) {
        return unchecked(format!(
            "`{}` has no `batch.json` naming its task file",
            inputs[index].display()
        ));
    }
    if digests.len() > 1 {
        return unchecked("the inputs ran different task files (their SHA-256 differ)".into());
    }
    let Some(first) = identities.first().cloned().flatten() else {
        return unchecked("no input names a task file".into());
    };
    let path = tasks.map_or_else(|| PathBuf::from(&first.tasks), Path::to_path_buf);
    match directory::file_sha256(&path) {
        Ok(digest) if digest == first.tasks_sha256 => {}
        Ok(_) => {
            return unchecked(format!(
                "`{}` changed since the batches ran (its SHA-256 differs)",
                path.display()
            ));
        }
        Err(error) => {
            return unchecked(format!(
                "cannot read the task file `{}`: {error}; hint: pass `--tasks FILE`",
                path.display()
            ));
        }
    }
    let mut lines = super::tasks::Lines::open(&path)
        .map_err(|error| usage(format!("cannot read `{}`: {error}", path.display())))?;
    let mut ids = Vec::new();
    while let Some(line) = lines.next_line() {
        let (number, text) = line.map_err(usage)?;
        if text.trim().is_empty() {
            continue;
        }
        let id = super::formats::line_id(text, number).unwrap_or_else(|| format!("line-{number}"));
        if !winners.contains_key(&id) {
            ids.push(id);
        }
    }
    Ok(Missing::Checked { tasks: path, ids })
}

/// The shards `K/N` no input holds, when every input is a shard of one `N`.
fn absent_shards(identities: &[Option<Identity>]) -> Vec<String> {
    let shards: Option<Vec<Shard>> = identities
        .iter()
        .map(|identity| {
            identity
                .as_ref()
                .and_then(|identity| identity.shard.as_deref())
                .and_then(|text| Shard::parse(text).ok())
        })
        .collect();
    let Some(shards) = shards.filter(|shards| !shards.is_empty()) else {
        return Vec::new();
    };
    let count = shards[0].count;
    if shards.iter().any(|shard| shard.count != count) {
        return Vec::new();
    }
    (1..=count)
        .filter(|index| shards.iter().all(|shard| shard.index != *index))
        .map(|index| format!("{index}/{count}"))
        .collect()
}

/// Calls `each` with `file:line` and the text of every non-blank line of
/// `path` (a missing file has none). The first `Err` stops, as a usage error.
fn for_each_line(
    path: &Path,
    mut each: impl FnMut(&str, &str) -> std::result::Result<(), String>,
) -> Result<()> {
    let mut reader = match crate::jsonl::Lines::open(path) {
        Ok(reader) => reader,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(usage(format!("cannot read `{}`: {error}", path.display()))),
    };
    let mut line = String::new();
    let mut number = 0usize;
    loop {
        let read = crate::jsonl::read_text_line(&mut reader, &mut line)
            .map_err(|error| usage(format!("cannot read `{}`: {error}", path.display())))?;
        number += 1;
        let place = format!("{}:{number}", path.display());
        match read {
            crate::jsonl::LineRead::End => return Ok(()),
            // Refused as a line that is not JSON is: the merge keeps every line.
            crate::jsonl::LineRead::NotText => {
                return Err(usage(format!(
                    "{place}: not UTF-8 text (a torn or corrupted line); hint: remove \
                     the line, or merge without that input"
                )));
            }
            crate::jsonl::LineRead::Text => {}
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        each(&place, text).map_err(|error| {
            let torn = if line.ends_with('\n') {
                ""
            } else {
                "; hint: a torn last line (a killed run): `lllm batch --resume` on that \
                 directory cuts it"
            };
            usage(format!("{error}{torn}"))
        })?;
    }
}

/// A serde error without its own "at line … column …" (the caller names the line).
fn one_line(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Writes `dir/name` through a temporary file and a rename.
fn write_atomic(
    dir: &Path,
    name: &str,
    fill: impl FnOnce(&mut crate::file::atomic::AtomicFile) -> std::io::Result<()>,
) -> Result<()> {
    let path = dir.join(name);
    let written = crate::file::atomic::AtomicFile::create(&path).and_then(|mut file| {
        fill(&mut file)?;
        file.commit()
    });
    written.map_err(|source| Error::Write {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::output::SESSIONS;

    fn line(id: &str, state: &str, session: Option<&str>) -> String {
        serde_json::json!({
            "id": id, "state": state, "delivery": null, "error": null,
            "cost": 0.5, "session_id": session, "calls": 1,
        })
        .to_string()
            + "\n"
    }

    fn input(root: &Path, name: &str, results: &str, sessions: &str) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(RESULTS), results).unwrap();
        std::fs::write(dir.join(SESSIONS), sessions).unwrap();
        dir
    }

    #[test]
    fn a_success_wins_then_the_newest_session() {
        let root = tempfile::tempdir().unwrap();
        let session = |id: &str, end: &str| {
            format!("{{\"session_id\":\"{id}\",\"ended_at\":\"{end}\",\"task_id\":\"x\"}}\n")
        };
        let a = input(
            root.path(),
            "a",
            &(line("x", "success", Some("s1")) + &line("y", "failure", Some("s2"))),
            &(session("s1", "2026-01-01T00:00:02.000Z")
                + &session("s2", "2026-01-01T00:00:09.000Z")),
        );
        let b = input(
            root.path(),
            "b",
            &(line("x", "failure", Some("s3")) + &line("y", "failure", Some("s4"))),
            &(session("s3", "2026-01-01T00:00:05.000Z")
                + &session("s4", "2026-01-01T00:00:01.000Z")),
        );
        let out = root.path().join("out");
        let merged = merge(&[a.clone(), b], &out, None, false).unwrap();
        assert_eq!(merged.ids, 2);
        let kept: Vec<(&str, &Path)> = merged
            .duplicates
            .iter()
            .map(|d| (d.id.as_str(), d.kept.as_path()))
            .collect();
        // x: success over failure; y: both failures, a's session ended last.
        assert_eq!(kept, [("x", a.as_path()), ("y", a.as_path())]);
        assert_eq!((merged.summary.success, merged.summary.failure), (1, 1));
        // Spend counts every line of every input.
        assert_eq!(merged.summary.cost, 2.0);
        // The winners' records come last, so replay's "latest" is the winner.
        let sessions = std::fs::read_to_string(out.join(SESSIONS)).unwrap();
        let order: Vec<&str> = sessions.lines().map(|l| &l[15..17]).collect();
        assert_eq!(order, ["s3", "s4", "s1", "s2"]);
        assert!(matches!(merged.missing, Missing::Unchecked { .. }));
    }

    #[test]
    fn a_bad_line_names_its_place_and_nothing_is_written() {
        let root = tempfile::tempdir().unwrap();
        let a = input(root.path(), "a", &line("x", "success", None), "");
        let b = input(root.path(), "b", "{\"id\": 3}\n", "");
        let out = root.path().join("out");
        let error = merge(&[a, b], &out, None, false).unwrap_err().to_string();
        assert!(
            error.contains("b/results.jsonl:1: not a result line"),
            "{error}"
        );
        assert!(!out.exists());
    }

    #[test]
    fn shards_no_input_holds_are_named() {
        let identity = |shard: &str| {
            Some(Identity::new(
                Path::new("t.jsonl"),
                "aa".into(),
                Shard::parse(shard).ok(),
            ))
        };
        assert_eq!(
            absent_shards(&[identity("1/4"), identity("3/4")]),
            ["2/4", "4/4"]
        );
        assert!(absent_shards(&[identity("1/4"), identity("1/3")]).is_empty());
    }
}
