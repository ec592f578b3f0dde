//! A record on disk is a finished task (issue 26): `--resume` after a kill
//! between a task's record and its result line rebuilds the result line from
//! the record, which holds the delivery, the state and the cost, instead of
//! running (and paying for) the task again.
//!
//! A record "has" a result line when a line of `results.jsonl` names its
//! session. The ones that have none are rebuilt, but for a record followed,
//! later in the records file, by another record of the same task that has a
//! result line (a directory resumed by a version that ran such tasks again):
//! the later run is the task's latest; and but for a task whose latest
//! result line is a `success` naming no session (a line written by hand, or
//! by a version that did not name it), which a record does not second-guess.
//! Records are read three times at most
//! (their session and task ids; then, only when some lack results, the
//! whole records of those), one line at a time, so memory stays small: a
//! 16-byte digest per result line, and the task ids of the records found
//! without one. The session store is not told of rebuilt records (`lllm logs
//! reindex` registers them).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use serde::Deserialize;

use super::ids::IdKey;
use super::output::TaskState;
use super::scheduler::Reason;
use crate::tactic::{RunState, SessionRecord};

/// Result lines rebuilt, for the warning that names them.
#[derive(Debug, Default)]
pub struct Rebuilt {
    /// How many.
    pub count: u64,
    /// The ids of the first [`Rebuilt::NAMED`].
    pub named: Vec<String>,
}

impl Rebuilt {
    /// Ids named in [`Rebuilt::named`].
    pub const NAMED: usize = 5;
}

/// What a result line says of its task and its session.
#[derive(Deserialize)]
struct ResultSession<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    state: TaskState,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
}

/// What a record says of itself, the rest skipped over.
#[derive(Deserialize)]
struct RecordIds<'a> {
    #[serde(borrow)]
    session_id: Cow<'a, str>,
    #[serde(borrow, default)]
    task_id: Option<Cow<'a, str>>,
}

/// Appends to `results` the result line of every record in `sessions`
/// (plain or compressed) that has none; both files whole (after
/// `jsonl::repair`). A record that cannot be read is left alone, as readers
/// skip it.
pub fn missing_results(results: &Path, sessions: &Path) -> std::io::Result<Rebuilt> {
    let mut with_result: Vec<IdKey> = Vec::new();
    // Tasks whose latest line is a success that names no session.
    let mut unnamed: std::collections::HashSet<IdKey> = std::collections::HashSet::new();
    each_line(results, &mut |_, line| {
        let Ok(result) = serde_json::from_str::<ResultSession<'_>>(line) else {
            return;
        };
        let task = IdKey::of(&result.id);
        match (result.session_id, result.state) {
            (Some(session), _) => {
                with_result.push(IdKey::of(&session));
                unnamed.remove(&task);
            }
            (None, TaskState::Success) => {
                unnamed.insert(task);
            }
            (None, _) => {
                unnamed.remove(&task);
            }
        }
    })?;
    with_result.sort_unstable();
    // Task → the line of its latest record without a result line, unless a
    // later record of the task has one.
    let mut pending: HashMap<IdKey, usize> = HashMap::new();
    each_line(sessions, &mut |number, line| {
        let Ok(ids) = serde_json::from_str::<RecordIds<'_>>(line) else {
            return;
        };
        let Some(task) = ids.task_id else { return };
        let task = IdKey::of(&task);
        if with_result
            .binary_search(&IdKey::of(&ids.session_id))
            .is_ok()
            || unnamed.contains(&task)
        {
            pending.remove(&task);
        } else {
            pending.insert(task, number);
        }
    })?;
    let mut rebuilt = Rebuilt::default();
    if pending.is_empty() {
        return Ok(rebuilt);
    }
    drop(with_result);
    let mut wanted: Vec<usize> = pending.into_values().collect();
    wanted.sort_unstable();
    let mut wanted = wanted.into_iter().peekable();
    let mut lines = Vec::new();
    let mut failed = None;
    each_line(sessions, &mut |number, line| {
        if wanted.peek() != Some(&number) {
            return;
        }
        wanted.next();
        let Ok(mut record) = serde_json::from_str::<SessionRecord>(line) else {
            return;
        };
        let Some(id) = record.task_id.clone() else {
            return;
        };
        // A record written before `skipped` was a record state says
        // `failure` / `interrupted`.
        let cancelled = cancelled(&record);
        super::scheduler::settle(&mut record, cancelled);
        let result = super::scheduler::result_of(id, &record);
        if let Err(error) = serde_json::to_writer(&mut lines, &result) {
            failed.get_or_insert(error);
            return;
        }
        lines.push(b'\n');
        rebuilt.count += 1;
        if rebuilt.named.len() < Rebuilt::NAMED {
            rebuilt.named.push(result.id);
        }
    })?;
    if let Some(error) = failed {
        return Err(std::io::Error::other(error));
    }
    if !lines.is_empty() {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(results)?;
        file.write_all(&lines)?;
    }
    Ok(rebuilt)
}

/// What stopped a record's run in flight, as far as the record tells: an
/// interrupted run (Ctrl-C, `--fail-fast`, a failed write) is a failure
/// whose error is `interrupted`; its task was not finished.
fn cancelled(record: &SessionRecord) -> Option<Reason> {
    (record.state == RunState::Failure
        && record.error.as_deref() == Some(crate::tactic::INTERRUPTED))
    .then_some(Reason::Interrupted)
}

