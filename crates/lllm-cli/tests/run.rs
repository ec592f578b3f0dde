//! `lllm run` end to end: the real binary against an `lllm-mock` server on
//! 127.0.0.1 (or the in-process `mock/` provider), checking stdout, stderr,
//! exit codes, the session record and what reached the server.

mod common;

use common::{MockServer, Test};
use serde_json::Value;

/// A one-agent tactic on a local OpenAI-compatible server; `extra` is appended.
fn tactic(base_url: &str, extra: &str) -> String {
    format!(
        r#"tactic_type: test
global:
  model_name: local/test-model
  max_llm_recall: 3
agent_configs:
  - name: assistant
    system_prompt: "You are terse."
providers:
  local: {{api: openai, base_url: "{base_url}", api_key_env: TEST_KEY, retry_base_ms: 10, retry_cap_ms: 50}}
{extra}"#
    )
}

fn record(test: &Test) -> Value {
    test.read_json("record.json")
}

/// `record.json` as `lllm replay --json` shows it: with what the written
/// form keeps only once (shared history, responses, deliveries) in place.
fn expanded_record(test: &Test) -> Value {
    let output = test.run(&["replay", "record.json", "--json"]);
    output.expect_code(0);
    serde_json::from_str(&output.stdout).unwrap()
}

#[test]
fn answers_on_stdout_and_writes_a_complete_record() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - {text: \"Paris.\", usage: {prompt_tokens: 12, completion_tokens: 2}}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .env("TEST_KEY", "sk-test-secret-123");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "Capital of France?",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "Paris.\n");
    assert!(output.stderr.contains("lllm: success"), "{}", output.stderr);
    assert!(
        output.stderr.contains("14 tokens (12 in, 2 out)"),
        "{}",
        output.stderr
    );

    let record = record(&test);
    assert_eq!(record["format"], "lllm.session/3");
    assert_eq!(record["state"], "success");
    assert_eq!(record["delivery"], "Paris.");
    assert_eq!(record["task"], "Capital of France?");
    assert_eq!(record["tactic"]["name"], "test");
    // Every prompt of the tactic, with its hash and template.
    let prompts = record["prompts"].as_object().unwrap();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let (_, prompt) = prompts.iter().next().unwrap();
    assert_eq!(prompt["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(prompt["template"], "You are terse.");
    let call = &record["agent_calls"][0];
    assert_eq!(call["agent"], "assistant");
    assert_eq!(call["state"], "success");
    assert_eq!(call["invokes"].as_array().unwrap().len(), 1);
    assert_eq!(
        call["invokes"][0]["request"]["sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    // The canonical dialog holds system, user and the reply.
    let dialogs = record["dialogs"].as_array().unwrap();
    let canonical = dialogs
        .iter()
        .find(|d| d["tree_node"]["parent_id"].is_null())
        .unwrap();
    let roles: Vec<&str> = canonical["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant"]);

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0]["body"];
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "Capital of France?");
    assert!(
        requests[0]["auth"].as_str().unwrap().starts_with("sha256:"),
        "the key was sent"
    );

    // The key never appears in any output or file.
    let record_text = std::fs::read_to_string(test.path("record.json")).unwrap();
    for text in [&output.stdout, &output.stderr, &record_text] {
        assert!(!text.contains("sk-test-secret-123"));
    }
}

#[test]
fn runs_a_tool_loop_with_a_command_tool() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        r#"replies:
  - tool_calls: [{id: call_1, name: word_count, arguments: {text: "one two three"}}]
  - text: "There are 3 words."
"#,
    );
    let tools = r#"tools:
  - name: word_count
    description: Count words
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [sh, count.sh]
"#;
    let yaml = tactic(&server.base_url(), tools).replace(
        "system_prompt: \"You are terse.\"",
        "system_prompt: \"You are terse.\"\n    tools: [word_count]",
    );
    let test = test
        .file("t.yaml", &yaml)
        .file(
            "count.sh",
            "python3 -c 'import json,sys; print(len(json.load(sys.stdin)[\"text\"].split()))'\n",
        )
        .env("TEST_KEY", "k");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "Count: one two three",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "There are 3 words.\n");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0]["body"]["tools"][0]["function"]["name"],
        "word_count"
    );
    let messages = requests[1]["body"]["messages"].as_array().unwrap();
    let tool_message = messages.last().unwrap();
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_call_id"], "call_1");
    assert_eq!(
        tool_message["content"],
        "Return of calling function word_count with arguments {\"text\":\"one two three\"}:\n---\n3\n---\n"
    );
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");

    let record = record(&test);
    let call = &record["agent_calls"][0];
    assert_eq!(call["interrupts"][0]["calls"][0]["result"], "3");
    assert_eq!(call["invokes"].as_array().unwrap().len(), 2);
}

