//! `lllm serve` called by real Python clients (the venv of
//! `scripts/python-env`, found by `common::python`): the `openai` SDK
//! through the OpenAI-compatible face, plain and streaming, and upstream
//! lllm-core 0.2.1's own `RemoteTactic` (`lllm.services.client`), unchanged:
//! `run`, `stream`, `aevents`, `fetch_info`, and its error on a 400.

mod common;

use common::serve::Served;
use common::{MockServer, Test, python};
use serde_json::{Value, json};

fn tactic(base_url: &str) -> String {
    format!(
        r#"tactic_type: helper
description: Answers through the mock.
global: {{model_name: local/m, max_llm_recall: 0}}
agent_configs:
  - name: assistant
    system_prompt: "Answer the task."
providers:
  local: {{api: openai, base_url: "{base_url}", retry_base_ms: 1, retry_cap_ms: 5}}
"#
    )
}

const SCRIPT: &str =
    "default: {text: \"ok from lllm\", usage: {prompt_tokens: 10, completion_tokens: 3}}\n";

/// Runs `code` (it prints one JSON value) with `lllm serve`'s URL as its argument.
#[track_caller]
fn python_json(python: &std::path::Path, code: &str, url: &str) -> Value {
    let output = python::run_code(python, code, &[url], &[]);
    output.expect_code(0);
    serde_json::from_str(output.stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: {}\n{}", output.stdout, output.stderr))
}

const OPENAI: &str = r#"
import json, sys
from openai import OpenAI, APIStatusError
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
out = {}
out["models"] = [model.id for model in client.models.list()]
reply = client.chat.completions.create(model="helper", messages=[
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "earlier"},
    {"role": "assistant", "content": "noted"},
    {"role": "user", "content": "now"}])
out["content"] = reply.choices[0].message.content
out["finish_reason"] = reply.choices[0].finish_reason
out["usage"] = [reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens]
chunks = client.chat.completions.create(model="helper", stream=True,
    stream_options={"include_usage": True},
    messages=[{"role": "user", "content": "stream it"}])
pieces, finish, usage = [], None, None
for chunk in chunks:
    if chunk.usage is not None:
        usage = chunk.usage.total_tokens
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        finish = choice.finish_reason or finish
out["streamed"] = "".join(pieces)
out["stream_finish"] = finish
out["stream_usage"] = usage
try:
    client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
except APIStatusError as error:
    out["error"] = [error.status_code, error.body["type"] if isinstance(error.body, dict) and "type" in error.body else error.body]
print(json.dumps(out))
"#;

#[test]
fn the_openai_sdk_calls_a_tactic_as_a_model() {
    let Some(python) = python::python() else {
        return;
    };
    let test = Test::new();
    let mock = MockServer::start(test.dir.path(), SCRIPT);
    let test = test
        .file("t.yaml", &tactic(&mock.base_url()))
        .env("LLLM_HOME", "home");
    let served = Served::start(&test, &["t.yaml"]);
    let out = python_json(&python, OPENAI, &served.url);
    assert_eq!(out["models"], json!(["helper"]));
    assert_eq!(out["content"], "ok from lllm");
    assert_eq!(out["finish_reason"], "stop");
    assert_eq!(out["usage"], json!([10, 3, 13]));
    assert_eq!(out["streamed"], "ok from lllm");
    assert_eq!(out["stream_finish"], "stop");
    assert_eq!(out["stream_usage"], 13);
    assert_eq!(out["error"][0], 404, "{out}");
    // The earlier messages were the conversation, the last the task.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let roles: Vec<(&str, &str)> = requests[0]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap(),
                message["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("system", "Be brief."),
            ("user", "earlier"),
            ("assistant", "noted"),
            ("user", "now")
        ]
    );
}

const REMOTE: &str = r#"
import asyncio, json, sys
from lllm.services.client import RemoteTactic, RemoteTacticError
from lllm.protocol import CallContext
url = sys.argv[1]
out = {}
remote = RemoteTactic(url, name="helper")
named = RemoteTactic(url + "/tactics/helper/run")
out["info"] = remote.fetch_info().model_dump(mode="json")
out["named_info"] = named.fetch_info().name
out["run"] = remote.run("hello", context=CallContext(request_id="py-1", tags={"team": "py"}))
out["named_run"] = named.run("again")
out["arun"] = asyncio.run(named.arun("async"))
async def events():
    return [[event.kind, event.data] async for event in remote.aevents("streamed")]
out["events"] = asyncio.run(events())
out["stream"] = list(remote.stream("sync stream"))
try:
    remote.run(5)
    out["error"] = None
except RemoteTacticError as error:
    out["error"] = {"status": error.status_code, "type": error.error_type,
                    "message": error.message, "tactic": error.tactic, "endpoint": error.endpoint}
print(json.dumps(out))
"#;

#[test]
fn upstreams_remote_tactic_calls_lllm_serve_unchanged() {
    let Some(python) = python::python() else {
        return;
    };
    let test = Test::new();
    let mock = MockServer::start(test.dir.path(), SCRIPT);
    let home = test.path("home").display().to_string();
    let test = test
        .file("t.yaml", &tactic(&mock.base_url()))
        .env("LLLM_HOME", &home);
    let served = Served::start(&test, &["t.yaml"]);
    let out = python_json(&python, REMOTE, &served.url);
    assert_eq!(out["info"]["name"], "helper");
    assert_eq!(out["info"]["description"], "Answers through the mock.");
    assert_eq!(out["named_info"], "helper");
    assert_eq!(out["run"], "ok from lllm");
    assert_eq!(out["named_run"], "ok from lllm");
    assert_eq!(out["arun"], "ok from lllm");
    let events = out["events"].as_array().unwrap();
    let (kind, data) = (&events.last().unwrap()[0], &events.last().unwrap()[1]);
    assert_eq!(
        (kind, &data["delivery"]),
        (&json!("result"), &json!("ok from lllm"))
    );
    assert!(events.iter().any(|event| event[0] == "model_call_started"));
    let stream = out["stream"].as_array().unwrap();
    assert_eq!(stream.last().unwrap()["delivery"], "ok from lllm");
    assert_eq!(
        out["error"],
        json!({"status": 400, "type": "SchemaError", "tactic": "helper", "endpoint": "run",
               "message": out["error"]["message"]})
    );
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`input`: "),
        "{out}"
    );
    // The context's request id and tags are in the session's record.
    assert_eq!(
        mock.requests().len(),
        5,
        "run, named run, arun, aevents, stream"
    );
    served.eventually("the sessions indexed", || {
        test.run(&["logs", "--json", "--tag", "request_id=py-1"])
            .expect_code(0)
            .json_lines()
            .len()
            == 1
    });
    let found = test
        .run(&["logs", "--json", "--tag", "request_id=py-1"])
        .expect_code(0)
        .json_lines();
    assert_eq!(found.len(), 1);
    let found = test
        .run(&["logs", "--json", "--tag", "team=py"])
        .expect_code(0)
        .json_lines();
    assert_eq!(found.len(), 1);
}
