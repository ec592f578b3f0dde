//! A Rust tool, a custom parser and a handler in one tactic, then `quick`:
//! `cargo run --example seed_tool_parser_handler`.
//!
//! The prompt `examples/seeds/count/prompts/count.md` names the parser `answer` and
//! the handler `strict` in its front matter; the agent's `tools:` names the
//! `#[lllm::tool]` function `word_count`. Offline on `mock/script` with
//! `examples/seeds/count/script.yaml`: the model calls the tool, answers in prose
//! (rejected by the parser), and answers in the tag once `strict` asks.

use lllm::agent::{AgentCallSession, Handler};
use lllm::{BoxError, ParseFailure, Registry, Tactic};
use serde_json::{Value, json};

/// Count the words of a text.
#[lllm::tool]
fn word_count(
    /// The text whose words are counted.
    text: &str,
) -> usize {
    text.split_whitespace().count()
}

/// `<answer>4</answer>` becomes `{"answer": 4}`; an `Err` goes back to the
/// model as a repair request.
fn answer(reply: &str) -> Result<Value, ParseFailure> {
    let (_, rest) = reply.split_once("<answer>").ok_or("no <answer> tag")?;
    let (number, _) = rest.split_once("</answer>").ok_or("no </answer> tag")?;
    let number: u64 = number
        .trim()
        .parse()
        .map_err(|_| "the answer is not a number")?;
    Ok(json!({ "answer": number }))
}

/// Repair requests that say exactly what to send.
struct Strict;

impl Handler for Strict {
    fn on_exception(&self, error: &str, _call: &AgentCallSession) -> String {
        format!("{error}. Reply with <answer>NUMBER</answer> and nothing else.")
    }
}

const TACTIC: &str = "
global: {model_name: mock/script}
agent_configs:
  - {name: counter, system_prompt: You count words., tools: [word_count]}
providers:
  mock: {script: script.yaml}
flow:
  - {step: count, agent: counter, prompt: count}
";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let registry = Registry::new()
        .tool_impl(word_count::tool())
        .parser("answer", answer)
        .handler("strict", Strict);
    let directory = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seeds/count");
    let tactic = Tactic::from_yaml(TACTIC, directory, &registry)?;
    let record = tactic.call_record("the quick brown fox").await;

    let call = &record.agent_calls[0];
    let reply = call.delivery().ok_or("no delivery")?;
    println!("{call}\nparsed: {:?}", reply.parsed);
    assert_eq!(call.interrupts[0].calls[0].result, Some(json!("4")));
    assert!(
        call.exception_retries[0].error.contains("no <answer> tag"),
        "{:?}",
        call.exception_retries
    );
    assert_eq!(reply.parsed["answer"], 4);

    // One question, one answer, no tactic (Python's `Tactic.quick`).
    let reply = lllm::quick("How many legs has a spider?")
        .model("mock/echo")
        .system("Answer with a number.")
        .await?;
    println!("quick: {}", reply.content);
    assert_eq!(reply.content, "How many legs has a spider?");
    Ok(())
}