#[test]
fn repairs_a_reply_that_does_not_parse() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: \"no tags here\"\n  - text: \"<answer>42</answer>\"\n",
    );
    // The task goes through a flow step whose prompt carries the parser.
    let yaml = format!(
        "{}flow:\n  - step: ask\n    agent: assistant\n    prompt: ask\n",
        tactic(&server.base_url(), "")
    );
    let test = test
        .file("t.yaml", &yaml)
        .file(
            "prompts/ask.md",
            "---\nparser: {type: tags, required_xml_tags: [answer]}\n---\n{{ task }}",
        )
        .env("TEST_KEY", "k");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "6 times 7?",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "<answer>42</answer>\n");
    let written = record(&test);
    // The delivery is the last response, which the working fork holds: the
    // written record keeps it there only.
    assert!(written["agent_calls"][0].get("delivery").is_none());
    assert_eq!(
        written["agent_calls"][0]["invokes"][1]["response_in_dialog"],
        true
    );
    let record = expanded_record(&test);
    let call = &record["agent_calls"][0];
    assert_eq!(call["exception_retries"].as_array().unwrap().len(), 1);
    assert_eq!(call["delivery"]["parsed"]["xml_tags"]["answer"][0], "42");
    let delivered = &call["invokes"][1]["response"];
    assert_eq!(delivered["parsed"]["xml_tags"]["answer"][0], "42");
    assert!(
        call["invokes"][0]["parse_error"]
            .as_str()
            .unwrap()
            .contains("answer")
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let repair = requests[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(repair["role"], "user");
    assert!(
        repair["content"].as_str().unwrap().starts_with("Error: "),
        "{repair}"
    );
    // The canonical dialog keeps only the accepted reply; the repair lives in a fork.
    let dialogs = record["dialogs"].as_array().unwrap();
    let canonical = dialogs
        .iter()
        .find(|d| d["tree_node"]["parent_id"].is_null())
        .unwrap();
    assert_eq!(canonical["messages"].as_array().unwrap().len(), 3);
    assert_eq!(
        dialogs.len(),
        2,
        "the canonical dialog and its working fork"
    );
}

#[test]
fn exhausted_repairs_fail_with_the_whole_trace_recorded() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"still no tags\"}\n");
    let yaml = format!(
        "{}flow:\n  - step: ask\n    agent: assistant\n    prompt: ask\n",
        tactic(&server.base_url(), "").replace(
            "max_llm_recall: 3",
            "max_llm_recall: 3\n  max_exception_retry: 2"
        )
    );
    let test = test
        .file("t.yaml", &yaml)
        .file(
            "prompts/ask.md",
            "---\nparser: {type: tags, required_xml_tags: [answer]}\n---\n{{ task }}",
        )
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "?", "--record", "record.json"]);
    output.expect_code(1);
    assert_eq!(output.stdout, "");
    assert!(output.stderr.contains("lllm: failure"), "{}", output.stderr);
    assert!(
        output.stderr.contains("does not parse after 2 repairs"),
        "{}",
        output.stderr
    );
    let record = record(&test);
    assert_eq!(record["state"], "failure");
    let call = &record["agent_calls"][0];
    assert_eq!(call["state"], "failure");
    assert_eq!(
        call["invokes"].as_array().unwrap().len(),
        3,
        "first try and two repairs (D7)"
    );
    assert_eq!(server.requests().len(), 3);
    // Each repair is numbered (issue 27: every one was `attempt 1`), in
    // the record, in `lllm replay` and in `-v`'s lines.
    let repairs: Vec<(Option<u64>, u64)> = call["invokes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|invoke| {
            (
                invoke["repair"].as_u64(),
                invoke["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(repairs, [(None, 1), (Some(1), 1), (Some(2), 1)]);
    let shown = test.run(&["replay", "record.json"]);
    let heads: Vec<&str> = shown
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("  call in round 0"))
        .map(|rest| rest.split(" · ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        heads,
        [
            ", attempt 1",
            ", repair 1, attempt 1",
            ", repair 2, attempt 1"
        ]
    );
    let traced = test.run(&["-v", "run", "t.yaml", "--task", "?", "--no-record"]);
    let posts: Vec<&str> = traced
        .stderr
        .lines()
        .filter(|line| line.contains(": lllm::provider::trace: POST "))
        .collect();
    assert_eq!(posts.len(), 3, "{}", traced.stderr);
    assert!(posts[0].contains("call{provider=local model=test-model}:attempt{number=1}"));
    assert!(
        posts[1].contains("call{provider=local model=test-model repair=1}:attempt{number=1}"),
        "{}",
        posts[1]
    );
    assert!(posts[2].contains("repair=2}"), "{}", posts[2]);
}

#[test]
fn retries_500_then_429_with_retry_after_then_succeeds() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 500}\n  - fault: {status: 429, retry_after_ms: 30}\n  - text: \"ok\"\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "ok\n");
    assert_eq!(server.requests().len(), 3);
    let record = record(&test);
    let call = &record["agent_calls"][0];
    let recalls = call["llm_recalls"].as_array().unwrap();
    assert_eq!(recalls.len(), 2);
    assert_eq!(recalls[0]["error"]["kind"], "transient");
    assert_eq!(recalls[1]["error"]["kind"], "rate_limit");
    assert_eq!(recalls[1]["error"]["retry_after"], 30);
    let invokes = call["invokes"].as_array().unwrap();
    assert_eq!(invokes.len(), 3);
    assert!(
        invokes[1]["waited_ms"].as_u64().unwrap() >= 30,
        "Retry-After was honoured"
    );
}

