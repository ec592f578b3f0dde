//! The real `lllm-mock` binary over HTTP on 127.0.0.1: reply shapes, order,
//! rules and the default; faults (statuses, Retry-After, malformed bodies,
//! resets, timeouts, cut streams); SSE; latency; the request log (which never
//! holds a key); the Responses and Anthropic APIs; a clean SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const KEY: &str = "sk-test-secret";

/// An `lllm-mock` process on 127.0.0.1 with a temp script and log, killed on drop.
struct Mock {
    child: Child,
    url: String,
    log: PathBuf,
    _directory: tempfile::TempDir,
}

impl Mock {
    fn start(script: &str) -> Mock {
        Mock::start_with(script, &[])
    }

    fn start_with(script: &str, arguments: &[&str]) -> Mock {
        let directory = tempfile::tempdir().expect("temp dir");
        let script_path = directory.path().join("script.yaml");
        std::fs::write(&script_path, script).expect("write the script");
        let log = directory.path().join("requests.jsonl");
        let mut child = Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
            .arg("--script")
            .arg(&script_path)
            .arg("--log")
            .arg(&log)
            .args(arguments)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lllm-mock");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the banner");
        let url = match line.trim().strip_prefix("listening on http://127.0.0.1:") {
            Some(port) if port.parse::<u16>().is_ok() => format!("http://127.0.0.1:{port}"),
            _ => {
                let _ = child.kill();
                panic!("unexpected banner {line:?}");
            }
        };
        Mock {
            child,
            url,
            log,
            _directory: directory,
        }
    }

    fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.endpoint(path))
            .header("authorization", format!("Bearer {KEY}"))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .expect("a response")
    }

    async fn chat(&self, body: Value) -> Value {
        let response = self.post("/v1/chat/completions", body).await;
        assert_eq!(response.status(), 200);
        response.json().await.expect("a JSON body")
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON log line"))
            .collect()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ask(text: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": text}]})
}

fn streamed(text: &str) -> Value {
    let mut body = ask(text);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    body
}

fn content(completion: &Value) -> &Value {
    &completion["choices"][0]["message"]["content"]
}

/// The `data:` payloads of an SSE body.
fn data_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect()
}

#[tokio::test]
async fn a_text_reply_is_a_chat_completion() {
    let mock = Mock::start(
        "replies:\n  - {text: Hello, usage: {prompt_tokens: 12, completion_tokens: 3}}\n  - Estimated\n",
    );
    let completion = mock.chat(ask("hi")).await;
    assert!(completion["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(completion["object"], "chat.completion");
    assert!(completion["created"].as_i64().is_some());
    assert_eq!(completion["model"], "m");
    let choice = &completion["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Hello");
    assert!(choice["message"].get("tool_calls").is_none());
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(
        completion["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})
    );
    let estimated = mock.chat(ask("a longer question here")).await;
    assert_eq!(
        estimated["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}),
        "four characters a token"
    );
}

#[tokio::test]
async fn tool_calls_send_their_arguments_verbatim() {
    let mock = Mock::start(
        "replies:\n  - tool_calls:\n      - {id: call_9, name: lookup, arguments: '{\"q\": '}\n      - {name: word_count, arguments: {text: a b c}}\n",
    );
    let completion = mock.chat(ask("x")).await;
    let message = &completion["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(
        message["tool_calls"],
        json!([
            {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": "}},
            {"id": "call_1", "type": "function", "function": {"name": "word_count", "arguments": "{\"text\":\"a b c\"}"}},
        ])
    );
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn replies_rules_echo_and_the_default() {
    let mock = Mock::start(
        "rules:\n  - when: {contains: weather}\n    reply: {text: sunny}\n    times: 2\n  - when: {last_role: tool}\n    reply: {text: thanks for the result}\nreplies:\n  - first\n  - second\n  - echo: true\ndefault: {text: fallback}\n",
    );
    let tool_result = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "42"},
    ]});
    let parts = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "repeat me"}]},
    ]});
    let requests = [
        (ask("weather?"), "sunny"),
        (ask("hi"), "first"),
        (tool_result, "thanks for the result"),
        (ask("weather again"), "sunny"),
        (ask("weather, third time"), "second"),
        (parts, "repeat me"),
        (ask("more"), "fallback"),
        (ask("and more"), "fallback"),
    ];
    for (number, (request, expected)) in requests.into_iter().enumerate() {
        let completion = mock.chat(request).await;
        assert_eq!(content(&completion), expected, "request {number}");
    }
}

