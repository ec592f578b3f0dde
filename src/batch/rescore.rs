//! `lllm eval DIR [--asserts FILE]` (issue 32): scores a finished batch
//! output (or a merged one) again, without running its tasks: every result
//! line's `scores`, `score` and `pass` are rewritten, and `summary.json`'s
//! `scores`. Only judges (`llm-rubric`) send anything.
//!
//! The assertions are those a batch would score with now: the tactic's
//! (`--tactic`, else the one `batch.json` names, else a line's own) and the
//! task line's (read from the TASKS file `batch.json` names, or `--tasks`);
//! with `--asserts FILE` (a YAML list of items), FILE's instead, for every
//! task (a line's `threshold` still holds). The directory is locked as a
//! batch locks it, and `results.jsonl` is replaced whole (a new file, then
//! a rename), so a kill leaves the old one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::grade::{Graded, Grader};
use super::output::{self, ResultLine};
use crate::error::{Error, Outcome, Result};
use crate::eval::{Assertion, Assertions};

/// What `lllm eval` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The batch output directory.
    pub output: PathBuf,
    /// `--asserts FILE`: assertions for every task instead of its own.
    pub asserts: Option<PathBuf>,
    /// `--tasks FILE` (default: the one `batch.json` names).
    pub tasks: Option<PathBuf>,
    /// `--tactic FILE` (default: the one `batch.json` names).
    pub tactic: Option<PathBuf>,
    /// Results scored at once (judges and command graders run in parallel).
    pub concurrency: usize,
    /// `--fail-under RATE`: exit 3 below it.
    pub fail_under: Option<f64>,
    /// The extensions tactics may name.
    pub registry: crate::Registry,
    /// The response cache judges' calls use (`None`: none).
    pub cache: Option<Arc<crate::provider::cache::CacheSource>>,
    /// Where keys and base URLs are read (`None`: the process environment).
    pub env: Option<super::Environment>,
    /// A user's defaults under every tactic.
    pub defaults: Option<Arc<crate::config::Defaults>>,
    pub quiet: bool,
}

/// What a task line gives its scoring.
struct LineInfo {
    task: Value,
    assertions: Option<Arc<Assertions>>,
    /// The tactic whose `asserts` hold for it (`None` with `--asserts`).
    tactic: Option<Arc<crate::tactic::Tactic>>,
}

/// Results scored between two writes.
const CHUNK: usize = 4096;

pub async fn run(options: Options) -> Result<Outcome> {
    let directory = &options.output;
    let results = directory.join(output::RESULTS);
    if !std::fs::metadata(&results).is_ok_and(|meta| meta.is_file()) {
        return Err(Error::Usage(format!(
            "`{}` holds no `{}`: not the output directory of a batch; hint: `lllm eval` \
             rescores what `lllm batch -o DIR` (or `lllm merge`) wrote",
            directory.display(),
            output::RESULTS
        )));
    }
    let _lock = super::directory::lock(directory).map_err(Error::Usage)?;
    let identity = super::directory::read_identity(directory).map_err(Error::Usage)?;
    let mut tactics = super::tactics::Tactics::new(
        None,
        crate::config::ModelArgs::default(),
        None,
        None,
        options.registry.clone(),
        options.cache.clone(),
        None,
    )?;
    tactics.set_sources(options.env.clone(), options.defaults.clone());
    let replacement = match &options.asserts {
        Some(path) => Some(read_asserts(path, &mut tactics)?),
        None => None,
    };
    let tactic = options.tactic.clone().or_else(|| {
        identity
            .as_ref()
            .and_then(|identity| identity.tactic.clone().map(PathBuf::from))
    });
    let tasks_file = options.tasks.clone().or_else(|| {
        identity
            .as_ref()
            .map(|identity| PathBuf::from(&identity.tasks))
    });
    let lines = read_lines(
        tasks_file.as_deref(),
        tactic.as_deref(),
        directory,
        replacement.is_some(),
        &mut tactics,
    )?;
    let judges = tactics.judges();
    let grader = Grader::new(judges, directory);
    for judge in grader.judges() {
        judge.start().await?;
    }
    let rescored = rewrite(&results, &lines, replacement.as_deref(), &grader, &options).await;
    for judge in grader.judges() {
        judge.shutdown().await;
    }
    rescored?;
    let previous = output::read_previous(&results).map_err(|source| Error::Write {
        path: results.display().to_string(),
        source,
    })?;
    let scores = previous.scores.summary(options.fail_under);
    update_summary(directory, scores.as_ref())?;
    if !options.quiet {
        let mut text = String::from("lllm eval summary\n");
        let rows = match &scores {
            Some(scores) => super::summary::score_rows(scores),
            None => vec![("pass rate", "no task has assertions".to_string())],
        };
        for (name, value) in rows {
            text.push_str(&format!("  {name:<10} {value}\n"));
        }
        text.push_str(&format!("  {:<10} {}\n", "output", directory.display()));
        crate::output::stderr(&text);
    }
    Ok(
        if super::below_fail_under(options.fail_under, scores.as_ref()) {
            Outcome::BelowFailUnder
        } else {
            Outcome::Success
        },
    )
}