#[test]
fn permanent_errors_are_not_retried() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: {status: 401, message: \"bad key\"}\n  - text: \"never\"\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "record.json"]);
    output.expect_code(1);
    assert!(output.stderr.contains("HTTP 401"), "{}", output.stderr);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn runs_offline_on_the_mock_provider() {
    let test = Test::new().file(
        "t.yaml",
        "global: {model_name: mock/echo}\nagent_configs:\n  - name: echo\n",
    );
    let output = test.run(&["run", "t.yaml", "--task", "hello there", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "hello there\n");
    // The records' default place: `sessions/` in the session store's
    // directory (`$HOME/.local/share/lllm` here), not the working directory.
    let records = test.path(".local/share/lllm/sessions");
    assert!(!records.exists(), "--no-record writes nothing");

    let output = test.run(&["run", "t.yaml", "--task", "again"]);
    output.expect_code(0);
    let written: Vec<_> = std::fs::read_dir(&records).unwrap().collect();
    assert_eq!(
        written.len(),
        1,
        "a record is written under the store's sessions/ by default"
    );
    assert!(!test.path("sessions").exists());
}

#[test]
fn model_flag_overrides_every_agent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"from server\"}\n");
    let yaml = format!(
        "global: {{model_name: mock/echo}}\nagent_configs:\n  - name: a\nproviders:\n  local: {{api: openai, base_url: \"{}\"}}\n",
        server.base_url()
    );
    let test = test.file("t.yaml", &yaml);
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "x",
        "--model",
        "local/other",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "from server\n");
    assert_eq!(server.requests()[0]["body"]["model"], "other");
}

#[test]
fn reads_the_task_from_stdin_and_files_and_vars_reach_templates() {
    let test = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - step: s\n    agent: a\n    text: \"{{ task }} / {{ topic }} / {{ args.topic }}\"\n",
        )
        .file("task.txt", "from a file")
        .stdin("from stdin");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "-",
        "--var",
        "topic=owls",
        "--no-record",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "from stdin / owls / owls\n");
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task-file",
        "task.txt",
        "--var",
        "topic=x",
        "--no-record",
    ]);
    assert_eq!(output.stdout, "from a file / x / x\n");
}

