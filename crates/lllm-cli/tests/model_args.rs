//! `-O KEY=VALUE` / `--model-arg` on `lllm run` and `lllm batch` (issue 27),
//! end to end against `lllm-mock`: the values reach the wire typed as YAML,
//! for every agent or the one named; the command line wins over the tactic
//! and over a task line's `model_args`; `--show-config` shows them; the
//! record keeps them, so `replay --rerun` sends them again; they are part of
//! the response cache's key; a bad pair is one error line and exit 2 with
//! nothing sent.

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

/// Two agents on the mock server: the writer drafts, the critic checks.
fn tactic(base_url: &str) -> String {
    format!(
        r#"tactic_type: two
global:
  model_name: local/test-model
  model_args: {{temperature: 0.2, max_tokens: 1024}}
  max_llm_recall: 0
agent_configs:
  - name: writer
    system_prompt: "You write."
  - name: critic
    system_prompt: "You check."
    model_args: {{top_p: 0.5}}
providers:
  local: {{api: openai, base_url: "{base_url}"}}
flow:
  - step: draft
    agent: writer
    text: "Draft: {{{{ task }}}}"
  - step: check
    agent: critic
    text: "Check: {{{{ draft.content }}}}"
"#
    )
}

fn test() -> Test {
    let test = Test::new();
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

/// The bodies of the chat requests the server got, in order.
fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|request| request["path"] == "/v1/chat/completions")
        .map(|request| request["body"].clone())
        .collect()
}

/// The body's model arguments: what is not `model` or `messages`.
fn arguments(body: &Value) -> Value {
    let mut body = body.as_object().cloned().unwrap_or_default();
    body.remove("model");
    body.remove("messages");
    Value::Object(body)
}

#[test]
fn run_sends_them_typed_to_every_agent_or_the_one_named_and_rerun_sends_them_again() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url()));
    let flags = [
        "-O",
        "max_tokens=256",
        "--model-arg",
        "critic.temperature=0",
        "-O",
        "stop=[\"\\n\", END]",
        "-O",
        "critic.top_p=null",
    ];
    let mut args = vec!["run", "t.yaml", "owls", "--record", "run.json", "-q"];
    args.extend(flags);
    test.run(&args).expect_code(0);
    let sent = bodies(&server);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        arguments(&sent[0]),
        json!({"temperature": 0.2, "max_tokens": 256, "stop": ["\n", "END"]}),
        "the writer: every agent's, typed (a number, a list with a line break)"
    );
    assert_eq!(
        arguments(&sent[1]),
        json!({"temperature": 0, "max_tokens": 256, "stop": ["\n", "END"]}),
        "the critic: its own over every agent's; `null` took its `top_p` away"
    );

    // The record keeps them; a re-run sends the same requests.
    let record = test.read_json("run.json");
    assert_eq!(
        record["tactic"]["model_args"],
        json!({"all": {"max_tokens": 256, "stop": ["\n", "END"]},
               "agents": {"critic": {"temperature": 0, "top_p": null}}})
    );
    let rerun = test.run(&["replay", "run.json", "--rerun"]);
    rerun.expect_code(0);
    assert!(
        rerun.stdout.starts_with("identical: 2 model calls"),
        "{}",
        rerun.stdout
    );
    let shown = test.run(&["replay", "run.json"]);
    assert!(
        shown
            .stdout
            .contains("model arguments (`-O`): max_tokens=256 stop=[\"\\n\",\"END\"] critic.temperature=0 critic.top_p=null"),
        "{}",
        shown.stdout
    );

    // `--show-config` shows what runs.
    let mut args = vec!["run", "t.yaml", "--show-config"];
    args.extend(flags);
    let output = test.run(&args);
    output.expect_code(0);
    let config: Value = serde_json::from_str(&output.stdout).expect("JSON");
    assert_eq!(
        config["global"]["model_args"],
        json!({"temperature": 0.2, "max_tokens": 256, "stop": ["\n", "END"]})
    );
    assert_eq!(
        config["agent_configs"][1]["model_args"],
        json!({"temperature": 0, "max_tokens": 256, "stop": ["\n", "END"]})
    );
    assert_eq!(bodies(&server).len(), 2, "--show-config sent nothing");
}

