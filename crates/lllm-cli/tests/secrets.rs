//! Secrets stay where they belong, end to end: the real `lllm` binary against
//! HTTP servers on 127.0.0.1 that each test starts (two ports are two
//! origins). Credentials in URLs never show, redirects never carry a request
//! to another origin, whatever a server echoes of a key is scrubbed from
//! every output, and control characters from a server or a model reach a
//! terminal escaped.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use common::{Test, closed_port};
use serde_json::{Value, json};

/// One request as a test server read it.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A whole HTTP response.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Reply {
    fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.to_string(),
        }
    }

    fn redirect(status: u16, location: &str) -> Reply {
        Reply {
            status,
            headers: vec![("location", location.into())],
            body: String::new(),
        }
    }

    /// A chat completion whose answer is `content`.
    fn chat(content: &str) -> Reply {
        Reply::json(
            200,
            &json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
        )
    }

    /// A streamed chat completion sending `content` three characters a chunk.
    fn chat_stream(content: &str) -> Reply {
        let characters: Vec<char> = content.chars().collect();
        let mut body = String::new();
        for piece in characters.chunks(3) {
            let piece: String = piece.iter().collect();
            let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1,
                               "model": "m", "choices": [{"index": 0, "delta": {"content": piece},
                                                          "finish_reason": null}]});
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        let last = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                          "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        body.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        Reply {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body,
        }
    }
}