#[test]
fn two_step_flow_passes_outputs_to_later_templates() {
    let test = Test::new().file(
        "t.yaml",
        r#"global: {model_name: mock/echo}
agent_configs:
  - name: writer
  - name: critic
flow:
  - step: draft
    agent: writer
    text: "draft of {{ task }}"
  - step: review
    agent: critic
    text: "review of {{ draft.content }}"
result: "{{ draft.content }} | {{ review.content }}"
"#,
    );
    let output = test.run(&["run", "t.yaml", "--task", "owls", "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "draft of owls | review of draft of owls\n");
    let record = test.read_json("record.json");
    assert_eq!(record["steps"][1]["agent"], "critic");
    assert_eq!(record["agent_calls"].as_array().unwrap().len(), 2);
}

/// Each bad input: one clear line naming where and what, exit 2, no request sent.
#[test]
fn bad_inputs_fail_before_anything_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"x\"}\n");
    let base = tactic(&server.base_url(), "");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "malformed yaml",
            "global: {model_name: [unclosed\n".to_string(),
            vec!["t.yaml:"],
        ),
        (
            "unknown prompt key",
            base.replace(
                "system_prompt: \"You are terse.\"",
                "system_prompt_path: helpr",
            ),
            vec!["unknown prompt `helpr`", "did you mean `helper`"],
        ),
        (
            "unknown agent in a step",
            format!("{base}flow:\n  - step: s\n    agent: asistant\n    text: hi\n"),
            vec!["asistant", "did you mean `assistant`"],
        ),
        (
            "missing template variable",
            format!(
                "{base}flow:\n  - step: s\n    agent: assistant\n    text: \"{{{{ topic }}}}\"\n"
            ),
            vec!["step `s`", "`topic`"],
        ),
        (
            "missing model_name",
            base.replace("  model_name: local/test-model\n", ""),
            vec!["agent `assistant` has no `model_name`"],
        ),
    ];
    let test = test.file("prompts/helper.md", "Help.").env("TEST_KEY", "k");
    for (name, yaml, expected) in cases {
        std::fs::write(test.path("t.yaml"), &yaml).unwrap();
        let output = test.run(&["run", "t.yaml", "--task", "x", "--no-record"]);
        assert_eq!(output.code, 2, "{name}: {}", output.stderr);
        assert!(
            output.stderr.starts_with("error: "),
            "{name}: {}",
            output.stderr
        );
        for text in expected {
            assert!(
                output.stderr.contains(text),
                "{name}: expected {text:?} in {}",
                output.stderr
            );
        }
        assert!(!output.stderr.contains("panicked"), "{name}");
        assert_eq!(output.stdout, "", "{name}");
    }
    let output = test.run(&["run", "missing.yaml", "--task", "x"]);
    assert_eq!(output.code, 2);
    assert!(output.stderr.contains("missing.yaml"), "{}", output.stderr);
    assert_eq!(server.requests().len(), 0, "nothing was sent");
}

/// A name holding a line break or a terminal escape (the class fuzzing
/// `prompt_file` found) is shown escaped: each problem stays on its line.
#[test]
fn names_holding_control_characters_keep_each_problem_on_its_line() {
    let yaml = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    system_prompt_path: \"help\\nr\"\n    tools: [\"count\\u001b[2J\"]\n";
    let test = Test::new().file("t.yaml", yaml);
    let output = test.run(&["run", "t.yaml", "--task", "x", "--no-record"]);
    output.expect_code(2);
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per problem: {}", output.stderr);
    assert!(
        lines[0].contains("unknown prompt `help\\nr`"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("tool `count\\x1b[2J`"), "{}", lines[1]);
    assert!(!output.stderr.contains('\u{1b}'));
}

#[test]
fn a_hung_server_times_out_and_the_request_is_retried() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - fault: timeout\n  - text: \"recovered\"\n",
    );
    let yaml = tactic(&server.base_url(), "")
        // The held request costs the whole limit; the retry must be answered
        // within it, so it is generous, not short (the test takes that long).
        .replace("retry_cap_ms: 50}", "retry_cap_ms: 50, timeout_s: 10}");
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "recovered\n");
    let record = record(&test);
    let recall = &record["agent_calls"][0]["llm_recalls"][0]["error"];
    assert_eq!(recall["kind"], "transient");
    assert!(
        recall["message"].as_str().unwrap().contains("no reply"),
        "{recall}"
    );
}

#[test]
fn a_failing_tool_is_an_error_the_model_sees() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - tool_calls: [{id: c1, name: broken, arguments: {}}]\n  - text: \"I could not count.\"\n",
    );
    let tools = "tools:\n  - name: broken\n    description: Always fails\n    command: [sh, -c, \"echo 'disk on fire' >&2; exit 4\"]\n";
    let yaml = tactic(&server.base_url(), tools).replace(
        "system_prompt: \"You are terse.\"",
        "system_prompt: \"You are terse.\"\n    tools: [broken]",
    );
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "go", "--no-record"]);
    output.expect_code(0);
    let requests = server.requests();
    let tool_message = requests[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        tool_message["content"],
        "Error: `sh` exited with status 4: disk on fire"
    );
}

