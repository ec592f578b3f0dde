//! What the programs tools start inherit, end to end: the real `lllm` binary
//! runs command tools and an MCP server (`tests/fixtures/mcp_server.py`) with
//! provider credentials in its own environment; the programs see none of them
//! unless the tool's or server's `env` passes them (issue 12).

mod common;

use std::collections::BTreeMap;

use common::Test;
use serde_json::Value;

/// Credentials lllm reads, and ordinary variables, in lllm's environment.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-openai-secret"),
    ("GROQ_API_KEY", "gsk-groq-secret"),
    ("ANTHROPIC_AUTH_TOKEN", "anthropic-token-secret"),
    ("MY_LLM_TOKEN", "custom-key-secret"),
    (
        "OPENAI_BASE_URL",
        "https://user:url-password-secret@proxy.example/v1",
    ),
    ("OLLAMA_HOST", "127.0.0.1:11434"),
    ("PLAIN_SETTING", "visible"),
];

fn with_environment(mut test: Test) -> Test {
    for (name, value) in ENVIRONMENT {
        test = test.env(name, value);
    }
    test
}

/// `NAME=value` lines as a map.
fn parse_environment(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

#[test]
fn command_tools_start_without_the_keys_lllm_reads() {
    let tactic = r#"global: {model_name: mock/script}
agent_configs:
  - name: a
    tools: [plain, passing]
providers:
  mock: {script: replies.yaml}
  other: {api: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: MY_LLM_TOKEN}
tools:
  - name: plain
    command: [env]
  - name: passing
    command: [env]
    env: {OPENAI_API_KEY: "${OPENAI_API_KEY}", MY_LLM_TOKEN: written-here, UNSET_ONE: "${NOT_SET_ANYWHERE}"}
"#;
    let replies = r#"replies:
  - tool_calls: [{name: plain, arguments: {}}, {name: passing, arguments: {}}]
  - text: done
"#;
    let test = with_environment(
        Test::new()
            .file("t.yaml", tactic)
            .file("replies.yaml", replies),
    );
    let output = test.run(&["run", "t.yaml", "--task", "go", "--record", "record.json"]);
    output.expect_code(0);
    let record = test.read_json("record.json");
    let calls = &record["agent_calls"][0]["interrupts"][0]["calls"];
    let plain = parse_environment(calls[0]["result"].as_str().unwrap());
    let passing = parse_environment(calls[1]["result"].as_str().unwrap());

    for hidden in [
        "OPENAI_API_KEY",
        "GROQ_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "MY_LLM_TOKEN",
        "OPENAI_BASE_URL",
    ] {
        assert!(!plain.contains_key(hidden), "{hidden} reached the tool");
    }
    assert_eq!(plain["PLAIN_SETTING"], "visible");
    assert_eq!(plain["OLLAMA_HOST"], "127.0.0.1:11434", "no password in it");

    // The key the tactic passed on reached the tool, which printed it: its
    // result holds it, and the record keeps `***` in its place (issue 26).
    assert_eq!(passing["OPENAI_API_KEY"], "***");
    assert_eq!(passing["MY_LLM_TOKEN"], "written-here");
    assert!(!passing.contains_key("GROQ_API_KEY"));
    assert!(!passing.contains_key("UNSET_ONE"));
    // The environment a tool printed is its result, so it is in the record:
    // only what the tactic passed on explicitly may be there, keys scrubbed.
    let text = std::fs::read_to_string(test.path("record.json")).unwrap();
    for secret in [
        "sk-openai-secret",
        "gsk-groq-secret",
        "anthropic-token-secret",
        "url-password-secret",
    ] {
        assert!(!text.contains(secret), "{secret} is in the record");
    }
}

/// The environment the test MCP server saw when started with `env_line`
/// (its `env:` entry, or nothing).
fn mcp_server_environment(env_line: &str) -> BTreeMap<String, Value> {
    let fixture = format!(
        "{}/tests/fixtures/mcp_server.py",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
    );
    let tactic = format!(
        r#"global: {{model_name: mock/echo}}
agent_configs:
  - name: a
    mcp_servers: [calc]
providers:
  other: {{api: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: MY_LLM_TOKEN}}
mcp_servers:
  - name: calc
    command: [python3, "{fixture}"]
    args: [--env-file, seen.json]
    {env_line}
"#
    );
    let test = with_environment(Test::new().file("t.yaml", &tactic));
    let output = test.run(&["run", "t.yaml", "--task", "go", "--no-record"]);
    output.expect_code(0);
    let text = std::fs::read_to_string(test.path("seen.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn mcp_servers_start_without_the_keys_lllm_reads() {
    let plain = mcp_server_environment("");
    for hidden in [
        "OPENAI_API_KEY",
        "GROQ_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "MY_LLM_TOKEN",
        "OPENAI_BASE_URL",
    ] {
        assert!(!plain.contains_key(hidden), "{hidden} reached the server");
    }
    assert_eq!(plain["PLAIN_SETTING"], "visible");
    let passing =
        mcp_server_environment(r#"env: {ANTHROPIC_AUTH_TOKEN: "${ANTHROPIC_AUTH_TOKEN}"}"#);
    assert_eq!(passing["ANTHROPIC_AUTH_TOKEN"], "anthropic-token-secret");
    assert!(!passing.contains_key("OPENAI_API_KEY"));
}

/// Whether process `pid`, started as `program`, has ended: gone, a zombie its
/// reaper has not collected yet, or its id taken by another program.
#[cfg(unix)]
fn ended(pid: u32, program: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
    let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state.starts_with('Z') || !String::from_utf8_lossy(&command_line).contains(program)
}

#[cfg(unix)]
#[test]
fn ctrl_c_ends_a_running_tool_and_everything_it_started() {
    use std::time::{Duration, Instant};
    let tactic = r#"global: {model_name: mock/script}
agent_configs:
  - name: a
    tools: [slow]
providers:
  mock: {script: replies.yaml}
tools:
  - name: slow
    command: [sh, -c, "sleep 987656 & echo \"$$ $!\" > pids.tmp && mv pids.tmp pids; wait"]
    timeout_s: 3600
"#;
    let replies = "replies:\n  - tool_calls: [{name: slow, arguments: {}}]\n  - text: done\n";
    let test = Test::new()
        .file("t.yaml", tactic)
        .file("replies.yaml", replies);
    let child = test.spawn(&["run", "t.yaml", "--task", "go", "--no-record"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let pids = loop {
        if let Ok(text) = std::fs::read_to_string(test.path("pids")) {
            break text;
        }
        assert!(Instant::now() < deadline, "the tool did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = common::Output::of(child.wait_with_output().unwrap());
    output.expect_code(130);
    let (shell, sleeper) = pids.trim().split_once(' ').unwrap();
    for (pid, program) in [(shell, "sh"), (sleeper, "987656")] {
        let pid: u32 = pid.parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ended(pid, program) {
            assert!(
                Instant::now() < deadline,
                "`{program}` ({pid}) outlived lllm"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
