//! Pre-flight: before the first request, every line of the TASKS file is
//! parsed and every task checked against its tactic (`Tactic::check_task`:
//! template variables, and the templates that need only the task rendered),
//! so all problems are reported at once, with line numbers, and nothing is
//! sent for a file that cannot finish.
//!
//! The file is streamed in chunks; rayon parses and checks each chunk in
//! parallel (on one core without the `rayon` feature: the same calls, in
//! order). What is kept across chunks is small: a 16-byte digest and the
//! line of each id (`ids::Seen`: duplicates are an error, found by one sort
//! at the end), the grouped problems, and the counts the run needs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[cfg(not(feature = "rayon"))]
use one_core::OneCore;
#[cfg(feature = "rayon")]
use rayon::prelude::*;

use super::ids::Seen;
use super::shard::Shard;
use super::tactics::Tactics;
use super::tasks::{self, Task};

/// Without the `rayon` feature, rayon's two calls this file makes, on the
/// calling thread: a slower pre-flight, the same findings.
#[cfg(not(feature = "rayon"))]
mod one_core {
    pub(super) trait OneCore<T> {
        fn par_iter(&self) -> std::slice::Iter<'_, T>;
        fn into_par_iter(self) -> std::vec::IntoIter<T>;
    }

    impl<T> OneCore<T> for Vec<T> {
        fn par_iter(&self) -> std::slice::Iter<'_, T> {
            self.iter()
        }

        fn into_par_iter(self) -> std::vec::IntoIter<T> {
            self.into_iter()
        }
    }
}

/// Lines parsed and checked together.
const CHUNK: usize = 4096;

/// Which task lines belong to this run, applied the same way by pre-flight and
/// by the run: the shard's tasks, the first `limit` of them.
#[derive(Debug, Clone)]
pub struct Selector {
    pub shard: Option<Shard>,
    pub limit: Option<u64>,
    selected: u64,
}

impl Selector {
    pub fn new(shard: Option<Shard>, limit: Option<u64>) -> Selector {
        Selector {
            shard,
            limit,
            selected: 0,
        }
    }

    /// Whether the task `id` (the next task line in file order) is in the run.
    pub fn select(&mut self, id: &str) -> bool {
        if self.shard.is_some_and(|shard| !shard.contains(id)) || self.full() {
            return false;
        }
        self.selected += 1;
        true
    }

    /// `--limit` is reached: no later line is in the run.
    pub fn full(&self) -> bool {
        self.limit.is_some_and(|limit| self.selected >= limit)
    }
}

/// What pre-flight found.
pub struct Plan {
    /// Grouped problems: one per distinct message, with the lines it applies to.
    pub problems: Vec<Problem>,
    /// Bad lines of this run, by line number: their id (or `line-N`) and the
    /// problem (`--skip-invalid` records them as failed).
    pub invalid: HashMap<usize, (String, String)>,
    /// Tasks of this run (shard, `--limit`), bad lines included.
    pub in_run: u64,
    /// Of those, the ones `--resume` will not skip.
    pub to_run: u64,
    /// Whether some line has assertions of its own (`asserts`, `expected`).
    pub line_assertions: bool,
}

pub struct Problem {
    pub message: String,
    pub lines: Vec<usize>,
    /// Duplicate ids are never skipped by `--skip-invalid`.
    pub fatal: bool,
}

impl Plan {
    pub fn has_fatal(&self) -> bool {
        self.problems.iter().any(|problem| problem.fatal)
    }

    /// All problems, one per line of text: `FILE:LINE: message`, or
    /// `FILE: lines 3, 4, … (N lines): message` for one shared by many
    /// lines; past `max`, how many more and how many bad lines in all.
    pub fn report(&self, file: &Path, max: usize) -> String {
        let file = file.display();
        let mut text: Vec<String> = Vec::new();
        for problem in self.problems.iter().take(max) {
            let lines = &problem.lines;
            text.push(match lines.as_slice() {
                [line] => format!("{file}:{line}: {}", problem.message),
                _ => {
                    let mut shown: Vec<String> =
                        lines.iter().take(8).map(usize::to_string).collect();
                    if lines.len() > 8 {
                        shown.push("…".into());
                    }
                    format!(
                        "{file}: lines {} ({} lines): {}",
                        shown.join(", "),
                        lines.len(),
                        problem.message
                    )
                }
            });
        }
        if self.problems.len() > max {
            let bad: std::collections::HashSet<usize> = self
                .problems
                .iter()
                .flat_map(|problem| problem.lines.iter().copied())
                .collect();
            text.push(format!(
                "… and {} more problems ({} in all)",
                self.problems.len() - max,
                crate::words::count(bad.len() as u64, "bad line", "bad lines")
            ));
        }
        text.join("\n")
    }
}