/// Calls `each` with every line of the JSONL file at `path` (plain or
/// compressed) that is text, with its number (1-based); nothing when there
/// is no such file.
fn each_line(path: &Path, each: &mut dyn FnMut(usize, &str)) -> std::io::Result<()> {
    let mut reader = match crate::jsonl::Lines::open(path) {
        Ok(reader) => reader,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut line = String::new();
    let mut number = 0;
    loop {
        let read = crate::jsonl::read_text_line(&mut reader, &mut line)?;
        number += 1;
        match read {
            crate::jsonl::LineRead::End => return Ok(()),
            crate::jsonl::LineRead::NotText => {}
            crate::jsonl::LineRead::Text => each(number, &line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::output::{ResultLine, TaskState};

    /// A record of task `id` in its written form (a mock run's, its fields
    /// set as given): a success, or a failure when `error` is given.
    fn record(id: &str, session: &str, delivery: Option<&str>, error: Option<&str>) -> String {
        let tactic = crate::Tactic::from_yaml(
            "agent_configs: [{name: echo, model_name: mock/echo}]",
            ".",
            &crate::Registry::new(),
        )
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let task = crate::tactic::Task::new("x").id(id);
        let record = runtime.block_on(tactic.run_until(task, None, std::future::pending()));
        let mut value = serde_json::to_value(&record).unwrap();
        value["session_id"] = session.into();
        value["state"] = if error.is_some() {
            "failure"
        } else {
            "success"
        }
        .into();
        value["delivery"] = delivery.into();
        value["error"] = error.into();
        value.to_string()
    }

    fn result(id: &str, session: Option<&str>) -> String {
        let mut line = ResultLine::skipped(id.into(), "budget");
        line.state = TaskState::Success;
        line.session_id = session.map(str::to_string);
        serde_json::to_string(&line).unwrap()
    }

    #[track_caller]
    fn case(records: &[String], results: &[String], expected: &[(&str, TaskState)]) {
        let dir = tempfile::tempdir().unwrap();
        let (sessions, results_path) = (dir.path().join("s.jsonl"), dir.path().join("r.jsonl"));
        let lines = |lines: &[String]| {
            lines
                .iter()
                .map(|line| format!("{line}\n"))
                .collect::<String>()
        };
        std::fs::write(&sessions, lines(records)).unwrap();
        std::fs::write(&results_path, lines(results)).unwrap();
        let rebuilt = missing_results(&results_path, &sessions).unwrap();
        let text = std::fs::read_to_string(&results_path).unwrap();
        let appended: Vec<ResultLine> = text
            .lines()
            .skip(results.len())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let got: Vec<(&str, TaskState)> = appended
            .iter()
            .map(|line| (line.id.as_str(), line.state))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(rebuilt.count, expected.len() as u64);
        // Run again, nothing more is rebuilt: every record has its line now.
        assert_eq!(missing_results(&results_path, &sessions).unwrap().count, 0);
    }

    #[test]
    fn records_without_result_lines_get_theirs() {
        let (a, b) = (
            record("a", "s-a", Some("A"), None),
            record("b", "s-b", None, Some("boom")),
        );
        // Both have results: nothing to do.
        case(
            &[a.clone(), b.clone()],
            &[result("a", Some("s-a")), result("b", Some("s-b"))],
            &[],
        );
        // b's result line was never written: rebuilt as the failure it was.
        case(
            &[a.clone(), b.clone()],
            &[result("a", Some("s-a"))],
            &[("b", TaskState::Failure)],
        );
        // An interrupted run was not finished: `skipped`, run again.
        case(
            &[record("c", "s-c", None, Some("interrupted"))],
            &[],
            &[("c", TaskState::Skipped)],
        );
        // A later record of the task with a result wins over an earlier one
        // without; a later record without one wins over an earlier result.
        case(
            &[
                record("a", "s-a1", Some("old"), None),
                record("a", "s-a2", Some("new"), None),
                b.clone(),
                record("b", "s-b2", Some("B"), None),
            ],
            &[result("a", Some("s-a2")), result("b", Some("s-b"))],
            &[("b", TaskState::Success)],
        );
        // A skipped result line (no session) is superseded; a success
        // that names no session is left as it is.
        let skipped = ResultLine::skipped("a".into(), "interrupted");
        case(
            std::slice::from_ref(&a),
            &[serde_json::to_string(&skipped).unwrap()],
            &[("a", TaskState::Success)],
        );
        case(std::slice::from_ref(&a), &[result("a", None)], &[]);
    }

    #[test]
    fn a_rebuilt_line_is_the_one_the_run_would_have_written() {
        let dir = tempfile::tempdir().unwrap();
        let (sessions, results) = (dir.path().join("s.jsonl"), dir.path().join("r.jsonl"));
        let text = record("a", "s-a", Some("A"), None);
        std::fs::write(&sessions, format!("{text}\n")).unwrap();
        missing_results(&results, &sessions).unwrap();
        let line: ResultLine =
            serde_json::from_str(std::fs::read_to_string(&results).unwrap().trim()).unwrap();
        let record: SessionRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(line, ResultLine::from_record("a".into(), &record));
        assert_eq!(line.delivery.as_deref(), Some("A"));
        assert_eq!(line.session_id.as_deref(), Some("s-a"));
        assert_eq!(line.calls, 1);
        assert_eq!(line.state, TaskState::Success);
    }
}