/// `--asserts FILE`: a YAML list of assertion items, each problem placed
/// (`FILE:LINE:COLUMN: …`), its judges built.
fn read_asserts(path: &Path, tactics: &mut super::tactics::Tactics) -> Result<Arc<[Assertion]>> {
    let shown = path.display();
    let text = crate::file::read_text(path, 16 << 20)
        .map_err(|error| Error::Usage(format!("cannot read `{shown}`: {error}")))?;
    let (value, positions) = crate::yaml::parse_located(&text).map_err(|error| {
        let place = error
            .location
            .map(|at| format!(":{}:{}", at.line, at.column))
            .unwrap_or_default();
        Error::Usage(format!("{shown}{place}: {}", error.message))
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let items = crate::eval::parse_list(&value, &base).map_err(|problems| {
        let lines: Vec<String> = problems
            .into_iter()
            .map(|(at, problem)| {
                let place = positions
                    .get(&at)
                    .map(|at| format!(":{}:{}", at.line, at.column))
                    .unwrap_or_default();
                format!("{shown}{place}: {problem}")
            })
            .collect();
        Error::Usage(lines.join("\n"))
    })?;
    for judge in super::grade::judges_of(&items) {
        tactics
            .judge(judge)
            .map_err(|problem| Error::Usage(format!("{shown}: {problem}")))?;
    }
    Ok(items.into())
}

/// Every task line by id: its task, its own assertions and its tactic
/// (unless `replaced`). Without `--asserts` the TASKS file is needed (its
/// lines hold `expected`); with it, a missing one only leaves judges
/// without the task.
fn read_lines(
    tasks_file: Option<&Path>,
    tactic: Option<&Path>,
    directory: &Path,
    replaced: bool,
    tactics: &mut super::tactics::Tactics,
) -> Result<HashMap<String, LineInfo>> {
    let mut lines = HashMap::new();
    let Some(tasks_file) = tasks_file else {
        if replaced {
            return Ok(lines);
        }
        return Err(Error::Usage(format!(
            "`{}` names no TASKS file (`batch.json` is missing); hint: pass `--tasks FILE`, \
             or `--asserts FILE` to score with other assertions",
            directory.display()
        )));
    };
    let text = match crate::file::read_text(tasks_file, u64::MAX) {
        Ok(text) => text,
        Err(error) if replaced => {
            crate::report::warn(&format!(
                "cannot read `{}` ({error}): judges and command graders are not given the tasks",
                tasks_file.display()
            ));
            return Ok(lines);
        }
        Err(error) => {
            return Err(Error::Usage(format!(
                "cannot read the TASKS file `{}`: {error}; hint: pass `--tasks FILE`",
                tasks_file.display()
            )));
        }
    };
    let tasks_dir = tasks_file.parent().unwrap_or(Path::new(""));
    let scope = crate::dialog::AttachmentScope::anywhere(tasks_dir);
    let fallback = directory.join(super::formats::DEFAULT_TACTIC_FILE);
    let fallback = fallback.exists().then_some(fallback);
    let mut unreadable = 0u64;
    for (index, line) in text.lines().enumerate() {
        let task = match super::tasks::parse_line(line, index + 1, &scope) {
            Ok(Some(task)) => task,
            Ok(None) => continue,
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        let tactic = if replaced {
            None
        } else {
            match super::tasks::tactic_path(&task, tasks_dir, tactic, fallback.as_deref()) {
                Some(path) => Some(tactics.get(&path, None).map_err(|(error, _)| {
                    Error::Usage(format!("tactic `{}`: {error}", path.display()))
                })?),
                None => None,
            }
        };
        if let Some(assertions) = &task.assertions
            && !replaced
        {
            for judge in super::grade::judges_of(&assertions.items) {
                tactics.judge(judge).map_err(|problem| {
                    Error::Usage(format!(
                        "{}:{}: `asserts`: {problem}",
                        tasks_file.display(),
                        index + 1
                    ))
                })?;
            }
        }
        lines.insert(
            task.id.clone(),
            LineInfo {
                task: task.input.task,
                assertions: task.assertions,
                tactic,
            },
        );
    }
    if unreadable > 0 {
        crate::report::warn(&format!(
            "`{}`: {} not read as task lines; their results are scored with the tactic's \
             assertions only",
            tasks_file.display(),
            crate::words::count(unreadable, "line", "lines")
        ));
    }
    Ok(lines)
}

/// Rescores every line of `results` into a new file that replaces it.
async fn rewrite(
    results: &Path,
    lines: &HashMap<String, LineInfo>,
    replacement: Option<&[Assertion]>,
    grader: &Grader,
    options: &Options,
) -> Result<()> {
    let write_error = |source: std::io::Error| Error::Write {
        path: results.display().to_string(),
        source,
    };
    let mut reader = crate::jsonl::Lines::open(results).map_err(write_error)?;
    let mut file = crate::file::atomic::AtomicFile::create(results).map_err(write_error)?;
    let mut text = String::new();
    loop {
        let mut chunk: Vec<String> = Vec::with_capacity(CHUNK);
        while chunk.len() < CHUNK {
            match crate::jsonl::read_text_line(&mut reader, &mut text).map_err(write_error)? {
                crate::jsonl::LineRead::End => break,
                crate::jsonl::LineRead::NotText => continue,
                crate::jsonl::LineRead::Text => chunk.push(std::mem::take(&mut text)),
            }
        }
        if chunk.is_empty() {
            break;
        }
        let rescored: Vec<String> = futures_util::stream::iter(chunk)
            .map(|line| rescore_line(line, lines, replacement, grader))
            .buffered(options.concurrency.max(1))
            .collect()
            .await;
        for line in rescored {
            std::io::Write::write_all(&mut file, line.trim_end().as_bytes())
                .map_err(write_error)?;
            std::io::Write::write_all(&mut file, b"\n").map_err(write_error)?;
        }
    }
    file.commit().map_err(write_error)
}

/// One result line, rescored; a line that is not a result is kept as it is.
async fn rescore_line(
    line: String,
    lines: &HashMap<String, LineInfo>,
    replacement: Option<&[Assertion]>,
    grader: &Grader,
) -> String {
    let Ok(result) = serde_json::from_str::<ResultLine>(&line) else {
        return line;
    };
    let original = result.repeat_of.as_deref().unwrap_or(&result.id);
    let info = lines.get(original);
    let null = Value::Null;
    let task = info.map_or(&null, |info| &info.task);
    let line_assertions = info.and_then(|info| info.assertions.as_deref());
    let (tactic_items, own): (&[Assertion], Option<Assertions>) = match replacement {
        Some(items) => (
            items,
            line_assertions.map(|line| Assertions {
                items: Vec::new(),
                threshold: line.threshold,
                expected: line.expected.clone(),
            }),
        ),
        None => (
            info.and_then(|info| info.tactic.as_ref())
                .map_or(&[][..], |tactic| &tactic.config.asserts[..]),
            line_assertions.cloned(),
        ),
    };
    let empty = Map::new();
    let graded = Graded {
        id: &result.id,
        task,
        args: &result.args,
        tags: if result.tags.is_empty() {
            &empty
        } else {
            &result.tags
        },
        expected: own.as_ref().and_then(|own| own.expected.as_ref()),
    };
    let scored = grader
        .grade(tactic_items, own.as_ref(), &graded, &result)
        .await;
    let result = result.clone().with_scores(scored);
    serde_json::to_string(&result).unwrap_or(line)
}

/// Sets `summary.json`'s `scores` (or removes it), the rest as it was.
fn update_summary(directory: &Path, scores: Option<&crate::eval::TallySummary>) -> Result<()> {
    let path = directory.join(output::SUMMARY);
    let mut summary: Map<String, Value> = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
        Err(_) => Map::new(),
    };
    match scores.map(serde_json::to_value) {
        Some(Ok(scores)) => {
            summary.insert("scores".into(), scores);
        }
        _ => {
            summary.remove("scores");
        }
    }
    let text = serde_json::to_string_pretty(&summary).unwrap_or_default() + "\n";
    crate::file::atomic::write(&path, text.as_bytes()).map_err(|source| Error::Write {
        path: path.display().to_string(),
        source,
    })
}