#[test]
fn the_context_manager_truncates_what_is_sent() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let yaml = tactic(&server.base_url(), "").replace(
        "  max_llm_recall: 3\n",
        "  max_llm_recall: 3\n  context_manager: {type: default, max_tokens: 400}\n",
    );
    let long_task = format!("{} THE END", "filler ".repeat(2000));
    let test = test
        .file("t.yaml", &yaml)
        .env("TEST_KEY", "k")
        .file("task.txt", &long_task);
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task-file",
        "task.txt",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    let sent = server.requests()[0]["body"]["messages"].clone();
    let user = sent[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with("[...earlier content truncated...]"),
        "{}",
        &user[..60]
    );
    assert!(user.ends_with("THE END"));
    assert!(user.len() < long_task.len() / 4);
    let record = expanded_record(&test);
    let canonical = record["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["tree_node"]["parent_id"].is_null())
        .unwrap()
        .clone();
    assert_eq!(
        canonical["messages"][1]["content"],
        long_task.trim_end(),
        "the canonical dialog keeps everything"
    );
}

#[test]
fn stream_prints_the_final_turn_as_it_arrives() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: \"streamed words here\"}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--stream", "--no-record"]);
    output.expect_code(0);
    assert_eq!(
        output.stdout, "streamed words here\n",
        "streamed once, not printed again"
    );
    assert_eq!(server.requests()[0]["stream"], true);

    let with_result = format!(
        "{}flow:\n  - step: one\n    agent: assistant\n    text: \"{{{{ task }}}}\"\n  - step: two\n    agent: assistant\n    text: again\nresult: \"[{{{{ two.content }}}}]\"\n",
        tactic(&server.base_url(), "")
    );
    std::fs::write(test.path("t.yaml"), with_result).unwrap();
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--stream", "--no-record"]);
    output.expect_code(0);
    // Into a pipe, stdout holds the delivery once (the streamed text of the
    // final step shows only on a terminal).
    assert_eq!(output.stdout, "[streamed words here]\n");
    let requests = server.requests();
    assert_eq!(requests[1]["stream"], false, "only the final step streams");
    assert_eq!(requests[2]["stream"], true);
}

#[test]
fn show_config_prints_the_resolved_tactic() {
    let test = Test::new()
        .file(
            "base.yaml",
            "global: {model_name: mock/echo, model_args: {temperature: 0.1, seed: 1}}\nagent_configs:\n  - name: a\n",
        )
        .file("t.yaml", "base: base.yaml\nglobal: {model_args: {temperature: 0.7}, top_k: 5}\n");
    let output = test.run(&["run", "t.yaml", "--show-config", "--model", "mock/script"]);
    output.expect_code(0);
    let resolved: Value = serde_json::from_str(&output.stdout).unwrap();
    let agent = &resolved["agent_configs"][0];
    assert_eq!(agent["model_name"], "mock/script");
    assert_eq!(
        agent["model_args"],
        serde_json::json!({"temperature": 0.7, "seed": 1, "top_k": 5})
    );
    assert!(resolved.get("base").is_none());
    assert!(
        output
            .stderr
            .contains("warning: t.yaml:2:42: agent `a`: unknown key `top_k` passed to the model"),
        "{}",
        output.stderr
    );
}

/// Issue 27: with `-m`, `--show-config` showed `global.model_name` as the
/// tactic's, only the tactic's own `mock` provider and no base URL.
#[test]
fn show_config_shows_the_model_and_the_provider_that_run() {
    let test = Test::new()
        .file(
            "t.yaml",
            r#"global: {model_name: mock/script}
agent_configs:
  - name: a
providers:
  mock: {script: replies.yaml}
  local: {api: openai, base_url: "http://me:pw@127.0.0.1:9/v1", api_key_env: LOCAL_KEY}
"#,
        )
        .env("OPENAI_BASE_URL", "http://127.0.0.1:8/v1");
    let show = |model: &str| {
        let output = test.run(&["run", "t.yaml", "--show-config", "-m", model]);
        output.expect_code(0);
        serde_json::from_str::<Value>(&output.stdout).unwrap()
    };
    let resolved = show("openai/gpt-4o-mini");
    assert_eq!(resolved["global"]["model_name"], "openai/gpt-4o-mini");
    assert_eq!(
        resolved["agent_configs"][0]["model_name"],
        "openai/gpt-4o-mini"
    );
    assert_eq!(
        resolved["providers"]["openai"],
        serde_json::json!({"api": "openai", "base_url": "http://127.0.0.1:8/v1",
                           "base_url_from": "OPENAI_BASE_URL", "api_key_env": "OPENAI_API_KEY"})
    );
    assert!(
        resolved["providers"]["mock"].is_object(),
        "the tactic's entries stay"
    );
    // A provider of the tactic: its entry, with what a run reads; the URL's
    // credentials are never shown.
    let resolved = show("local/m");
    assert_eq!(
        resolved["providers"]["local"],
        serde_json::json!({"api": "openai", "base_url": "http://***@127.0.0.1:9/v1",
                           "base_url_from": "`providers.local.base_url`",
                           "api_key_env": "LOCAL_KEY"})
    );
    let resolved = show("anthropic/claude-haiku-4-5");
    assert_eq!(
        resolved["providers"]["anthropic"]["base_url"],
        "https://api.anthropic.com"
    );
    assert_eq!(
        resolved["providers"]["anthropic"]["api_key_env"],
        "ANTHROPIC_API_KEY"
    );
}

