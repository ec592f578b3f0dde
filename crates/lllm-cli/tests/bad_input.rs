//! Bad input gets one clear line, and nothing panics (issue 26), end to end
//! on the real binary, one test per class: a table cell of any width (no
//! panic: cut); a value of any size echoed into a line (bounded, `--json`
//! whole).

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

/// Echoes the task with the offline mock provider.
const TACTIC: &str = "tactic_type: echoer
global: {model_name: mock/script, max_llm_recall: 0}
agent_configs: [{name: a, system_prompt: You repeat.}]
providers:
  mock: {script: replies.yaml}
";

/// A test dir with the echoing tactic and its own store.
fn test() -> Test {
    let test = Test::new()
        .file("t.yaml", TACTIC)
        .file("replies.yaml", "default: {echo: true}\n");
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

/// Past `u16::MAX`: std's `{:width$}` panics on a width this large.
const WIDE: usize = 70_000;

#[track_caller]
fn assert_lines_within(text: &str, chars: usize) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= chars,
            "a line of {} characters: {}…",
            line.chars().count(),
            line.chars().take(120).collect::<String>()
        );
    }
}

#[test]
fn every_table_cuts_a_cell_wider_than_a_format_width_can_be() {
    let test = test();
    let wide = "w".repeat(WIDE);
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "hi",
        "--tag",
        &format!("team={wide}"),
        "-q",
    ])
    .expect_code(0);

    // `logs cost`: one long tag broke it for the whole store (exit 101).
    let cost = test.run(&["logs", "cost", "--by", "tag:team"]);
    cost.expect_code(0);
    assert!(cost.stderr.is_empty(), "{}", cost.stderr);
    let lines: Vec<&str> = cost.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", cost.stdout);
    assert!(
        lines[1].starts_with("www") && lines[1].contains("…"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("total"), "{}", lines[2]);
    assert_lines_within(&cost.stdout, 150);
    // The columns still line up under the header.
    let column = lines[0].find("sessions").unwrap();
    assert_eq!(lines[2].chars().position(|c| c == '1').unwrap(), column + 7);
    // JSON keeps the value whole.
    let json = test.run(&["logs", "cost", "--by", "tag:team", "--json"]);
    json.expect_code(0);
    let first: Value = serde_json::from_str(json.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["group"], wide.as_str());

    // `models`: a price file's model name.
    let prices = json!({&wide: {"input_per_million": 1, "output_per_million": 2}});
    let test = test.file("prices.json", &prices.to_string());
    let models = test.run(&["models", "www", "--prices", "prices.json"]);
    models.expect_code(0);
    assert!(
        models.stdout.lines().nth(1).unwrap().contains("www…"),
        "{}",
        models.stdout
    );
    assert_lines_within(&models.stdout, 300);

    // `cache stats`: a cached reply of a model with a long name.
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let model = "m".repeat(WIDE);
    let test = test.file(
        "cached.yaml",
        &format!(
            "tactic_type: cached\nglobal: {{model_name: local/{model}, max_llm_recall: 0}}\n\
             agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
             providers:\n  local: {{api: openai, base_url: \"{}\"}}\n",
            server.base_url()
        ),
    );
    test.run(&["run", "cached.yaml", "--task", "hi", "--cache", "-q"])
        .expect_code(0);
    let stats = test.run(&["cache", "stats"]);
    stats.expect_code(0);
    assert!(stats.stdout.contains("local/mmm"), "{}", stats.stdout);
    assert!(stats.stdout.contains("m…"), "{}", stats.stdout);
    assert_lines_within(&stats.stdout, 300);
}

#[test]
fn a_huge_value_is_echoed_cut_with_its_length() {
    let test = test();
    let huge = "v".repeat(100_000);
    for round in 0..3 {
        let tags: Vec<String> = (0..4).map(|key| format!("k{key}={huge}{round}")).collect();
        let mut args = vec!["run", "t.yaml", "--task", "hi", "-q"];
        for tag in &tags {
            args.extend(["--tag", tag.as_str()]);
        }
        test.run(&args).expect_code(0);
    }

    // The listing: 10.5 MB for five sessions before; now a line each.
    let listing = test.run(&["logs", "-n", "5"]);
    listing.expect_code(0);
    assert_eq!(listing.stdout.lines().count(), 3, "{}", listing.stdout);
    assert!(
        listing.stdout.len() < 2_000,
        "{} bytes",
        listing.stdout.len()
    );
    assert!(listing.stdout.contains("characters)"), "{}", listing.stdout);
    // `--json` stays whole.
    let json = test.run(&["logs", "-n", "1", "--json"]);
    let session: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(session["tags"]["k0"], format!("{huge}2"));

    // Errors: an id, a flag's value, a tag, a time, a grouping.
    let cut = format!("{}… (100000 characters)", "v".repeat(200));
    for args in [
        vec!["logs", "show", huge.as_str()],
        vec!["logs", "--since", huge.as_str()],
        vec!["logs", "cost", "--by", huge.as_str()],
        vec!["logs", "--tag", huge.as_str()],
        vec!["run", "t.yaml", "--task", "hi", "--tag", huge.as_str()],
    ] {
        let output = test.run(&args);
        output.expect_code(2);
        assert_eq!(
            output.stderr.lines().count(),
            1,
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
        assert!(
            output.stderr.contains(&cut),
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
        assert!(
            output.stderr.len() < 600,
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
    }

    // A task file's id, repeated: the pre-flight error names it, cut.
    let line = json!({"id": huge, "task": "x"}).to_string();
    let test = test.file("tasks.jsonl", &format!("{line}\n{line}\n"));
    let batch = test.batch("t.yaml", "out", &[]);
    batch.expect_code(2);
    let duplicate = batch
        .stderr
        .lines()
        .find(|line| line.contains("duplicate id"))
        .unwrap_or_else(|| panic!("{}", batch.stderr));
    assert!(duplicate.contains(&cut), "{duplicate}");
    assert_lines_within(&batch.stderr, 600);
}
