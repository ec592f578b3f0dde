//! The same noun the same way in every command (docs/run.md, "Flags: the same
//! everywhere"): the tactic is `-t/--tactic FILE` for `run`, `batch` and
//! `replay --rerun` (and `run` keeps it as its first argument too), `-q` is
//! `--quiet`, `-m` the model, `-n` how many, `-o` where the output goes.
//!
//! clap places arguments by position, so `lllm run -t t.yaml "task"` parses
//! the task into the tactic's slot; [`resolve_run`] puts each where it
//! belongs and refuses what names a noun twice. A hint for a flag's old
//! spelling (`lllm logs -q TEXT`) is [`hint`]'s.

use lllm::error::{Error, Result};

use crate::RunArgs;

/// Fills `args.tactic` and `args.task_text` from the arguments and `-t`:
/// `TACTIC [TASK]`, or `-t FILE [TASK]`. Either names a thing once.
pub(crate) fn resolve_run(args: &mut RunArgs) -> Result<()> {
    let (tactic, task) = match (args.tactic_option.take(), args.tactic_argument.take()) {
        (Some(tactic), first) => {
            if let Some(second) = args.task_argument.take() {
                let first = first.unwrap_or_default();
                return Err(Error::Usage(format!(
                    "the tactic is given twice: `-t {}` and `{}`; hint: with `-t`, the only \
                     argument is the task (`lllm run -t {} {}`)",
                    lllm::redact::echo(&tactic.display().to_string()),
                    lllm::redact::echo(&first.to_string_lossy()),
                    lllm::redact::echo(&tactic.display().to_string()),
                    quoted(&second),
                )));
            }
            // The argument in the tactic's place is the task: text, as `--task` takes it.
            let task = match first.map(|first| first.into_os_string().into_string()) {
                Some(Err(_)) => {
                    return Err(Error::Usage(
                        "the task argument is not UTF-8 text; hint: `--task-file PATH` reads \
                         it from a file"
                            .into(),
                    ));
                }
                Some(Ok(task)) => Some(task),
                None => None,
            };
            (tactic, task)
        }
        (None, Some(tactic)) => (tactic, args.task_argument.take()),
        // clap requires one of them; this is its message, should it not.
        (None, None) => {
            return Err(Error::Usage(
                "no tactic given; hint: `lllm run TACTIC.yaml \"TASK\"` or `lllm run -t TACTIC.yaml \"TASK\"`"
                    .into(),
            ));
        }
    };
    if task.is_some() {
        let other = match (&args.task, &args.task_file) {
            (Some(_), _) => Some("--task"),
            (None, Some(_)) => Some("--task-file"),
            (None, None) => None,
        };
        if let Some(other) = other {
            return Err(Error::Usage(format!(
                "the argument `TASK` cannot be used with `{other}`; give the task once"
            )));
        }
    }
    args.tactic = tactic;
    args.task_text = task;
    Ok(())
}

/// A task as a shell would take it back, for a hint.
fn quoted(text: &str) -> String {
    let shown = lllm::redact::terminal_line(text);
    let short: String = shown.chars().take(40).collect();
    let ellipsis = if short.len() < shown.len() { "…" } else { "" };
    format!("\"{short}{ellipsis}\"")
}

/// A hint for a flag a user may bring from an earlier lllm, where a parse
/// error names it: `lllm logs -q TEXT` searched; `-q` is `--quiet` now.
pub(crate) fn hint(error: &clap::Error, arguments: &[String]) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(flag)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let in_logs = arguments.iter().skip(1).any(|argument| argument == "logs");
    (in_logs && flag.starts_with("-q")).then_some(
        "hint: `lllm logs` searches with `-s/--search TEXT`; `-q` is `--quiet` in every command",
    )
}