#[test]
fn presets_take_their_endpoint_from_the_environment() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"from ollama\"}\n");
    let test = test
        .file(
            "t.yaml",
            "global: {model_name: ollama/llama3.2}\nagent_configs:\n  - name: a\n",
        )
        .env("OLLAMA_BASE_URL", &server.base_url());
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "from ollama\n");
    assert_eq!(server.requests()[0]["body"]["model"], "llama3.2");
    assert!(server.requests()[0]["auth"].is_null(), "no key, no header");
}

#[test]
fn an_rpm_limit_is_kept_across_agents() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let mut yaml = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - name: one\n  - name: two\nproviders:\n  local: {{base_url: \"{}\", rpm: 60}}\nflow:\n",
        server.base_url()
    );
    for step in 0..62 {
        let agent = if step % 2 == 0 { "one" } else { "two" };
        yaml.push_str(&format!(
            "  - step: s{step}\n    agent: {agent}\n    text: \"step {step}\"\n"
        ));
    }
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "x", "--no-record"]);
    output.expect_code(0);
    let times: Vec<chrono::DateTime<chrono::FixedOffset>> = server
        .requests()
        .iter()
        .map(|request| {
            chrono::DateTime::parse_from_rfc3339(request["ts"].as_str().unwrap()).unwrap()
        })
        .collect();
    assert_eq!(times.len(), 62);
    // 60 rpm is the provider's bucket: the minute's 60 at once, then one a
    // second from the end of the first request, whichever agent sends.
    // (The log's times are in whole milliseconds.)
    for (index, at_least) in [(60, 999), (61, 1999)] {
        let span = (times[index] - times[0]).num_milliseconds();
        assert!(
            span >= at_least,
            "request {index} after {span} ms: {times:?}"
        );
    }
}

#[test]
fn unknown_prices_are_unknown_until_a_price_file_gives_them() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: ok, usage: {prompt_tokens: 1000000, completion_tokens: 1000000}}\n",
    );
    let test = test
        .file("t.yaml", &tactic(&server.base_url(), ""))
        .file(
            "prices.json",
            r#"{"test-model": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}"#,
        )
        .env("TEST_KEY", "k");
    let output = test.run(&["run", "t.yaml", "--task", "x", "--record", "record.json"]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("warning: no price known for `local/test-model`"),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains("cost unknown"), "{}", output.stderr);
    let record = test.read_json("record.json");
    assert_eq!(record["cost_known"], false);
    assert!(record["cost"]["cost"].is_null(), "never a silent $0");

    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "x",
        "--prices",
        "prices.json",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert!(
        !output.stderr.contains("no price known"),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains("$3.000000"), "{}", output.stderr);
    assert_eq!(test.read_json("record.json")["cost_known"], true);
}

