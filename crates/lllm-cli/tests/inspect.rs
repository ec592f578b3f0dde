//! `lllm inspect` on the real binary (issue 30): the text form shows each
//! part of a tactic (its contract, agents, models, tools, prompts); `--json`
//! is one object whose first keys are upstream's `TacticInfo`, which
//! upstream's own `TacticInfo.model_validate` accepts (through the test
//! venv, `common::python`); a bad tactic is the usual one-line errors, exit 2.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::Test;
use serde_json::{Value, json};

fn shipped(tactic: &str) -> String {
    format!("{}/../../tactics/{tactic}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_text_form_shows_the_contract_and_every_part() {
    let test = Test::new();
    let output = test.run(&["inspect", &shipped("triage.yaml")]);
    output.expect_code(0);
    let expected = [
        "triage: Sort a support ticket into a category and say whether it is urgent.",
        "runtime lllm · capabilities arun, events, run, stream",
        "",
        "input (input_schema):",
        "  ticket: string, required, minLength 1 — The customer's message, as written",
        "",
        "output (output_schema):",
        "  category: string, required, one of billing, outage, account, other",
        "  urgent: boolean, required",
        "  (and {\"additionalProperties\":false})",
        "",
        "examples (2):",
        "  {\"input\":{\"ticket\":\"I was charged twice for my March invoice.\"},\
         \"output\":{\"category\":\"billing\",\"urgent\":false}}",
        "  {\"input\":{\"ticket\":\"The whole site is down since 9:00 and nobody can log in.\"},\
         \"output\":{\"category\":\"outage\",\"urgent\":true}}",
        "",
        "metadata:",
        "  owner: support-team",
        "  version: 1",
        "",
        "agents:",
        "  triager: model mock/script · tools none · system prompt triager/system (inline) · \
         dialogs main · prompts sort (inline)",
        "models:",
        "  mock/script: triager",
        "tools:",
        "  none",
        "prompts: sort (inline), triager/system (inline)",
    ];
    assert_eq!(output.stdout.lines().collect::<Vec<_>>(), expected);

    // A tactic with tools, two agents and prompt files, and no contract.
    let output = test.run(&["inspect", &shipped("summarize.yaml")]);
    output.expect_code(0);
    for part in [
        "input: any (no input_schema)",
        "output: any (no output_schema)",
        "  writer: model mock/script · tools word_count · system prompt \
         summarize/writer_system · dialogs main · prompts summarize/draft",
        "  critic: model mock/script · tools none · system prompt summarize/critic_system · \
         dialogs main · prompts summarize/review",
        "  mock/script: writer, critic",
        "  word_count: Count the words in a text.",
        "    text: string, required — The text to count",
        "prompts: summarize/critic_system, summarize/draft, summarize/review, \
         summarize/writer_system",
    ] {
        assert!(
            output.stdout.lines().any(|line| line == part),
            "missing {part:?} in:\n{}",
            output.stdout
        );
    }
}

#[test]
fn json_is_tactic_info_then_the_parts() {
    let test = Test::new();
    let output = test.run(&["inspect", &shipped("triage.yaml"), "--json"]);
    output.expect_code(0);
    let outline: Value = serde_json::from_str(&output.stdout).expect("one JSON object");
    let keys: Vec<&str> = outline
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "description",
            "input_schema",
            "output_schema",
            "capabilities",
            "runtime_kind",
            "package_ref",
            "service_ref",
            "examples",
            "metadata",
            "agents",
            "models",
            "tools",
            "prompts"
        ]
    );
    assert_eq!(outline["input_schema"]["required"], json!(["ticket"]));
    assert_eq!(
        outline["capabilities"],
        json!(["arun", "events", "run", "stream"])
    );
    assert_eq!(outline["service_ref"], Value::Null);
    assert_eq!(
        outline["agents"],
        json!([{
            "name": "triager", "model": "mock/script", "tools": [], "mcp_servers": [],
            "system_prompt": "triager/system (inline)", "dialogs": ["main"],
            "prompts": ["sort (inline)"],
        }])
    );
    assert_eq!(
        outline["models"],
        json!([{"name": "mock/script", "provider": "mock", "service": null, "priced": true,
                "agents": ["triager"]}])
    );
    // The library's `TacticInfo` reads its own keys back.
    let info: lllm::TacticInfo = serde_json::from_value(outline.clone()).unwrap();
    assert_eq!(info.name, "triage");
    assert_eq!(info.metadata["owner"], "support-team");

    let output = test.run(&["inspect", &shipped("research.yaml"), "--json"]);
    output.expect_code(0);
    let outline: Value = serde_json::from_str(&output.stdout).unwrap();
    let tools: Vec<&str> = outline["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["current_time", "list_dir", "read_file"]);
    assert_eq!(
        outline["tools"][2]["parameters"]["required"],
        json!(["path"])
    );
    assert_eq!(outline["input_schema"], Value::Null);
}

#[test]
fn upstreams_tactic_info_accepts_the_json() {
    let Some(python) = common::python::python() else {
        return;
    };
    let test = Test::new();
    let check = "import json, sys\n\
                 from lllm.protocol import TacticInfo\n\
                 data = json.load(sys.stdin)\n\
                 info = TacticInfo.model_validate(data)\n\
                 dumped = info.model_dump(mode='json')\n\
                 assert list(data)[:len(dumped)] == list(dumped), (list(data), list(dumped))\n\
                 for key, value in dumped.items():\n\
                 \x20   assert data[key] == value, (key, data[key], value)\n\
                 print(info.name, info.runtime_kind, ','.join(info.capabilities))\n";
    for (tactic, name) in [
        ("triage.yaml", "triage"),
        ("summarize.yaml", "summarize"),
        ("research.yaml", "research"),
    ] {
        let output = test.run(&["inspect", &shipped(tactic), "--json"]);
        output.expect_code(0);
        let mut child = Command::new(&python)
            .args(["-c", check])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start python");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(output.stdout.as_bytes())
            .unwrap();
        let result = child.wait_with_output().unwrap();
        assert!(
            result.status.success(),
            "{tactic}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            format!("{name} lllm arun,events,run,stream\n")
        );
    }
}

#[test]
fn a_bad_tactic_is_refused_with_one_line_per_problem() {
    let test = Test::new().file(
        "t.yaml",
        "agent_configs: [{name: a, model_name: mock/echo, tools: [nosuch]}]\n\
         input_schema: {type: 5}\n",
    );
    let output = test.run(&["inspect", "t.yaml", "--json"]);
    output.expect_code(2);
    assert_eq!(output.stdout, "");
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", output.stderr);
    assert!(
        lines[0].starts_with("error: t.yaml:2:") && lines[0].contains("`input_schema`"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("error: t.yaml:1:") && lines[1].contains("nosuch"),
        "{lines:?}"
    );
    let output = test.run(&["inspect", "missing.yaml"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: tactic file `missing.yaml` not found\n"
    );
}

#[test]
fn a_tactic_on_a_paid_model_is_inspected_without_its_key() {
    // The test's environment holds no key: nothing is sent, nothing is needed.
    let test = Test::new().file(
        "t.yaml",
        "agent_configs: [{name: a, model_name: openai/gpt-4o-mini}]\n",
    );
    let output = test.run(&["inspect", "t.yaml", "--json"]);
    output.expect_code(0);
    let outline: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(outline["name"], "t");
    assert_eq!(outline["models"][0]["name"], "openai/gpt-4o-mini");
    assert_eq!(outline["models"][0]["priced"], true);
}
