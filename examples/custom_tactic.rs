//! A programmed tactic: two agents, a Rust loop and a fork, in your own `lllm`.
//!
//! `examples/custom_tactic/tactic.yaml` supplies the agents (`writer`, `critic`),
//! their models and prompts, and names the Rust flow `review_loop` below as
//! its `tactic_type`. The writer drafts (checking its length with the Rust
//! tool `word_count`); the critic reviews until it approves (three rounds at
//! most), its replies read by the Rust parser `verdict`; then the writer forks
//! its dialog to say it in one sentence. Every call lands in the session
//! record as a YAML flow's would.
//!
//! ```text
//! cargo run --example custom_tactic                 # offline (mock/script); record: PATH on stderr
//! LLLM_MODEL=openai/gpt-4o-mini cargo run --example custom_tactic
//! cargo run --example custom_tactic -- --rerun PATH            # re-execute it offline (lllm::replay)
//! cargo run --example custom_tactic -- replay PATH             # show the record (the full `lllm`)
//! cargo run --example custom_tactic -- run examples/custom_tactic/tactic.yaml --task "What is a B-tree?"
//! ```
//!
//! Without arguments it runs its tactic on a built-in task, prints the
//! delivery on stdout and, as the last line on stderr, `record: PATH` of the
//! session record the call wrote (in the session store, where `lllm logs`
//! finds it; under cargo the build's own store, `target/test-records`).
//! `--rerun PATH` re-executes a record with this program's registry
//! (`lllm::replay::rerun`, no command-line crate needed). Given other
//! arguments it is the full `lllm` command line with `review_loop`
//! registered (`lllm_cli::main_with`).

use std::path::Path;
use std::process::ExitCode;

use lllm::{Ctx, Flow, FlowResult, ParseFailure, Records, Registry, Task};
use serde_json::{Value, json};

/// The task the example answers when run without arguments.
const TASK: &str = "Explain what a hash map is.";

/// Count the words of a text.
#[lllm::tool] // the Rust tool `word_count`, named in the writer's `tools:`
pub fn word_count(
    /// The text whose words are counted.
    text: &str,
) -> usize {
    text.split_whitespace().count()
}

/// The Rust parser `verdict` (front matter `parser: verdict` of
/// `examples/custom_tactic/prompts/custom/review.md`): `<verdict>approve</verdict><notes>…</notes>`
/// becomes `{"verdict": "approve", "notes": "…"}`; an `Err` goes back to the
/// model as a repair request.
pub fn verdict(reply: &str) -> Result<Value, ParseFailure> {
    let tag = |name: &str| -> Option<String> {
        let (_, rest) = reply.split_once(&format!("<{name}>"))?;
        let (inner, _) = rest.split_once(&format!("</{name}>"))?;
        Some(inner.trim().to_string())
    };
    let verdict = tag("verdict").ok_or("no <verdict>…</verdict> in the reply")?;
    if verdict != "approve" && verdict != "revise" {
        return Err(format!("the verdict is `{verdict}`; write approve or revise").into());
    }
    Ok(json!({ "verdict": verdict, "notes": tag("notes") }))
}

/// Draft, review until approved, then a one-sentence version in a fork.
pub struct ReviewLoop;

impl Flow for ReviewLoop {
    const NAME: &'static str = "review_loop";
    const AGENTS: &'static [&'static str] = &["writer", "critic"];

    async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
        let [writer, critic] = cx.agents(["writer", "critic"])?;
        writer.open("draft")?;
        critic.open("review")?;

        // Prompts by registry key: `examples/custom_tactic/prompts/custom/draft.md` sees the task.
        writer.receive_prompt("custom/draft", ())?;
        let mut draft = writer.respond().await?;
        for round in 1..=3 {
            // The `verdict` parser fills `parsed`; a reply it rejects is
            // repaired by the agent loop before it gets here.
            critic.receive_prompt("custom/review", json!({ "draft": draft.content }))?;
            let review = critic
                .respond()
                .step(format!("review {round}")) // the call's name in the record
                .metadata(json!({ "round": round }))
                .await?;
            if review.parsed["verdict"] == "approve" {
                break;
            }
            let notes = review.parsed["notes"].as_str().unwrap_or("make it clearer");
            writer.receive(format!("Revise your answer. Reviewer's notes: {notes}"))?;
            draft = writer.respond().await?;
        }

        // A child of `draft` holding its whole history, now the active dialog.
        writer.fork("draft", "short")?;
        writer.receive("Now say it in one sentence.")?;
        let short = writer.respond().await?;
        Ok(format!(
            "{}\n\nIn one sentence: {}",
            draft.content, short.content
        ))
    }
}

/// Everything this program adds to `lllm`.
pub fn registry() -> Registry {
    Registry::new()
        .flow(ReviewLoop)
        .tool_impl(word_count::tool())
        .parser("verdict", verdict)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice()
        && flag == "--rerun"
    {
        return rerun(Path::new(path));
    }
    if !args.is_empty() {
        return lllm_cli::main_with(registry());
    }
    let tactic = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/custom_tactic/tactic.yaml");
    let model = std::env::var("LLLM_MODEL")
        .ok()
        .filter(|model| !model.is_empty());
    run_builtin(&tactic, Records::default(), model.as_deref())
}

/// Re-executes the record at `path` offline with this program's flow:
/// exit 0 when identical, 1 where it differs, 2 when it cannot run.
fn rerun(path: &Path) -> ExitCode {
    let registry = registry();
    let rerun = tokio::runtime::Runtime::new()
        .map_err(lllm::BoxError::from)
        .and_then(|runtime| runtime.block_on(lllm::replay::rerun(path, &registry).into_future()));
    match rerun {
        Ok(rerun) if rerun.is_identical() => {
            println!("identical: {} model calls replayed", rerun.replayed);
            ExitCode::SUCCESS
        }
        Ok(rerun) => {
            eprintln!("diverged: {}", rerun.difference().unwrap_or_default());
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs `tactic` on [`TASK`] (every agent on `model` if given), its record
/// written to `records`, prints the delivery and `record: PATH`. Exit 0 on
/// success, 1 when the run failed, 2 when the tactic cannot run.
pub fn run_builtin(tactic: &Path, records: Records, model: Option<&str>) -> ExitCode {
    let registry = registry();
    let options = lllm::tactic::LoadOptions {
        model,
        ..lllm::tactic::LoadOptions::new(&registry)
    };
    let task = Task::new(TASK);
    let tactic = match lllm::tactic::load(tactic, &options, Some(&task)) {
        Ok(tactic) => tactic,
        Err(error) => {
            for line in error.to_string().lines() {
                eprintln!("error: {line}");
            }
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let tactic = tactic.with_records(records.clone());
    let record = runtime.block_on(async {
        let record = tactic.call_record(task).await; // written where `records` says
        tactic.shutdown().await;
        record
    });
    let code = match (&record.delivery, &record.error) {
        (Some(delivery), _) => {
            println!("{delivery}");
            ExitCode::SUCCESS
        }
        (None, error) => {
            eprintln!("error: {}", error.as_deref().unwrap_or("no delivery"));
            ExitCode::from(1)
        }
    };
    if let Some(path) = records.file_for(&record) {
        eprintln!("record: {}", path.display());
    }
    code
}