/// Everything pre-flight needs besides the file.
pub struct Inputs<'a> {
    /// The TASKS file, as named (for line tactics' paths).
    pub tasks_file: &'a Path,
    /// The directories (resolved) a line's own `tactic` must be inside:
    /// the TASKS file's, `--tactic`'s, every `--tactics-dir`.
    pub tactic_roots: &'a [PathBuf],
    /// Its lines, as they were when the run started.
    pub snapshot: &'a super::snapshot::Snapshot,
    /// Reads the file's lines in its format.
    pub reader: &'a super::formats::LineReader,
    pub default_tactic: Option<&'a Path>,
    /// The tactic of lines that name a model but no tactic, when there is
    /// no `--tactic` (`formats::DEFAULT_TACTIC`).
    pub fallback_tactic: Option<&'a Path>,
    pub selector: Selector,
    /// Whether `--resume` skips this id.
    pub done: &'a (dyn Fn(&str) -> bool + Sync),
    /// `--repeat`: runs of each line (1: once, under its own id).
    pub repeat: u32,
}

pub fn run(inputs: Inputs<'_>, tactics: &mut Tactics) -> std::io::Result<Plan> {
    let tasks_dir = inputs
        .tasks_file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut lines = inputs.snapshot.lines();
    let mut state = State {
        ids: Seen::default(),
        problems: Vec::new(),
        index: HashMap::new(),
        plan_invalid: HashMap::new(),
        selector: inputs.selector.clone(),
        in_run: 0,
        to_run: 0,
        repeat: inputs.repeat,
        line_assertions: false,
    };
    loop {
        let chunk = next_chunk(&mut lines)?;
        if chunk.is_empty() {
            break;
        }
        let parsed = parse_chunk(inputs.reader, chunk);
        // In order: tactics, duplicates and the selection depend on what came before.
        let to_check = state.route(parsed, &inputs, &tasks_dir, tactics);
        let checked: Vec<(Task, bool, Result<(), Vec<String>>)> = to_check
            .into_par_iter()
            .map(|(task, tactic, selected)| {
                let result = check(&tactic, &task.input);
                (task, selected, result)
            })
            .collect();
        for (task, selected, result) in checked {
            match result {
                Ok(()) => state.count(&task.id, selected, inputs.done),
                Err(messages) => {
                    state.invalid_all(task.line, &task.id, messages, selected, inputs.done)
                }
            }
        }
    }
    state.report_duplicates(&inputs);
    Ok(Plan {
        problems: state.problems,
        invalid: state.plan_invalid,
        in_run: state.in_run,
        to_run: state.to_run,
        line_assertions: state.line_assertions,
    })
}

/// The problems of one task on its tactic: its input against the tactic's
/// `input_schema` (`input at POINTER: EXPECTED`, one message each), else
/// its templates (`Tactic::check_task`, one message). The input comes
/// first: a template that needs a missing argument would only repeat it.
fn check(tactic: &crate::tactic::Tactic, task: &crate::tactic::Task) -> Result<(), Vec<String>> {
    if let Err(error) = tactic.check_input(task) {
        return Err(error.problems.iter().map(ToString::to_string).collect());
    }
    tactic
        .check_task(task)
        .map_err(|error| vec![error.problems.join("; ")])
}

/// The judges a line's own assertions name, built and fit to judge; else
/// the first one's problem.
fn line_judges(task: &Task, tactics: &mut Tactics) -> Result<(), String> {
    let Some(assertions) = &task.assertions else {
        return Ok(());
    };
    for judge in super::grade::judges_of(&assertions.items) {
        tactics
            .judge(judge)
            .map_err(|problem| format!("`asserts`: {problem}"))?;
    }
    Ok(())
}

/// The next `CHUNK` lines of the file (fewer at its end, none past it).
fn next_chunk(lines: &mut tasks::Lines) -> std::io::Result<Vec<(usize, String)>> {
    let mut chunk: Vec<(usize, String)> = Vec::with_capacity(CHUNK);
    while chunk.len() < CHUNK {
        match lines.next_line() {
            None => break,
            Some(Ok((number, text))) => chunk.push((number, text.to_string())),
            Some(Err(message)) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    message,
                ));
            }
        }
    }
    Ok(chunk)
}

