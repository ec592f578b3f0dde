//! Batch files the ecosystem speaks, and attachments (issue 15), end to end:
//! the real `lllm` against `lllm-mock` on 127.0.0.1 — OpenAI Batch API and
//! Anthropic Message Batches files in, with and without `--tactic`; task
//! lines' attachments and `lllm run --attach` on the wire of both APIs (the
//! mock refuses image parts the real APIs refuse); bad lines refused with one
//! line naming the file, the line and the field.

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

const ECHO: &str = "default: {echo: true}\n";
/// A PNG's first bytes, in base64 (`iVBORw0KGgo=` is `\x89PNG\r\n\x1a\n`).
const PNG_BASE64: &str = "iVBORw0KGgo=";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";

fn lines(values: &[Value]) -> String {
    values.iter().map(|value| format!("{value}\n")).collect()
}

fn results(test: &Test, dir: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(&format!("{dir}/results.jsonl")))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The request bodies the mock got on `path`, by the text of their last user turn.
fn bodies(server: &MockServer, path: &str) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|request| request["path"] == path)
        .map(|request| request["body"].clone())
        .collect()
}

fn openai_line(id: &str, messages: Value, extra: Value) -> Value {
    let mut body = json!({"model": "gpt-4o-mini", "messages": messages});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": body})
}