#[tokio::test]
async fn an_exhausted_script_is_a_permanent_error() {
    let mock = Mock::start("replies: [only]\n");
    assert_eq!(content(&mock.chat(ask("a")).await), "only");
    let response = mock.post("/v1/chat/completions", ask("b")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(
        body["error"]["message"],
        "lllm-mock: script exhausted after 1 replies"
    );
}

#[tokio::test]
async fn http_faults_carry_status_headers_and_body() {
    let mock = Mock::start(
        "replies:\n  - fault: {status: 500}\n  - fault: {status: 429, retry_after_s: 1, retry_after_ms: 1500}\n  - fault: {status: 400, code: insufficient_quota, message: out of credit}\n",
    );
    let failed = mock.post("/v1/chat/completions", ask("a")).await;
    assert_eq!(failed.status(), 500);
    let body: Value = failed.json().await.expect("JSON");
    assert_eq!(body["error"]["type"], "server_error");
    assert!(body["error"]["message"].is_string());

    let limited = mock.post("/v1/chat/completions", ask("b")).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    assert_eq!(limited.headers()["retry-after-ms"], "1500");
    let body: Value = limited.json().await.expect("JSON");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let quota = mock.post("/v1/chat/completions", ask("c")).await;
    assert_eq!(quota.status(), 400);
    let body: Value = quota.json().await.expect("JSON");
    assert_eq!(
        body["error"],
        json!({"message": "out of credit", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"})
    );
}

#[tokio::test]
async fn connection_faults() {
    let mock = Mock::start(
        "replies:\n  - fault: malformed\n  - fault: reset\n  - fault: timeout\n  - text: after the faults\n",
    );
    let malformed = mock.post("/v1/chat/completions", ask("a")).await;
    assert_eq!(malformed.status(), 200);
    assert_eq!(malformed.text().await.expect("a body"), "{not json");

    let reset = reqwest::Client::new()
        .post(mock.endpoint("/v1/chat/completions"))
        .json(&ask("b"))
        .send()
        .await;
    let error = reset.expect_err("a reset is an error, not a response");
    assert!(!error.is_timeout(), "{error:?}");

    let started = Instant::now();
    let held = reqwest::Client::new()
        .post(mock.endpoint("/v1/chat/completions"))
        .timeout(Duration::from_millis(300))
        .json(&ask("c"))
        .send()
        .await;
    assert!(
        held.expect_err("no reply").is_timeout(),
        "the client gave up"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));

    assert_eq!(content(&mock.chat(ask("d")).await), "after the faults");
    let statuses: Vec<Value> = mock
        .requests()
        .iter()
        .map(|entry| entry["status"].clone())
        .collect();
    assert_eq!(statuses, [json!(200), Value::Null, Value::Null, json!(200)]);
}

#[tokio::test]
async fn a_stream_assembles_to_the_same_reply() {
    let mock = Mock::start(
        "default:\n  text: streams arrive in several pieces\n  tool_calls: [{id: c1, name: f, arguments: {a: 1}}]\n  usage: {prompt_tokens: 4, completion_tokens: 5}\n",
    );
    let whole = mock.chat(ask("x")).await;
    let response = mock.post("/v1/chat/completions", streamed("x")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.expect("a body");
    let lines = data_lines(&text);
    assert_eq!(lines.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON chunk"))
        .collect();
    let mut assembled = String::new();
    let mut arguments = String::new();
    let mut finish = Value::Null;
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        let delta = &chunk["choices"][0]["delta"];
        assembled.push_str(delta["content"].as_str().unwrap_or_default());
        if let Some(call) = delta["tool_calls"].get(0) {
            assert_eq!(call["index"], 0);
            if let Some(id) = call.get("id") {
                assert_eq!(id, "c1");
                assert_eq!(call["function"]["name"], "f");
            }
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if !chunk["choices"][0]["finish_reason"].is_null() {
            finish = chunk["choices"][0]["finish_reason"].clone();
        }
    }
    let content_chunks = chunks
        .iter()
        .filter(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|text| !text.is_empty())
        })
        .count();
    assert!(content_chunks > 1, "the text arrives in several deltas");
    let message = &whole["choices"][0]["message"];
    assert_eq!(assembled, message["content"]);
    assert_eq!(arguments, message["tool_calls"][0]["function"]["arguments"]);
    assert_eq!(finish, "tool_calls");
    assert_eq!(
        chunks.last().map(|chunk| &chunk["usage"]),
        Some(&whole["usage"])
    );

    let mut without_usage = streamed("x");
    without_usage["stream_options"] = json!({"include_usage": false});
    let text = mock
        .post("/v1/chat/completions", without_usage)
        .await
        .text()
        .await
        .expect("a body");
    assert!(!text.contains("\"usage\""), "usage only when asked: {text}");
}

#[tokio::test]
async fn a_cut_stream_ends_without_done() {
    let mock = Mock::start("replies:\n  - fault: cut_stream\n  - fault: cut_stream\n");
    let response = mock.post("/v1/chat/completions", streamed("x")).await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut received = Vec::new();
    let mut failed = false;
    while let Some(piece) = body.next().await {
        match piece {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&received);
    assert!(failed, "the body breaks off: {text}");
    assert!(!data_lines(&text).is_empty(), "some chunks came first");
    assert!(!text.contains("[DONE]"));
    let whole = mock.post("/v1/chat/completions", ask("y")).await;
    assert!(
        whole.text().await.is_err(),
        "a non-streamed body is cut too"
    );
}

#[tokio::test]
async fn latency_is_respected() {
    let mock = Mock::start("latency_ms: 120\nreplies:\n  - a\n  - {text: b, delay_ms: 200}\n");
    let started = Instant::now();
    mock.chat(ask("x")).await;
    assert!(started.elapsed() >= Duration::from_millis(120));
    let started = Instant::now();
    mock.chat(ask("x")).await;
    assert!(started.elapsed() >= Duration::from_millis(200));

    let overridden = Mock::start_with("default: {text: ok}\n", &["--latency-ms", "150"]);
    let started = Instant::now();
    overridden.chat(ask("x")).await;
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn concurrent_requests_take_each_reply_once() {
    let replies: String = (0..100).map(|number| format!("  - r{number}\n")).collect();
    let mock = Mock::start(&format!("replies:\n{replies}"));
    let client = reqwest::Client::new();
    let requests = (0..100).map(|_| {
        client
            .post(mock.endpoint("/v1/chat/completions"))
            .json(&ask("x"))
            .send()
    });
    let mut texts = Vec::new();
    for response in futures_util::future::join_all(requests).await {
        let body: Value = response.expect("a response").json().await.expect("JSON");
        texts.push(content(&body).as_str().unwrap_or_default().to_string());
    }
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 100);
    let mut numbers: Vec<u64> = mock
        .requests()
        .iter()
        .filter_map(|entry| entry["n"].as_u64())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..100).collect::<Vec<u64>>());
}

#[tokio::test]
async fn the_log_has_every_request_and_no_key() {
    let mock = Mock::start("default: {text: ok}\n");
    mock.chat(ask("first")).await;
    mock.post("/v1/chat/completions", streamed("second"))
        .await
        .text()
        .await
        .expect("body");
    let entries = mock.requests();
    assert_eq!(entries.len(), 2);
    let digest = Sha256::digest(format!("Bearer {KEY}").as_bytes());
    let expected: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    for (number, entry) in entries.iter().enumerate() {
        assert_eq!(entry["n"], number);
        assert_eq!(entry["method"], "POST");
        assert_eq!(entry["path"], "/v1/chat/completions");
        assert_eq!(entry["model"], "m");
        assert_eq!(entry["status"], 200);
        assert_eq!(entry["auth"], format!("sha256:{expected}"));
        assert!(
            chrono::DateTime::parse_from_rfc3339(entry["ts"].as_str().unwrap_or_default()).is_ok()
        );
    }
    assert_eq!(entries[0]["stream"], false);
    assert_eq!(entries[1]["stream"], true);
    assert_eq!(entries[1]["body"]["messages"][0]["content"], "second");
    let text = std::fs::read_to_string(&mock.log).expect("the log");
    assert!(!text.contains(KEY), "the key never reaches the log");
}

#[tokio::test]
async fn models_and_unknown_routes() {
    let mock = Mock::start("default: ok\n");
    let models: Value = reqwest::get(mock.endpoint("/v1/models"))
        .await
        .expect("response")
        .json()
        .await
        .expect("JSON");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "mock");
    let missing = mock.post("/v2/chat", ask("x")).await;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.expect("JSON");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/v1/chat/completions")
    );
    // Only the real APIs' paths: without `/v1` there is nothing.
    for path in ["/chat/completions", "/responses", "/messages"] {
        assert_eq!(mock.post(path, ask("x")).await.status(), 404, "{path}");
    }
    assert_eq!(
        reqwest::get(mock.endpoint("/models"))
            .await
            .expect("response")
            .status(),
        404
    );
    let not_json = reqwest::Client::new()
        .post(mock.endpoint("/v1/chat/completions"))
        .body("{oops")
        .send()
        .await
        .expect("response");
    assert_eq!(not_json.status(), 400);
}

