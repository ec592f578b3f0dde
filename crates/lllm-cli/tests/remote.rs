//! Remote tactics (issue 30): a flow step and a tool that call a tactic
//! served over HTTP — upstream lllm-core's own service running the Python
//! peer tactic (`tests/python/upstream_tactic.py`), and `lllm serve` — with
//! every call on record and `lllm replay --rerun` answering from the record
//! with the servers stopped. Model calls are counted at `lllm-mock`.

mod common;

use common::python::UpstreamServer;
use common::serve::Served;
use common::{MockServer, Test};
use futures_util::StreamExt;
use lllm::EventKind;
use lllm::remote::RemoteTactic;
use serde_json::{Value, json};

/// The shipped tactic with a contract, and its scripted replies.
fn with_triage(test: Test) -> Test {
    let root = common::python::root();
    let read = |name: &str| {
        std::fs::read_to_string(root.join("tactics").join(name)).expect("shipped tactic")
    };
    test.file("served/triage.yaml", &read("triage.yaml"))
        .file("served/triage.mock.yaml", &read("triage.mock.yaml"))
        .file("token.txt", "t0ken-for-tests\n")
}

fn triage_step(url: &str) -> String {
    format!(
        r#"tactic_type: desk
global: {{model_name: mock/echo}}
agent_configs: [{{name: writer}}]
flow:
  - step: sort
    tactic: {url}
    token_env: DESK_TOKEN
    args: {{ticket: "{{{{ task }}}}"}}
  - step: final
    agent: writer
    text: "{{{{ sort.parsed.category }}}} (urgent: {{{{ sort.parsed.urgent | tojson }}}})"
"#
    )
}

