//! `lllm models`: the model table with prices, context windows and
//! tokenizers, its filters and JSON lines, and `--check TACTIC` naming the
//! models a tactic uses that have no price.

mod common;

use common::Test;
use serde_json::Value;

/// A self-hosted server (nothing listens there: nothing is sent).
const LOCAL: &str = "providers:\n  local: {api: openai, base_url: \"http://127.0.0.1:9/v1\"}\n";

/// A tactic whose writer uses `writer` and whose sub-tactic's critic uses a
/// self-hosted `local/llama3`, with `pricing` added to the sub-tactic. No
/// key is set: nothing is sent, so `--check` needs none.
fn tactics(writer: &str, pricing: &str) -> Test {
    Test::new()
        .file(
            "t.yaml",
            &format!(
                "{LOCAL}agent_configs:\n  - {{name: writer, model_name: {writer}, system_prompt: hi}}\n\
                 flow:\n  - {{step: draft, agent: writer, text: \"{{{{ task }}}}\"}}\n\
                 \x20 - {{step: review, tactic: sub/critic.yaml}}\n"
            ),
        )
        .file(
            "sub/critic.yaml",
            &format!(
                "{LOCAL}agent_configs:\n  - {{name: critic, model_name: local/llama3, system_prompt: hi}}\n\
                 flow:\n  - {{step: judge, agent: critic, text: \"{{{{ task }}}}\"}}\n{pricing}"
            ),
        )
}

#[test]
fn the_table_lists_known_models_with_prices_and_tokenizers() {
    let output = Test::new().run(&["models"]);
    output.expect_code(0);
    let lines: Vec<&str> = output.stdout.lines().collect();
    assert!(
        lines[0].starts_with("MODEL") && lines[0].ends_with("TOKENIZER"),
        "{}",
        lines[0]
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|line| line.split_whitespace().next() == Some(name))
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no row `{name}` in\n{}", output.stdout))
    };
    assert_eq!(
        row("gpt-4o-mini"),
        [
            "gpt-4o-mini",
            "openai",
            "128000",
            "0.15",
            "0.60",
            "0.075",
            "-",
            "o200k_base"
        ]
    );
    assert_eq!(
        row("claude-sonnet-4-5"),
        [
            "claude-sonnet-4-5",
            "anthropic",
            "200000",
            "3.00",
            "15.00",
            "0.30",
            "3.75",
            "estimate"
        ]
    );
    // Columns line up: every row's tokenizer starts under the header's.
    let column = lines[0].find("TOKENIZER").unwrap();
    for line in &lines[1..lines.len() - 1] {
        assert!(
            ["o200k_base", "cl100k_base", "estimate"].contains(&line.get(column..).unwrap_or("")),
            "{line}"
        );
    }
    assert!(output.stderr.is_empty(), "{}", output.stderr);
}

#[test]
fn json_lines_carry_every_field() {
    let output = Test::new().run(&["models", "gpt-4o-mini", "--json"]);
    output.expect_code(0);
    let entries: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let entry = entries
        .iter()
        .find(|entry| entry["model"] == "gpt-4o-mini")
        .unwrap();
    assert_eq!(entry["provider"], "openai");
    assert_eq!(entry["context_window"], 128000);
    assert_eq!(entry["max_output_tokens"], 16384);
    assert_eq!(entry["input_per_million"], 0.15);
    assert_eq!(entry["output_per_million"], 0.6);
    assert_eq!(entry["cached_input_per_million"], 0.075);
    assert_eq!(entry["cache_write_per_million"], Value::Null);
    assert_eq!(entry["tokenizer"], "o200k_base");
    assert!(
        entries
            .iter()
            .all(|entry| entry["model"].as_str().unwrap().contains("gpt-4o-mini"))
    );
}

