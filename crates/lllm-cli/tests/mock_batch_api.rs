//! The Batch API emulation of the real `lllm-mock` binary, over HTTP on
//! 127.0.0.1: an OpenAI round (upload, create, poll through the states,
//! output and error files) and an Anthropic one (create, poll, results),
//! each request answered by the same script as the synchronous endpoints
//! (its faults are the partial failures); validation answered as the real
//! APIs answer it; cancel; expiry; the request log; a due batch polled by
//! many clients at once runs once. Delays count polls, so nothing sleeps.

mod common;

use std::collections::BTreeSet;

use common::MockServer;
use serde_json::{Value, json};

const KEY: &str = "sk-batch-secret";

/// A mock server and a client for it.
struct Batches {
    mock: MockServer,
    client: reqwest::Client,
    _directory: tempfile::TempDir,
}

impl Batches {
    fn start(script: &str, arguments: &[&str]) -> Batches {
        let directory = tempfile::tempdir().expect("temp dir");
        let mock = MockServer::start_with(directory.path(), script, arguments);
        Batches {
            mock,
            client: reqwest::Client::new(),
            _directory: directory,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.mock.url)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("a response");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    /// An OpenAI request (a bearer token).
    async fn openai(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, self.url(path)).bearer_auth(KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.openai(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.openai(reqwest::Method::POST, path, Some(body)).await
    }

    /// An Anthropic request, with the headers the API wants.
    async fn anthropic(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, self.url(path))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01");
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    /// `POST /v1/files` with a hand-made multipart body.
    async fn upload(&self, purpose: &str, filename: &str, content: &str) -> (u16, Value) {
        let boundary = "lllm-test-boundary-7";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/jsonl\r\n\r\n{content}\r\n--{boundary}--\r\n"
        );
        let request = self
            .client
            .post(self.url("/v1/files"))
            .bearer_auth(KEY)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        self.send(request).await
    }

    /// A file's content, as text.
    async fn content(&self, id: &str) -> String {
        let response = self
            .client
            .get(self.url(&format!("/v1/files/{id}/content")))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("a response");
        assert_eq!(response.status(), 200);
        response.text().await.expect("a body")
    }

    /// Uploads `lines` and creates a chat-completions batch of them.
    async fn openai_batch(&self, lines: &str) -> Value {
        let (status, file) = self.upload("batch", "input.jsonl", lines).await;
        assert_eq!(status, 200, "{file}");
        let (status, batch) = self
            .post(
                "/v1/batches",
                json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                       "completion_window": "24h"}),
            )
            .await;
        assert_eq!(status, 200, "{batch}");
        batch
    }

    /// The log lines of requests a batch ran.
    fn ran(&self) -> Vec<Value> {
        self.mock
            .requests()
            .into_iter()
            .filter(|entry| entry.get("custom_id").is_some())
            .collect()
    }
}

fn chat_line(custom_id: &str, text: &str) -> String {
    json!({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
           "body": {"model": "gpt-test", "messages": [{"role": "user", "content": text}]}})
    .to_string()
}

