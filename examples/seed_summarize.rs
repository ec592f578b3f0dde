//! Seed 000's `SummarizeAgent`, a programmed tactic: `cargo run --example seed_summarize`.
//!
//! The seed subclasses `Tactic` and writes `call`; here the agents come from
//! the YAML below and the control flow is a Rust [`Flow`] registered by name.
//! Offline on `mock/echo` (the reply repeats the task).

use lllm::{BoxError, Ctx, Flow, FlowResult, Registry, Tactic, Task};
use serde_json::json;

struct SummarizeAgent;

impl Flow for SummarizeAgent {
    const NAME: &'static str = "summarizer";
    const AGENTS: &'static [&'static str] = &["assistant"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let agent = cx.agent("assistant")?;
        // 1. Open a dialog (the system prompt goes in first, rendered with `persona`).
        agent.open_with("summarize", json!({ "persona": "helpful assistant" }), true)?;
        // 2. Send the user's task.
        agent.receive(task.text())?;
        // 3. Run the agent loop.
        let response = agent.respond().await?;
        // 4. Inspect the results.
        let dialog = agent.current_dialog()?;
        println!("parsed: {:?}", response.parsed);
        println!("cost: {}", dialog.cost());
        println!("{}", dialog.overview(60));
        assert_eq!(dialog.messages().len(), 3, "system, task, reply");
        assert!(dialog.messages()[0].content.contains("helpful assistant"));
        Ok(response.content)
    }
}

const TACTIC: &str = "
tactic_type: summarizer
global: {model_name: mock/echo}
agent_configs:
  - name: assistant
    system_prompt: You are a {{ persona }}. Summarize what you are given.
";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let registry = Registry::new().flow(SummarizeAgent);
    let tactic = Tactic::from_yaml(TACTIC, ".", &registry)?;
    let summary = tactic.call("Owls hunt at night.").await?;
    println!("summary: {summary}");
    assert_eq!(summary, "Owls hunt at night.");
    Ok(())
}
