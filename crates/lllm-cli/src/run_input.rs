//! The task `lllm run` is given (issue 30): its text (an argument,
//! `--task`, `--task-file`, stdin), its `--var` arguments or its `--input`
//! JSON, made into one `Task`, and where it came from, so that an input
//! that does not fit the tactic's `input_schema` is refused naming it.
//! Running the task is `run.rs`'s.

use std::io::{IsTerminal, Read};

use serde_json::{Map, Value};

use crate::RunArgs;
use lllm::error::{Error, Result};
use lllm::tactic::Task;

/// Where `lllm run`'s task came from, for its input's problems.
pub(crate) enum Source {
    /// `--var` (the input is the arguments).
    Vars,
    /// `--input JSON`.
    Input,
    /// The `TASK` argument.
    Argument,
    /// `--task TEXT`.
    TaskFlag,
    /// `--task-file FILE`.
    File(std::path::PathBuf),
    /// A pipe or file on stdin (`--task -`, or no task given).
    Stdin,
}

/// The task `lllm run` was given, and where from: `--input JSON`
/// (`Task::from_input`); else the task text with the `--var` arguments;
/// else, with `--var` and no text, the arguments as the task (its input).
pub(crate) fn read_input(args: &RunArgs) -> Result<(Task, Source)> {
    if let Some(json) = &args.input {
        if args.task_text.is_some() {
            return Err(Error::Usage(
                "the argument `TASK` cannot be used with `--input`; give the task once".into(),
            ));
        }
        let value: Value = serde_json::from_str(json).map_err(|error| {
            Error::Usage(format!(
                "--input: not JSON: {error}; hint: quote it for the shell, as in \
                 `--input '{{\"ticket\": \"…\"}}'`"
            ))
        })?;
        let task = Task::from_input(value).map_err(|error| {
            Error::Usage(format!(
                "--input is {}; give a JSON object (the task's arguments) or a string (its text)",
                error.found
            ))
        })?;
        return Ok((task, Source::Input));
    }
    let vars = parse_vars(&args.vars)?;
    let source = if !vars.is_empty() {
        Source::Vars
    } else if args.task_text.as_deref().is_some_and(|text| text != "-") {
        Source::Argument
    } else if args.task.as_deref().is_some_and(|text| text != "-") {
        Source::TaskFlag
    } else if let Some(path) = &args.task_file {
        Source::File(path.clone())
    } else {
        Source::Stdin
    };
    let task = match read_task(args, !vars.is_empty())? {
        Some(text) => Task {
            task: Value::String(text),
            args: vars,
            ..Task::default()
        },
        None => Task::from_input(Value::Object(vars))
            .map_err(|error| Error::Usage(format!("--var: {error}")))?,
    };
    Ok((task, source))
}

/// Refuses a task whose input does not fit the tactic's `input_schema`
/// (nothing was sent): one line per problem,
/// `SOURCE: input at POINTER: EXPECTED`, where
/// SOURCE says where the input came from (`--var NAME`, `--input`,
/// `--task`, `TASK`, the task file, `stdin`).
pub(crate) fn check_input(tactic: &lllm::Tactic, task: &Task, source: &Source) -> Result<()> {
    let Err(error) = tactic.check_input(task) else {
        return Ok(());
    };
    let lines: Vec<String> = error
        .problems
        .iter()
        .map(|problem| {
            let place = match source {
                Source::Vars => {
                    // `/ticket` names `--var ticket=…` when one was given.
                    let name = problem.pointer.split('/').nth(1).unwrap_or_default();
                    let name = name.replace("~1", "/").replace("~0", "~");
                    if task.args.contains_key(&name) {
                        format!("--var {}", lllm::redact::echo(&name))
                    } else {
                        "--var".to_string()
                    }
                }
                Source::Input => "--input".into(),
                Source::Argument => "TASK".into(),
                Source::TaskFlag => "--task".into(),
                Source::File(path) => path.display().to_string(),
                Source::Stdin => "stdin".into(),
            };
            let hint = match source {
                Source::Vars if problem.message.contains(" is not of type ") => {
                    "; hint: `--var` values are text; give typed values with `--input JSON`"
                }
                Source::Argument | Source::TaskFlag | Source::File(_) | Source::Stdin
                    if problem.pointer.is_empty() && task.task.is_string() =>
                {
                    "; hint: give the input's fields with `--var KEY=VALUE`, or all of it with \
                     `--input JSON`"
                }
                _ => "",
            };
            format!("{place}: {problem}{hint}")
        })
        .collect();
    Err(Error::Usage(lines.join("\n")))
}

/// The largest `--task-file`: far beyond any model's context window.
const TASK_FILE_CAP: u64 = 256 << 20;

/// The task text; `None` when none was given and `arguments` (`--var`)
/// stand for the task.
fn read_task(args: &RunArgs, arguments: bool) -> Result<Option<String>> {
    if let Some(text) = &args.task_text {
        return task_text(text).map(Some);
    }
    match (&args.task, &args.task_file) {
        (Some(text), _) => task_text(text).map(Some),
        // A regular file (a pipe goes through `--task -`), of a size a model
        // could take.
        (None, Some(path)) => lllm::file::read_text(path, TASK_FILE_CAP)
            .map(Some)
            .map_err(|error| {
                Error::Usage(format!(
                    "cannot read task file `{}`: {error}; hint: pipe a stream into `--task -`",
                    path.display()
                ))
            }),
        // Nothing given: a pipe or a file on stdin is the task (`echo … |
        // lllm run t.yaml`); a terminal or an empty stdin is no task.
        (None, None) => {
            let stdin = std::io::stdin();
            let text = if stdin.is_terminal() {
                String::new()
            } else {
                read_stdin()?
            };
            if text.trim().is_empty() {
                if arguments {
                    return Ok(None);
                }
                return Err(Error::Usage(
                    "no task given; pass it as an argument (`lllm run t.yaml \"…\"`), \
                     `--task TEXT`, `--task-file PATH`, `--input JSON`, or pipe it into stdin"
                        .into(),
                ));
            }
            Ok(Some(text))
        }
    }
}

/// A task given as text: `-` reads stdin.
fn task_text(text: &str) -> Result<String> {
    if text == "-" {
        read_stdin()
    } else {
        Ok(text.to_string())
    }
}

fn read_stdin() -> Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .take(TASK_FILE_CAP + 1)
        .read_to_string(&mut text)
        .map_err(|error| Error::Usage(format!("cannot read the task from stdin: {error}")))?;
    if text.len() as u64 > TASK_FILE_CAP {
        return Err(Error::Usage(format!(
            "the task on stdin is larger than {TASK_FILE_CAP} bytes"
        )));
    }
    Ok(text)
}

/// `key=value` pairs into template arguments (values stay strings).
fn parse_vars(vars: &[String]) -> Result<Map<String, Value>> {
    let mut args = Map::new();
    for var in vars {
        let Some((key, value)) = var.split_once('=') else {
            return Err(Error::Usage(format!("`--var {var}` is not `key=value`")));
        };
        let key = key.trim();
        if key.is_empty() || matches!(key, "task" | "args") {
            return Err(Error::Usage(format!(
                "`--var {var}`: the key must be a name other than `task` and `args`"
            )));
        }
        args.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_parse_and_reject_bad_pairs() {
        let args = parse_vars(&["topic=owls".into(), "n=3=4".into()]).unwrap();
        assert_eq!(args["topic"], "owls");
        assert_eq!(args["n"], "3=4");
        assert!(parse_vars(&["novalue".into()]).is_err());
        assert!(parse_vars(&["task=x".into()]).is_err());
    }
}