/// The chunk's lines parsed as tasks, in parallel (`None`: a line that is
/// no task, a blank one). Attachments were read to check them; the check of
/// the task needs none of their bytes, so a chunk of image lines does not
/// hold every image at once.
fn parse_chunk(
    reader: &super::formats::LineReader,
    chunk: Vec<(usize, String)>,
) -> Vec<(usize, Result<Option<Task>, String>)> {
    chunk
        .par_iter()
        .map(|(number, text)| {
            let parsed = reader.check(text, *number).map(|task| {
                task.map(|mut task| {
                    task.input.attachments = Vec::new();
                    task
                })
            });
            (*number, parsed)
        })
        .collect()
}

/// The ids of the task lines `duplicates` names first (in the same order).
fn ids_of(
    snapshot: &super::snapshot::Snapshot,
    reader: &super::formats::LineReader,
    duplicates: &[(usize, usize)],
) -> Vec<String> {
    let wanted: std::collections::HashSet<usize> =
        duplicates.iter().map(|&(line, _)| line).collect();
    let mut found: HashMap<usize, String> = HashMap::new();
    let mut lines = snapshot.lines();
    while let Some(Ok((number, text))) = lines.next_line() {
        if wanted.contains(&number)
            && let Ok(Some(task)) = reader.parse(text, number)
        {
            found.insert(number, task.id);
        }
    }
    duplicates
        .iter()
        .map(|(line, _)| found.remove(line).unwrap_or_else(|| format!("line-{line}")))
        .collect()
}

/// Pre-flight's running state.
struct State {
    ids: Seen,
    problems: Vec<Problem>,
    /// Message → index in `problems`, to group lines sharing a problem.
    index: HashMap<String, usize>,
    plan_invalid: HashMap<usize, (String, String)>,
    selector: Selector,
    in_run: u64,
    to_run: u64,
    /// `--repeat`: runs of each line.
    repeat: u32,
    /// Whether some line has assertions of its own.
    line_assertions: bool,
}

impl State {
    /// Routes each parsed line of a chunk, in order: a line that does not
    /// parse, names no tactic, a tactic outside the allowed directories or
    /// one that does not build is invalid; the others are given with their
    /// tactic, for the check of their task.
    fn route(
        &mut self,
        parsed: Vec<(usize, Result<Option<Task>, String>)>,
        inputs: &Inputs<'_>,
        tasks_dir: &Path,
        tactics: &mut Tactics,
    ) -> Vec<(Task, std::sync::Arc<crate::tactic::Tactic>, bool)> {
        let mut to_check = Vec::new();
        for (number, parsed) in parsed {
            let task = match parsed {
                Ok(None) => continue,
                Ok(Some(task)) => task,
                Err(message) => {
                    let id = format!("line-{number}");
                    let selected = self.selector.select(&id);
                    self.invalid(number, &id, message, selected, inputs.done);
                    continue;
                }
            };
            let selected = self.selector.select(&task.id);
            self.ids.add(&task.id, number);
            match tasks::tactic_path(
                &task,
                tasks_dir,
                inputs.default_tactic,
                inputs.fallback_tactic,
            ) {
                None => {
                    let message = "no tactic: the line names none (nor a `model` for the default \
                                   tactic) and no `--tactic` was given"
                        .to_string();
                    self.invalid(number, &task.id, message, selected, inputs.done);
                }
                Some(path) if task.tactic.is_some() && !inside(&path, inputs.tactic_roots) => {
                    let written = task.tactic.as_deref().unwrap_or_default();
                    let message = format!(
                        "`tactic`: `{}` is outside the TASKS file's directory (and `--tactic`'s); \
                         a task line may only name a tactic there, or in a directory given \
                         with `--tactics-dir DIR`",
                        crate::suggest::printable(written)
                    );
                    self.invalid(number, &task.id, message, selected, inputs.done);
                }
                Some(path) => match tactics.get(&path, task.input.model.as_deref()) {
                    Ok(tactic) => match line_judges(&task, tactics) {
                        Ok(()) => {
                            self.line_assertions |= task.assertions.is_some();
                            to_check.push((task, tactic, selected))
                        }
                        Err(message) => {
                            self.invalid(number, &task.id, message, selected, inputs.done)
                        }
                    },
                    Err((error, _)) => {
                        let message = format!("tactic `{}`: {error}", path.display());
                        self.invalid(number, &task.id, message, selected, inputs.done);
                    }
                },
            }
        }
        to_check
    }

