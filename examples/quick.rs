//! One question, one answer: `cargo run --example quick [-- "QUESTION"]`.
//!
//! Offline it asks `mock/echo`, which answers with the question; set
//! `LLLM_MODEL` to ask a real model (`LLLM_MODEL=openai/gpt-4o-mini` with
//! `OPENAI_API_KEY`, `LLLM_MODEL=anthropic/claude-haiku-4-5` with
//! `ANTHROPIC_API_KEY`, `LLLM_MODEL=ollama/llama3.2` on a local Ollama, …).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Why do owls hunt at night?".to_string());
    // `quick` reads LLLM_MODEL itself; the example only adds an offline default.
    let model = std::env::var("LLLM_MODEL")
        .ok()
        .filter(|model| !model.is_empty())
        .unwrap_or_else(|| "mock/echo".to_string());
    let reply = lllm::quick(question)
        .model(&model)
        .system("Answer in one sentence.")
        .arg("temperature", 0.2)
        .await;
    match reply {
        Ok(reply) => {
            println!("{}", reply.content);
            eprintln!("model: {model}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            // 2: nothing was sent (no model, an unknown provider, a missing key).
            match error {
                lllm::quick::Error::Failed(_) => ExitCode::FAILURE,
                _ => ExitCode::from(2),
            }
        }
    }
}
