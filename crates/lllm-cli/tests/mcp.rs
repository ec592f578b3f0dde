//! MCP servers end to end: the real `lllm` binary against `lllm-mock` on
//! 127.0.0.1, with `tests/fixtures/mcp_server.py` (stdio, plain Python 3) as the
//! server. Checks what the model was offered and read, the exit codes of bad
//! declarations, that secrets in `env` stay out of every output, and that no
//! server outlives the run.

mod common;

use common::{MockServer, Test};
use serde_json::Value;

const SECRET: &str = "sk-mcp-secret-42";

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/mcp_server.py",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
    )
}

/// A one-agent tactic on `base_url` with MCP server `calc`; `agent_extra` goes
/// on the agent, `server_args` to the server, `extra` at the end.
fn tactic(base_url: &str, agent_extra: &str, server_args: &str, extra: &str) -> String {
    format!(
        r#"tactic_type: mcp-test
global:
  model_name: local/test-model
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
{agent_extra}
providers:
  local: {{api: openai, base_url: "{base_url}", api_key_env: TEST_KEY, retry_base_ms: 10, retry_cap_ms: 50}}
mcp_servers:
  - name: calc
    command: [python3, "{fixture}"]
    args: [--pid-file, pid.txt, --events, events.txt{server_args}]
    env: {{GREETING: Ahoy, TOKEN: "{SECRET}"}}
{extra}"#,
        fixture = fixture()
    )
}

fn run(test: &Test) -> common::Output {
    test.run(&["run", "t.yaml", "--task", "Go.", "--record", "record.json"])
}

fn tool_names(request: &Value) -> Vec<String> {
    request["body"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["function"]["name"].as_str())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The tool-result messages at the end of a request, in order.
fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["body"]["messages"].as_array().unwrap();
    let trailing: Vec<&Value> = messages
        .iter()
        .rev()
        .take_while(|message| message["role"] == "tool")
        .collect();
    trailing
        .into_iter()
        .rev()
        .map(|message| message["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The server wrote `started` and, on stdin EOF, `shutdown`; its process is gone.
#[track_caller]
fn assert_shut_down(test: &Test) {
    let events = std::fs::read_to_string(test.path("events.txt")).unwrap_or_default();
    assert_eq!(events, "started\nshutdown\n", "the server did not see EOF");
    assert_server_gone(test);
}

#[track_caller]
fn assert_server_gone(test: &Test) {
    let pid = std::fs::read_to_string(test.path("pid.txt")).expect("the server wrote its pid");
    assert!(
        !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "MCP server process {pid} outlived the run"
    );
}

#[test]
fn the_model_calls_mcp_tools_and_reads_their_results() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls:
      - {id: c1, name: add, arguments: {a: 2, b: 3}}
      - {id: c2, name: shout, arguments: {text: hi}}
      - {id: c3, name: greet, arguments: {name: Ann}}
      - {id: c4, name: text_reverse, arguments: {text: abc}}
  - text: "The sum is 5."
"#,
    );
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(0);
    assert_eq!(output.stdout, "The sum is 5.\n");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Every tool of the server, from both pages of `tools/list`; the
    // server's `text.reverse` under a name chat APIs accept.
    assert_eq!(
        tool_names(&requests[0]),
        ["add", "shout", "greet", "fail", "crash", "text_reverse"]
    );
    assert_eq!(
        requests[0]["body"]["tools"][0]["function"]["parameters"]["required"],
        serde_json::json!(["a", "b"])
    );
    assert_eq!(
        tool_results(&requests[1]),
        [
            "Return of calling function add with arguments {\"a\":2,\"b\":3}:\n---\n5\n---\n",
            "Return of calling function shout with arguments {\"text\":\"hi\"}:\n---\nHI\n!\n---\n",
            "Return of calling function greet with arguments {\"name\":\"Ann\"}:\n---\nAhoy, Ann\n---\n",
            "Return of calling function text_reverse with arguments {\"text\":\"abc\"}:\n---\ncba\n---\n",
        ]
    );

    let record = test.read_json("record.json");
    assert_eq!(record["state"], "success");
    assert_eq!(
        record["agent_calls"][0]["interrupts"][0]["calls"][0]["result"],
        "5"
    );
    // The server's environment may hold secrets: redacted in the record, never printed.
    assert_eq!(
        record["tactic"]["config"]["mcp_servers"][0]["env"]["TOKEN"],
        "***"
    );
    let record_text = std::fs::read_to_string(test.path("record.json")).unwrap();
    for text in [&output.stdout, &output.stderr, &record_text] {
        assert!(!text.contains(SECRET), "the secret leaked");
    }
    // The server's stderr is not mixed into ours.
    assert!(
        !output.stderr.contains("mcp_server.py"),
        "{}",
        output.stderr
    );
    assert_shut_down(&test);
}

#[test]
fn a_crashed_server_and_a_failing_tool_are_errors_the_model_sees() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls: [{id: c1, name: fail, arguments: {}}]
  - tool_calls: [{id: c2, name: crash, arguments: {}}]
  - tool_calls: [{id: c3, name: add, arguments: {a: 1, b: 1}}]
  - text: "The calculator is down."
"#,
    );
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(0);
    assert_eq!(output.stdout, "The calculator is down.\n");

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(tool_results(&requests[1]), ["Error: the disk is on fire"]);
    let gone = "Error: MCP server `calc`: the server is not running (its connection closed)";
    assert_eq!(
        tool_results(&requests[2]),
        [format!(
            "{gone} (stderr: mcp_server.py: crashing on purpose)"
        )]
    );
    // Later calls fail the same way, at once.
    assert!(
        tool_results(&requests[3])[0].starts_with(gone),
        "{:?}",
        tool_results(&requests[3])
    );
    let record = test.read_json("record.json");
    assert_eq!(record["state"], "success");
    let calls = &record["agent_calls"][0]["interrupts"];
    assert_eq!(calls[0]["calls"][0]["error_message"], "the disk is on fire");
    assert_server_gone(&test);
}

