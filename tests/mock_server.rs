//! `lllm-mock` over real HTTP on 127.0.0.1: reply shapes, order and rules,
//! faults (status codes, Retry-After, malformed bodies, resets, timeouts),
//! streaming, and a request log that never holds a key.

mod common;

use std::time::{Duration, Instant};

use common::MockServer;
use serde_json::{Value, json};

async fn post(server: &MockServer, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .header("authorization", "Bearer sk-test-secret")
        .json(&body)
        .send()
        .await
        .expect("request")
}

fn ask(text: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn serves_replies_in_order_after_rules_then_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        dir.path(),
        r#"rules:
  - when: {contains: weather}
    reply: {text: sunny}
    times: 1
replies:
  - text: first
    usage: {prompt_tokens: 7, completion_tokens: 1}
  - tool_calls: [{id: call_9, name: lookup, arguments: '{"q": '}]
  - echo: true
default: {text: fallback}
"#,
    );
    let first: Value = post(&server, ask("weather today?"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["choices"][0]["message"]["content"], "sunny");
    let second: Value = post(&server, ask("hi")).await.json().await.unwrap();
    assert_eq!(second["object"], "chat.completion");
    assert_eq!(second["choices"][0]["message"]["content"], "first");
    assert_eq!(second["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        second["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8})
    );
    let third: Value = post(&server, ask("weather again"))
        .await
        .json()
        .await
        .unwrap();
    let call = &third["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_9");
    assert_eq!(
        call["function"]["arguments"], "{\"q\": ",
        "arguments are sent verbatim"
    );
    assert_eq!(third["choices"][0]["finish_reason"], "tool_calls");
    let fourth: Value = post(&server, ask("repeat me")).await.json().await.unwrap();
    assert_eq!(fourth["choices"][0]["message"]["content"], "repeat me");
    let fifth: Value = post(&server, ask("x")).await.json().await.unwrap();
    assert_eq!(fifth["choices"][0]["message"]["content"], "fallback");

    let log = server.requests();
    assert_eq!(log.len(), 5);
    assert_eq!(log[1]["body"]["messages"][0]["content"], "hi");
    assert!(log[0]["auth"].as_str().unwrap().starts_with("sha256:"));
    let text = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        !text.contains("sk-test-secret"),
        "the key never reaches the log"
    );
}

#[tokio::test]
async fn injects_faults() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        dir.path(),
        "replies:\n  - fault: {status: 429, retry_after_s: 2, retry_after_ms: 1500}\n  - fault: {status: 500}\n  - fault: malformed\n  - fault: reset\n  - fault: timeout\n",
    );
    let limited = post(&server, ask("a")).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    assert_eq!(limited.headers()["retry-after-ms"], "1500");
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(post(&server, ask("b")).await.status(), 500);
    let malformed = post(&server, ask("c")).await;
    assert_eq!(malformed.status(), 200);
    assert!(malformed.json::<Value>().await.is_err());
    let reset = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&ask("d"))
        .send()
        .await;
    let broken = match reset {
        Err(_) => true,
        Ok(response) => response.bytes().await.is_err(),
    };
    assert!(broken, "a reset gives the client an error, not a reply");
    let started = Instant::now();
    let timed_out = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .timeout(Duration::from_millis(300))
        .json(&ask("e"))
        .send()
        .await;
    assert!(
        timed_out.err().is_some_and(|error| error.is_timeout()),
        "no reply before the client's timeout"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    let exhausted = post(&server, ask("f")).await;
    assert_eq!(exhausted.status(), 400);
    let body: Value = exhausted.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("script exhausted after 5 replies")
    );
}

#[tokio::test]
async fn streams_the_same_reply_as_sse() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(
        dir.path(),
        "replies:\n  - text: \"hello streaming world\"\n  - tool_calls: [{id: c1, name: f, arguments: {a: 1}}]\n",
    );
    let mut request = ask("x");
    request["stream"] = json!(true);
    let response = post(&server, request.clone()).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let chunks: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(chunks.last(), Some(&"[DONE]"));
    let content: String = chunks
        .iter()
        .filter_map(|chunk| serde_json::from_str::<Value>(chunk).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "hello streaming world");
    let text = post(&server, request).await.text().await.unwrap();
    let arguments: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|chunk| serde_json::from_str::<Value>(chunk).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(arguments, "{\"a\":1}");
}

#[tokio::test]
async fn honours_latency() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(dir.path(), "latency_ms: 120\ndefault: {text: ok}\n");
    let started = Instant::now();
    assert_eq!(post(&server, ask("x")).await.status(), 200);
    assert!(started.elapsed() >= Duration::from_millis(120));
}

#[test]
fn refuses_bad_scripts_and_remote_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.yaml");
    std::fs::write(&script, "replys: []\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .arg("--script")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("did you mean `replies`?"), "{stderr}");
    std::fs::write(&script, "default: {text: ok}\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .args(["--host", "0.0.0.0", "--script"])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}