/// A server on 127.0.0.1 that answers each request with `answer` and keeps
/// every request, one connection at a time (so once it has answered a later
/// request, it has read every earlier one).
struct Server {
    origin: String,
    received: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn start(answer: impl Fn(&Request) -> Reply + Send + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let origin = format!("http://{}", listener.local_addr().expect("address"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                kept.lock().unwrap().push(request.clone());
                let reply = answer(&request);
                let mut text = format!(
                    "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                    reply.status,
                    reply.body.len()
                );
                for (name, value) in &reply.headers {
                    text.push_str(&format!("{name}: {value}\r\n"));
                }
                text.push_str("\r\n");
                text.push_str(&reply.body);
                let _ = stream.write_all(text.as_bytes());
            }
        });
        Server { origin, received }
    }

    fn address(&self) -> &str {
        self.origin.trim_start_matches("http://")
    }

    /// The model requests the server got before now: everything but the
    /// `GET /props` lllm sends a local server once a run to learn its
    /// slots (`local_server.rs`). That one goes to the same origin with the
    /// same key, and carries no body: nothing of the prompt.
    fn received(&self) -> Vec<Request> {
        let mut received = self.everything_received();
        for probe in received.iter().filter(|request| request.path == "/props") {
            assert_eq!((probe.method.as_str(), probe.body.as_str()), ("GET", ""));
        }
        received.retain(|request| request.path != "/props");
        received
    }

    /// Every request the server got before now: asks it for `/sentinel`
    /// itself and returns what came before.
    fn everything_received(&self) -> Vec<Request> {
        let mut stream = TcpStream::connect(self.address()).expect("connect");
        stream
            .write_all(b"GET /sentinel HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .expect("write");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let mut received = self.received.lock().unwrap().clone();
        assert_eq!(received.pop().expect("the sentinel").path, "/sentinel");
        received.retain(|request| request.path != "/sentinel");
        received
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut request = Request {
        method,
        path,
        headers,
        body: String::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    request.body = String::from_utf8_lossy(&body).into_owned();
    Some(request)
}

/// A one-agent tactic on provider `local` (an OpenAI-compatible server at
/// `base_url`, key from `TEST_KEY`, a custom header) that never retries.
fn tactic(base_url: &str) -> String {
    format!(
        "tactic_type: t\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs:\n  - {{name: a, system_prompt: Hi.}}\n\
         providers:\n  local: {{api: openai, base_url: \"{base_url}\", api_key_env: TEST_KEY, \
         headers: {{X-Custom: {CUSTOM}}}}}\n"
    )
}

const KEY: &str = "sk-test-key-0001";
const CUSTOM: &str = "custom-header-value-42";
const PASSWORD: &str = "PASSWORD-in-url";

fn everything(test: &Test, output: &common::Output, files: &[&str]) -> String {
    let mut text = format!("{}\n{}", output.stdout, output.stderr);
    for file in files {
        text.push_str(&std::fs::read_to_string(test.path(file)).unwrap_or_default());
    }
    text
}

#[track_caller]
fn assert_no_secret(text: &str) {
    for secret in [KEY, CUSTOM, PASSWORD, "bWFyeTpQQVNTV09SRC1pbi11cmw"] {
        assert!(!text.contains(secret), "`{secret}` leaked:\n{text}");
    }
}

#[test]
fn url_credentials_authenticate_and_are_never_shown_or_recorded() {
    let server = Server::start(|_| Reply::chat("hello"));
    let url = format!("http://mary:{PASSWORD}@{}/v1", server.address());
    let test = Test::new()
        .file("t.yaml", &tactic(&url))
        .file("tasks.jsonl", "{\"id\": \"t1\", \"task\": \"hi\"}\n")
        .env("TEST_KEY", KEY);

    // The explicit key wins the `Authorization` header; without one, the
    // URL's credentials are sent as basic auth (as reqwest would send them).
    let keyless = tactic(&url).replace(", api_key_env: TEST_KEY", "");
    std::fs::write(test.path("keyless.yaml"), keyless).unwrap();
    let keyless_output = test.run(&["run", "keyless.yaml", "--task", "hi", "--record", "r.json"]);
    keyless_output.expect_code(0);
    let received = server.received();
    assert_eq!(
        received[0].header("authorization"),
        Some("Basic bWFyeTpQQVNTV09SRC1pbi11cmw="),
        "base64 of `mary:{PASSWORD}`"
    );
    assert_eq!(received[0].path, "/v1/chat/completions");
    let record = test.read_json("r.json");
    let shown = format!("http://***@{}/v1", server.address());
    assert_eq!(
        record["tactic"]["config"]["providers"]["local"]["base_url"],
        shown.as_str()
    );

    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(
        server.received()[1].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let show = test.run(&["run", "t.yaml", "--show-config"]);
    show.expect_code(0);
    assert!(show.stdout.contains(&shown), "{}", show.stdout);
    let dry = test.run(&["run", "t.yaml", "--task", "hi", "--dry-run"]);
    dry.expect_code(0);
    // The dry run names the endpoint as errors do: credentials marked, not shown.
    let post = format!("POST http://***@{}/v1/chat/completions\n", server.address());
    assert!(dry.stdout.contains(&post), "{}", dry.stdout);
    let batch = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    batch.expect_code(0);
    for (output, files) in [
        (&output, &["r.json"][..]),
        (&keyless_output, &[]),
        (&show, &[]),
        (&dry, &[]),
        (
            &batch,
            &[
                "out/results.jsonl",
                "out/sessions.jsonl",
                "out/summary.json",
            ],
        ),
    ] {
        assert_no_secret(&everything(&test, output, files));
    }
}

#[test]
fn a_failing_url_is_named_without_its_credentials() {
    let port = closed_port();
    let url = format!("http://mary:{PASSWORD}@127.0.0.1:{port}/v1");
    let test = Test::new()
        .file("t.yaml", &tactic(&url))
        .file("tasks.jsonl", "{\"id\": \"t1\", \"task\": \"hi\"}\n")
        .env("TEST_KEY", KEY);
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "r.json"]);
    output.expect_code(1);
    let named = format!("cannot connect to `http://***@127.0.0.1:{port}/v1/chat/completions`");
    assert!(output.stderr.contains(&named), "{}", output.stderr);
    let batch = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    batch.expect_code(1);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert!(results.contains(&named), "{results}");
    assert_no_secret(&everything(
        &test,
        &output,
        &["r.json", "out/results.jsonl", "out/sessions.jsonl"],
    ));
    assert_no_secret(&batch.stderr);

    // From the environment, as from a tactic; and a URL that does not parse.
    let environment = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: openai/gpt-4o-mini, max_llm_recall: 0}\nagent_configs:\n  - {name: a}\n",
        )
        .env("OPENAI_BASE_URL", &url)
        .env("OPENAI_API_KEY", KEY);
    let output = environment.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(1);
    assert!(output.stderr.contains(&named), "{}", output.stderr);
    assert_no_secret(&output.stderr);
    let broken = Test::new()
        .file(
            "t.yaml",
            &tactic(&format!("http://mary:{PASSWORD}@[::1/v1")),
        )
        .env("TEST_KEY", KEY);
    let output = broken.run(&["run", "t.yaml", "--task", "hi"]);
    output.expect_code(2);
    let invalid = "invalid URL `http://***@[::1/v1/chat/completions`";
    assert!(output.stderr.contains(invalid), "{}", output.stderr);
    assert_no_secret(&output.stderr);
}