#[tokio::test]
async fn the_responses_api() {
    let mock = Mock::start(
        "rules:\n  - when: {last_role: tool}\n    reply: {text: got it}\ndefault:\n  text: let me check\n  tool_calls: [{id: call_7, name: f, arguments: {a: 1}}]\n",
    );
    let response = mock
        .post(
            "/v1/responses",
            json!({"model": "m", "input": "hi", "instructions": "be brief"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(
        body["output"][0]["content"][0],
        json!({"type": "output_text", "text": "let me check", "annotations": []})
    );
    assert_eq!(body["output"][1]["type"], "function_call");
    assert_eq!(body["output"][1]["call_id"], "call_7");
    assert_eq!(body["output"][1]["arguments"], "{\"a\":1}");
    assert!(body["usage"]["input_tokens"].as_u64().is_some());
    assert!(body["usage"]["output_tokens"].as_u64().is_some());

    // An assistant item without `"type": "message"` is refused, as
    // llama-server refuses it.
    let typeless = mock
        .post(
            "/v1/responses",
            json!({"model": "m", "input": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "let me check"}]},
                {"role": "user", "content": "and?"}
            ]}),
        )
        .await;
    assert_eq!(typeless.status(), 400);
    let body: Value = typeless.json().await.expect("JSON");
    assert_eq!(body["error"]["message"], "Cannot determine type of 'item'");
    let tool_output = json!({"model": "m", "stream": true, "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_7", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_7", "output": "3"},
    ]});
    let text = mock
        .post("/v1/responses", tool_output)
        .await
        .text()
        .await
        .expect("body");
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    let assembled: String = data_lines(&text)
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "response.output_text.delta")
        .filter_map(|event| event["delta"].as_str().map(str::to_string))
        .collect();
    assert_eq!(assembled, "got it");
}

