//! `lllm completions SHELL` and `lllm man`: shell completions (clap_complete)
//! and man pages in roff (clap_mangen), both generated from the same [`Cli`]
//! definition that parses the arguments, so they never fall behind it.
//!
//! Nothing here knows the commands; their help texts live with their
//! arguments and in `help.rs`.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::Cli;
use lllm::error::{Error, Outcome, Result};

/// The shells clap_complete writes for, by the names users type.
const SHELLS: [(&str, Shell); 5] = [
    ("bash", Shell::Bash),
    ("zsh", Shell::Zsh),
    ("fish", Shell::Fish),
    ("elvish", Shell::Elvish),
    ("powershell", Shell::PowerShell),
];

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    // A string, not clap's value enum: an unknown shell is then our one
    // `error:` line (exit 2) rather than clap's three.
    #[arg(value_name = "SHELL")]
    pub shell: String,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `lllm.1` and one page per command (`lllm-run.1`, `lllm-logs-show.1`,
    /// …) into this directory, created if missing, instead of printing
    /// `lllm.1` to stdout.
    // `-o/--output` as in every command that writes files; `--out` as first shipped.
    #[arg(long = "output", short, visible_alias = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The shell named `name` (any case), or a usage error listing the known ones.
fn shell(name: &str) -> Result<Shell> {
    SHELLS
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(name))
        .map(|(_, shell)| *shell)
        .ok_or_else(|| {
            let known: Vec<&str> = SHELLS.iter().map(|(known, _)| *known).collect();
            Error::Usage(format!(
                "unknown shell `{name}`: expected one of {}",
                known.join(", ")
            ))
        })
}

pub fn completions(args: CompletionsArgs) -> Result<Outcome> {
    let shell = shell(&args.shell)?;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lllm", &mut script);
    lllm::output::stdout(&String::from_utf8_lossy(&script))?;
    Ok(Outcome::Success)
}

pub fn man(args: ManArgs) -> Result<Outcome> {
    match args.out {
        Some(directory) => write_pages(&directory),
        None => {
            let mut text = Vec::new();
            page(Cli::command())
                .render(&mut text)
                .map_err(|source| Error::Write {
                    path: "stdout".into(),
                    source,
                })?;
            lllm::output::stdout(&String::from_utf8_lossy(&text))?;
            Ok(Outcome::Success)
        }
    }
}

/// The page of `command`, its footer naming lllm and its version (clap_mangen
/// would name the subcommand, and no version, on a command's own page).
fn page(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command)
        .source(concat!("lllm ", env!("CARGO_PKG_VERSION")))
        .manual("lllm manual")
}

/// Every page into `directory`: `lllm.1`, then `lllm-<command>.1` for each
/// command and subcommand (the `help` command has none).
fn write_pages(directory: &Path) -> Result<Outcome> {
    fn write(command: clap::Command, directory: &Path) -> std::io::Result<()> {
        for subcommand in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            write(subcommand.clone(), directory)?;
        }
        // Written as every output is (a fresh file, then a rename): a link
        // at a page's name is replaced, not written through.
        let page = page(command);
        let mut text = Vec::new();
        page.render(&mut text)?;
        lllm::file::atomic::write(&directory.join(page.get_filename()), &text)
    }
    let failed = |source| Error::Write {
        path: directory.display().to_string(),
        source,
    };
    std::fs::create_dir_all(directory).map_err(failed)?;
    // Built first, so that subcommands have their display names (`lllm-run`).
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    write(command, directory).map_err(failed)?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(name: &str, expected: Option<Shell>) {
        assert_eq!(shell(name).ok(), expected, "{name}");
    }

    #[test]
    fn shells_by_name() {
        case("bash", Some(Shell::Bash));
        case("zsh", Some(Shell::Zsh));
        case("fish", Some(Shell::Fish));
        case("elvish", Some(Shell::Elvish));
        case("powershell", Some(Shell::PowerShell));
        case("PowerShell", Some(Shell::PowerShell));
        case("tcsh", None);
        case("", None);
    }

    #[test]
    fn an_unknown_shell_names_the_known_ones_on_one_line() {
        let message = shell("tcsh").err().map(|error| error.to_string());
        assert_eq!(
            message.as_deref(),
            Some("unknown shell `tcsh`: expected one of bash, zsh, fish, elvish, powershell")
        );
    }
}