fn chat_lines(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| chat_line(id, &format!("question {id}")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn keys(object: &Value) -> BTreeSet<&str> {
    object
        .as_object()
        .map(|fields| fields.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// `openai-python`'s `Batch` fields.
const BATCH_FIELDS: [&str; 22] = [
    "id",
    "object",
    "endpoint",
    "model",
    "errors",
    "input_file_id",
    "completion_window",
    "status",
    "output_file_id",
    "error_file_id",
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "request_counts",
    "usage",
    "metadata",
];

#[tokio::test]
async fn an_openai_batch_goes_from_upload_to_output_files() {
    let api = Batches::start(
        "replies:\n  - {text: first answer, usage: {prompt_tokens: 10, completion_tokens: 2}}\n  - fault: {status: 500}\n  - fault: timeout\n  - {text: fourth answer, usage: {prompt_tokens: 5, completion_tokens: 1}}\n  - after the batch\n",
        &["--batch-polls", "2"],
    );
    let lines = chat_lines(&["a", "b", "c", "d"]);
    let (status, file) = api.upload("batch", "requests.jsonl", &lines).await;
    assert_eq!(status, 200, "{file}");
    assert_eq!(file["object"], "file");
    assert_eq!(file["purpose"], "batch");
    assert_eq!(file["filename"], "requests.jsonl");
    assert_eq!(file["bytes"], lines.len());
    assert_eq!(file["status"], "processed");
    let file_id = file["id"].as_str().expect("a file id");
    assert_eq!(
        api.get(&format!("/v1/files/{file_id}")).await,
        (200, file.clone())
    );
    assert_eq!(api.content(file_id).await, lines);

    let (status, batch) = api
        .post(
            "/v1/batches",
            json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                   "completion_window": "24h", "metadata": {"run": "7"}}),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(keys(&batch), BTreeSet::from(BATCH_FIELDS));
    assert_eq!(batch["object"], "batch");
    assert_eq!(batch["status"], "validating");
    assert_eq!(batch["model"], "gpt-test");
    assert_eq!(batch["metadata"], json!({"run": "7"}));
    assert_eq!(
        batch["request_counts"],
        json!({"total": 4, "completed": 0, "failed": 0})
    );
    let created = batch["created_at"].as_i64().expect("created_at");
    assert_eq!(batch["expires_at"], created + 24 * 3600);
    let path = format!("/v1/batches/{}", batch["id"].as_str().expect("an id"));

    for poll in 1..=2 {
        let (_, polled) = api.get(&path).await;
        assert_eq!(polled["status"], "in_progress", "poll {poll}");
        assert!(polled["in_progress_at"].is_i64());
        assert!(polled["output_file_id"].is_null());
    }
    assert!(api.ran().is_empty(), "nothing runs before the batch is due");
    let (_, done) = api.get(&path).await;
    assert_eq!(done["status"], "completed", "{done}");
    for moment in ["in_progress_at", "finalizing_at", "completed_at"] {
        assert!(
            done[moment].as_i64().is_some_and(|at| at >= created),
            "{moment}"
        );
    }
    assert!(done["failed_at"].is_null() && done["expired_at"].is_null());
    assert_eq!(
        done["request_counts"],
        json!({"total": 4, "completed": 2, "failed": 2})
    );
    assert_eq!(done["usage"]["input_tokens"], 15);
    assert_eq!(done["usage"]["output_tokens"], 3);
    assert_eq!(done["usage"]["total_tokens"], 18);

    let output = jsonl(
        &api.content(done["output_file_id"].as_str().expect("output"))
            .await,
    );
    assert_eq!(output.len(), 2);
    for (line, (custom_id, text)) in output
        .iter()
        .zip([("a", "first answer"), ("d", "fourth answer")])
    {
        assert_eq!(
            keys(line),
            BTreeSet::from(["id", "custom_id", "response", "error"])
        );
        assert!(
            line["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("batch_req_"))
        );
        assert_eq!(line["custom_id"], custom_id);
        assert_eq!(line["error"], Value::Null);
        let response = &line["response"];
        assert_eq!(response["status_code"], 200);
        assert!(response["request_id"].is_string());
        assert_eq!(response["body"]["object"], "chat.completion");
        assert_eq!(response["body"]["choices"][0]["message"]["content"], text);
    }
    let errors = jsonl(
        &api.content(done["error_file_id"].as_str().expect("errors"))
            .await,
    );
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["custom_id"], "b");
    assert_eq!(errors[0]["response"]["status_code"], 500);
    assert_eq!(
        errors[0]["response"]["body"]["error"]["type"],
        "server_error"
    );
    assert_eq!(errors[0]["error"], Value::Null);
    assert_eq!(errors[1]["custom_id"], "c");
    assert_eq!(errors[1]["response"], Value::Null);
    assert_eq!(errors[1]["error"]["code"], "request_timeout");
    let (_, output_file) = api
        .get(&format!(
            "/v1/files/{}",
            done["output_file_id"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(output_file["purpose"], "batch_output");
    let (_, outputs) = api.get("/v1/files?purpose=batch_output").await;
    assert_eq!(outputs["object"], "list");
    let listed: BTreeSet<&str> = outputs["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|file| file["id"].as_str())
        .collect();
    let made =
        [&done["output_file_id"], &done["error_file_id"]].map(|id| id.as_str().unwrap_or_default());
    assert_eq!(listed, BTreeSet::from(made));
    let (_, newest) = api.get("/v1/files?limit=1").await;
    assert_eq!(
        newest["data"][0]["id"], done["error_file_id"],
        "newest first"
    );
    assert_eq!(newest["has_more"], true);

    // A later poll changes nothing; the script goes on where the batch left it.
    assert_eq!(api.get(&path).await, (200, done.clone()));
    let (status, completion) = api
        .post(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "after the batch"
    );

    let ran = api.ran();
    let ran_ids: Vec<&Value> = ran.iter().map(|entry| &entry["custom_id"]).collect();
    assert_eq!(ran_ids, ["a", "b", "c", "d"]);
    for entry in &ran {
        assert_eq!(entry["path"], "/v1/chat/completions");
        assert_eq!(entry["batch"], batch["id"]);
        assert_eq!(entry["body"]["model"], "gpt-test");
    }
    assert_eq!(ran[1]["status"], 500);
    assert_eq!(ran[2]["fault"], "timeout");
    let creation = api
        .mock
        .requests()
        .into_iter()
        .find(|entry| entry["path"] == "/v1/batches" && entry["method"] == "POST")
        .expect("the creation is logged");
    assert_eq!(creation["custom_ids"], json!(["a", "b", "c", "d"]));
    assert_eq!(creation["batch"], batch["id"]);
    let log = std::fs::read_to_string(&api.mock.log).expect("the log");
    assert!(!log.contains(KEY), "the key never reaches the log");

    let (status, deleted) = api
        .openai(
            reqwest::Method::DELETE,
            &format!("/v1/files/{file_id}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted,
        json!({"id": file_id, "object": "file", "deleted": true})
    );
    let (status, missing) = api.get(&format!("/v1/files/{file_id}")).await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn openai_refuses_what_the_real_api_refuses() {
    let api = Batches::start("default: {text: ok}\n", &[]);
    let (status, refused) = api
        .upload("batch", "requests.json", &chat_line("a", "x"))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["error"]["message"],
        "Invalid file format for Batch API. Must be .jsonl"
    );
    let (status, refused) = api.upload("tea", "requests.jsonl", "").await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["param"], "purpose");

    let (_, file) = api.upload("batch", "ok.jsonl", &chat_lines(&["a"])).await;
    let create = |changes: Value| {
        let mut body = json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                              "completion_window": "24h"});
        for (key, value) in changes.as_object().into_iter().flatten() {
            body[key] = value.clone();
        }
        api.post("/v1/batches", body)
    };
    for (changes, status, param) in [
        (json!({"endpoint": "/v1/embeddings"}), 400, "endpoint"),
        (json!({"endpoint": "/v2/chat"}), 400, "endpoint"),
        (json!({"completion_window": "1h"}), 400, "completion_window"),
        (
            json!({"input_file_id": "file-nothing"}),
            404,
            "input_file_id",
        ),
        (json!({"metadata": {"n": 1}}), 400, "metadata"),
        (json!({"colour": "blue"}), 400, "colour"),
    ] {
        let (got, body) = create(changes.clone()).await;
        assert_eq!(
            (got, &body["error"]["param"]),
            (status, &json!(param)),
            "{changes}"
        );
        assert!(body["error"]["message"].is_string());
    }

    // The input file's lines are checked while the batch validates; the
    // first read finds it failed, with every problem and its line.
    let lines = [
        chat_line("a", "x"),
        "{not json".into(),
        chat_line("b", "x").replace("/v1/chat/completions", "/v1/responses"),
        chat_line("a", "y"),
        chat_line("c", "x").replace("\"POST\"", "\"GET\""),
    ]
    .join("\n");
    let batch = api.openai_batch(&lines).await;
    assert_eq!(batch["status"], "validating");
    let (_, failed) = api
        .get(&format!(
            "/v1/batches/{}",
            batch["id"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(failed["status"], "failed");
    assert!(failed["failed_at"].is_i64());
    assert!(failed["output_file_id"].is_null() && failed["error_file_id"].is_null());
    assert_eq!(failed["errors"]["object"], "list");
    let problems: Vec<(Value, Value)> = failed["errors"]["data"]
        .as_array()
        .expect("errors.data")
        .iter()
        .map(|error| (error["code"].clone(), error["line"].clone()))
        .collect();
    assert_eq!(
        problems,
        [
            (json!("invalid_json_line"), json!(2)),
            (json!("url_mismatch"), json!(3)),
            (json!("duplicate_custom_id"), json!(4)),
            (json!("invalid_method"), json!(5)),
        ]
    );
    let (_, empty) = api
        .get(&format!(
            "/v1/batches/{}",
            api.openai_batch("\n").await["id"]
                .as_str()
                .unwrap_or_default()
        ))
        .await;
    assert_eq!(empty["errors"]["data"][0]["code"], "empty_file");
    assert!(api.ran().is_empty(), "a failed batch runs nothing");

    let (status, missing) = api.get("/v1/batches/batch_nothing").await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["type"], "invalid_request_error");
    let (status, _) = api.get("/v1/batches?limit=0").await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn openai_cancel_expiry_and_the_list() {
    let api = Batches::start(
        "default: {text: ok}\n",
        &["--batch-polls", "1", "--batch-expire-id", "x2"],
    );
    let cancelled = api.openai_batch(&chat_lines(&["c1", "c2"])).await;
    let path = format!(
        "/v1/batches/{}",
        cancelled["id"].as_str().unwrap_or_default()
    );
    let (status, cancelling) = api.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_i64());
    let (_, ended) = api.get(&path).await;
    assert_eq!(ended["status"], "cancelled");
    assert!(ended["cancelled_at"].is_i64());
    assert!(ended["output_file_id"].is_null());
    let errors = jsonl(
        &api.content(ended["error_file_id"].as_str().expect("errors"))
            .await,
    );
    let codes: Vec<(&Value, &Value)> = errors
        .iter()
        .map(|line| (&line["custom_id"], &line["error"]["code"]))
        .collect();
    assert_eq!(
        codes,
        [
            (&json!("c1"), &json!("batch_cancelled")),
            (&json!("c2"), &json!("batch_cancelled"))
        ]
    );
    let (status, again) = api.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!(status, 400, "{again}");

    let expiring = api.openai_batch(&chat_lines(&["x1", "x2", "x3"])).await;
    let path = format!(
        "/v1/batches/{}",
        expiring["id"].as_str().unwrap_or_default()
    );
    assert_eq!(api.get(&path).await.1["status"], "in_progress");
    let (_, expired) = api.get(&path).await;
    assert_eq!(expired["status"], "expired", "{expired}");
    assert!(expired["expired_at"].is_i64());
    assert_eq!(
        expired["request_counts"],
        json!({"total": 3, "completed": 2, "failed": 1})
    );
    let output = jsonl(
        &api.content(expired["output_file_id"].as_str().expect("output"))
            .await,
    );
    let answered: Vec<&Value> = output.iter().map(|line| &line["custom_id"]).collect();
    assert_eq!(answered, ["x1", "x3"]);
    let errors = jsonl(
        &api.content(expired["error_file_id"].as_str().expect("errors"))
            .await,
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["custom_id"], "x2");
    assert_eq!(errors[0]["response"], Value::Null);
    assert_eq!(errors[0]["error"]["code"], "batch_expired");
    let ran: Vec<Value> = api
        .ran()
        .iter()
        .map(|entry| entry["custom_id"].clone())
        .collect();
    assert_eq!(
        ran,
        ["x1", "x3"],
        "cancelled and expired requests never run"
    );

    let (_, first) = api.get("/v1/batches?limit=1").await;
    assert_eq!(first["object"], "list");
    assert_eq!(first["data"][0]["id"], expiring["id"], "newest first");
    assert_eq!(first["has_more"], true);
    assert_eq!(first["first_id"], expiring["id"]);
    let (_, second) = api
        .get(&format!(
            "/v1/batches?limit=1&after={}",
            first["last_id"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(second["data"][0]["id"], cancelled["id"]);
    assert_eq!(second["has_more"], false);
}

fn message_request(custom_id: &str, text: &str) -> Value {
    json!({"custom_id": custom_id, "params": {"model": "claude-test", "max_tokens": 100,
           "messages": [{"role": "user", "content": text}]}})
}

#[tokio::test]
async fn an_anthropic_batch_goes_from_creation_to_results() {
    let api = Batches::start(
        "replies:\n  - {text: first answer, usage: {prompt_tokens: 10, completion_tokens: 2}}\n  - fault: {status: 529}\n  - tool_calls: [{id: toolu_1, name: lookup, arguments: {q: x}}]\n",
        &["--batch-polls", "1"],
    );
    let mut streamed = message_request("s", "stream me");
    streamed["params"]["stream"] = json!(true);
    let requests = json!({"requests": [
        message_request("one", "a"), message_request("two", "b"), streamed, message_request("three", "c"),
    ]});
    let (status, batch) = api
        .anthropic(
            reqwest::Method::POST,
            "/v1/messages/batches",
            Some(requests),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(
        keys(&batch),
        BTreeSet::from([
            "id",
            "type",
            "processing_status",
            "request_counts",
            "ended_at",
            "created_at",
            "expires_at",
            "archived_at",
            "cancel_initiated_at",
            "results_url",
        ])
    );
    assert_eq!(batch["type"], "message_batch");
    assert_eq!(batch["processing_status"], "in_progress");
    assert_eq!(
        batch["request_counts"],
        json!({"processing": 4, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0})
    );
    assert!(batch["results_url"].is_null());
    let created =
        chrono::DateTime::parse_from_rfc3339(batch["created_at"].as_str().expect("created_at"))
            .expect("RFC 3339");
    let expires =
        chrono::DateTime::parse_from_rfc3339(batch["expires_at"].as_str().expect("expires_at"))
            .expect("RFC 3339");
    assert_eq!(expires - created, chrono::TimeDelta::days(1));
    let id = batch["id"].as_str().expect("an id").to_string();
    let path = format!("/v1/messages/batches/{id}");

    let (status, early) = api
        .anthropic(reqwest::Method::GET, &format!("{path}/results"), None)
        .await;
    assert_eq!(status, 400, "no results before the end: {early}");
    let (_, polled) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(polled["processing_status"], "in_progress");
    let (_, ended) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(ended["processing_status"], "ended", "{ended}");
    assert!(ended["ended_at"].is_string());
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 2, "errored": 2, "canceled": 0, "expired": 0})
    );
    let results_url = format!("{}/results", api.url(&path));
    assert_eq!(ended["results_url"], results_url);

    let response = api
        .client
        .get(&results_url)
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .expect("the results");
    assert_eq!(response.status(), 200);
    let results = jsonl(&response.text().await.expect("a body"));
    let kinds: Vec<(&Value, &Value)> = results
        .iter()
        .map(|line| (&line["custom_id"], &line["result"]["type"]))
        .collect();
    assert_eq!(
        kinds,
        [
            (&json!("one"), &json!("succeeded")),
            (&json!("two"), &json!("errored")),
            (&json!("s"), &json!("errored")),
            (&json!("three"), &json!("succeeded")),
        ]
    );
    let message = &results[0]["result"]["message"];
    assert_eq!(message["type"], "message");
    assert_eq!(
        message["content"][0],
        json!({"type": "text", "text": "first answer"})
    );
    assert_eq!(message["usage"]["input_tokens"], 10);
    assert_eq!(
        results[1]["result"]["error"],
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "lllm-mock: scripted fault 529"}})
    );
    assert_eq!(
        results[2]["result"]["error"]["error"]["type"], "invalid_request_error",
        "a streamed request is refused when it runs"
    );
    assert_eq!(
        results[3]["result"]["message"]["content"][0]["type"],
        "tool_use"
    );
    assert_eq!(results[3]["result"]["message"]["stop_reason"], "tool_use");

    let ran: Vec<Value> = api
        .ran()
        .iter()
        .map(|entry| entry["custom_id"].clone())
        .collect();
    assert_eq!(ran, ["one", "two", "s", "three"]);

    let (status, deleted) = api.anthropic(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(status, 200);
    assert_eq!(deleted, json!({"id": id, "type": "message_batch_deleted"}));
    let (status, gone) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 404);
    assert_eq!(gone["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn anthropic_refuses_cancels_expires_and_lists() {
    let api = Batches::start(
        "default: {text: ok}\n",
        &["--batch-polls", "1", "--batch-expire", "0.5"],
    );
    let one = json!({"requests": [message_request("a", "x")]});
    let missing_version = api
        .send(
            api.client
                .post(api.url("/v1/messages/batches"))
                .header("x-api-key", KEY)
                .json(&one),
        )
        .await;
    assert_eq!(missing_version.0, 400);
    assert_eq!(
        missing_version.1["error"],
        json!({"type": "invalid_request_error", "message": "anthropic-version: header is required"})
    );
    let missing_key = api
        .send(
            api.client
                .get(api.url("/v1/messages/batches"))
                .header("anthropic-version", "2023-06-01"),
        )
        .await;
    assert_eq!(missing_key.0, 401);
    assert_eq!(missing_key.1["error"]["type"], "authentication_error");
    for (requests, message) in [
        (
            json!([message_request("has space", "x")]),
            "requests.0.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        ),
        (
            json!([message_request("a", "x"), message_request("a", "y")]),
            "requests.1.custom_id: Duplicate custom_id `a`; each request in a batch needs its own",
        ),
        (
            json!([]),
            "requests: List should have at least 1 item after validation, not 0",
        ),
    ] {
        let (status, refused) = api
            .anthropic(
                reqwest::Method::POST,
                "/v1/messages/batches",
                Some(json!({"requests": requests})),
            )
            .await;
        assert_eq!(status, 400);
        assert_eq!(refused["type"], "error");
        assert_eq!(refused["error"]["type"], "invalid_request_error");
        assert_eq!(refused["error"]["message"], message);
    }

    let (_, cancelled) = api
        .anthropic(
            reqwest::Method::POST,
            "/v1/messages/batches",
            Some(json!({"requests": [message_request("c1", "x"), message_request("c2", "y")]})),
        )
        .await;
    let path = format!(
        "/v1/messages/batches/{}",
        cancelled["id"].as_str().unwrap_or_default()
    );
    let (status, refused) = api.anthropic(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(status, 400, "a batch in progress is not deleted: {refused}");
    let (status, canceling) = api
        .anthropic(reqwest::Method::POST, &format!("{path}/cancel"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(canceling["processing_status"], "canceling");
    assert!(canceling["cancel_initiated_at"].is_string());
    let (_, ended) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(ended["processing_status"], "ended");
    assert_eq!(ended["request_counts"]["canceled"], 2);
    let (_, results) = api
        .anthropic(reqwest::Method::GET, &format!("{path}/results"), None)
        .await;
    let results = jsonl(results.as_str().expect("JSONL text"));
    assert!(
        results
            .iter()
            .all(|line| line["result"] == json!({"type": "canceled"}))
    );

    let (_, expiring) = api
        .anthropic(
            reqwest::Method::POST,
            "/v1/messages/batches",
            Some(json!({"requests": [message_request("e1", "x"), message_request("e2", "y")]})),
        )
        .await;
    let path = format!(
        "/v1/messages/batches/{}",
        expiring["id"].as_str().unwrap_or_default()
    );
    api.anthropic(reqwest::Method::GET, &path, None).await;
    let (_, ended) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 1, "errored": 0, "canceled": 0, "expired": 1})
    );
    let (_, results) = api
        .anthropic(reqwest::Method::GET, &format!("{path}/results"), None)
        .await;
    let results = jsonl(results.as_str().expect("JSONL text"));
    assert_eq!(
        results[1],
        json!({"custom_id": "e2", "result": {"type": "expired"}})
    );
    let ran: Vec<Value> = api
        .ran()
        .iter()
        .map(|entry| entry["custom_id"].clone())
        .collect();
    assert_eq!(
        ran,
        ["e1"],
        "only the request that neither expired nor was cancelled ran"
    );

    let (_, first) = api
        .anthropic(reqwest::Method::GET, "/v1/messages/batches?limit=1", None)
        .await;
    assert_eq!(first["data"][0]["id"], expiring["id"], "newest first");
    assert_eq!(first["has_more"], true);
    let (_, next) = api
        .anthropic(
            reqwest::Method::GET,
            &format!(
                "/v1/messages/batches?limit=5&after_id={}",
                first["last_id"].as_str().unwrap_or_default()
            ),
            None,
        )
        .await;
    assert_eq!(next["data"][0]["id"], cancelled["id"]);
    assert_eq!(next["has_more"], false);
}

#[tokio::test]
async fn a_wall_time_delay_keeps_a_batch_in_progress() {
    // An hour: every poll of this test falls inside it, however slow the machine.
    let api = Batches::start("default: {text: ok}\n", &["--batch-delay-ms", "3600000"]);
    let batch = api.openai_batch(&chat_lines(&["a"])).await;
    let path = format!("/v1/batches/{}", batch["id"].as_str().unwrap_or_default());
    for _ in 0..3 {
        assert_eq!(api.get(&path).await.1["status"], "in_progress");
    }
    assert!(api.ran().is_empty());
}

#[tokio::test]
async fn a_due_batch_polled_at_once_by_many_runs_once() {
    let api = Batches::start("default: {echo: true}\n", &[]);
    let ids: Vec<String> = (0..20).map(|n| format!("r{n}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let batch = api.openai_batch(&chat_lines(&id_refs)).await;
    let path = format!("/v1/batches/{}", batch["id"].as_str().unwrap_or_default());
    let polls = (0..16).map(|_| api.get(&path));
    let answers = futures_util::future::join_all(polls).await;
    let outputs: BTreeSet<String> = answers
        .iter()
        .map(|(status, body)| {
            assert_eq!(*status, 200);
            assert_eq!(body["status"], "completed");
            body["output_file_id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(outputs.len(), 1, "one output file for all the polls");
    let ran: Vec<Value> = api
        .ran()
        .iter()
        .map(|entry| entry["custom_id"].clone())
        .collect();
    assert_eq!(ran.len(), 20, "each request ran once: {ran:?}");
    let output = jsonl(
        &api.content(outputs.first().map(String::as_str).unwrap_or_default())
            .await,
    );
    assert_eq!(
        output[3]["response"]["body"]["choices"][0]["message"]["content"], "question r3",
        "the script's echo answers each request"
    );
}

#[test]
fn a_bad_expiry_fraction_is_one_error_line() {
    let directory = tempfile::tempdir().expect("temp dir");
    let script = directory.path().join("script.yaml");
    std::fs::write(&script, "default: {text: ok}\n").expect("write the script");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
        .arg("--script")
        .arg(&script)
        .args(["--batch-expire", "1.5"])
        .output()
        .expect("run lllm-mock");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: `--batch-expire` must be a fraction between 0 and 1, not `1.5`\n"
    );
}

#[tokio::test]
async fn a_responses_batch_checks_each_body_as_the_endpoint_does() {
    let api = Batches::start("default: {text: fine}\n", &[]);
    let line = |custom_id: &str, input: Value| {
        json!({"custom_id": custom_id, "method": "POST", "url": "/v1/responses",
               "body": {"model": "gpt-test", "input": input}})
        .to_string()
    };
    let lines = [
        line("good", json!("hello")),
        // An assistant message without `"type": "message"`: the synchronous
        // endpoint's 400, here in the error file.
        line("bad", json!([{"role": "assistant", "content": "earlier"}])),
    ]
    .join("\n");
    let (_, file) = api.upload("batch", "responses.jsonl", &lines).await;
    let (status, batch) = api
        .post(
            "/v1/batches",
            json!({"input_file_id": file["id"], "endpoint": "/v1/responses", "completion_window": "24h"}),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    let (_, done) = api
        .get(&format!(
            "/v1/batches/{}",
            batch["id"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(
        done["request_counts"],
        json!({"total": 2, "completed": 1, "failed": 1})
    );
    let output = jsonl(
        &api.content(done["output_file_id"].as_str().expect("output"))
            .await,
    );
    assert_eq!(output[0]["response"]["body"]["object"], "response");
    let errors = jsonl(
        &api.content(done["error_file_id"].as_str().expect("errors"))
            .await,
    );
    assert_eq!(errors[0]["custom_id"], "bad");
    assert_eq!(errors[0]["response"]["status_code"], 400);
    assert_eq!(
        errors[0]["response"]["body"]["error"]["message"],
        "Cannot determine type of 'item'"
    );
}

#[tokio::test]
async fn with_the_defaults_a_cancel_right_after_creation_cancels() {
    let api = Batches::start("default: {text: ok}\n", &[]);
    let batch = api.openai_batch(&chat_lines(&["a"])).await;
    let path = format!("/v1/batches/{}", batch["id"].as_str().unwrap_or_default());
    let (status, cancelling) = api.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!((status, &cancelling["status"]), (200, &json!("cancelling")));
    let (_, listed) = api.get("/v1/batches").await;
    assert_eq!(
        listed["data"][0]["status"], "cancelling",
        "a list moves nothing on"
    );
    assert_eq!(api.get(&path).await.1["status"], "cancelled");

    let (_, batch) = api
        .anthropic(
            reqwest::Method::POST,
            "/v1/messages/batches",
            Some(json!({"requests": [message_request("a", "x")]})),
        )
        .await;
    let path = format!(
        "/v1/messages/batches/{}",
        batch["id"].as_str().unwrap_or_default()
    );
    let (status, canceling) = api
        .anthropic(reqwest::Method::POST, &format!("{path}/cancel"), None)
        .await;
    assert_eq!(
        (status, &canceling["processing_status"]),
        (200, &json!("canceling"))
    );
    let (_, ended) = api.anthropic(reqwest::Method::GET, &path, None).await;
    assert_eq!(ended["request_counts"]["canceled"], 1);
    assert!(api.ran().is_empty());
}

/// Every id of a list, page by page (`cursor` names the query key of the
/// next page's cursor), and the pages it took.
async fn walk(api: &Batches, path: &str, cursor: &str, anthropic: bool) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut next: Option<String> = None;
    loop {
        let url = match &next {
            Some(last) => format!("{path}&{cursor}={last}"),
            None => path.to_string(),
        };
        let (status, page) = if anthropic {
            api.anthropic(reqwest::Method::GET, &url, None).await
        } else {
            api.get(&url).await
        };
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let data = page["data"].as_array().unwrap();
        ids.extend(
            data.iter()
                .map(|batch| batch["id"].as_str().unwrap().to_string()),
        );
        assert_eq!(
            page["first_id"],
            data.first()
                .map_or(Value::Null, |batch| batch["id"].clone())
        );
        assert_eq!(
            page["last_id"],
            data.last().map_or(Value::Null, |batch| batch["id"].clone())
        );
        if page["has_more"] != true {
            return (ids, pages);
        }
        next = page["last_id"].as_str().map(str::to_string);
    }
}

/// Issue 26: the list endpoints page as the real APIs do, so that a client
/// reading only the first page misses a batch: newest first, 20 by default,
/// at most 100 (OpenAI) or 1,000 (Anthropic) a page, `after` / `after_id`
/// the last id of the page before, `has_more` until the end; a limit out of
/// range is a 400.
#[tokio::test]
async fn lists_page_as_the_real_apis_do() {
    let api = Batches::start("default: {text: ok}\n", &[]);
    let (status, file) = api
        .upload("batch", "input.jsonl", &chat_lines(&["a"]))
        .await;
    assert_eq!(status, 200);
    let mut created = Vec::new();
    for _ in 0..130 {
        let (status, batch) = api
            .post(
                "/v1/batches",
                json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                       "completion_window": "24h"}),
            )
            .await;
        assert_eq!(status, 200, "{batch}");
        created.push(batch["id"].as_str().unwrap().to_string());
    }
    created.reverse();
    let (_, first) = api.get("/v1/batches").await;
    assert_eq!(first["data"].as_array().unwrap().len(), 20, "20 by default");
    assert_eq!(first["has_more"], true);
    for limit in ["0", "101", "x"] {
        let (status, refused) = api.get(&format!("/v1/batches?limit={limit}")).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["param"], "limit");
    }
    let (ids, pages) = walk(&api, "/v1/batches?limit=100", "after", false).await;
    assert_eq!((ids, pages), (created, 2), "newest first, every batch once");

    let mut created = Vec::new();
    for i in 0..130 {
        let (status, batch) = api
            .anthropic(
                reqwest::Method::POST,
                "/v1/messages/batches",
                Some(json!({"requests": [message_request(&format!("r{i}"), "hi")]})),
            )
            .await;
        assert_eq!(status, 200, "{batch}");
        created.push(batch["id"].as_str().unwrap().to_string());
    }
    created.reverse();
    let path = "/v1/messages/batches";
    let (_, first) = api.anthropic(reqwest::Method::GET, path, None).await;
    assert_eq!(first["data"].as_array().unwrap().len(), 20, "20 by default");
    let (_, all) = api
        .anthropic(reqwest::Method::GET, &format!("{path}?limit=1000"), None)
        .await;
    assert_eq!(all["data"].as_array().unwrap().len(), 130);
    assert_eq!(all["has_more"], false);
    for limit in ["0", "1001"] {
        let (status, _) = api
            .anthropic(reqwest::Method::GET, &format!("{path}?limit={limit}"), None)
            .await;
        assert_eq!(status, 400);
    }
    let (ids, pages) = walk(&api, &format!("{path}?limit=100"), "after_id", true).await;
    assert_eq!(
        (&ids, pages),
        (&created, 2),
        "newest first, every batch once"
    );
    // `before_id`: the page of newer batches just before it.
    let (_, newer) = api
        .anthropic(
            reqwest::Method::GET,
            &format!("{path}?limit=5&before_id={}", created[10]),
            None,
        )
        .await;
    let newer: Vec<&str> = newer["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|batch| batch["id"].as_str().unwrap())
        .collect();
    assert_eq!(newer, &created[5..10]);
}

/// `--batch-state` and `--batch-age-s`: a batch in progress is shown in a
/// state no client knows, and as created long ago (with its `expires_at` a
/// day after that), for tests of a client's deadline without waiting a day.
#[tokio::test]
async fn a_batch_can_be_shown_in_an_unknown_state_and_created_long_ago() {
    let api = Batches::start(
        "default: {text: ok}\n",
        &[
            "--batch-polls",
            "5",
            "--batch-state",
            "paused",
            "--batch-age-s",
            "7200",
        ],
    );
    let now = chrono::Utc::now().timestamp();
    let batch = api.openai_batch(&chat_lines(&["a"])).await;
    let path = format!("/v1/batches/{}", batch["id"].as_str().unwrap());
    assert_eq!(batch["status"], "validating");
    let (_, polled) = api.get(&path).await;
    assert_eq!(polled["status"], "paused");
    let created = polled["created_at"].as_i64().unwrap();
    assert!(
        (now - 7200 - 5..=now - 7200 + 5).contains(&created),
        "{polled}"
    );
    assert_eq!(polled["expires_at"].as_i64(), Some(created + 86_400));

    let (_, message_batch) = api
        .anthropic(
            reqwest::Method::POST,
            "/v1/messages/batches",
            Some(json!({"requests": [message_request("r", "hi")]})),
        )
        .await;
    assert_eq!(message_batch["processing_status"], "paused");
    let created =
        chrono::DateTime::parse_from_rfc3339(message_batch["created_at"].as_str().unwrap())
            .unwrap()
            .timestamp();
    assert!(
        (now - 7200 - 5..=now - 7200 + 5).contains(&created),
        "{message_batch}"
    );
}
