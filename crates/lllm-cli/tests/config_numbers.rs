//! Numbers from the user, end to end through the real binary: out-of-range
//! tactic keys, prices (`pricing:`, `--prices` in our format and LiteLLM's)
//! and numeric flags each exit 2 with one `error:` line naming the place, the
//! key and the allowed range, all of a file's problems at once, before
//! anything is sent, and never a panic.

mod common;

use common::{MockServer, Test};

const ECHO: &str = "global: {model_name: mock/echo}\nagent_configs:\n  - {name: a}\n";

#[track_caller]
fn refused(output: &common::Output) -> Vec<String> {
    output.expect_code(2);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    output
        .stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn out_of_range_tactic_numbers_are_all_named_before_anything_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: never}\n");
    let tactic = format!(
        r#"global:
  model_name: local/m
  max_llm_recall: 1000
agent_configs:
  - name: a
    context_manager: {{type: default, max_tokens: 18446744073709551615}}
    max_exception_retry: 99999999999999999999999999999
    max_interrupt_steps: -99999999999999999999999999999
providers:
  local: {{api: openai, base_url: "{}", rpm: 0, tpm: 0, timeout_s: 1e20, connect_timeout_s: 1e20, retry_cap_ms: 1e30}}
tools:
  - {{name: t, command: [echo], timeout_s: -1}}
mcp_servers:
  - {{name: s, command: [echo], timeout_s: .inf}}
"#,
        server.base_url()
    );
    let test = test.file("t.yaml", &tactic);
    for extra in [&[][..], &["--show-config"][..], &["--dry-run"][..]] {
        let output = test.run(&[&["run", "t.yaml", "--task", "hi"][..], extra].concat());
        let errors = refused(&output);
        for expected in [
            "`global`: `max_llm_recall: 1000` must be a whole number from 0 to 100 (retries)",
            "agent `a`: `context_manager.max_tokens: 18446744073709551615` must be a whole number from 1 to 100000000 (tokens)",
            // Past 64 bits: the same message, not a parse error hiding the rest.
            "agent `a`: `max_exception_retry: 99999999999999999999999999999` must be a whole number from 0 to 100 (repairs)",
            "agent `a`: `max_interrupt_steps: -99999999999999999999999999999` must be a whole number from 0 to 100",
            "provider `local`: `rpm: 0` must be a whole number from 1 to 1000000000 (requests per minute)",
            "provider `local`: `tpm: 0` must be",
            "provider `local`: `timeout_s: 1e+20` must be a number from 0.001 to 86400 (seconds)",
            "provider `local`: `connect_timeout_s: 1e+20` must be a number from 0.001 to 3600 (seconds)",
            "provider `local`: `retry_cap_ms: 1e+30` must be a whole number from 0 to 3600000 (milliseconds)",
            "tool `t`: `timeout_s: -1` must be a number from 0.001 to 86400 (seconds)",
            "MCP server `s`: `timeout_s: .inf` must be a number from 0.001 to 86400 (seconds)",
        ] {
            // Each at the line and column of its key.
            assert!(
                errors.iter().any(|line| {
                    line.strip_prefix("error: t.yaml:").is_some_and(|rest| {
                        let mut parts = rest.splitn(3, ':');
                        parts.next().is_some_and(|line| line.parse::<u32>().is_ok())
                            && parts
                                .next()
                                .is_some_and(|column| column.parse::<u32>().is_ok())
                    }) && line.contains(expected)
                }),
                "{extra:?}: {expected}\n{}",
                output.stderr
            );
        }
        assert_eq!(errors.len(), 11, "{}", output.stderr);
    }
    assert!(server.requests().is_empty(), "nothing sent");
}