#[tokio::test]
async fn the_anthropic_messages_api() {
    let mock = Mock::start(
        "replies:\n  - text: hello\n    tool_calls: [{id: toolu_1, name: f, arguments: {a: 1}}]\n  - text: streamed answer here\n  - fault: {status: 529}\n",
    );
    let request = json!({"model": "claude", "max_tokens": 100, "system": "be nice", "messages": [{"role": "user", "content": "hi"}]});
    let client = reqwest::Client::new();
    // What the real API refuses, before the script is consulted.
    let unversioned = client
        .post(mock.endpoint("/v1/messages"))
        .header("x-api-key", KEY)
        .json(&request)
        .send()
        .await
        .expect("response");
    assert_eq!(unversioned.status(), 400);
    let keyless = client
        .post(mock.endpoint("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&request)
        .send()
        .await
        .expect("response");
    assert_eq!(keyless.status(), 401);
    let body: Value = keyless.json().await.expect("JSON");
    assert_eq!(body["error"]["type"], "authentication_error");
    // The path without `/v1` is not the API's (Anthropic's SDKs add `/v1`).
    let unversioned_path = mock.post("/messages", request.clone()).await;
    assert_eq!(unversioned_path.status(), 404);
    let body: Value = unversioned_path.json().await.expect("JSON");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    let response = client
        .post(mock.endpoint("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&request)
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "hello"}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}])
    );
    assert_eq!(body["stop_reason"], "tool_use");
    assert!(body["usage"]["input_tokens"].as_u64().is_some());

    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    let text = mock
        .post("/v1/messages", streaming)
        .await
        .text()
        .await
        .expect("body");
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"));
    assert_eq!(events.last(), Some(&"message_stop"));
    assert!(events.contains(&"content_block_delta") && events.contains(&"message_delta"));
    let assembled: String = data_lines(&text)
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|event| event["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(assembled, "streamed answer here");

    let overloaded = mock.post("/v1/messages", request).await;
    assert_eq!(overloaded.status(), 529);
    let body: Value = overloaded.json().await.expect("JSON");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
    let text = std::fs::read_to_string(&mock.log).expect("the log");
    assert!(!text.contains(KEY));
}

#[test]
fn bad_scripts_and_remote_hosts_exit_with_2() {
    let directory = tempfile::tempdir().expect("temp dir");
    let script = directory.path().join("bad.yaml");
    let run = |arguments: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
            .arg("--script")
            .arg(&script)
            .args(arguments)
            .output()
            .expect("run lllm-mock")
    };
    std::fs::write(&script, "replys: []\n").expect("write");
    let output = run(&[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.yaml:1:1: unknown key `replys`; did you mean `replies`?"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());

    std::fs::write(&script, "default: {text: ok}\n").expect("write");
    let output = run(&["--host", "0.0.0.0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--allow-remote"));
}

#[cfg(unix)]
#[tokio::test]
async fn sigterm_ends_held_requests_and_exits_cleanly() {
    let mut mock = Mock::start("default: {fault: timeout}\n");
    let client = reqwest::Client::new();
    let held = tokio::spawn(
        client
            .post(mock.endpoint("/v1/chat/completions"))
            .json(&ask("x"))
            .send(),
    );
    // The request reaches the server (and its log) before the signal.
    let deadline = Instant::now() + Duration::from_secs(60);
    while mock.requests().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = Command::new("kill")
        .args(["-TERM", &mock.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(exit) = mock.child.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "lllm-mock did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "{exit:?}");
    let outcome = held.await.expect("the request task");
    assert!(outcome.is_err(), "the held request ends without a reply");
    assert_eq!(mock.requests().len(), 1);
}
