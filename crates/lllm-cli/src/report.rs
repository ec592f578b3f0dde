//! `lllm report DIR`: the HTML page and CSV of a batch output directory
//! (`lllm::batch::report` builds them; this file only reads the arguments,
//! writes the files and says where they are).

use std::path::PathBuf;

use lllm::batch::report::{self, Batch};
use lllm::error::{Error, Outcome, Result};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A batch output directory (`results.jsonl`, `sessions.jsonl`, `summary.json`).
    pub dir: PathBuf,
    /// Where to write the HTML page (default: `DIR/report.html`).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Where to write the CSV (default: `DIR/report.csv`).
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

/// Reading errors are bad input (exit 2, nothing written); a write that fails
/// is exit 1.
pub fn error(error: report::Error) -> Error {
    match error {
        report::Error::Write { path, source } => Error::Write { path, source },
        other => Error::Usage(other.to_string()),
    }
}

pub fn run(args: ReportArgs) -> Result<Outcome> {
    let html_path = args.output.unwrap_or_else(|| args.dir.join("report.html"));
    let csv_path = args.csv.unwrap_or_else(|| args.dir.join("report.csv"));
    // Before anything is read: a report never replaces what it is made from.
    report::check_outputs(&[("-o", &html_path), ("--csv", &csv_path)], &[&args.dir])
        .map_err(error)?;
    let batch = Batch::read(&args.dir).map_err(error)?;
    for note in &batch.notes {
        lllm::output::stderr_line(&format!("note: {note}"));
    }
    report::write(&html_path, &report::html::report(&batch)).map_err(error)?;
    report::write(&csv_path, &report::csv::report(&batch)).map_err(error)?;
    let scores = match &batch.scores {
        Some(scores) => format!("; scores: {}", scores.text()),
        None => String::new(),
    };
    lllm::output::stderr_line(&format!(
        "report: {} ({} tasks); csv: {}{scores}",
        html_path.display(),
        batch.tasks.len(),
        csv_path.display()
    ));
    Ok(Outcome::Success)
}
