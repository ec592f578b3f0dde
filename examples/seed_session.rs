//! Everything one agent call did, from its `AgentCallSession`:
//! `cargo run --example seed_session`.
//!
//! `respond().session()` gives the whole trace instead of the reply: every
//! invoke of the provider, the provider retries, the tool rounds, the parser
//! repairs, the outcome and the cost. Offline on `mock/script` with
//! `examples/seeds/session.yaml`: one rate limit, one tool call, one reply
//! that is not JSON, then the answer.

use lllm::agent::CallState;
use lllm::prompt::{Parser, Prompt};
use lllm::{Agent, BoxError, Registry};
use serde_json::json;

/// Today's temperature in a city, in °C.
#[lllm::tool]
fn temperature(
    /// The city.
    city: &str,
) -> Result<i32, String> {
    match city {
        "Oslo" => Ok(4),
        _ => Err(format!("no weather station in {city}")),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seeds/session.yaml");
    let mut agent = Agent::builder("mock/script")
        .provider("mock", json!({ "script": script }))
        .registry(Registry::new().tool_impl(temperature::tool()))
        .set("tools", json!(["temperature"]))
        .build()?;
    agent.open("weather")?;
    let json = Parser::from_value(&json!({"type": "json"}))?;
    let prompt =
        Prompt::new("weather", "How warm is it in {{ city }}? Reply in JSON.")?.with_parser(json);
    agent.receive_prompt(prompt, json!({ "city": "Oslo" }))?;
    let session = agent.respond().session().await?;

    for invoke in &session.invokes {
        let outcome = match (&invoke.error, &invoke.response) {
            (Some(error), _) => format!("error: {error}"),
            (None, Some(reply)) if reply.is_function_call() => "tool call".to_string(),
            (None, Some(reply)) => format!("reply: {}", reply.content),
            (None, None) => "nothing".to_string(),
        };
        println!(
            "invoke: round {} repair {} attempt {}: {outcome}",
            invoke.step, invoke.repair, invoke.attempt
        );
    }
    println!("{session}"); // agent, model, state, calls, retries, repairs, tool rounds, cost
    let delivery = session.delivery().ok_or("no delivery")?;
    println!(
        "delivery: {} (parsed celsius: {})",
        delivery.content, delivery.parsed["celsius"]
    );

    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.invokes.len(), 4);
    assert_eq!(session.llm_recall_count(), 1);
    assert_eq!(session.interrupts[0].calls[0].result, Some(json!("4")));
    assert_eq!(session.exception_retry_count(), 1);
    assert_eq!(delivery.parsed["celsius"], 4);
    assert!(session.cost.total_tokens >= 132);
    Ok(())
}