#[test]
fn builtin_tools_are_enabled_in_yaml_and_confined() {
    let test = Test::new()
        .file("data/notes.txt", "the meeting is at noon")
        .file("secret.txt", "do not read")
        .file(
            "replies.yaml",
            "replies:\n  - tool_calls: [{id: c1, name: read_file, arguments: {path: notes.txt}}, {id: c2, name: read_file, arguments: {path: ../secret.txt}}]\n  - text: done\n",
        )
        .file(
            "t.yaml",
            "global: {model_name: mock/script}\nagent_configs:\n  - name: a\n    tools: [read_file, current_time]\nproviders:\n  mock: {script: replies.yaml}\nbuiltin_tools:\n  read_file: {root: data}\n  current_time: null\n",
        );
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "when?",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    let record = test.read_json("record.json");
    let calls = &record["agent_calls"][0]["interrupts"][0]["calls"];
    assert_eq!(calls[0]["result"], "the meeting is at noon");
    assert!(
        calls[1]["error_message"]
            .as_str()
            .unwrap()
            .contains("outside the allowed directory")
    );
    assert!(
        !std::fs::read_to_string(test.path("record.json"))
            .unwrap()
            .contains("do not read")
    );

    std::fs::write(test.path("t.yaml"), "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nbuiltin_tools:\n  read_fil: {root: data}\n").unwrap();
    let output = test.run(&["run", "t.yaml", "--task", "x"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("did you mean `read_file`?"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_loop_runs_until_its_condition_and_if_skips_steps() {
    let test = Test::new()
        .file(
            "replies.yaml",
            r#"rules:
  - when: {contains: REVIEW}
    reply: {text: needs work}
    times: 1
  - when: {contains: REVIEW}
    reply: {text: ok}
  - when: {contains: REVISE}
    reply: {text: better draft}
default: {text: first draft}
"#,
        )
        .file(
            "t.yaml",
            r#"global: {model_name: mock/script}
agent_configs:
  - name: writer
  - name: critic
providers:
  mock: {script: replies.yaml}
flow:
  - step: draft
    agent: writer
    text: "Draft: {{ task }}"
  - loop: {max: 3, until: "review.content == 'ok'"}
    steps:
      - step: review
        agent: critic
        text: "REVIEW {{ draft.content }}"
      - step: revise
        agent: writer
        if: "review.content != 'ok'"
        text: "REVISE per {{ review.content }}"
result: "{{ revise.content }} / {{ review.content }}"
"#,
        );
    let output = test.run(&["run", "t.yaml", "--task", "owls", "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "better draft / ok\n");
    let record = test.read_json("record.json");
    let steps: Vec<&str> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        ["draft", "review", "revise", "review"],
        "the second round skipped `revise` and ended the loop"
    );

    let bad = std::fs::read_to_string(test.path("t.yaml"))
        .unwrap()
        .replace("review.content == 'ok'", "verdict == 'ok'");
    std::fs::write(test.path("t.yaml"), bad).unwrap();
    let output = test.run(&["run", "t.yaml", "--task", "owls", "--no-record"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("loop `until`: `verdict == 'ok'` needs `verdict`"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_step_can_fork_a_dialog_and_stop_the_tactic() {
    let test = Test::new().file(
        "t.yaml",
        r#"global: {model_name: mock/echo}
agent_configs:
  - name: a
flow:
  - step: s1
    agent: a
    text: "first"
  - step: s2
    agent: a
    dialog: side
    fork: {from: main}
    text: "second"
    stop: "'second' in s2.content"
  - step: s3
    agent: a
    text: "never"
"#,
    );
    let output = test.run(&["run", "t.yaml", "--task", "x", "--record", "record.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "second\n");
    // As a reader sees it: forks' shared history restored (`replay --json`).
    let record: Value =
        serde_json::from_str(&test.run(&["replay", "record.json", "--json"]).stdout).unwrap();
    let steps: Vec<&str> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["s1", "s2"], "`stop` ended the tactic before s3");
    let main_id = record["agent_calls"][0]["dialog_id"]
        .as_str()
        .unwrap()
        .to_string();
    let side_id = record["agent_calls"][1]["dialog_id"]
        .as_str()
        .unwrap()
        .to_string();
    let side = record["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["tree_node"]["dialog_id"] == side_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        side["tree_node"]["parent_id"],
        main_id.as_str(),
        "the side dialog is a fork of main"
    );
    let contents: Vec<&str> = side["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents[1..], ["first", "first", "second", "second"]);

    std::fs::write(test.path("t.yaml"), "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - step: s\n    agent: a\n    fork: {from: main}\n    text: x\n").unwrap();
    let output = test.run(&["run", "t.yaml", "--task", "x"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("forks dialog `main` into itself"),
        "{}",
        output.stderr
    );
}

#[test]
fn parallel_blocks_map_over_a_list_and_run_independent_steps() {
    let test = Test::new().file(
        "t.yaml",
        r#"global: {model_name: mock/echo}
agent_configs:
  - name: mapper
  - name: other
flow:
  - parallel: {foreach: "task | split(',')", as: topic}
    steps:
      - step: note
        agent: mapper
        text: "note on {{ topic }}"
  - parallel:
    steps:
      - step: left
        agent: mapper
        text: "left"
      - step: right
        agent: other
        text: "right"
  - step: summary
    agent: other
    text: "{{ note | map(attribute='content') | join(' + ') }} / {{ left.content }} {{ right.content }}"
"#,
    );
    let output = test.run(&[
        "run",
        "t.yaml",
        "--task",
        "owls,bats,newts",
        "--record",
        "record.json",
    ]);
    output.expect_code(0);
    assert_eq!(
        output.stdout,
        "note on owls + note on bats + note on newts / left right\n"
    );
    let record = test.read_json("record.json");
    let steps: Vec<&str> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        ["note", "note", "note", "left", "right", "summary"],
        "records in branch order"
    );
    for (index, step) in record["steps"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            step["agent_call"], index,
            "each step points at its own call"
        );
    }
    let dialogs = record["dialogs"].as_array().unwrap();
    let mapper_roots = dialogs
        .iter()
        .filter(|d| d["owner"] == "mapper" && d["tree_node"]["parent_id"].is_null())
        .count();
    assert_eq!(
        mapper_roots, 4,
        "every branch ran on a fresh agent: 3 foreach branches and `left`"
    );

    std::fs::write(test.path("t.yaml"), "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\nflow:\n  - parallel: {foreach: \"task\"}\n    steps:\n      - {step: s, agent: a, text: x}\n").unwrap();
    let output = test.run(&["run", "t.yaml", "--task", "not a list", "--no-record"]);
    // Known from the task alone: bad input, found before anything is sent.
    output.expect_code(2);
    assert!(
        output.stderr.contains("`task` is not a list"),
        "{}",
        output.stderr
    );
}

#[test]
fn ctrl_c_exits_130_and_keeps_what_finished_in_the_record() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - text: \"first done\"\n  - fault: timeout\n",
    );
    let yaml = tactic(
        &server.base_url(),
        "flow:\n  - {step: one, agent: assistant, text: \"a\"}\n  - {step: two, agent: assistant, text: \"b\"}\n",
    );
    let test = test.file("t.yaml", &yaml).env("TEST_KEY", "k");
    let child = test
        .command(&["run", "t.yaml", "--task", "x", "--record", "record.json"])
        .spawn()
        .expect("start lllm");
    // The server logs a held request as it starts holding it: once the
    // second request is logged, the first call has finished (no sleep that
    // must be long enough).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while server.requests().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second request never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let output = common::Output::of(child.wait_with_output().expect("wait"));
    output.expect_code(130);
    assert!(output.stderr.contains("interrupted"), "{}", output.stderr);
    let record = expanded_record(&test);
    assert_eq!(record["state"], "failure");
    assert_eq!(record["error"], "interrupted");
    let calls = record["agent_calls"].as_array().unwrap();
    assert_eq!(
        calls.len(),
        2,
        "the finished call is kept, and the one in flight"
    );
    assert_eq!(calls[0]["delivery"]["content"], "first done");
    assert_eq!(calls[1]["state"], "failure");
    assert_eq!(calls[1]["error"], "interrupted");
    // Its request was sent and never answered: a call, whose cost is not
    // known (issue 27: it was left out, and the run said `1 call`).
    let invokes = calls[1]["invokes"].as_array().unwrap();
    assert_eq!(invokes.len(), 1, "{invokes:?}");
    assert_eq!(invokes[0]["error"]["code"], "interrupted");
    assert!(invokes[0]["response"].is_null());
    assert!(output.stderr.contains(" · 2 calls · "), "{}", output.stderr);
}

#[test]
fn a_bad_provider_header_or_url_is_bad_config_and_nothing_is_sent() {
    let server_dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(server_dir.path(), "replies:\n  - text: never\n");
    let header = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - {{name: a, system_prompt: Hi.}}\n\
         providers:\n  local: {{api: openai, base_url: \"{}\", api_key_env: KEY, headers: {{x-extra: \"bad\\nvalue\"}}}}\n",
        server.base_url()
    );
    let test = Test::new()
        .file("header.yaml", &header)
        .file(
            "url.yaml",
            "global: {model_name: local/m}\nagent_configs:\n  - {name: a, system_prompt: Hi.}\n\
             providers:\n  local: {api: openai, base_url: \"localhost:9/v1?key=sk-in-url\"}\n",
        )
        .env("KEY", "sk-from-env");
    let output = test.run(&["run", "header.yaml", "--task", "x"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr.trim(),
        "error: header.yaml:5:3: provider `local`: invalid value for header `x-extra`"
    );
    let output = test.run(&["run", "url.yaml", "--task", "x"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("invalid URL `localhost:9/v1`"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("sk-"), "{}", output.stderr);
    assert!(server.requests().is_empty(), "nothing was sent");
}
