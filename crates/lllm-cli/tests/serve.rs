//! `lllm serve` on the real binary, against `lllm-mock` on loopback, the
//! provider's requests counted at the mock: every route, the three body
//! forms, bad input answered 400 with nothing sent, the token, the body
//! and concurrency limits, the budget, a client that goes away, SIGTERM's
//! drain, and events that end with exactly one closing event.

mod common;

use common::serve::{Events, Served, block, get, post, records, send, until_running};
use common::{MockServer, Test};
use serde_json::{Value, json};

/// A tactic on the mock at `base_url`, named `name`; its prompt uses `{{ task }}`.
fn tactic(name: &str, base_url: &str) -> String {
    format!(
        r#"tactic_type: {name}
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

/// Replies `ok` to everything, after `latency_ms`; a task holding FAIL gets a 400.
fn script(latency_ms: u64) -> String {
    format!(
        "latency_ms: {latency_ms}\nrules:\n  - when: {{contains: FAIL}}\n    reply: {{fault: {{status: 400}}}}\n\
         default: {{text: \"ok\", usage: {{prompt_tokens: 10, completion_tokens: 2}}}}\n"
    )
}

/// A test dir with `t.yaml` (tactic `helper`) on a fresh mock, its store in `home`.
fn setup(latency_ms: u64) -> (Test, MockServer) {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), &script(latency_ms));
    let test = test.file("t.yaml", &tactic("helper", &server.base_url()));
    let home = test.path("home").display().to_string();
    (test.env("LLLM_HOME", &home), server)
}

fn sessions(test: &Test) -> Vec<Value> {
    records(&test.path("home/sessions"))
}