    /// Duplicate ids are a fatal problem: nothing runs, so the counts do
    /// not matter. The ids are read again from their lines (only when some
    /// repeat).
    fn report_duplicates(&mut self, inputs: &Inputs<'_>) {
        let duplicates = std::mem::take(&mut self.ids).duplicates();
        if !duplicates.is_empty() {
            let ids = ids_of(inputs.snapshot, inputs.reader, &duplicates);
            for ((line, first), id) in duplicates.into_iter().zip(ids) {
                self.push(
                    format!(
                        "duplicate id `{}` (first on line {first})",
                        crate::redact::echo(&id)
                    ),
                    line,
                    true,
                );
            }
            self.problems.sort_by_key(|problem| problem.lines[0]);
        }
    }

    fn push(&mut self, message: String, line: usize, fatal: bool) {
        match self.index.get(&message) {
            Some(&index) => self.problems[index].lines.push(line),
            None => {
                self.index.insert(message.clone(), self.problems.len());
                self.problems.push(Problem {
                    message,
                    lines: vec![line],
                    fatal,
                });
            }
        }
    }

    fn count(&mut self, id: &str, selected: bool, done: &(dyn Fn(&str) -> bool + Sync)) {
        if selected {
            for run in super::ids::repeated(id, self.repeat) {
                self.in_run += 1;
                if !done(&run) {
                    self.to_run += 1;
                }
            }
        }
    }

    /// A bad line with several problems: each listed on its own, the line
    /// counted once (its recorded error, under `--skip-invalid`, holds them
    /// all).
    fn invalid_all(
        &mut self,
        line: usize,
        id: &str,
        messages: Vec<String>,
        selected: bool,
        done: &(dyn Fn(&str) -> bool + Sync),
    ) {
        if selected {
            self.plan_invalid
                .insert(line, (id.to_string(), messages.join("; ")));
        }
        self.count(id, selected, done);
        for message in messages {
            self.push(message, line, false);
        }
    }

    fn invalid(
        &mut self,
        line: usize,
        id: &str,
        message: String,
        selected: bool,
        done: &(dyn Fn(&str) -> bool + Sync),
    ) {
        self.invalid_all(line, id, vec![message], selected, done);
    }
}

/// Whether the tactic file at `path` is inside one of `roots`, judged where
/// its links lead (`..` and links out are caught). A file that cannot be
/// resolved (it does not exist) is left to loading, which names it.
fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    match std::fs::canonicalize(path) {
        Ok(real) => roots.iter().any(|root| real.starts_with(root)),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_takes_the_shard_then_the_limit() {
        let ids: Vec<String> = (0..40).map(|n| format!("t{n}")).collect();
        let shard = Shard { index: 2, count: 3 };
        let mut selector = Selector::new(Some(shard), Some(4));
        let chosen: Vec<&String> = ids.iter().filter(|id| selector.select(id)).collect();
        assert_eq!(chosen.len(), 4);
        assert!(chosen.iter().all(|id| shard.contains(id)));
        assert!(selector.full());
        let mut everything = Selector::new(None, None);
        assert!(ids.iter().all(|id| everything.select(id)));
    }

    #[test]
    fn report_groups_lines_sharing_a_problem() {
        let plan = Plan {
            problems: vec![
                Problem {
                    message: "bad".into(),
                    lines: vec![3],
                    fatal: false,
                },
                Problem {
                    message: "needs `x`".into(),
                    lines: (1..=10).collect(),
                    fatal: false,
                },
            ],
            invalid: HashMap::new(),
            in_run: 0,
            to_run: 0,
            line_assertions: false,
        };
        let text = plan.report(Path::new("t.jsonl"), 1);
        assert_eq!(
            text,
            "t.jsonl:3: bad\n… and 1 more problems (10 bad lines in all)"
        );
        let text = plan.report(Path::new("t.jsonl"), 5);
        assert!(
            text.ends_with("t.jsonl: lines 1, 2, 3, 4, 5, 6, 7, 8, … (10 lines): needs `x`"),
            "{text}"
        );
    }
}
