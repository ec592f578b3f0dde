//! `lllm compare DIR_A DIR_B`: two batch output directories side by side
//! (`lllm::batch::report::compare` does the comparing). Differences are what
//! it reports, not errors: exit 0 when it ran, 2 on bad input.

use std::path::PathBuf;

use lllm::batch::report::{self, Batch, compare};
use lllm::error::{Outcome, Result};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The first batch output directory (A).
    pub a: PathBuf,
    /// The second (B).
    pub b: PathBuf,
    /// Print the comparison as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page of the comparison to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

pub fn run(args: CompareArgs) -> Result<Outcome> {
    if let Some(path) = &args.html {
        // Neither directory's own files: the page never replaces an input.
        report::check_outputs(&[("--html", path)], &[&args.a, &args.b])
            .map_err(crate::report::error)?;
    }
    let a = Batch::read_results(&args.a).map_err(crate::report::error)?;
    let b = Batch::read_results(&args.b).map_err(crate::report::error)?;
    for note in a.notes.iter().chain(&b.notes) {
        lllm::output::stderr_line(&format!("note: {note}"));
    }
    let comparison = compare::compare(&a, &b);
    if let Some(path) = &args.html {
        report::write(path, &comparison.html()).map_err(crate::report::error)?;
        lllm::output::stderr_line(&format!("html: {}", path.display()));
    }
    let text = if args.json {
        let text = serde_json::to_string_pretty(&comparison).unwrap_or_default();
        lllm::redact::json_controls(&text).into_owned() + "\n"
    } else {
        comparison.text()
    };
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}
