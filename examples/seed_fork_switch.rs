//! Two agents in a loop, with a fork and a switch, run over many tasks with
//! `bcall` and `ccall`: `cargo run --example seed_fork_switch`.
//!
//! The writer drafts, the critic reviews until it approves; the writer then
//! forks its dialog to say it in one line, and switches back to the draft,
//! which the fork left as it was. Offline on `mock/script` with
//! `examples/seeds/review.yaml` (the critic asks for one revision, then
//! approves; the writer repeats what it is told).

use futures_util::StreamExt;
use lllm::{BoxError, Ctx, Flow, FlowResult, Registry, Tactic, Task};

struct Review;

impl Flow for Review {
    const NAME: &'static str = "review";
    const AGENTS: &'static [&'static str] = &["writer", "critic"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let [writer, critic] = cx.agents(["writer", "critic"])?;
        writer.open("draft")?;
        critic.open("review")?;
        writer.receive(task.text())?;
        let mut draft = writer.respond().await?.content;
        for _round in 1..=3 {
            critic.receive(format!("Review: {draft}"))?;
            let verdict = critic.respond().await?.content;
            let Some(notes) = verdict.strip_prefix("REVISE: ") else {
                break;
            };
            writer.receive(format!("{draft} ({notes})"))?;
            draft = writer.respond().await?.content;
        }
        let draft_length = writer.current_dialog()?.len();

        // A child of `draft` with its whole history, now the active dialog.
        writer.fork("draft", "one_line")?;
        writer.receive(format!("In one line: {}", task.text()))?;
        let line = writer.respond().await?.content;
        // Back to the draft: the fork added nothing to it.
        writer.switch("draft")?;
        assert_eq!(writer.current_dialog()?.len(), draft_length);
        Ok(format!("{draft} | {line}"))
    }
}

const TACTIC: &str = "
tactic_type: review
global: {model_name: mock/script}
agent_configs:
  - {name: writer, system_prompt: You write one clear sentence.}
  - {name: critic, system_prompt: You review drafts; reply APPROVE or REVISE with a note.}
providers:
  mock: {script: review.yaml}
";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seeds");
    let tactic = Tactic::from_yaml(TACTIC, seeds, &Registry::new().flow(Review))?;
    let topics = ["Tides", "Owls", "Glaciers", "Volcanoes"];
    let expected = |topic: &str| format!("{topic} (give a reason.) | In one line: {topic}");

    // bcall: every result, in input order.
    let results = tactic.bcall(topics).concurrency(2).await;
    for (topic, result) in topics.iter().zip(results) {
        let answer = result?;
        println!("bcall {topic}: {answer}");
        assert_eq!(answer, expected(topic));
    }

    // ccall: a stream of (index, result) as runs finish.
    let finished: Vec<_> = tactic.ccall(topics).concurrency(4).collect().await;
    assert_eq!(finished.len(), topics.len());
    for (index, result) in finished {
        let answer = result?;
        println!("ccall {index}: {answer}");
        assert_eq!(answer, expected(topics[index]));
    }
    Ok(())
}