#[test]
fn negative_and_non_finite_prices_are_refused_in_every_price_source() {
    let test = Test::new()
        .file(
            "t.yaml",
            &format!("{ECHO}pricing:\n  my-model: {{input_per_million: -1, output_per_million: .nan}}\n"),
        )
        .file("echo.yaml", ECHO)
        .file("tasks.jsonl", "\"one\"\n")
        .file(
            "litellm.json",
            r#"{"sample_spec": {"input_cost_per_token": 0.0, "max_input_tokens": "max input tokens, if the provider specifies it"},
                "openai/cheap": {"input_cost_per_token": -2e-6, "output_cost_per_token": 8e-6, "max_input_tokens": 0}}"#,
        )
        .file(
            "ours.yaml",
            "fine: {input_per_million: 1, output_per_million: 2}\nbad: {input_per_million: 1, output_per_million: -.inf}\n",
        );
    let errors = refused(&test.run(&["run", "t.yaml", "--task", "hi"]));
    assert_eq!(
        errors,
        [
            "error: t.yaml:5:3: `pricing`: `my-model`: `input_per_million: -1` must be a number from 0 to 1000000 (USD per 1M tokens)",
            "error: t.yaml:5:3: `pricing`: `my-model`: `output_per_million: .nan` must be a number from 0 to 1000000 (USD per 1M tokens)",
        ]
    );
    let errors = refused(&test.run(&[
        "run",
        "echo.yaml",
        "--task",
        "hi",
        "--prices",
        "litellm.json",
    ]));
    assert_eq!(
        errors,
        [
            "error: litellm.json:2:17: `openai/cheap`: `input_cost_per_token: -2e-6` must be a number from 0 to 1 (USD per token)",
            "error: litellm.json:2:17: `openai/cheap`: `max_input_tokens: 0` must be a whole number from 1 to 100000000 (tokens)",
        ]
    );
    let errors = refused(&test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "echo.yaml",
        "-o",
        "out",
        "--prices",
        "ours.yaml",
    ]));
    assert_eq!(
        errors,
        [
            "error: ours.yaml:2:1: `bad`: `output_per_million: -.inf` must be a number from 0 to 1000000 (USD per 1M tokens)"
        ]
    );
    assert!(!test.path("out").exists());
}

#[test]
fn numeric_flags_out_of_range_name_the_flag_and_the_range() {
    let test = Test::new()
        .file("echo.yaml", ECHO)
        .file("tasks.jsonl", "\"one\"\n");
    for (flag, value, range) in [
        ("-j", "0", "a whole number from 1 to 100000"),
        (
            "-j",
            "18446744073709551615",
            "a whole number from 1 to 100000",
        ),
        ("--threads", "0", "a whole number from 1 to 1024"),
        ("--threads", "100000", "a whole number from 1 to 1024"),
        ("--grace", "1e20", "a number from 0 to 86400 (seconds)"),
        ("--grace", "-1", "a number from 0 to 86400 (seconds)"),
        ("--progress-interval", "1e20", "a number from 0.05 to 86400"),
        ("--progress-interval", "NaN", "a number from 0.05 to 86400"),
        ("--max-cost", "NaN", "a number from 0 to 1000000000 (USD)"),
        ("--max-cost", "-0.5", "a number from 0 to 1000000000 (USD)"),
        ("--max-cost", "inf", "a number from 0 to 1000000000 (USD)"),
        ("--limit", "0", "a whole number, at least 1"),
        ("--limit", "-3", "a whole number, at least 1"),
        ("--shards", "0", "a whole number, at least 1"),
    ] {
        let output = test.run(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "echo.yaml",
            "-o",
            "out",
            flag,
            value,
        ]);
        let errors = refused(&output);
        assert_eq!(errors.len(), 1, "{flag} {value}: {}", output.stderr);
        assert!(
            errors[0].contains(&format!("invalid value '{value}'")) && errors[0].contains(range),
            "{flag} {value}: {}",
            output.stderr
        );
        assert!(!test.path("out").exists(), "{flag} {value}");
    }
    for (flag, value) in [("--shard", "0/4"), ("--shard", "5/4"), ("--shard", "1/0")] {
        let output = test.run(&[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "echo.yaml",
            "-o",
            "out",
            flag,
            value,
        ]);
        assert_eq!(refused(&output).len(), 1, "{flag} {value}");
    }
}