#[test]
fn an_openai_batch_file_runs_without_a_tactic() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO);
    let tasks = lines(&[
        openai_line(
            "req-1",
            json!([{"role": "system", "content": "Be terse."},
                   {"role": "user", "content": "First question"},
                   {"role": "assistant", "content": "First answer"},
                   {"role": "user", "content": [
                       {"type": "text", "text": "Which bird?"},
                       {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}"), "detail": "low"}}]}]),
            json!({"max_completion_tokens": 64, "temperature": 0.5}),
        ),
        openai_line(
            "req-2",
            json!([{"role": "user", "content": "Just this"}]),
            json!({}),
        ),
    ]);
    let test = test
        .file("batch.jsonl", &tasks)
        .env("OPENAI_BASE_URL", &server.base_url())
        .env("OPENAI_API_KEY", "sk-test-secret");
    let output = test.run(&["batch", "batch.jsonl", "-o", "out", "-q"]);
    output.expect_code(0);
    let results = results(&test, "out");
    assert_eq!(results.len(), 2);
    let first = results
        .iter()
        .find(|result| result["id"] == "req-1")
        .unwrap();
    assert_eq!(first["state"], "success");
    assert_eq!(first["delivery"], "Which bird?");

    let bodies = bodies(&server, "/v1/chat/completions");
    let body = bodies
        .iter()
        .find(|body| body["messages"].as_array().unwrap().len() == 4)
        .expect("the conversation's request");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["max_completion_tokens"], 64);
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be terse."})
    );
    assert_eq!(body["messages"][1]["content"], "First question");
    assert_eq!(body["messages"][2]["content"], "First answer");
    assert_eq!(
        body["messages"][3]["content"],
        json!([{"type": "text", "text": "Which bird?"},
               {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}"), "detail": "low"}}])
    );
    // The default tactic adds no system prompt of its own.
    let plain = bodies
        .iter()
        .find(|body| body["messages"].as_array().unwrap().len() == 1)
        .expect("the single-turn request");
    assert_eq!(plain["messages"][0]["role"], "user");
    // The default tactic is on disk for `lllm replay --rerun`.
    let default = std::fs::read_to_string(test.path("out/default_tactic.yaml")).unwrap();
    assert!(default.contains("tactic_type: batch_default"), "{default}");
    // The record holds the line's model, conversation and image: a re-run
    // offline sends the same requests.
    let sent = server.requests().len();
    let output = test.run(&["replay", "out/sessions.jsonl", "--id", "req-1", "--rerun"]);
    output.expect_code(0);
    assert!(
        output.stdout.contains("identical: 1 model call replayed"),
        "{}{}",
        output.stdout,
        output.stderr
    );
    assert_eq!(server.requests().len(), sent, "a re-run sends nothing");
}

#[test]
fn an_anthropic_batch_file_runs_without_and_with_a_tactic() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO);
    let tasks = lines(&[
        json!({"custom_id": "a-1", "params": {
            "model": "claude-haiku-4-5", "max_tokens": 100, "system": "Be terse.",
            "stop_sequences": ["END"],
            "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
                {"type": "text", "text": "Which bird?"}]}]}}),
        json!({"custom_id": "a-2", "params": {
            "model": "claude-haiku-4-5", "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello."},
                         {"role": "user", "content": "Again"}]}}),
    ]);
    let tactic = format!(
        "tactic_type: terse\nagent_configs:\n  - {{name: a, model_name: anthropic/claude-sonnet-4-5, system_prompt: From the tactic.}}\nproviders:\n  anthropic: {{api: anthropic, base_url: \"{}\"}}\n",
        server.url
    );
    let test = test
        .file("requests.jsonl", &tasks)
        .file("terse.yaml", &tactic)
        .env("ANTHROPIC_BASE_URL", &server.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-secret");
    test.run(&["batch", "requests.jsonl", "-o", "plain", "-q"])
        .expect_code(0);
    let results = results(&test, "plain");
    assert!(
        results.iter().all(|result| result["state"] == "success"),
        "{results:?}"
    );
    let bodies_plain = bodies(&server, "/v1/messages");
    assert_eq!(bodies_plain.len(), 2);
    let first = bodies_plain
        .iter()
        .find(|body| body["max_tokens"] == 100)
        .unwrap();
    assert_eq!(first["model"], "claude-haiku-4-5");
    assert_eq!(first["system"], "Be terse.");
    assert_eq!(first["stop_sequences"], json!(["END"]));
    // The turn's text is the task; its images follow it.
    assert_eq!(
        first["messages"][0]["content"],
        json!([{"type": "text", "text": "Which bird?"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}}])
    );
    let second = bodies_plain
        .iter()
        .find(|body| body["max_tokens"] == 10)
        .unwrap();
    assert!(second.get("system").is_none(), "{second}");
    assert_eq!(second["messages"].as_array().unwrap().len(), 3);

    // With `--tactic`: the line's model and messages, the tactic's agent.
    test.run(&[
        "batch",
        "requests.jsonl",
        "--tactic",
        "terse.yaml",
        "-o",
        "tactic",
        "-q",
    ])
    .expect_code(0);
    let all = bodies(&server, "/v1/messages");
    let with_tactic = &all[2..];
    assert_eq!(with_tactic.len(), 2);
    assert!(
        with_tactic
            .iter()
            .all(|body| body["model"] == "claude-haiku-4-5")
    );
    let second = with_tactic
        .iter()
        .find(|body| body["max_tokens"] == 10)
        .unwrap();
    assert_eq!(second["system"], "From the tactic.");
    let record: Value = std::fs::read_to_string(test.path("tactic/sessions.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["task_id"] == "a-1")
        .unwrap();
    assert_eq!(record["model"], "anthropic/claude-haiku-4-5");
    assert_eq!(record["tactic"]["name"], "terse");
    assert_eq!(record["attachments"][0]["type"], "image_url");
}

#[test]
fn attachments_reach_the_wire_of_both_apis() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO);
    let tactic = |api: &str, model: &str, url: &str| {
        format!(
            "tactic_type: see\nagent_configs:\n  - {{name: a, model_name: local/{model}}}\nproviders:\n  local: {{api: {api}, base_url: \"{url}\", api_key_env: KEY}}\n"
        )
    };
    let tasks = lines(&[json!({"id": "t1", "task": "Describe.", "attachments": [
        "images/owl.jpg", {"path": "notes.txt"}]})]);
    let test = test
        .file(
            "openai.yaml",
            &tactic("openai", "gpt-4o", &server.base_url()),
        )
        .file(
            "anthropic.yaml",
            &tactic("anthropic", "claude-haiku-4-5", &server.url),
        )
        .file("notes.txt", "Owls hunt at night.\n")
        .file("tasks.jsonl", &tasks)
        .env("KEY", "secret");
    // Named `.jpg`, holding a PNG: the bytes decide.
    std::fs::create_dir_all(test.path("images")).unwrap();
    std::fs::write(test.path("images/owl.jpg"), PNG).unwrap();
    for (tactic, out) in [("openai.yaml", "o"), ("anthropic.yaml", "a")] {
        test.run(&["batch", "tasks.jsonl", "--tactic", tactic, "-o", out, "-q"])
            .expect_code(0);
    }
    let chat = &bodies(&server, "/v1/chat/completions")[0];
    assert_eq!(
        chat["messages"][1]["content"],
        json!([{"type": "text", "text": "Describe."},
               {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}")}},
               {"type": "text", "text": "<file name=\"notes.txt\">\nOwls hunt at night.\n</file>"}])
    );
    let messages = &bodies(&server, "/v1/messages")[0];
    assert_eq!(
        messages["messages"][0]["content"],
        json!([{"type": "text", "text": "Describe."},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
               {"type": "text", "text": "<file name=\"notes.txt\">\nOwls hunt at night.\n</file>"}])
    );

    // `lllm run --attach`, the same way.
    let output = test.run(&[
        "run",
        "anthropic.yaml",
        "--task",
        "What is this?",
        "--attach",
        "images/owl.jpg",
        "--no-record",
    ]);
    output.expect_code(0);
    let last = bodies(&server, "/v1/messages").pop().unwrap();
    assert_eq!(
        last["messages"][0]["content"][1]["source"]["media_type"],
        "image/png"
    );
    assert_eq!(last["messages"][0]["content"][0]["text"], "What is this?");

    // An attachment that is neither an image nor text is refused before anything is sent.
    std::fs::write(test.path("blob.bin"), b"\x00\x01\x02\x03").unwrap();
    let sent = server.requests().len();
    let output = test.run(&[
        "run",
        "anthropic.yaml",
        "--task",
        "x",
        "--attach",
        "blob.bin",
        "--no-record",
    ]);
    output.expect_code(2);
    assert_eq!(output.stderr.trim().lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains("--attach: attachment `blob.bin`: neither an image"),
        "{}",
        output.stderr
    );
    assert_eq!(server.requests().len(), sent);
}

