//! A user's own `lllm` (`lllm_cli::run_with` with a registry) runs a tactic
//! that names a Rust tool, a custom parser, renderer and handler; its record
//! re-executes with `replay --rerun`; the stock registry refuses the tactic
//! with exit code 2 before anything is sent.

use std::process::ExitCode;

use lllm::Registry;
use lllm::prompt::ParseFailure;
use lllm::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::{Value, json};

/// Count the words in a text.
#[derive(Deserialize, JsonSchema)]
struct WordCount {
    /// The text whose words are counted.
    text: String,
}

async fn word_count(args: WordCount) -> Result<usize, String> {
    Ok(args.text.split_whitespace().count())
}

fn verdict(reply: &str) -> Result<Value, ParseFailure> {
    let (_, rest) = reply.split_once("<verdict>").ok_or("no <verdict> tag")?;
    let (verdict, _) = rest.split_once("</verdict>").ok_or("unclosed <verdict>")?;
    Ok(json!({ "verdict": verdict.trim() }))
}

fn registry() -> Registry {
    Registry::new()
        .tool("word_count", word_count)
        .parser("verdict", verdict)
}

fn run(dir: &std::path::Path, args: &[&str], registry: Registry) -> ExitCode {
    let mut full = vec!["lllm".to_string()];
    full.extend(args.iter().map(|arg| {
        if arg.ends_with(".yaml") || arg.ends_with(".json") {
            dir.join(arg).display().to_string()
        } else {
            arg.to_string()
        }
    }));
    lllm_cli::run_with(full, registry)
}

#[test]
fn a_users_own_lllm_runs_and_reruns_a_tactic_with_rust_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "t.yaml",
            "global: {model_name: mock/script}\nproviders: {mock: {script: script.yaml}}\nagent_configs:\n  - name: critic\n    system_prompt: Judge.\n    tools: [word_count]\nflow:\n  - step: review\n    agent: critic\n    prompt: review\n    args: {draft: \"{{ task }}\"}\n",
        ),
        (
            "script.yaml",
            "replies:\n  - tool_calls: [{name: word_count, arguments: {text: \"a b c\"}}]\n  - text: fine\n  - text: \"<verdict>ok</verdict>\"\n",
        ),
        (
            "prompts/review.md",
            "---\nparser: verdict\n---\nReview: {{ draft }}\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    let code = run(
        dir.path(),
        &["run", "t.yaml", "--task", "a b c", "--record", "r.json"],
        registry(),
    );
    assert_eq!(code, ExitCode::SUCCESS);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(record["delivery"], "<verdict>ok</verdict>");
    assert_eq!(
        record["agent_calls"][0]["interrupts"][0]["calls"][0]["result"],
        "3"
    );
    assert_eq!(record["prompts"]["review"]["parser"], "verdict");

    let code = run(dir.path(), &["replay", "r.json", "--rerun"], registry());
    assert_eq!(code, ExitCode::SUCCESS, "the rerun is identical");

    let code = run(
        dir.path(),
        &["run", "t.yaml", "--task", "a b c"],
        Registry::new(),
    );
    assert_eq!(code, ExitCode::from(2), "the stock lllm lacks the names");
}