#[test]
fn a_flow_step_calls_lllm_serve_with_a_token_and_reruns_offline() {
    let test = with_triage(Test::new());
    let served = Served::start(&test, &["served/triage.yaml", "--token-file", "token.txt"]);
    let test = test
        .file(
            "desk.yaml",
            &triage_step(&format!("{}/tactics/triage", served.url)),
        )
        .env("DESK_TOKEN", "t0ken-for-tests");
    let output = test.run(&[
        "run",
        "desk.yaml",
        "--task",
        "I was charged twice this month.",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "billing (urgent: false)\n");
    let record = test.read_json("r.json");
    let call = &record["remote_calls"][0];
    assert_eq!(
        call["request"]["input"],
        json!({"ticket": "I was charged twice this month."})
    );
    assert_eq!(
        call["answer"]["output"],
        json!({"category": "billing", "urgent": false})
    );
    // lllm serve names its own session of the run: `lllm logs` there finds it.
    let remote_session = call["session_id"]
        .as_str()
        .expect("the server's session id");
    assert_eq!(call["answer"]["session_id"], remote_session);
    assert_eq!(call["request_id"], call["answer"]["request_id"]);
    // The token is sent, never kept.
    let text = std::fs::read_to_string(test.path("r.json")).expect("record");
    assert!(
        !text.contains("t0ken-for-tests"),
        "the record holds the token"
    );

    drop(served);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical:"), "{}", output.stdout);
}

#[test]
fn lllm_serve_s_refusals_reach_the_step_as_its_error() {
    let test = with_triage(Test::new());
    let served = Served::start(&test, &["served/triage.yaml", "--token-file", "token.txt"]);
    // A wrong token: 401.
    let test = test
        .file("desk.yaml", &triage_step(&served.url))
        .env("DESK_TOKEN", "wrong");
    let output = test.run(&["run", "desk.yaml", "--task", "hello"]);
    output.expect_code(1);
    assert!(
        output.stderr.contains("answered HTTP 401"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("wrong"), "{}", output.stderr);
    // An input its contract refuses: 400 with the server's reason.
    let test = test
        .file(
            "desk.yaml",
            &triage_step(&served.url).replace(r#"{ticket: "{{ task }}"}"#, "{ticket: 7}"),
        )
        .env("DESK_TOKEN", "t0ken-for-tests");
    let output = test.run(&["run", "desk.yaml", "--task", "hello"]);
    output.expect_code(1);
    assert!(
        output.stderr.contains("step `sort`") && output.stderr.contains("answered HTTP 400"),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains("/ticket"), "{}", output.stderr);
}

#[test]
fn remote_tactic_reads_both_servers_events_and_contracts() {
    let test = with_triage(Test::new());
    let served = Served::start(&test, &["served/triage.yaml", "--token-file", "token.txt"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let triage = RemoteTactic::new(&format!("{}/stream", served.url))
            .expect("a URL")
            .token("t0ken-for-tests");
        let info = triage.info().await.expect("its contract");
        assert_eq!(info.name, "triage");
        assert_eq!(
            info.input_schema
                .as_ref()
                .map(|schema| schema["required"].clone()),
            Some(json!(["ticket"]))
        );
        let answer = triage
            .run(json!({"ticket": "The site is down, nobody can log in."}))
            .await
            .expect("an answer");
        assert_eq!(answer.output, json!({"category": "outage", "urgent": true}));
        assert!(answer.session_id.is_some());
        let events: Vec<_> = triage
            .events(json!({"ticket": "Where is my parcel?"}))
            .await
            .expect("a stream")
            .collect()
            .await;
        let last = events.last().expect("events").as_ref().expect("no error");
        let EventKind::Result { delivery, .. } = &last.kind else {
            panic!("{events:?}")
        };
        assert_eq!(delivery, r#"{"category": "other", "urgent": false}"#);
        assert!(events.iter().all(Result::is_ok), "{events:?}");
        // A refused input is an error before any event (D17).
        let refused = triage
            .events(json!({"ticket": 7}))
            .await
            .err()
            .map(|error| error.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|error| error.contains("HTTP 400")),
            "{refused:?}"
        );
        // Without the token: 401, whatever the route.
        let anonymous = RemoteTactic::new(&served.url).expect("a URL");
        let refused = anonymous.info().await.err().map(|error| error.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|error| error.contains("HTTP 401")),
            "{refused:?}"
        );
    });

    let Some(python) = common::python::python() else {
        return;
    };
    let mock = MockServer::start(&test.path(""), SCRIPT);
    let upstream = UpstreamServer::start(&python, &mock.base_url());
    runtime.block_on(async {
        let answer = RemoteTactic::new(&upstream.url).expect("a URL");
        assert_eq!(answer.info().await.expect("its contract").name, "answer");
        // Upstream streams text as `data:` lines and no closing event.
        let events: Vec<_> = answer
            .events(json!({"question": "Capital?"}))
            .await
            .expect("a stream")
            .collect()
            .await;
        assert!(!events.is_empty());
        let mut text = String::new();
        for event in &events {
            let event = event.as_ref().expect("no error");
            let EventKind::Remote { kind, data } = &event.kind else {
                panic!("{event:?}")
            };
            assert_eq!(kind, "message");
            text.push_str(data.as_str().unwrap_or_default());
        }
        assert_eq!(text, "Paris is the capital of France.");
        // Its 4xx on a bad input (upstream validates `run` only).
        let refused = answer
            .run(json!({"question": ""}))
            .await
            .err()
            .map(|error| error.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|error| error.contains("HTTP 4")),
            "{refused:?}"
        );
    });
}

#[test]
fn a_local_tactic_with_a_contract_is_a_tool_whose_parameters_are_its_input_schema() {
    let test = with_triage(Test::new());
    let mock = MockServer::start(
        &test.path(""),
        r#"replies:
  - tool_calls:
      - {name: sort, arguments: {ticket: "I was charged twice."}, id: c1}
      - {name: sort, arguments: {ticket: 7}, id: c2}
  - text: sorted
"#,
    );
    let test = test.file(
        "desk.yaml",
        &format!(
            r#"tactic_type: desk
global: {{model_name: local/helper, max_llm_recall: 0}}
providers:
  local: {{api: openai, base_url: "{}"}}
pricing:
  local/helper: {{input_per_million: 0, output_per_million: 0}}
agent_configs:
  - name: clerk
    tools: [sort]
tools:
  - name: sort
    tactic: served/triage.yaml
"#,
            mock.base_url()
        ),
    );
    let output = test.run(&[
        "run",
        "desk.yaml",
        "--task",
        "sort my tickets",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "sorted\n");
    let requests = mock.requests();
    let tool = &requests[0]["body"]["tools"][0]["function"];
    assert_eq!(tool["name"], "sort");
    assert_eq!(
        tool["description"],
        "Sort a support ticket into a category and say whether it is urgent."
    );
    assert_eq!(tool["parameters"]["required"], json!(["ticket"]));
    let messages = requests[1]["body"]["messages"]
        .as_array()
        .expect("messages");
    let results: Vec<&str> = messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(results.len(), 2, "{messages:?}");
    assert!(
        results[0].contains(r#"{"category": "billing", "urgent": false}"#),
        "{}",
        results[0]
    );
    // The model's bad call is answered with what the contract expected.
    assert!(results[1].contains("/ticket"), "{}", results[1]);
    let record = test.read_json("r.json");
    let subs = record["sub_tactic_sessions"]
        .as_array()
        .expect("sub-sessions");
    assert_eq!(subs.len(), 1, "only the call that ran");
    assert_eq!(subs[0]["tactic"]["name"], "triage");
    drop(mock);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical:"), "{}", output.stdout);
}

/// One mock for every model call: the Python tactic's (model
/// `gpt-4o-mini`) and our agent's (model `helper`), told apart by model.
const SCRIPT: &str = r#"rules:
  - when: {model: gpt-4o-mini}
    reply: {text: "Paris is the capital of France."}
  - when: {model: helper, last_role: tool}
    reply: {text: "The tool said so."}
  - when: {model: helper}
    reply: {tool_calls: [{name: ask, arguments: {question: "Capital of France?"}, id: call_1}]}
default: {text: unexpected}
"#;

fn step_tactic(url: &str) -> String {
    format!(
        r#"tactic_type: asker
global: {{model_name: mock/echo}}
agent_configs: [{{name: writer}}]
flow:
  - step: ask
    tactic: {url}
    args: {{question: "{{{{ task }}}}"}}
  - step: final
    agent: writer
    text: "answer: {{{{ ask.parsed.answer }}}}"
"#
    )
}

fn tool_tactic(url: &str, mock: &str) -> String {
    format!(
        r#"tactic_type: delegator
global:
  model_name: local/helper
  max_llm_recall: 0
agent_configs:
  - name: assistant
    system_prompt: "Use the ask tool."
    tools: [ask]
providers:
  local: {{api: openai, base_url: "{mock}"}}
pricing:
  local/helper: {{input_per_million: 0, output_per_million: 0}}
tools:
  - name: ask
    tactic: {url}
"#
    )
}

fn model_calls(mock: &MockServer, model: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|request| request["body"]["model"] == model)
        .collect()
}

#[test]
fn a_flow_step_runs_a_python_tactic_served_by_upstream_and_reruns_offline() {
    let Some(python) = common::python::python() else {
        return;
    };
    let test = Test::new();
    let mock = MockServer::start(&test.path(""), SCRIPT);
    let upstream = UpstreamServer::start(&python, &mock.base_url());
    // The base URL of a one-tactic server (D21): no name needed.
    let test = test.file("asker.yaml", &step_tactic(&upstream.url));
    let output = test.run(&[
        "run",
        "asker.yaml",
        "--task",
        "What is the capital of France?",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "answer: Paris is the capital of France.\n");
    assert_eq!(model_calls(&mock, "gpt-4o-mini").len(), 1);

    let record = test.read_json("r.json");
    let calls = record["remote_calls"].as_array().expect("remote calls");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call["by"], "ask");
    assert_eq!(call["url"], upstream.url.as_str());
    assert_eq!(call["route"], "run");
    assert_eq!(
        call["request"]["input"],
        json!({"question": "What is the capital of France?"})
    );
    assert_eq!(
        call["answer"]["output"],
        json!({"answer": "Paris is the capital of France."})
    );
    assert_eq!(call["answer"]["tactic"], "answer");
    // The request id sent is the one upstream answered with.
    assert_eq!(call["request_id"], call["answer"]["request_id"]);
    assert_eq!(record["steps"][0]["step"], "ask");
    let shown = test.run(&["replay", "r.json"]);
    shown.expect_code(0);
    assert!(
        shown
            .stdout
            .contains(&format!("ask called `{}` (run, ", upstream.url))
            && shown
                .stdout
                .contains(r#"input: {"question":"What is the capital of France?"}"#),
        "{}",
        shown.stdout
    );

    // With both servers gone, the re-run is answered from the record.
    drop(upstream);
    drop(mock);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical:"), "{}", output.stdout);

    // A different input is not in the record: the re-run says where.
    std::fs::write(
        test.path("asker.yaml"),
        step_tactic(&format!("{}/run", upstream_url_of(&record))).replace(
            "question: \"{{ task }}\"",
            "question: \"{{ task }} (again)\"",
        ),
    )
    .expect("edit the tactic");
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(1);
    assert!(
        output.stderr.contains("the re-run calls")
            && output
                .stderr
                .contains("with an input the record has no answer for"),
        "{}",
        output.stderr
    );
}

fn upstream_url_of(record: &Value) -> String {
    record["remote_calls"][0]["url"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_tool_calls_a_python_tactic_with_its_input_schema_as_parameters() {
    let Some(python) = common::python::python() else {
        return;
    };
    let test = Test::new();
    let mock = MockServer::start(&test.path(""), SCRIPT);
    let upstream = UpstreamServer::start(&python, &mock.base_url());
    // The route form of a server of several tactics.
    let url = format!("{}/tactics/answer/run", upstream.url);
    let test = test.file("delegator.yaml", &tool_tactic(&url, &mock.base_url()));
    let output = test.run(&[
        "run",
        "delegator.yaml",
        "--task",
        "Find the capital of France.",
        "--record",
        "r.json",
    ]);
    output.expect_code(0);
    assert_eq!(output.stdout, "The tool said so.\n");

    // The model was offered the tactic's contract as the tool.
    let ours = model_calls(&mock, "helper");
    assert_eq!(ours.len(), 2, "{ours:?}");
    let tool = &ours[0]["body"]["tools"][0]["function"];
    assert_eq!(tool["name"], "ask");
    assert_eq!(
        tool["description"],
        "Answers a question in one sentence with one model call."
    );
    assert_eq!(tool["parameters"]["required"], json!(["question"]));
    assert_eq!(
        tool["parameters"]["properties"]["question"]["type"],
        "string"
    );
    // The tool's result is the tactic's output, in the dialog.
    let messages = ours[1]["body"]["messages"].as_array().expect("messages");
    let result = messages.last().expect("a tool result")["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        result.contains(r#"{"answer":"Paris is the capital of France."}"#),
        "{result}"
    );
    assert_eq!(model_calls(&mock, "gpt-4o-mini").len(), 1);

    let record = test.read_json("r.json");
    let calls = record["remote_calls"].as_array().expect("remote calls");
    let routes: Vec<&str> = calls
        .iter()
        .map(|call| call["route"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(routes, ["info", "run"]);
    assert_eq!(calls[1]["by"], "tool `ask`");
    assert_eq!(calls[0]["answer"]["name"], "answer");

    drop(upstream);
    drop(mock);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical:"), "{}", output.stdout);
}

#[test]
fn a_local_tactic_is_a_tool_and_its_run_nests_in_the_record() {
    let test = Test::new()
        .file(
            "sub/shout.yaml",
            "tactic_type: shout\ndescription: Says the task back.\nagent_configs: [{name: echo, model_name: mock/echo}]\n",
        )
        .file(
            "replies.yaml",
            "replies:\n  - tool_calls: [{name: shout, arguments: {task: hello there}, id: c1}]\n  - text: relayed\n",
        )
        .file(
            "main.yaml",
            r#"tactic_type: relay
global: {model_name: mock/script}
providers:
  mock: {script: replies.yaml}
agent_configs:
  - name: relay
    tools: [shout]
tools:
  - name: shout
    tactic: sub/shout.yaml
"#,
        );
    let output = test.run(&["run", "main.yaml", "--task", "go", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "relayed\n");
    let record = test.read_json("r.json");
    let subs = record["sub_tactic_sessions"]
        .as_array()
        .expect("sub-sessions");
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["tactic"]["name"], "shout");
    assert_eq!(subs[0]["task"], "hello there");
    assert_eq!(subs[0]["delivery"], "hello there");
    assert!(record.get("remote_calls").is_none(), "nothing remote");
    let shown = test.run(&["replay", "r.json"]);
    assert!(
        shown.stdout.contains("a tool ran tactic `shout`"),
        "{}",
        shown.stdout
    );
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(output.stdout.starts_with("identical:"), "{}", output.stdout);
}

#[test]
fn bad_remote_settings_are_one_line_each_and_nothing_runs() {
    let closed = common::closed_port();
    let test = Test::new().file(
        "bad.yaml",
        &format!(
            r#"global: {{model_name: mock/echo}}
agent_configs: [{{name: a, tools: [far, near]}}]
tools:
  - name: far
    tactic: http://127.0.0.1:{closed}/tactics/x
  - name: near
    tactic: http://me:pw@127.0.0.1:{closed}/run
flow:
  - step: s
    tactic: http://127.0.0.1:{closed}/run?x=1
  - step: t
    tactic: http://127.0.0.1:{closed}
    token_env: NO_SUCH_TOKEN_VARIABLE
"#
        ),
    );
    let output = test.run(&["run", "bad.yaml", "--task", "x"]);
    output.expect_code(2);
    let lines: Vec<&str> = output.stderr.lines().collect();
    let has = |needle: &str| lines.iter().any(|line| line.contains(needle));
    assert!(
        has("tool `far`: cannot read its contract"),
        "{}",
        output.stderr
    );
    assert!(
        has("tool `near`") && has("credentials"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("pw@"), "{}", output.stderr);
    assert!(
        has("step `s`") && has("takes no query"),
        "{}",
        output.stderr
    );
    assert!(
        has("`token_env` names `NO_SUCH_TOKEN_VARIABLE`, which is not set"),
        "{}",
        output.stderr
    );
    assert!(
        has("bad.yaml:"),
        "each line names the file: {}",
        output.stderr
    );
}

#[test]
fn a_dry_run_sends_no_call_to_a_served_tactic() {
    // A listener that is never answered: a call sent would hang the run.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let test = Test::new().file(
        "asker.yaml",
        &step_tactic(&format!("http://127.0.0.1:{port}")),
    );
    let output = test.run(&["run", "asker.yaml", "--task", "x", "--dry-run"]);
    assert!(
        output.stderr.contains(&format!(
            "dry run: the call to `http://127.0.0.1:{port}/run` was not sent"
        )),
        "{}",
        output.stderr
    );
    drop(listener);
}

#[test]
fn a_tactic_tool_that_runs_its_own_tactic_is_refused_before_anything_runs() {
    let test = Test::new().file(
        "loop.yaml",
        r#"global: {model_name: mock/echo}
agent_configs: [{name: a, tools: [again]}]
tools:
  - name: again
    tactic: loop.yaml
  - name: both
    tactic: loop.yaml
    command: [echo]
"#,
    );
    let output = test.run(&["run", "loop.yaml", "--task", "x"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("tool `again`: tactic") && output.stderr.contains("calls itself"),
        "{}",
        output.stderr
    );
    assert!(
        output
            .stderr
            .contains("loop.yaml:8:5: tool `both` runs tactic")
            && output.stderr.contains("so it takes no `command`"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("not defined"), "{}", output.stderr);
}