#[test]
fn every_route_answers() {
    let (test, mock) = setup(0);
    let test = test.file("u.yaml", &tactic("other", &mock.base_url()));
    let served = Served::start(&test, &["t.yaml"]);
    let url = &served.url;

    let health = get(&format!("{url}/health"));
    assert_eq!(
        (health.status, health.json()),
        (
            200,
            json!({"ok": true, "tactics": ["helper"], "running": 0, "concurrency": 256})
        )
    );
    let list = get(&format!("{url}/tactics")).json();
    assert_eq!(list[0]["name"], "helper");
    assert_eq!(list[0]["description"], "Answers through the mock.");
    assert_eq!(list[0]["runtime_kind"], "lllm");
    for info_url in [format!("{url}/tactics/helper/info"), format!("{url}/info")] {
        let info = get(&info_url);
        assert_eq!(info.status, 200);
        assert_eq!(info.json(), list[0]);
    }
    for run_url in [format!("{url}/tactics/helper/run"), format!("{url}/run")] {
        let answer = post(&run_url, r#""hello""#);
        assert_eq!(answer.status, 200, "{}", answer.text);
        let body = answer.json();
        assert_eq!(
            (&body["output"], &body["tactic"], &body["state"]),
            (&json!("ok"), &json!("helper"), &json!("success"))
        );
        assert_eq!(body["usage"]["total_tokens"], 12);
        assert_eq!(body["calls"], 1);
        assert!(body["session_id"].is_string() && body["latency_ms"].is_u64());
        assert_eq!(
            answer.headers["x-request-id"],
            body["request_id"].as_str().unwrap()
        );
    }
    for stream_url in [
        format!("{url}/tactics/helper/stream"),
        format!("{url}/stream"),
    ] {
        let events = block(async {
            let (status, events) = Events::open(&stream_url, r#""hello""#).await;
            assert_eq!(status, 200);
            events.all().await
        });
        assert_eq!(events.last().unwrap().event.as_deref(), Some("result"));
    }
    let models = get(&format!("{url}/v1/models")).json();
    assert_eq!(
        (&models["object"], &models["data"][0]["id"]),
        (&json!("list"), &json!("helper"))
    );
    let chat = post(
        &format!("{url}/v1/chat/completions"),
        r#"{"model": "helper", "messages": [{"role": "user", "content": "hi"}]}"#,
    );
    assert_eq!(chat.status, 200, "{}", chat.text);
    assert_eq!(chat.json()["choices"][0]["message"]["content"], "ok");
    // Unknown names and routes: the one error shape.
    let missing = get(&format!("{url}/tactics/nope/info"));
    assert_eq!(
        (missing.status, missing.error_type()),
        (404, "TacticNotFound".into())
    );
    let missing = post(&format!("{url}/tactics/nope/run"), r#""x""#);
    assert_eq!(
        (missing.status, missing.error_type()),
        (404, "TacticNotFound".into())
    );
    let nowhere = get(&format!("{url}/elsewhere"));
    assert_eq!(
        (nowhere.status, nowhere.error_type()),
        (404, "NotFound".into())
    );
    let wrong = get(&format!("{url}/tactics/helper/run"));
    assert_eq!(
        (wrong.status, wrong.error_type()),
        (405, "MethodNotAllowed".into())
    );
    assert_eq!(mock.requests().len(), 5, "two runs, two streams, one chat");
    drop(served);

    // Two tactics: no single-tactic routes.
    let served = Served::start(&test, &["t.yaml", "u.yaml"]);
    let health = get(&format!("{}/health", served.url)).json();
    assert_eq!(health["tactics"], json!(["helper", "other"]));
    assert_eq!(get(&format!("{}/info", served.url)).status, 404);
    assert_eq!(
        post(&format!("{}/tactics/other/run", served.url), r#""x""#).status,
        200
    );
}

#[test]
fn envelope_and_task_line_bodies_are_sessions_found_by_request_id_and_tags() {
    let (test, mock) = setup(0);
    let served = Served::start(&test, &["t.yaml", "--tag", "service=demo"]);
    let run = format!("{}/run", served.url);
    // Upstream's envelope, its context carried into the record.
    let answer = post(
        &run,
        r#"{"input": "from python", "context": {"request_id": "req-1", "trace_id": "tr-9",
            "tags": {"team": "ops"}, "metadata": {"ticket": 7}}}"#,
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["request_id"], "req-1");
    // lllm's task line, with args and its own id.
    let answer = post(
        &run,
        r#"{"id": "line-9", "task": "from a line", "tags": {"team": "web"}}"#,
    );
    assert_eq!(answer.json()["request_id"], "line-9");
    let sent: Vec<String> = mock
        .requests()
        .iter()
        .map(|request| {
            request["body"]["messages"][1]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(sent, ["from python", "from a line"]);

    // Written before each answer, indexed while the server runs (a few
    // milliseconds after the answer at most).
    assert_eq!(sessions(&test).len(), 2, "{}", served.stderr());
    let logs = |args: &[&str]| -> Vec<Value> {
        let mut all = vec!["logs", "--json"];
        all.extend_from_slice(args);
        test.run(&all).expect_code(0).json_lines()
    };
    served.eventually("both sessions indexed", || {
        logs(&["--tag", "service=demo"]).len() == 2
    });
    let found = logs(&["--tag", "request_id=req-1"]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["task_id"], "req-1");
    assert_eq!(logs(&["--tag", "team=web"]).len(), 1);
    assert_eq!(logs(&["--tag", "service=demo"]).len(), 2);
    assert_eq!(logs(&["--tactic", "helper"]).len(), 2);
    let record = sessions(&test)
        .into_iter()
        .find(|record| record["task_id"] == "req-1")
        .unwrap();
    assert_eq!(record["metadata"]["trace_id"], "tr-9");
    assert_eq!(record["metadata"]["ticket"], 7);
}

#[test]
fn bad_input_is_answered_400_before_anything_is_sent() {
    let test = Test::new();
    let mock = MockServer::start(test.dir.path(), &script(0));
    let templated =
        tactic("helper", &mock.base_url()).replace("Answer the task.", "Answer about {{ topic }}.");
    let test = test
        .file("t.yaml", &templated)
        .file("secret.txt", "server file")
        .env("LLLM_HOME", "home");
    let served = Served::start(&test, &["t.yaml"]);
    let run = format!("{}/run", served.url);
    let stream = format!("{}/stream", served.url);
    let secret = test.path("secret.txt").display().to_string();
    let cases = [
        ("{\"task\": ", "not JSON"),
        ("[1]", "not an array"),
        (
            "{\"input\": \"x\", \"topic\": 1}",
            "unknown key `topic` in the envelope",
        ),
        ("{\"task\": \"x\", \"colour\": 1}", "unknown key `colour`"),
        ("{\"task\": \"x\", \"args\": {}}", "topic"),
        ("\"no topic given\"", "topic"),
        (
            "{\"input\": {\"topic\": \"owls\"}, \"context\": {\"request_id\": \"a/b\"}}",
            "request id",
        ),
        (
            "{\"task\": \"x\", \"tactic\": \"t.yaml\", \"args\": {\"topic\": 1}}",
            "`tactic`",
        ),
    ];
    for (body, expected) in cases {
        for url in [&run, &stream] {
            let answer = post(url, body);
            assert_eq!(answer.status, 400, "{body}: {}", answer.text);
            assert_eq!(answer.error_type(), "SchemaError", "{body}");
            // Every refused call has a request id, in the body and the header.
            let id = answer.json()["error"]["request_id"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(answer.headers["x-request-id"], id.as_str());
            let message = answer.json()["error"]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(message.contains(expected), "{body}: {message}");
        }
    }
    // An attachment naming a file on the server is refused, and the
    // file's path and content are in no answer.
    let body = json!({"task": "x", "args": {"topic": "t"}, "attachments": [secret]}).to_string();
    let answer = post(&run, &body);
    assert_eq!(answer.status, 400);
    assert!(
        answer.text.contains("files are not read here"),
        "{}",
        answer.text
    );
    assert!(!answer.text.contains("server file"));
    let body =
        json!({"task": "x", "args": {"topic": "t"}, "attachments": [{"path": "secret.txt"}]});
    assert_eq!(post(&run, &body.to_string()).status, 400);
    assert_eq!(mock.requests().len(), 0, "nothing reached the provider");
    // The same tactic answers a good body.
    let answer = post(&run, r#"{"task": "x", "args": {"topic": "owls"}}"#);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn a_token_guards_every_route_but_health() {
    let (test, mock) = setup(0);
    let test = test.file("token", "s3cret-token\n");
    let served = Served::start(&test, &["t.yaml", "--token-file", "token"]);
    let url = &served.url;
    assert_eq!(get(&format!("{url}/health")).status, 200);
    for (method, path) in [
        ("GET", "/tactics"),
        ("GET", "/info"),
        ("POST", "/run"),
        ("POST", "/stream"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/nowhere"),
    ] {
        for token in [None, Some("wrong"), Some("s3cret-token-and-more")] {
            let answer = block(send(
                method,
                &format!("{url}{path}"),
                token,
                Some(("application/json", "\"x\"")),
            ));
            assert_eq!(answer.status, 401, "{method} {path} {token:?}");
            assert_eq!(answer.error_type(), "Unauthorized");
            assert!(!answer.text.contains("s3cret"));
        }
    }
    let answer = block(send(
        "POST",
        &format!("{url}/run"),
        Some("s3cret-token"),
        Some(("application/json", "\"x\"")),
    ));
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(mock.requests().len(), 1);
    drop(served);

    // The variable works too; beyond loopback without a token: exit 2, nothing bound.
    let test = test.env("LLLM_SERVE_TOKEN", "from-env");
    let served = Served::start(&test, &["t.yaml"]);
    let answer = block(send(
        "GET",
        &format!("{}/tactics", served.url),
        Some("from-env"),
        None,
    ));
    assert_eq!(answer.status, 200);
    drop(served);
    let test = Test::new().file("t.yaml", &tactic("helper", &mock.base_url()));
    let output = test.run(&["serve", "t.yaml", "--host", "0.0.0.0", "--port", "0"]);
    output.expect_code(2);
    assert!(output.stdout.is_empty(), "{}", output.stdout);
    assert!(output.stderr.contains("needs a token"), "{}", output.stderr);
    let test = test.file("empty", "\n");
    let output = test.run(&["serve", "t.yaml", "--token-file", "empty", "--port", "0"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("the token is empty"),
        "{}",
        output.stderr
    );
}

#[test]
fn tactics_that_cannot_be_served_are_refused_before_binding() {
    let test = Test::new()
        .file("a.yaml", &tactic("same", "http://127.0.0.1:9/v1"))
        .file("b.yaml", &tactic("same", "http://127.0.0.1:9/v1"))
        .file("c.yaml", &tactic("\"with space\"", "http://127.0.0.1:9/v1"));
    let output = test.run(&["serve", "a.yaml", "b.yaml", "c.yaml", "--port", "0"]);
    output.expect_code(2);
    assert!(output.stdout.is_empty());
    assert!(
        output
            .stderr
            .contains("b.yaml: tactic name `same` is served by a.yaml already"),
        "{}",
        output.stderr
    );
    assert!(
        output
            .stderr
            .contains("c.yaml: tactic name `with space` cannot be served"),
        "{}",
        output.stderr
    );
    for (flag, value) in [
        ("--max-body", "10"),
        ("--timeout", "0"),
        ("--concurrency", "0"),
        ("--host", "example.com"),
    ] {
        let output = test.run(&["serve", "a.yaml", flag, value, "--port", "0"]);
        output.expect_code(2);
        assert!(output.stderr.contains(flag), "{flag}: {}", output.stderr);
    }
}

#[test]
fn a_body_over_the_limit_is_413_and_nothing_is_sent() {
    let (test, mock) = setup(0);
    let served = Served::start(&test, &["t.yaml", "--max-body", "1024"]);
    let big = json!({"input": "x".repeat(2000)}).to_string();
    for path in ["/run", "/stream", "/v1/chat/completions"] {
        let answer = post(&format!("{}{path}", served.url), &big);
        assert_eq!(answer.status, 413, "{path}: {}", answer.text);
        assert_eq!(answer.error_type(), "BodyTooLarge");
    }
    assert_eq!(
        post(&format!("{}/run", served.url), r#""small""#).status,
        200
    );
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn a_head_over_8_kb_is_431_and_bodies_larger_than_the_read_buffer_are_read_whole() {
    let (test, mock) = setup(0);
    let served = Served::start(&test, &["t.yaml", "--max-body", "262144"]);
    let url = format!("{}/run", served.url);
    let with_header = |bytes: usize| {
        block(async {
            reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("x-padding", "p".repeat(bytes))
                .body(r#""small""#)
                .send()
                .await
                .expect("an answer")
                .status()
                .as_u16()
        })
    };
    // The head is read through an 8 KB buffer: a head that does not fit is
    // 431 and nothing is sent; one that fits is served.
    assert_eq!(with_header(9000), 431);
    assert_eq!(mock.requests().len(), 0);
    assert_eq!(with_header(6000), 200);
    // A body twenty times the buffer still arrives whole: the task the
    // provider is asked holds every byte of it.
    let long = format!("{}END", "y".repeat(160_000));
    let answer = post(&url, &json!({"input": long}).to_string());
    assert_eq!(answer.status, 200, "{}", answer.text);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let asked = requests[1].to_string();
    assert!(asked.contains(&long), "the long task was cut");
}

#[test]
fn past_the_concurrency_limit_a_call_is_429_with_retry_after() {
    // A slow reply holds the only slot while the stream is open.
    let (test, mock) = setup(30_000);
    let served = Served::start(&test, &["t.yaml", "--concurrency", "1"]);
    block(async {
        let (status, mut events) =
            Events::open(&format!("{}/stream", served.url), r#""slow""#).await;
        assert_eq!(status, 200);
        let first = events.next().await.unwrap();
        assert_eq!(first.event.as_deref(), Some("model_call_started"));
        for path in ["/run", "/stream", "/v1/chat/completions"] {
            let answer = send(
                "POST",
                &format!("{}{path}", served.url),
                None,
                Some(("application/json", "\"more\"")),
            )
            .await;
            assert_eq!(answer.status, 429, "{path}: {}", answer.text);
            assert_eq!(answer.headers["retry-after"], "1");
            assert_eq!(answer.error_type(), "Busy");
        }
        // Reading needs no slot.
        assert_eq!(
            send("GET", &format!("{}/tactics", served.url), None, None)
                .await
                .status,
            200
        );
    });
    assert_eq!(
        mock.requests().len(),
        0,
        "only the slow call was sent, and it is unanswered"
    );
}

#[test]
fn a_client_that_goes_away_cancels_its_run_recorded_as_cancelled() {
    let (test, _mock) = setup(60_000);
    let served = Served::start(&test, &["t.yaml", "--concurrency", "1"]);
    // A stream dropped after its first event.
    block(async {
        let (status, mut events) = Events::open(
            &format!("{}/stream", served.url),
            r#"{"input": "slow", "context": {"request_id": "gone-1"}}"#,
        )
        .await;
        assert_eq!(status, 200);
        events.next().await.unwrap();
    });
    served.eventually("the stream's record", || !sessions(&test).is_empty());
    let record = &sessions(&test)[0];
    assert_eq!(record["task_id"], "gone-1");
    assert_eq!(record["state"], "failure");
    assert_eq!(record["error"], "cancelled: the client disconnected");
    block(until_running(&served.url, 0));
    // A /run whose client goes away once its run is under way.
    let url = served.url.clone();
    let client = std::thread::spawn(move || {
        block(async {
            let request = reqwest::Client::new()
                .post(format!("{url}/run"))
                .body(r#"{"input": "slow", "context": {"request_id": "gone-2"}}"#)
                .send();
            tokio::select! {
                _ = request => panic!("the slow run answered"),
                () = until_running(&url, 1) => {}
            }
        })
    });
    client.join().unwrap();
    served.eventually("the run's record", || sessions(&test).len() == 2);
    let record = sessions(&test)
        .into_iter()
        .find(|record| record["task_id"] == "gone-2")
        .unwrap();
    assert_eq!(record["error"], "cancelled: the client disconnected");
    // Nothing runs now, and its slot is free again.
    served.eventually("no run", || {
        get(&format!("{}/health", served.url)).json()["running"] == 0
    });
    assert_eq!(post(&format!("{}/run", served.url), "[]").status, 400);
}

#[test]
fn sigterm_drains_the_runs_in_flight_and_writes_their_records() {
    let (test, mock) = setup(1_000);
    let mut served = Served::start(&test, &["t.yaml", "--concurrency", "1"]);
    let url = served.url.clone();
    let (answer, code) = block(async {
        let run_url = format!("{url}/run");
        let run = tokio::spawn(async move {
            send(
                "POST",
                &run_url,
                None,
                Some(("application/json", "\"drained\"")),
            )
            .await
        });
        until_running(&url, 1).await;
        served.terminate();
        let answer = run.await.unwrap();
        let code = tokio::task::spawn_blocking(move || {
            let status = served.child.wait().unwrap();
            (status.code(), served.stderr())
        })
        .await
        .unwrap();
        (answer, code)
    });
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["output"], "ok");
    assert_eq!(code.0, Some(0), "{}", code.1);
    assert!(code.1.contains("stopping"), "{}", code.1);
    let records = sessions(&test);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["state"], "success");
    assert_eq!(mock.requests().len(), 1);
    // Indexed before the server exits: its shutdown waits for the rows too.
    let listed = test.run(&["logs", "--json"]).expect_code(0).json_lines();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["session_id"], records[0]["session_id"]);
    // One file, the served call's: a server that served nothing leaves no
    // empty one behind at its shutdown.
    // SIGTERM as soon as the address is read, as a supervisor may send it:
    // the handler is installed before the line is printed, so this is a
    // graceful stop (exit 0), not a kill.
    let mut idle = Served::start(&test, &["t.yaml"]);
    idle.terminate();
    assert_eq!(idle.child.wait().unwrap().code(), Some(0));
    assert_eq!(segment_files(&test.path("home/sessions")).len(), 1);
}

#[test]
fn a_stream_ends_with_exactly_one_closing_event() {
    let (test, _mock) = setup(0);
    let served = Served::start(&test, &["t.yaml"]);
    for (body, closing) in [(r#""fine""#, "result"), (r#""FAIL now""#, "error")] {
        let events = block(async {
            let (status, events) = Events::open(&format!("{}/stream", served.url), body).await;
            assert_eq!(status, 200);
            events.all().await
        });
        let kinds: Vec<&str> = events
            .iter()
            .map(|sse| sse.event.as_deref().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"model_call_started"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&closing), "{kinds:?}");
        assert_eq!(
            kinds
                .iter()
                .filter(|kind| matches!(**kind, "result" | "error"))
                .count(),
            1
        );
        for sse in &events {
            // `event:` and `id:` say what `data` holds.
            assert_eq!(sse.data["kind"].as_str(), sse.event.as_deref());
            assert_eq!(sse.data["id"].as_str(), sse.id.as_deref());
        }
        let last = &events.last().unwrap().data["data"];
        match closing {
            "result" => assert_eq!(last["delivery"], "ok"),
            _ => assert!(last["message"].as_str().unwrap().contains("400"), "{last}"),
        }
    }
    // A failed run through /run: the error shape, with what the record says.
    let answer = post(&format!("{}/run", served.url), r#""FAIL again""#);
    assert_eq!(answer.status, 500, "{}", answer.text);
    assert_eq!(answer.error_type(), "RunFailed");
    let metadata = &answer.json()["error"]["metadata"];
    assert_eq!(metadata["state"], "failure");
    assert!(metadata["session_id"].is_string());
}

#[test]
fn the_budget_caps_the_servers_spend() {
    let (test, mock) = setup(0);
    // $100 per million tokens; a call of 12 tokens costs $0.0012, and
    // reserves its worst case (its body's bytes and `max_tokens`) first.
    let priced = tactic("helper", &mock.base_url()).replace(
        "max_llm_recall: 0}",
        "max_llm_recall: 0, model_args: {max_tokens: 10}}\npricing:\n  m: {input_per_million: 100.0, output_per_million: 100.0}",
    );
    let test = test.file("priced.yaml", &priced);
    let served = Served::start(&test, &["priced.yaml", "--max-cost", "0.04"]);
    let mut answers = Vec::new();
    loop {
        let answer = post(&format!("{}/run", served.url), r#""spend""#);
        let status = answer.status;
        answers.push(answer);
        if status != 200 || answers.len() > 100 {
            break;
        }
    }
    let last = answers.last().unwrap();
    assert!(answers.len() > 1, "{}", last.text);
    assert_eq!(
        (last.status, last.error_type()),
        (429, "BudgetExceeded".into())
    );
    let spent: f64 = answers[..answers.len() - 1]
        .iter()
        .map(|answer| answer.json()["cost"].as_f64().unwrap())
        .sum();
    let sent = mock.requests().len();
    assert_eq!(sent, answers.len() - 1, "the refused call was not sent");
    assert!(
        spent <= 0.04 && (spent - sent as f64 * 0.0012).abs() < 1e-9,
        "{spent}"
    );
    // Spent: every call is refused at once now, or with a budget of 0.
    drop(served);
    let served = Served::start(&test, &["priced.yaml", "--max-cost", "0"]);
    for path in ["/run", "/stream", "/v1/chat/completions"] {
        let body = r#"{"model": "helper", "messages": [{"role": "user", "content": "x"}]}"#;
        let answer = post(&format!("{}{path}", served.url), body);
        assert_eq!(answer.status, 429, "{path}: {}", answer.text);
        assert_eq!(answer.error_type(), "BudgetExceeded");
    }
    assert_eq!(mock.requests().len(), sent);
}

#[test]
fn a_run_past_its_deadline_is_504_and_recorded() {
    let (test, _mock) = setup(30_000);
    let served = Served::start(&test, &["t.yaml", "--timeout", "1"]);
    let answer = post(&format!("{}/run", served.url), r#""slow""#);
    assert_eq!(answer.status, 504, "{}", answer.text);
    assert_eq!(answer.error_type(), "Timeout");
    // Written before the answer.
    assert_eq!(sessions(&test).len(), 1, "{}", served.stderr());
    assert_eq!(
        sessions(&test)[0]["error"],
        "the request's deadline of 1 s passed"
    );
    let events = block(async {
        let (_, events) = Events::open(&format!("{}/stream", served.url), r#""slow""#).await;
        events.all().await
    });
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(
        last.data["data"]["message"],
        "the request's deadline of 1 s passed"
    );
}

#[test]
fn the_shipped_triage_tactic_is_served_with_its_contract() {
    let test = Test::new();
    let mock = MockServer::start(
        test.dir.path(),
        "default: {text: '{\"category\": \"billing\", \"urgent\": false}'}\n",
    );
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tactics/triage.yaml"),
    )
    .unwrap();
    let on_mock = shipped
        .replace("model_name: mock/script", "model_name: local/m")
        .replace(
            "mock: {script: triage.mock.yaml}",
            &format!(
                "local: {{api: openai, base_url: \"{}\", retry_base_ms: 1}}",
                mock.base_url()
            ),
        );
    let test = test.file("triage.yaml", &on_mock).env("LLLM_HOME", "home");
    let served = Served::start(&test, &["triage.yaml"]);
    let info = get(&format!("{}/tactics/triage/info", served.url)).json();
    assert_eq!(info["input_schema"]["required"], json!(["ticket"]));
    assert_eq!(
        info["output_schema"]["required"],
        json!(["category", "urgent"])
    );
    assert_eq!(info["examples"].as_array().unwrap().len(), 2);
    assert_eq!(info["metadata"]["owner"], "support-team");
    // Input that does not fit `input_schema`: 400, each problem with its
    // JSON pointer, nothing sent.
    for (body, pointer) in [
        (r#"{"input": {"ticket": 7}}"#, "/ticket"),
        (r#"{"input": {"ticket": ""}}"#, "/ticket"),
        (r#"{"input": {}}"#, ""),
        (r#""only text""#, ""),
    ] {
        for path in ["/run", "/stream"] {
            let answer = post(&format!("{}{path}", served.url), body);
            assert_eq!(answer.status, 400, "{body}: {}", answer.text);
            assert_eq!(answer.error_type(), "SchemaError");
            let error = &answer.json()["error"];
            assert_eq!(
                error["metadata"]["problems"][0]["pointer"], pointer,
                "{body}"
            );
            assert!(error["message"].as_str().unwrap().contains("input_schema"));
        }
    }
    let chat = format!("{}/v1/chat/completions", served.url);
    let bad =
        json!({"model": "triage", "messages": [{"role": "user", "content": "{\"ticket\": 7}"}]});
    assert_eq!(post(&chat, &bad.to_string()).status, 400);
    assert_eq!(mock.requests().len(), 0);
    // Input that fits: the output is the parsed JSON delivery.
    let answer = post(
        &format!("{}/run", served.url),
        r#"{"input": {"ticket": "I was charged twice."}}"#,
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        answer.json()["output"],
        json!({"category": "billing", "urgent": false})
    );
    // Through the OpenAI face, a user message that is a JSON object is the input.
    let good = json!({"model": "triage", "messages": [{"role": "user", "content": "{\"ticket\": \"Refund me\"}"}]});
    let answer = post(&chat, &good.to_string());
    assert_eq!(answer.status, 200, "{}", answer.text);
    let content = answer.json()["choices"][0]["message"]["content"].clone();
    let content: Value = serde_json::from_str(content.as_str().unwrap()).unwrap();
    assert_eq!(content["category"], "billing");
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    let last = sent[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("Ticket: Refund me"),
        "{last}"
    );
}

/// docs/serve.md's opening example, as written (it starts a server, so the
/// docs check does not run it): the shipped triage tactic, offline.
#[test]
fn the_docs_opening_example_answers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/serve.md")).unwrap();
    assert!(page.contains(
        "lllm serve tactics/triage.yaml &          # listening on http://127.0.0.1:8000\n\
         curl -s localhost:8000/run -d '{\"input\": {\"ticket\": \"I was charged twice.\"}}'\n\
         curl -sN localhost:8000/stream -d '{\"input\": {\"ticket\": \"The site is down.\"}}'"
    ));
    let test = Test::new().env("LLLM_HOME", "home");
    std::os::unix::fs::symlink(root.join("tactics"), test.path("tactics")).unwrap();
    let served = Served::start(&test, &["tactics/triage.yaml"]);
    let answer = post(
        &format!("{}/run", served.url),
        r#"{"input": {"ticket": "I was charged twice."}}"#,
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    assert_eq!(
        body["output"],
        json!({"category": "billing", "urgent": false})
    );
    assert_eq!(
        (&body["tactic"], &body["cost"]),
        (&json!("triage"), &json!(0.0))
    );
    let events = block(async {
        let (_, events) = Events::open(
            &format!("{}/stream", served.url),
            r#"{"input": {"ticket": "The site is down."}}"#,
        )
        .await;
        events.all().await
    });
    let last = &events.last().unwrap().data;
    assert_eq!(last["kind"], "result");
    assert_eq!(
        last["data"]["delivery"],
        r#"{"category": "outage", "urgent": true}"#
    );
}

#[test]
fn calls_at_once_are_each_recorded_and_indexed_before_their_answers() {
    let (test, mock) = setup(0);
    let served = Served::start(&test, &["t.yaml", "--tag", "wave=1"]);
    let url = served.url.clone();
    let ids: Vec<String> = block(async {
        let calls = (0..40).map(|index| {
            let url = url.clone();
            tokio::spawn(async move {
                let body = format!(
                    r#"{{"input": "call {index}", "context": {{"request_id": "c-{index}"}}}}"#
                );
                send(
                    "POST",
                    &format!("{url}/run"),
                    None,
                    Some(("application/json", &body)),
                )
                .await
            })
        });
        let mut ids = Vec::new();
        for call in calls.collect::<Vec<_>>() {
            let answer = call.await.unwrap();
            assert_eq!(answer.status, 200, "{}", answer.text);
            ids.push(answer.json()["session_id"].as_str().unwrap().to_string());
        }
        ids
    });
    assert_eq!(mock.requests().len(), 40);
    assert_eq!(sessions(&test).len(), 40, "{}", served.stderr());
    let listing = || {
        test.run(&["logs", "--json", "--tag", "wave=1", "-n", "100"])
            .expect_code(0)
            .json_lines()
    };
    served.eventually("every session indexed", || listing().len() == 40);
    let listed = test
        .run(&["logs", "--json", "--tag", "wave=1", "-n", "100"])
        .expect_code(0)
        .json_lines();
    let mut found: Vec<String> = listed
        .iter()
        .map(|session| session["session_id"].as_str().unwrap().to_string())
        .collect();
    let mut ids = ids;
    found.sort();
    ids.sort();
    assert_eq!(found, ids);
}

#[test]
fn a_record_that_cannot_be_written_is_a_warning_and_the_call_is_answered() {
    let (test, mock) = setup(0);
    // The records' directory is a file: no record can be written.
    let test = test.file("home/sessions", "not a directory\n");
    let served = Served::start(&test, &["t.yaml"]);
    let mut ids = Vec::new();
    for index in 0..2 {
        let answer = post(
            &format!("{}/run", served.url),
            &format!(r#""call {index}""#),
        );
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(answer.json()["output"], "ok");
        ids.push(answer.json()["session_id"].as_str().unwrap().to_string());
    }
    assert_eq!(mock.requests().len(), 2);
    for id in &ids {
        served.eventually("a warning for each record", || {
            served.stderr().lines().any(|line| {
                line.starts_with("lllm serve: warning: the record of session ")
                    && line.contains(id.as_str())
                    && line.contains("was not written")
            })
        });
    }
    // The server still drains and exits cleanly, with nothing to sync.
    served.terminate();
    let mut served = served;
    let status = served.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{}", served.stderr());
    assert_eq!(
        std::fs::read_to_string(test.path("home/sessions")).unwrap(),
        "not a directory\n"
    );
}

/// The `sessions.jsonl` files under `dir`, found at any depth.
fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(segment_files(&path));
        } else if path
            .file_name()
            .is_some_and(|name| name == "sessions.jsonl")
        {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_servers_records_are_lines_of_a_file_of_its_own_that_logs_and_replay_read() {
    let (test, _mock) = setup(0);
    let first = Served::start(&test, &["t.yaml"]);
    let second = Served::start(&test, &["t.yaml"]);
    let mut ids = Vec::new();
    for (served, task) in [(&first, "one"), (&second, "two"), (&first, "three")] {
        let answer = post(
            &format!("{}/run", served.url),
            &format!("{{\"input\": \"{task}\"}}"),
        );
        assert_eq!(answer.status, 200, "{}", answer.text);
        ids.push(answer.json()["session_id"].as_str().unwrap().to_string());
    }
    // Two servers on one store: two files, each in a `serve-UUID` folder,
    // each a compact JSON line per call.
    let mut files = segment_files(&test.path("home/sessions"));
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut lines: Vec<usize> = Vec::new();
    for file in &files {
        let folder = file
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy();
        assert!(folder.starts_with("serve-"), "{folder}");
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.ends_with('\n'));
        for line in text.lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            assert!(ids.contains(&record["session_id"].as_str().unwrap().to_string()));
        }
        lines.push(text.lines().count());
    }
    lines.sort();
    assert_eq!(lines, [1, 2]);

    // The index points at each line: `logs show` reads the session back,
    // indexed while the servers run.
    first.eventually("every session indexed", || {
        test.run(&["logs", "--json"])
            .expect_code(0)
            .json_lines()
            .len()
            == 3
    });
    for id in &ids {
        let shown = test.run(&["logs", "show", id, "--json"]);
        shown.expect_code(0);
        let record: Value = serde_json::from_str(&shown.stdout).unwrap();
        assert_eq!(record["session_id"], id.as_str());
    }
    // `replay FILE --id SESSION` shows one and re-runs it offline.
    let file = files
        .iter()
        .find(|file| std::fs::read_to_string(file).unwrap().contains(&ids[2]))
        .unwrap()
        .display()
        .to_string();
    let replayed = test.run(&["replay", &file, "--id", &ids[2], "--json"]);
    replayed.expect_code(0);
    let record: Value = serde_json::from_str(&replayed.stdout).unwrap();
    assert_eq!(record["delivery"], "ok");
    test.run(&["replay", &file, "--id", &ids[2], "--rerun"])
        .expect_code(0);
    // `reindex` finds them as it finds a batch's.
    std::fs::remove_file(test.path("home/index.sqlite")).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(test.path(&format!("home/index.sqlite{suffix}")));
    }
    drop((first, second));
    test.run(&["logs", "reindex", "--from", "home/sessions"])
        .expect_code(0);
    let listed = test.run(&["logs", "--json"]);
    assert_eq!(listed.expect_code(0).json_lines().len(), 3);
}
