//! Streaming through the OpenAI provider against `lllm-mock` over real HTTP:
//! the text arrives through the sink and the message equals the non-streamed one.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::MockServer;
use lllm::dialog::Message;
use lllm::provider::openai::{OpenAiProvider, WireOptions};
use lllm::provider::{ChatRequest, ErrorKind, Provider};
use serde_json::Map;

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(
        lllm::provider::http::client(Duration::from_secs(5)).unwrap(),
        lllm::provider::registry::BaseUrl {
            url: server.base_url(),
            source: "the test".into(),
            explicit: true,
        },
        None,
        &[],
        WireOptions::default(),
        Duration::from_secs(5),
        Arc::new(lllm::provider::limit::Limiter::new(Default::default())),
    )
    .unwrap()
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = "replies:\n  - text: \"streams arrive in pieces\"\n  - text: \"streams arrive in pieces\"\n  - fault: cut_stream\n";
    let server = MockServer::start(dir.path(), script);
    let provider = provider(&server);
    let messages = [Arc::new(Message::user("go"))];
    let model_args = Map::new();
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: None,
        model_args: &model_args,
        api_type: Default::default(),
        stream: None,
    };
    let whole = provider.invoke(request).await.unwrap();
    let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
    let collected = pieces.clone();
    let sink = move |text: &str| collected.lock().unwrap().push(text.to_string());
    let streamed = provider
        .invoke(ChatRequest {
            stream: Some(&sink),
            ..request
        })
        .await
        .unwrap();
    assert_eq!(streamed.content, whole.content);
    assert_eq!(streamed.function_calls, whole.function_calls);
    let pieces = pieces.lock().unwrap().clone();
    assert!(
        pieces.len() > 1,
        "text arrived in several deltas: {pieces:?}"
    );
    assert_eq!(pieces.concat(), "streams arrive in pieces");
    assert_eq!(server.requests()[1]["stream"], true);
    let cut = provider
        .invoke(ChatRequest {
            stream: Some(&sink),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(cut.kind, ErrorKind::Transient);
}

/// Runs `lllm` with `args` in `dir`, its stdout on a pseudo-terminal (as a
/// person sees it), and returns what the terminal showed and the exit code.
fn on_a_terminal(dir: &std::path::Path, args: &[&str]) -> (String, i32) {
    const RUNNER: &str = r#"
import os, pty, subprocess, sys
master, slave = pty.openpty()
child = subprocess.Popen(sys.argv[1:], stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
os.close(slave)
shown = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    shown += chunk
sys.stdout.buffer.write(shown)
sys.exit(child.wait())
"#;
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(RUNNER)
        .arg(env!("CARGO_BIN_EXE_lllm"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .output()
        .expect("run python3");
    let shown = String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n");
    (shown, output.status.code().unwrap_or(-1))
}

#[test]
fn a_stream_cut_mid_way_is_marked_on_a_terminal_and_the_answer_is_not_repeated() {
    let test = common::Test::new();
    let script = "replies:\n  - fault: cut_stream\n  - text: \"The final answer.\"\n";
    let server = MockServer::start(test.dir.path(), script);
    let yaml = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - name: a\nproviders:\n  local: {{base_url: \"{}\", retry_base_ms: 10}}\n",
        server.base_url()
    );
    let test = test.file("t.yaml", &yaml);
    let args = [
        "run",
        "t.yaml",
        "--task",
        "go",
        "--stream",
        "--no-record",
        "-q",
    ];
    let (shown, code) = on_a_terminal(test.dir.path(), &args);
    assert_eq!(code, 0, "{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown:?}");
    assert!(
        "this reply is cut off before its end".starts_with(lines[0]) && !lines[0].is_empty(),
        "the cut attempt's text comes first: {shown:?}"
    );
    assert!(
        lines[1].starts_with("[lllm: the text above is not the answer"),
        "{shown:?}"
    );
    assert_eq!(
        lines[2], "The final answer.",
        "once, after the marker: {shown:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_streamed_run_into_a_pipe_holds_the_delivery_once() {
    let test = common::Test::new();
    let script = "replies:\n  - fault: cut_stream\n  - text: \"The final answer.\"\n";
    let server = MockServer::start(test.dir.path(), script);
    let yaml = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - name: a\nproviders:\n  local: {{base_url: \"{}\", retry_base_ms: 10}}\n",
        server.base_url()
    );
    let test = test.file("t.yaml", &yaml);
    let output = test.run(&["run", "t.yaml", "--task", "go", "--stream", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "The final answer.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|request| request["body"]["stream"] == true)
    );
}
