//! 100 tasks, results printed as they finish: `cargo run --example ccall`.
//!
//! Offline the tactic's model is `mock/script` with `examples/scripts/ccall.yaml`
//! (the question back after a random few milliseconds, so runs finish out of
//! order); set `LLLM_MODEL` to run the tasks on a real model. At most 8 run at
//! once; the runs share the provider's limits, and a failure is printed with
//! what its run spent.

use std::process::ExitCode;

use futures_util::StreamExt;
use lllm::config::{AgentEntry, TacticConfig};
use lllm::{Registry, Tactic, Task};

#[tokio::main]
async fn main() -> ExitCode {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let model = std::env::var("LLLM_MODEL")
        .ok()
        .filter(|model| !model.is_empty())
        .unwrap_or_else(|| "mock/script".to_string());
    let config = TacticConfig::builder()
        .name("arithmetic")
        .base_dir(examples)
        .agent(
            AgentEntry::new("calculator")
                .model(model)
                .system("Reply with the number only."),
        )
        .provider("mock", serde_json::json!({"script": "scripts/ccall.yaml"}))
        .build();
    let tactic = match config
        .map_err(|error| error.to_string())
        .and_then(|config| {
            Tactic::from_config(config, &Registry::new()).map_err(|error| error.to_string())
        }) {
        Ok(tactic) => tactic,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };

    // Pulled lazily: a task is made only when a run slot is free.
    let tasks = (0..100u32).map(|number| {
        Task::new(format!("What is {number} + {}?", number * 2)).id(format!("sum-{number}"))
    });
    let mut finished = tactic.ccall(tasks).concurrency(8);
    let (mut succeeded, mut failed) = (0, 0);
    while let Some((index, result)) = finished.next().await {
        match result {
            Ok(answer) => {
                succeeded += 1;
                println!("{index}: {answer}");
            }
            Err(error) => {
                failed += 1;
                let cost = error.record().cost.total_tokens;
                eprintln!("{index}: failed: {error} ({cost} tokens spent)");
            }
        }
    }
    eprintln!("{succeeded} succeeded, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