/// `--compress[=BOOL]`, the same in `batch` and `merge`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct CompressArg {
    /// Write the session records zstd-compressed: `sessions.jsonl.zst`
    /// instead of `sessions.jsonl`, about 20 times smaller; every command that
    /// reads records takes either. `--compress=false` (or `LLLM_COMPRESS=0`)
    /// turns it off; without either, the config file's `compress` decides.
    /// `batch --resume` continues a directory's records in their own form;
    /// `merge` writes the form asked for, whatever its inputs' forms.
    #[arg(
        long,
        env = "LLLM_COMPRESS",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub compress: Option<bool>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    #[track_caller]
    fn resolved(arguments: &[&str]) -> std::result::Result<(String, Option<String>), String> {
        let cli = Cli::try_parse_from(["lllm", "run"].iter().chain(arguments))
            .map_err(|error| error.kind().to_string())?;
        let Command::Run(mut args) = cli.command else {
            unreachable!("a run command line");
        };
        resolve_run(&mut args).map_err(|error| error.to_string())?;
        Ok((args.tactic.display().to_string(), args.task_text))
    }

    /// What each short flag means, in every command that has it.
    const SHORTS: &[(char, &[&str])] = &[
        ('h', &["help"]),
        ('V', &["version"]),
        ('v', &["verbose"]),
        ('q', &["quiet"]),
        ('t', &["tactic"]),
        ('m', &["model"]),
        ('O', &["model-arg"]),
        ('o', &["output"]),
        ('n', &["count", "limit"]),
        ('j', &["concurrency"]),
        ('s', &["search"]),
    ];

    /// Every command and subcommand, with its path (`lllm logs cost`).
    fn commands(command: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        out.push((path.clone(), command.clone()));
        for sub in command.get_subcommands() {
            commands(sub, format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn a_short_flag_means_the_same_in_every_command() {
        use clap::CommandFactory;
        let mut all = Vec::new();
        commands(&Cli::command(), "lllm".into(), &mut all);
        for (path, command) in &all {
            for argument in command.get_arguments() {
                let long = argument.get_long().unwrap_or_default();
                if let Some(short) = argument.get_short() {
                    let meanings = SHORTS
                        .iter()
                        .find(|(known, _)| *known == short)
                        .map(|(_, meanings)| *meanings)
                        .unwrap_or_default();
                    assert!(meanings.contains(&long), "`{path}`: -{short} is --{long}");
                }
                // The long names a user guesses the short of have it.
                let aliases = argument.get_all_aliases().unwrap_or_default();
                let names = [
                    ("quiet", 'q'),
                    ("model", 'm'),
                    ("output", 'o'),
                    ("out", 'o'),
                ];
                for (name, short) in names {
                    if long == name || aliases.contains(&name) {
                        assert_eq!(argument.get_short(), Some(short), "`{path}` --{long}");
                    }
                }
            }
        }
        // The tactic file is `-t` wherever a command takes one.
        for path in ["lllm run", "lllm batch", "lllm replay"] {
            let (_, command) = all.iter().find(|(name, _)| name == path).unwrap();
            let tactic = command
                .get_arguments()
                .find(|argument| argument.get_long() == Some("tactic"));
            assert_eq!(
                tactic.and_then(|argument| argument.get_short()),
                Some('t'),
                "{path}"
            );
        }
    }

    #[test]
    fn the_tactic_is_an_argument_or_dash_t_and_never_both() {
        let ok =
            |tactic: &str, task: Option<&str>| Ok((tactic.to_string(), task.map(String::from)));
        assert_eq!(resolved(&["t.yaml", "task"]), ok("t.yaml", Some("task")));
        assert_eq!(resolved(&["t.yaml"]), ok("t.yaml", None));
        assert_eq!(
            resolved(&["-t", "t.yaml", "task"]),
            ok("t.yaml", Some("task"))
        );
        assert_eq!(resolved(&["--tactic", "t.yaml"]), ok("t.yaml", None));
        assert_eq!(
            resolved(&["task", "--tactic=t.yaml"]),
            ok("t.yaml", Some("task"))
        );
        assert_eq!(
            resolved(&["-t", "t.yaml", "u.yaml", "task"]),
            Err(
                "the tactic is given twice: `-t t.yaml` and `u.yaml`; hint: with `-t`, the only \
                 argument is the task (`lllm run -t t.yaml \"task\"`)"
                    .into()
            )
        );
        assert_eq!(
            resolved(&["-t", "t.yaml", "a", "--task", "b"]),
            Err("the argument `TASK` cannot be used with `--task`; give the task once".into())
        );
        assert_eq!(
            resolved(&["t.yaml", "a", "--task-file", "f"]),
            Err("the argument `TASK` cannot be used with `--task-file`; give the task once".into())
        );
        assert!(resolved(&[]).is_err(), "a tactic is required");
    }
}