#[test]
fn filters_narrow_the_list_and_prices_files_add_to_it() {
    let test = Test::new().file(
        "prices.yaml",
        "my-finetune: {input_per_million: 1.5, output_per_million: 6, context_window: 32000}\n",
    );
    let output = test.run(&["models", "SONNET", "--provider", "anthropic"]);
    output.expect_code(0);
    let rows: Vec<&str> = output.stdout.lines().skip(1).collect();
    assert!(rows.len() > 1);
    assert!(
        rows[..rows.len() - 1]
            .iter()
            .all(|row| row.contains("sonnet") && row.contains("anthropic")),
        "{}",
        output.stdout
    );
    // Another provider's models are left out.
    let output = test.run(&["models", "--provider", "gemini"]);
    assert!(!output.stdout.contains("gpt-4o") && output.stdout.contains("gemini-2.5-pro"));

    let output = test.run(&["models", "finetune", "--prices", "prices.yaml"]);
    output.expect_code(0);
    let row: Vec<&str> = output
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            "my-finetune",
            "-",
            "32000",
            "1.50",
            "6.00",
            "-",
            "-",
            "estimate"
        ]
    );

    let output = test.run(&["models", "--provider", "anthropc"]);
    output.expect_code(1);
    assert_eq!(
        output.stderr,
        "no known model matches; did you mean `anthropic`?\n"
    );
}

#[test]
fn check_names_the_model_without_a_price_and_exits_1() {
    let test = tactics("openai/gpt-4o-mini", "");
    let output = test.run(&["models", "--check", "t.yaml"]);
    output.expect_code(1);
    let lines: Vec<&str> = output.stdout.lines().collect();
    assert!(
        lines[1].starts_with("openai/gpt-4o-mini  openai "),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("0.15"));
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["local/llama3", "-", "-", "-", "-", "-", "-", "estimate"]
    );
    let errors: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    assert!(
        errors[0].starts_with("no price for `local/llama3` (agent `critic` in `")
            && errors[0].contains("critic.yaml")
            && errors[0].ends_with(
                "hint: add `local/llama3: {input_per_million: …, output_per_million: …}` \
                 under `pricing:` in the tactic, or pass `--prices FILE`"
            ),
        "{}",
        errors[0]
    );

    // `--model` applies to every agent, sub-tactics' too.
    let output = test.run(&[
        "models",
        "--check",
        "t.yaml",
        "--model",
        "local/llama3",
        "--json",
    ]);
    output.expect_code(1);
    let used: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(used.len(), 1);
    assert_eq!(used[0]["model"], "local/llama3");
    assert_eq!(used[0]["input_per_million"], Value::Null);
}

#[test]
fn check_passes_when_every_model_is_priced() {
    let test = tactics(
        "openai/gpt-4o-mini",
        "pricing:\n  local/llama3: {input_per_million: 0.01, output_per_million: 0.02}\n",
    )
    .file(
        "prices.json",
        r#"{"local/llama3": {"input_per_million": 0.5, "output_per_million": 1}}"#,
    );
    let output = test.run(&["models", "--check", "t.yaml"]);
    output.expect_code(0);
    assert!(output.stderr.is_empty(), "{}", output.stderr);
    assert!(output.stdout.lines().nth(2).unwrap().contains("0.01"));

    // A tactic without prices passes with `--prices`, and the mock is free.
    let test = tactics("mock/echo", "").file(
        "prices.json",
        r#"{"local/llama3": {"input_per_million": 0.5, "output_per_million": 1}}"#,
    );
    let output = test.run(&["models", "--check", "t.yaml", "--prices", "prices.json"]);
    output.expect_code(0);
    let rows: Vec<Vec<&str>> = output
        .stdout
        .lines()
        .skip(1)
        .take(2)
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..5], ["mock/echo", "-", "-", "0.00", "0.00"]);
    assert_eq!(rows[1][..5], ["local/llama3", "-", "-", "0.50", "1.00"]);
}

#[test]
fn a_bad_tactic_path_is_one_error_line_and_exit_2() {
    let output = Test::new().run(&["models", "--check", "missing.yaml"]);
    output.expect_code(2);
    assert!(output.stdout.is_empty());
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(output.stderr.starts_with("error: ") && output.stderr.contains("missing.yaml"));

    let output = Test::new().run(&["models", "--prices", "missing.json"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
}

#[test]
fn a_hosted_service_without_a_published_price_is_named_too() {
    let test = tactics("groq/brand-new-model", "").file(
        "prices.json",
        r#"{"local/llama3": {"input_per_million": 0.5, "output_per_million": 1}}"#,
    );
    let output = test.run(&["models", "--check", "t.yaml", "--prices", "prices.json"]);
    output.expect_code(1);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.starts_with(
            "no price for `groq/brand-new-model` (agent `writer` in `t.yaml`: groq publishes none lllm knows)"
        ),
        "{}",
        output.stderr
    );
}