#[test]
fn a_redirect_to_another_origin_is_refused_and_sends_it_nothing() {
    let elsewhere = Server::start(|_| Reply::chat("stolen"));
    let target = format!("{}/v1/messages", elsewhere.origin);
    let redirecting = Server::start(move |_| Reply::redirect(307, &target));
    let anthropic = format!(
        "tactic_type: t\nglobal: {{model_name: anthropic/claude-x, max_llm_recall: 3}}\n\
         agent_configs:\n  - {{name: a, system_prompt: Hi.}}\n\
         providers:\n  anthropic: {{api: anthropic, base_url: \"{}/v1\", \
         headers: {{X-Custom: {CUSTOM}}}, retry_base_ms: 1}}\n",
        redirecting.origin
    );
    let test = Test::new()
        .file("anthropic.yaml", &anthropic)
        .file(
            "openai.yaml",
            &tactic(&format!("{}/v1", redirecting.origin)),
        )
        .env("ANTHROPIC_API_KEY", KEY)
        .env("TEST_KEY", KEY);
    for file in ["anthropic.yaml", "openai.yaml"] {
        let output = test.run(&["run", file, "--task", "the prompt", "--record", "r.json"]);
        output.expect_code(1);
        let expected = format!(
            "HTTP 307: the server at `{}` redirected to `{}/v1/messages`, another origin; not followed",
            redirecting.origin, elsewhere.origin
        );
        assert!(output.stderr.contains(&expected), "{}", output.stderr);
        let record = test.read_json("r.json");
        assert!(
            record["error"].as_str().unwrap().contains(&expected),
            "{record}"
        );
    }
    let reached = elsewhere.everything_received();
    assert!(reached.is_empty(), "the other origin got {reached:?}");
    let asked = redirecting.received();
    assert_eq!(
        asked.len(),
        2,
        "a permanent error: one request per run, never retried"
    );
    assert_eq!(asked[0].header("x-api-key"), Some(KEY));
    assert_eq!(asked[0].method, "POST");
}

#[test]
fn a_307_within_the_origin_is_followed() {
    let server = Server::start(|request| match request.path.as_str() {
        "/v1/chat/completions" => Reply::redirect(307, "/v2/chat/completions"),
        _ => Reply::chat("moved answer"),
    });
    let test = Test::new()
        .file("t.yaml", &tactic(&format!("{}/v1", server.origin)))
        .env("TEST_KEY", KEY);
    let output = test.run(&["run", "t.yaml", "--task", "the prompt", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "moved answer\n");
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].path, "/v2/chat/completions");
    assert_eq!(received[1].body, received[0].body);
    assert_eq!(received[1].header("x-custom"), Some(CUSTOM));
}

/// A server that echoes every credential it was sent: in a 401 error body on
/// `/v1`, and as the model's answer (whole, or streamed a few characters at
/// a time) elsewhere.
fn echoing_server() -> Server {
    Server::start(|request| {
        let echo = format!(
            "authorization={} x-custom={} key={KEY}",
            request.header("authorization").unwrap_or_default(),
            request.header("x-custom").unwrap_or_default()
        );
        let streamed = request.body.contains("\"stream\":true");
        match request.path.split('/').nth(1) {
            Some("v1") => Reply::json(
                401,
                &json!({"error": {"message": format!("invalid key: {echo}"), "code": "invalid_api_key"}}),
            ),
            _ if streamed => Reply::chat_stream(&format!("you sent {echo}")),
            _ => Reply::chat(&format!("you sent {echo}")),
        }
    })
}

