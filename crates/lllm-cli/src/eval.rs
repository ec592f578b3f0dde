//! `lllm eval DIR [--asserts FILE]`: the arguments, turned into
//! `batch::rescore::Options`; the library rescores (docs/evals.md).

use std::path::PathBuf;
use std::sync::Arc;

use crate::numbers;
use lllm::batch::rescore;
use lllm::error::{Outcome, Result};

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// A batch output directory (or a merged one): its `results.jsonl` is
    /// scored again and rewritten, with `summary.json`'s `scores`.
    #[arg(value_name = "DIR")]
    pub output: PathBuf,
    /// A YAML list of assertion items that replace, for every task, those
    /// it was scored with (the tactic's `asserts` and its line's `expected`
    /// and `asserts`).
    #[arg(long, value_name = "FILE")]
    pub asserts: Option<PathBuf>,
    /// The TASKS file (default: the one DIR's `batch.json` names): its lines'
    /// `expected` and `asserts`.
    #[arg(long, value_name = "FILE")]
    pub tasks: Option<PathBuf>,
    /// The tactic whose `asserts` hold (default: the batch's `--tactic`, as
    /// DIR's `batch.json` names it, and each line's own `tactic`).
    #[arg(long, short, value_name = "FILE")]
    pub tactic: Option<PathBuf>,
    /// Results scored at once (judges and command graders run in parallel).
    #[arg(long, short = 'j', default_value_t = 16, value_parser = numbers::concurrency, allow_negative_numbers = true)]
    pub concurrency: usize,
    /// Exit with code 3 when the pass rate is below RATE (0 to 1).
    #[arg(long, value_name = "RATE", value_parser = numbers::fail_under, allow_negative_numbers = true)]
    pub fail_under: Option<f64>,
    #[command(flatten)]
    pub store: crate::store::StoreArgs,
    /// Print only errors (no summary table or warning).
    #[arg(long, short)]
    pub quiet: bool,
}

pub async fn run(args: EvalArgs, registry: lllm::Registry) -> Result<Outcome> {
    let settings = crate::settings::current();
    let cache = args.store.cache_source();
    let outcome = rescore::run(rescore::Options {
        output: args.output,
        asserts: args.asserts,
        tasks: args.tasks,
        tactic: args.tactic,
        concurrency: args.concurrency,
        fail_under: args.fail_under,
        registry,
        cache: Some(cache.clone()),
        env: Some(crate::settings::batch_environment()),
        defaults: Some(Arc::new(settings.defaults())),
        quiet: args.quiet,
    })
    .await;
    cache.flush();
    outcome
}