#[test]
fn bad_lines_get_one_line_naming_the_file_line_and_field() {
    let cases: [(&str, String, &str); 6] = [
        (
            "tasks.jsonl",
            lines(&[
                json!({"id": "a", "task": "x"}),
                json!({"id": "b", "task": "y", "attachments": ["gone.png"]}),
            ]),
            "tasks.jsonl:2: `attachments[0]`: attachment `gone.png`: cannot read it:",
        ),
        (
            "tasks.jsonl",
            lines(&[json!({"id": "a", "task": "x", "model_args": {"messages": []}})]),
            "tasks.jsonl:1: `model_args` may not hold `messages`",
        ),
        (
            "batch.jsonl",
            lines(&[
                openai_line("r1", json!([{"role": "user", "content": "x"}]), json!({})),
                json!({"custom_id": "r2", "params": {"model": "m", "messages": []}}),
            ]),
            "batch.jsonl:2: an Anthropic Message Batches line (`custom_id`, `params`) in a file of OpenAI Batch API lines",
        ),
        (
            "batch.jsonl",
            lines(&[
                json!({"custom_id": "r1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}),
            ]),
            "batch.jsonl:1: `url` is `/v1/chat/completions`",
        ),
        (
            "batch.jsonl",
            lines(&[openai_line(
                "r1",
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]),
                json!({}),
            )]),
            "batch.jsonl:1: `body`: messages[0].content[0]: the data: URL's bytes are not an image",
        ),
        (
            "tasks.jsonl",
            lines(&[json!({"id": "a", "task": "x"})]),
            "tasks.jsonl:1: no tactic",
        ),
    ];
    for (name, text, expected) in cases {
        let test = Test::new()
            .file(name, &text)
            .file(
                "t.yaml",
                "agent_configs: [{name: a, model_name: mock/echo}]\n",
            )
            .env("OPENAI_API_KEY", "sk-unused");
        let mut args = vec!["batch", name, "-o", "out", "-q"];
        if !expected.contains("no tactic") {
            args.extend(["--tactic", "t.yaml"]);
        }
        let output = test.run(&args);
        output.expect_code(2);
        assert!(
            output.stderr.contains(expected),
            "{expected}\n{}",
            output.stderr
        );
        let problem_lines = output
            .stderr
            .lines()
            .filter(|line| line.starts_with(&format!("error: {name}:")))
            .count();
        assert_eq!(problem_lines, 1, "{}", output.stderr);
        assert!(
            !test.path("out").exists(),
            "a refused batch leaves nothing behind"
        );
    }
    // `--input-format` names a format, with a suggestion.
    let test = Test::new().file("t.jsonl", "\"x\"\n");
    let output = test.run(&["batch", "t.jsonl", "-o", "out", "--input-format", "opneai"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("did you mean `openai`"),
        "{}",
        output.stderr
    );
}

fn jsonl(test: &Test, path: &str) -> Vec<Value> {
    std::fs::read_to_string(test.path(path))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn openai_batch_output_is_written_and_survives_resume_and_merge() {
    let test = Test::new();
    let refusing = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: refuse}\n    reply: {fault: {status: 400, message: no thanks}}\ndefault: {echo: true}\n",
    );
    let tasks = lines(&[
        openai_line(
            "r1",
            json!([{"role": "user", "content": "Hello"}]),
            json!({}),
        ),
        openai_line(
            "r2",
            json!([{"role": "user", "content": "please refuse"}]),
            json!({}),
        ),
        openai_line("r3", json!([{"role": "user", "content": "Bye"}]), json!({})),
    ]);
    let test = test
        .file("batch.jsonl", &tasks)
        .env("OPENAI_BASE_URL", &refusing.base_url())
        .env("OPENAI_API_KEY", "sk-test-secret");
    let run = |test: &Test, extra: &[&str]| {
        let mut args = vec!["batch", "batch.jsonl", "--output-format", "openai", "-q"];
        args.extend(extra);
        test.run(&args)
    };
    run(&test, &["-o", "out"]).expect_code(1);
    let own = results(&test, "out");
    let session = |id: &str| {
        own.iter().find(|result| result["id"] == id).unwrap()["session_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let output = jsonl(&test, "out/openai_output.jsonl");
    assert_eq!(output.len(), 2);
    let first = output
        .iter()
        .find(|line| line["custom_id"] == "r1")
        .unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "custom_id", "response", "error"]);
    assert_eq!(first["id"], format!("batch_req_{}", session("r1")));
    assert_eq!(first["error"], Value::Null);
    let response = &first["response"];
    assert_eq!(response["status_code"], 200);
    assert_eq!(response["request_id"], session("r1"));
    let body = &response["body"];
    assert_eq!(body["id"], format!("chatcmpl-{}", session("r1")));
    assert_eq!(body["object"], "chat.completion");
    assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(body["model"], "gpt-4o-mini");
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Hello");
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["logprobs"], Value::Null);
    let usage = &body["usage"];
    let tokens = |key: &str| usage[key].as_u64().unwrap();
    assert!(tokens("prompt_tokens") > 0 && tokens("completion_tokens") > 0);
    assert_eq!(
        tokens("total_tokens"),
        tokens("prompt_tokens") + tokens("completion_tokens")
    );
    let errors = jsonl(&test, "out/openai_errors.jsonl");
    assert_eq!(errors.len(), 1);
    let refused = &errors[0];
    assert_eq!(refused["custom_id"], "r2");
    assert_eq!(refused["id"], format!("batch_req_{}", session("r2")));
    assert_eq!(refused["response"]["status_code"], 400);
    assert_eq!(refused["response"]["request_id"], session("r2"));
    assert_eq!(
        refused["response"]["body"]["error"]["type"],
        "invalid_request_error"
    );
    assert!(
        refused["response"]["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no thanks")
    );
    assert_eq!(refused["error"], Value::Null);

    // `--retry-errors` against a server that answers: each task once, in its final state.
    let answering = MockServer::start(test.dir.path(), ECHO);
    let test = test.env("OPENAI_BASE_URL", &answering.base_url());
    run(&test, &["-o", "out", "--retry-errors"]).expect_code(0);
    let output = jsonl(&test, "out/openai_output.jsonl");
    let mut ids: Vec<&str> = output
        .iter()
        .map(|line| line["custom_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["r1", "r2", "r3"]);
    assert!(jsonl(&test, "out/openai_errors.jsonl").is_empty());

    // Shards, then a merge: the merged directory has the OpenAI files over the winners.
    run(&test, &["-o", "s1", "--shard", "1/2"]).expect_code(0);
    run(&test, &["-o", "s2", "--shard", "2/2"]).expect_code(0);
    let shard_lines =
        jsonl(&test, "s1/openai_output.jsonl").len() + jsonl(&test, "s2/openai_output.jsonl").len();
    assert_eq!(shard_lines, 3);
    test.run(&["merge", "s1", "s2", "-o", "merged", "-q"])
        .expect_code(0);
    let merged = jsonl(&test, "merged/openai_output.jsonl");
    assert_eq!(merged.len(), 3);
    assert!(
        !std::fs::read_to_string(test.path("merged/openai_output.jsonl"))
            .unwrap()
            .contains("sk-test-secret")
    );
}

#[test]
fn a_lines_model_and_model_args_hold_for_every_agent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), ECHO);
    let tactic = format!(
        "tactic_type: two
global: {{model_name: local/configured, model_args: {{temperature: 1}}}}
agent_configs:
  - {{name: writer, system_prompt: Write.}}
  - {{name: critic, system_prompt: Judge., model_name: local/other}}
providers:
  local: {{api: openai, base_url: \"{}\", api_key_env: KEY}}
flow:
  - {{step: draft, agent: writer, text: '{{{{ task }}}}'}}
  - {{step: review, agent: critic, text: 'check: {{{{ draft.content }}}}'}}
",
        server.base_url()
    );
    let tasks = lines(&[
        json!({"id": "a", "task": "owls", "model": "local/chosen", "model_args": {"temperature": 0, "seed": 7}}),
        json!({"id": "b", "task": "bats"}),
    ]);
    let test = test
        .file("two.yaml", &tactic)
        .file("tasks.jsonl", &tasks)
        .env("KEY", "secret");
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "two.yaml",
        "-o",
        "out",
        "-q",
    ])
    .expect_code(0);
    let bodies = bodies(&server, "/v1/chat/completions");
    assert_eq!(bodies.len(), 4);
    let of = |text: &str| {
        bodies
            .iter()
            .filter(|body| {
                body["messages"][1]["content"]
                    .as_str()
                    .is_some_and(|content| content.contains(text))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(of("owls").len(), 2);
    for body in of("owls") {
        assert_eq!(body["model"], "chosen", "every agent runs the line's model");
        assert_eq!(body["temperature"], 0, "the line's argument wins");
        assert_eq!(body["seed"], 7);
    }
    let models: Vec<&Value> = of("bats").iter().map(|body| &body["model"]).collect();
    assert_eq!(models, [&json!("configured"), &json!("other")]);
}

/// Issue 27: `finish_reason` was always `stop` in `openai_output.jsonl`, even
/// when the record said `length`. Each task's line has its final reply's
/// reason, an Anthropic reply's in the chat completions' words.
#[test]
fn openai_batch_output_keeps_each_final_reply_s_finish_reason() {
    let test = Test::new();
    let script = "rules:\n  - when: {contains: long}\n    reply: {text: \"cut sh\", finish_reason: length}\n\
                  default: {echo: true}\n";
    let server = MockServer::start(test.dir.path(), script);
    let tasks = lines(&[
        json!({"id": "long", "task": "a long answer"}),
        json!({"id": "short", "task": "a short one"}),
    ]);
    for api in ["openai", "anthropic"] {
        let base_url = match api {
            "openai" => server.base_url(),
            _ => server.url.clone(),
        };
        let tactic = format!(
            "agent_configs:\n  - {{name: a, model_name: local/m}}\n\
             providers:\n  local: {{api: {api}, base_url: \"{base_url}\", api_key_env: TEST_KEY}}\n"
        );
        let test = Test::new()
            .file("t.yaml", &tactic)
            .file("tasks.jsonl", &tasks)
            .env("TEST_KEY", "test-key");
        test.batch("t.yaml", "out", &["--output-format", "openai"])
            .expect_code(0);
        let output = jsonl(&test, "out/openai_output.jsonl");
        let reason = |id: &str| {
            output.iter().find(|line| line["custom_id"] == id).unwrap()["response"]["body"]
                ["choices"][0]["finish_reason"]
                .clone()
        };
        assert_eq!(reason("long"), "length", "{api}");
        assert_eq!(reason("short"), "stop", "{api}");
        let own = results(&test, "out");
        let long = own.iter().find(|line| line["id"] == "long").unwrap();
        let recorded = if api == "openai" {
            "length"
        } else {
            "max_tokens"
        };
        assert_eq!(
            long["finish_reason"], recorded,
            "results.jsonl keeps the provider's word"
        );
    }
}