#[test]
fn echoed_keys_and_header_values_are_scrubbed_from_every_output() {
    let server = echoing_server();
    let test = Test::new()
        .file("error.yaml", &tactic(&format!("{}/v1", server.origin)))
        .file("reply.yaml", &tactic(&format!("{}/v2", server.origin)))
        .file("tasks.jsonl", "{\"id\": \"t1\", \"task\": \"hi\"}\n")
        .env("TEST_KEY", KEY);

    let output = test.run(&["run", "error.yaml", "--task", "hi", "--record", "e.json"]);
    output.expect_code(1);
    let error = test.read_json("e.json")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("invalid key: authorization=Bearer *** x-custom=*** key=***"),
        "{error}"
    );
    assert_no_secret(&everything(&test, &output, &["e.json"]));
    let batch = test.run(&["batch", "tasks.jsonl", "--tactic", "error.yaml", "-o", "e"]);
    batch.expect_code(1);
    assert_no_secret(&everything(
        &test,
        &batch,
        &["e/results.jsonl", "e/sessions.jsonl"],
    ));

    let output = test.run(&["run", "reply.yaml", "--task", "hi", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(
        output.stdout,
        "you sent authorization=Bearer *** x-custom=*** key=***\n"
    );
    assert_no_secret(&everything(&test, &output, &["r.json"]));
    let streamed = test.run(&[
        "run",
        "reply.yaml",
        "--task",
        "hi",
        "--stream",
        "--no-record",
    ]);
    streamed.expect_code(0);
    assert_eq!(streamed.stdout, output.stdout, "streamed once, scrubbed");
    // The event stream (issue 29): the key arrives three characters a
    // chunk, and no event, text delta or error holds it.
    for tactic in ["reply.yaml", "error.yaml"] {
        let events = test.run(&["run", tactic, "--task", "hi", "--events", "--no-record"]);
        assert_no_secret(&events.stdout);
        assert_no_secret(&events.stderr);
        let last = events.stdout.lines().last().unwrap_or_default();
        assert!(last.contains("x-custom=***"), "{tactic}: {last}");
    }
    let events = test.run(&[
        "run",
        "reply.yaml",
        "--task",
        "hi",
        "--events",
        "--no-record",
    ]);
    events.expect_code(0);
    let deltas: String = events
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["kind"] == "text_delta")
        .map(|event| event["data"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        deltas,
        "you sent authorization=Bearer *** x-custom=*** key=***"
    );
    let batch = test.run(&["batch", "tasks.jsonl", "--tactic", "reply.yaml", "-o", "r"]);
    batch.expect_code(0);
    assert_no_secret(&everything(
        &test,
        &batch,
        &["r/results.jsonl", "r/sessions.jsonl"],
    ));
    let replay = test.run(&["replay", "r/sessions.jsonl"]);
    replay.expect_code(0);
    assert!(replay.stdout.contains("x-custom=***"), "{}", replay.stdout);
}

#[test]
fn control_sequences_from_a_server_or_a_model_reach_a_terminal_escaped() {
    const HOSTILE: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m";
    let server = Server::start(|request| {
        if request.path.starts_with("/v1/") {
            let message = format!("bad request {HOSTILE}\nsecond line");
            Reply::json(400, &json!({"error": {"message": message}}))
        } else {
            Reply::chat(&format!("answer {HOSTILE}\nend"))
        }
    });
    let test = Test::new()
        .file("error.yaml", &tactic(&format!("{}/v1", server.origin)))
        .file("reply.yaml", &tactic(&format!("{}/v2", server.origin)))
        .env("TEST_KEY", KEY);
    let raw = |text: &str| {
        text.chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    };

    let output = test.run(&["run", "error.yaml", "--task", "hi", "--record", "e.json"]);
    output.expect_code(1);
    assert!(!raw(&output.stderr), "{:?}", output.stderr);
    let summary = output
        .stderr
        .lines()
        .find(|line| line.starts_with("lllm: failure"))
        .unwrap();
    assert!(
        summary.contains(r"bad request \x1b[2J\x1b]0;pwned\x07\u{9b}31m\nsecond line"),
        "{summary}"
    );
    assert_eq!(
        output.stderr.lines().count(),
        1,
        "one line: {:?}",
        output.stderr
    );

    // A pipe gets the delivery byte for byte: it is data.
    let output = test.run(&["run", "reply.yaml", "--task", "hi", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, format!("answer {HOSTILE}\nend\n"));
    // `replay` renders for a person; `--json` stays the same JSON value.
    let replay = test.run(&["replay", "r.json"]);
    replay.expect_code(0);
    assert!(!raw(&replay.stdout), "{:?}", replay.stdout);
    assert!(
        replay.stdout.contains(r"answer \x1b[2J"),
        "{}",
        replay.stdout
    );
    let json = test.run(&["replay", "r.json", "--json"]);
    json.expect_code(0);
    assert!(!raw(&json.stdout), "{:?}", json.stdout);
    let value: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["delivery"], format!("answer {HOSTILE}\nend").as_str());
}

/// Every text lllm writes of a run or a batch, and what it prints.
fn written_texts(test: &Test, outputs: &[&common::Output], files: &[&str]) -> String {
    let mut text = String::new();
    for output in outputs {
        text.push_str(&format!("{}\n{}\n", output.stdout, output.stderr));
    }
    for file in files {
        let path = test.path(file);
        text.push_str(&std::fs::read_to_string(&path).unwrap_or_else(|error| {
            panic!("{}: {error}", path.display());
        }));
    }
    text
}

#[test]
fn a_key_a_request_carries_is_sent_but_never_recorded_or_shown() {
    let server = Server::start(|_| Reply::chat("done"));
    let base_url = format!("{}/v1", server.origin);
    // The key in the tactic's own system prompt and model arguments, and in
    // the task's text, arguments and conversation.
    let tactic = format!(
        "tactic_type: t\nglobal: {{model_name: local/m, max_llm_recall: 0, \
         model_args: {{user: \"{KEY}\"}}}}\n\
         agent_configs:\n  - {{name: a, system_prompt: \"Token {{{{ token }}}}, and {KEY}.\"}}\n\
         providers:\n  local: {{api: openai, base_url: \"{base_url}\", api_key_env: TEST_KEY}}\n"
    );
    let line = json!({"id": "t1", "task": format!("my key is {KEY}"), "args": {"token": KEY},
                      "messages": [{"role": "user", "content": format!("before: {KEY}")},
                                   {"role": "assistant", "content": "noted"}]});
    // Invalid (no `token` for the system prompt): a result without a record.
    let invalid = json!({"id": "t2", "task": "no token", "args": {"other": KEY}});
    let test = Test::new()
        .file("t.yaml", &tactic)
        .file("tasks.jsonl", &format!("{line}\n{invalid}\n"))
        .env("TEST_KEY", KEY);

    let batch = test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "--skip-invalid",
    ]);
    batch.expect_code(1);
    let sent = server.received();
    assert_eq!(sent.len(), 1, "{sent:?}");
    // On the wire, as the user asked: the system prompt (twice: the
    // argument and the text), the conversation, the task, the model argument.
    assert_eq!(sent[0].body.matches(KEY).count(), 5, "{}", sent[0].body);
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let replay = test.run(&["replay", "out/sessions.jsonl", "--id", "t1", "--json"]);
    replay.expect_code(0);
    let written = written_texts(
        &test,
        &[&batch, &replay],
        &[
            "out/sessions.jsonl",
            "out/results.jsonl",
            "out/summary.json",
        ],
    );
    assert_no_secret(&written);
    let record: Value = serde_json::from_str(&replay.stdout).unwrap();
    assert_eq!(record["task"], "my key is ***");
    assert_eq!(record["args"]["token"], "***");
    assert_eq!(record["model_args"], Value::Null, "the line set none");
    assert_eq!(record["messages"][0]["content"], "before: ***");
    let system = &record["dialogs"][0]["messages"][0]["content"];
    assert_eq!(system, "Token ***, and ***.");
    let invoke = &record["agent_calls"][0]["invokes"][0]["request"];
    assert_eq!(invoke["model_args"]["user"], "***");
    let config = &record["tactic"]["config"];
    assert_eq!(config["global"]["model_args"]["user"], "***", "{config}");
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let result = |id: &str| -> Value {
        results
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|result| result["id"] == id)
            .unwrap()
    };
    assert_eq!(result("t1")["args"]["token"], "***");
    assert_eq!(result("t1")["state"], "success");
    assert_eq!(result("t2")["state"], "failure");
    assert_eq!(
        result("t2")["args"]["other"],
        "***",
        "a line without a record"
    );

    // `lllm run`: the record, `--dry-run` and `--show-config` likewise.
    let task = format!("my key is {KEY}");
    let token = format!("token={KEY}");
    let run = test.run(&[
        "run", "t.yaml", "--task", &task, "--var", &token, "--record", "r.json",
    ]);
    run.expect_code(0);
    assert_eq!(server.received()[1].body.matches(KEY).count(), 4);
    let dry = test.run(&[
        "run",
        "t.yaml",
        "--task",
        &task,
        "--var",
        &token,
        "--dry-run",
    ]);
    dry.expect_code(0);
    assert!(dry.stdout.contains("my key is ***"), "{}", dry.stdout);
    assert!(
        dry.stdout.contains("agent `a`"),
        "the request is named by its digest, as recorded: {}",
        dry.stdout
    );
    let show = test.run(&["run", "t.yaml", "--show-config"]);
    show.expect_code(0);
    assert!(show.stdout.contains("and ***."), "{}", show.stdout);
    assert_no_secret(&written_texts(&test, &[&run, &dry, &show], &["r.json"]));
}