#[test]
fn in_a_batch_the_command_line_wins_over_a_task_line() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let lines = [
        json!({"id": "a", "task": "owls", "model_args": {"temperature": 0.7, "seed": 3}}),
        json!({"id": "b", "task": "bats"}),
    ]
    .map(|line| line.to_string() + "\n")
    .concat();
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &lines);
    test.batch(
        "t.yaml",
        "out",
        &[
            "-j",
            "1",
            "-O",
            "temperature=0",
            "-O",
            "writer.max_tokens=64",
        ],
    )
    .expect_code(0);
    let sent = bodies(&server);
    assert_eq!(sent.len(), 4, "{sent:?}");
    let task = |body: &Value| {
        body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .and_then(|message| message["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let draft_a = sent
        .iter()
        .find(|body| task(body) == "Draft: owls")
        .expect("a's draft");
    assert_eq!(
        arguments(draft_a),
        json!({"temperature": 0, "max_tokens": 64, "seed": 3}),
        "-O over the line's temperature; the line's seed over the tactic's nothing"
    );
    let check_b = sent
        .iter()
        .find(|body| task(body).starts_with("Check: Draft: bats"))
        .expect("b's check");
    assert_eq!(
        arguments(check_b),
        json!({"temperature": 0, "max_tokens": 1024, "top_p": 0.5}),
        "the critic keeps the tactic's max_tokens: `writer.` named the writer only"
    );
    // Each record keeps the run's `-O`.
    let records = std::fs::read_to_string(test.path("out/sessions.jsonl")).expect("records");
    for line in records.lines() {
        let record: Value = serde_json::from_str(line).expect("a record");
        assert_eq!(record["tactic"]["model_args"]["all"]["temperature"], 0);
    }
}

#[test]
fn they_are_part_of_the_response_cache_key() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test.file("t.yaml", &tactic(&server.base_url()));
    let run = |flags: &[&str]| {
        let mut args = vec!["run", "t.yaml", "owls", "--cache", "--no-record", "-q"];
        args.extend(flags);
        test.run(&args).expect_code(0);
        bodies(&server).len()
    };
    assert_eq!(run(&["-O", "max_tokens=10"]), 2);
    assert_eq!(
        run(&["-O", "max_tokens=10"]),
        2,
        "the same -O: answered from the cache"
    );
    assert_eq!(run(&["-O", "max_tokens=11"]), 4, "another -O: sent");
    assert_eq!(run(&[]), 6, "none: the tactic's own, sent");
}

#[test]
fn bad_pairs_are_one_line_each_and_nothing_is_sent() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", "{\"id\": \"a\", \"task\": \"owls\"}\n");
    let output = test.run(&[
        "run",
        "t.yaml",
        "owls",
        "-O",
        "temperature=9",
        "-O",
        "max_tokens",
        "-O",
        "messages=[]",
    ]);
    output.expect_code(2);
    assert_eq!(
        output.stderr.lines().collect::<Vec<_>>(),
        [
            "error: `-O temperature=9`: `temperature: 9` must be a number from 0 to 2 (sampling temperature)",
            "error: `-O max_tokens`: is not `KEY=VALUE`",
            "error: `-O messages=[]`: `messages` is not a model argument: the messages are the \
             dialog's (a task line's own `messages` start it)",
        ]
    );
    let output = test.run(&["run", "t.yaml", "owls", "-O", "critc.temperature=0"]);
    output.expect_code(2);
    assert!(
        output.stderr.starts_with(
            "error: `-O critc.temperature=…`: the tactic has no agent `critc`; did you mean `critic`?"
        ),
        "{}",
        output.stderr
    );
    let output = test.batch("t.yaml", "out", &["-O", "top_p=2"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("`-O top_p=2`: `top_p: 2` must be a number from 0 to 1 (probability mass)"),
        "{}",
        output.stderr
    );
    assert!(bodies(&server).is_empty(), "nothing was sent");
}