#[test]
fn tools_follow_the_prompt_that_names_the_server() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: first\n  - text: second\n",
    );
    let flow = "prompts: prompts\nflow:\n  - step: plain\n    agent: assistant\n    text: \"Hello\"\n  - step: with_tools\n    agent: assistant\n    prompt: ask\n";
    let yaml = tactic(&server.base_url(), "", "", flow);
    let test = test
        .file("t.yaml", &yaml)
        .file(
            "prompts/ask.md",
            "---\nmcp_servers: [calc]\n---\nAdd things.\n",
        )
        .env("TEST_KEY", "k");
    run(&test).expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(tool_names(&requests[0]).is_empty());
    assert_eq!(tool_names(&requests[1]).len(), 6);
    assert_shut_down(&test);
}

#[test]
fn an_unknown_server_name_is_bad_input() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "replies:\n  - text: never\n");
    let flow = "prompts: prompts\nflow:\n  - step: s\n    agent: assistant\n    prompt: ask\n";
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calcc]", "", flow);
    let test = test
        .file("t.yaml", &yaml)
        .file("prompts/ask.md", "---\nmcp_servers: [files]\n---\nHi.\n")
        .env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: t.yaml:7:5: agent `assistant` names MCP server `calcc`, which is not defined under `mcp_servers:`; did you mean `calc`?\n\
         error: ./prompts/ask.md:2:1: prompt `ask` names MCP server `files`, which is not defined under `mcp_servers:`\n"
    );
    assert!(server.requests().is_empty());
    assert!(!test.path("events.txt").exists(), "a server was started");
}

