//! `lllm merge DIR... -o DIR`: the arguments, the report on stderr; the
//! library (`lllm::batch::merge`) does the merge.

use std::path::PathBuf;

use lllm::batch::merge::{self, Missing};
use lllm::error::{Outcome, Result};
use lllm::output::stderr_line;

/// Ids listed by name on stderr before `… and N more`.
const SHOWN: usize = 20;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The batch directories to merge (the shards of one task file).
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// The merged directory: new, empty, or an earlier merge's (replaced).
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// The task file to check missing ids against (default: the path the
    /// inputs' `batch.json` recorded); its SHA-256 must be the recorded one.
    #[arg(long, value_name = "FILE")]
    pub tasks: Option<PathBuf>,
    #[command(flatten)]
    pub compress: crate::nouns::CompressArg,
    /// Print only errors and what is missing (no duplicates, summary table or warning).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Exit 0 when every task of the merged run succeeded and none is missing,
/// 1 otherwise (as `lllm batch`), 2 when nothing was written.
pub fn run(args: MergeArgs) -> Result<Outcome> {
    let compress = crate::settings::current().compress(args.compress.compress);
    let merged = merge::merge(&args.inputs, &args.output, args.tasks.as_deref(), compress)?;
    if !args.quiet {
        for duplicate in &merged.duplicates {
            let inputs: Vec<String> = duplicate
                .inputs
                .iter()
                .map(|input| format!("`{}`", input.display()))
                .collect();
            stderr_line(&format!(
                "duplicate: `{}` is in {}; kept the {} from `{}`",
                lllm::redact::echo(&duplicate.id),
                inputs.join(", "),
                state_word(duplicate.state),
                duplicate.kept.display()
            ));
        }
    }
    let missing = match &merged.missing {
        Missing::Checked { tasks, ids } => {
            if !ids.is_empty() {
                let mut shown: Vec<String> = ids
                    .iter()
                    .take(SHOWN)
                    .map(|id| format!("`{}`", lllm::redact::echo(id)))
                    .collect();
                if ids.len() > SHOWN {
                    shown.push(format!("… and {} more", ids.len() - SHOWN));
                }
                stderr_line(&format!(
                    "missing: {} of `{}` {} no result: {}; hint: `lllm batch --resume` \
                     on the merged directory runs them",
                    lllm::words::count(ids.len() as u64, "id", "ids"),
                    tasks.display(),
                    if ids.len() == 1 { "has" } else { "have" },
                    shown.join(", ")
                ));
            }
            !ids.is_empty()
        }
        Missing::Unchecked { reason, shards } => {
            if !shards.is_empty() {
                stderr_line(&format!(
                    "missing: no input holds {} {}",
                    if shards.len() == 1 { "shard" } else { "shards" },
                    shards.join(", ")
                ));
            }
            if !args.quiet {
                stderr_line(&format!("note: missing ids not checked: {reason}"));
            }
            !shards.is_empty()
        }
    };
    let summary = &merged.summary;
    if !args.quiet {
        let table = summary.table(&args.output.display().to_string());
        lllm::output::stderr(&table.replacen("lllm batch summary", "lllm merge summary", 1));
    }
    let complete = summary.failure == 0 && summary.skipped == 0 && summary.not_run == 0;
    Ok(if complete && !missing {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

fn state_word(state: lllm::batch::output::TaskState) -> &'static str {
    match state {
        lllm::batch::output::TaskState::Success => "success",
        lllm::batch::output::TaskState::Failure => "failure",
        lllm::batch::output::TaskState::Skipped => "skipped",
    }
}