#[test]
fn a_rerun_of_a_record_whose_task_held_a_key_sends_the_mask_and_matches() {
    let server = Server::start(|_| Reply::chat("done"));
    let tactic = format!(
        "tactic_type: t\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs:\n  - {{name: a, system_prompt: \"Token {{{{ token }}}}.\"}}\n\
         providers:\n  local: {{api: openai, base_url: \"{}/v1\", api_key_env: TEST_KEY}}\n",
        server.origin
    );
    let test = Test::new().file("t.yaml", &tactic).env("TEST_KEY", KEY);
    let task = format!("my key is {KEY}");
    let token = format!("token={KEY}");
    let run = test.run(&[
        "run", "t.yaml", "--task", &task, "--var", &token, "--record", "r.json",
    ]);
    run.expect_code(0);
    assert_eq!(server.received()[0].body.matches(KEY).count(), 2);
    let rerun = test.run(&["replay", "r.json", "--rerun"]);
    rerun.expect_code(0);
    assert_eq!(
        rerun.stdout,
        "identical: 1 model call replayed, same delivery\n"
    );
    assert_no_secret(&written_texts(&test, &[&run, &rerun], &["r.json"]));
}

#[test]
fn a_sub_tactics_delivery_goes_on_whole_and_is_recorded_scrubbed() {
    let server = Server::start(|_| Reply::chat("done"));
    let provider = format!(
        "providers:\n  local: {{api: openai, base_url: \"{}/v1\", api_key_env: TEST_KEY}}\n",
        server.origin
    );
    let parent = format!(
        "tactic_type: parent\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: a}}]\n{provider}\
         flow:\n  - step: inner\n    tactic: sub.yaml\n\
         \x20 - step: final\n    agent: a\n    text: \"forwarded: {{{{ inner.content }}}}\"\n"
    );
    let sub = format!(
        "tactic_type: sub\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: b}}]\n{provider}\
         flow:\n  - step: ask\n    agent: b\n    text: \"{{{{ task }}}}\"\n\
         result: \"sub saw {{{{ task }}}}\"\n"
    );
    let test = Test::new()
        .file("parent.yaml", &parent)
        .file("sub.yaml", &sub)
        .env("TEST_KEY", KEY);
    let task = format!("key {KEY}");
    let output = test.run(&["run", "parent.yaml", "--task", &task, "--record", "r.json"]);
    output.expect_code(0);
    let sent = server.received();
    assert_eq!(sent.len(), 2);
    assert!(
        sent[1]
            .body
            .contains(&format!("forwarded: sub saw key {KEY}")),
        "the next request gets the delivery as it was made: {}",
        sent[1].body
    );
    let record = test.read_json("r.json");
    assert_eq!(
        record["sub_tactic_sessions"][0]["delivery"],
        "sub saw key ***"
    );
    assert_no_secret(&written_texts(&test, &[&output], &["r.json"]));
}