#[test]
fn a_server_that_cannot_start_is_bad_input() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "replies:\n  - text: never\n");
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "")
        .replace("command: [python3, ", "command: [no-such-mcp-server, ");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: MCP server `calc`: cannot start `no-such-mcp-server`: No such file or directory (os error 2)\n"
    );

    // A server that exits before answering `initialize`: its last stderr line says why.
    let yaml = tactic(
        &server.base_url(),
        "    mcp_servers: [calc]",
        ", --exit-at-start",
        "",
    );
    std::fs::write(test.path("t.yaml"), yaml).unwrap();
    let output = run(&test);
    output.expect_code(2);
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", output.stderr);
    assert!(
        lines[0].starts_with("error: MCP server `calc` did not start: ")
            && lines[0].ends_with("(stderr: mcp_server.py: refusing to start (--exit-at-start))"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains(SECRET));
    assert!(server.requests().is_empty());
    assert!(!test.path("record.json").exists());
}

#[test]
fn a_server_that_cannot_list_its_tools_is_bad_input_and_is_stopped() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "replies:\n  - text: never\n");
    let yaml = tactic(
        &server.base_url(),
        "    mcp_servers: [calc]",
        ", --no-tools-list",
        "",
    );
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: MCP server `calc`: listing its tools failed: tools/list is switched off\n"
    );
    assert!(server.requests().is_empty());
    assert_shut_down(&test);
}

#[test]
fn a_tool_name_two_sources_share_is_bad_input() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "replies:\n  - text: never\n");
    let tools = "tools:\n  - name: add\n    command: [echo, \"1\"]\n";
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", tools);
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: tool `add` of MCP server `calc` clashes with tool `add` of `tools:`; a tool name must be unique in a tactic\n"
    );
    assert!(server.requests().is_empty());
    assert_shut_down(&test);
}

#[test]
fn the_server_is_stopped_when_the_run_fails() {
    let test = Test::new();
    // The script answers 400 (`script_exhausted`) to the first request.
    let server = MockServer::start(test.dir.path(), "replies: []\n");
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(1);
    assert_eq!(test.read_json("record.json")["state"], "failure");
    assert_shut_down(&test);
}

#[test]
fn a_sub_tactic_starts_its_servers_with_the_run_and_stops_them_at_the_end() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls: [{id: c1, name: add, arguments: {a: 20, b: 22}}]
  - text: "42"
"#,
    );
    let sub = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "");
    let parent = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - {step: sum, tactic: sub.yaml}\n  - {step: say, agent: a, text: \"answer {{ sum.content }}\"}\n";
    let test = test
        .file("sub.yaml", &sub)
        .file("t.yaml", parent)
        .env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(0);
    assert_eq!(output.stdout, "answer 42\n");
    let record = test.read_json("record.json");
    assert_eq!(record["sub_tactic_sessions"][0]["delivery"], "42");
    assert_shut_down(&test);
}

#[test]
fn a_huge_mcp_result_is_cut_like_a_command_tool_s_output() {
    let test = Test::new();
    // 5 MB of result (1.25M tokens), then the model answers.
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls:
      - {id: c1, name: shout, arguments: {text: ab, repeat: 2500000}}
  - text: "Read it."
"#,
    );
    let yaml = tactic(&server.base_url(), "    mcp_servers: [calc]", "", "");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = run(&test);
    output.expect_code(0);
    assert_eq!(output.stdout, "Read it.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1);
    let result = &results[0];
    // The command tools' cap and note: 256 KiB of the result, then the note.
    let kept = result
        .split_once(":\n---\n")
        .and_then(|(_, rest)| rest.strip_suffix("\n[output cut at 256 KiB]\n---\n"))
        .unwrap_or_else(|| panic!("{}…", &result[..200.min(result.len())]));
    assert_eq!(kept.len(), 256 * 1024);
    assert!(kept.bytes().all(|byte| byte == b'A' || byte == b'B'));
    // The record holds what the model read.
    let record = test.read_json("record.json");
    let recorded = record["agent_calls"][0]["interrupts"][0]["calls"][0]["result"]
        .as_str()
        .unwrap();
    assert_eq!(
        recorded.len(),
        256 * 1024 + "\n[output cut at 256 KiB]".len()
    );
    assert_shut_down(&test);
}
