//! The conventions users already have, end to end with the real binary and
//! `lllm-mock` on 127.0.0.1: Ollama's variables in their ecosystems' forms,
//! errors that name the URL requested and the setting it came from, `name`
//! only where the API takes it, prices that belong to a provider.

mod common;

use common::{MockServer, Test, closed_port};
use serde_json::Value;

const ONE_AGENT: &str = "agent_configs:\n  - name: a\n    system_prompt: Be brief.\n";

fn tactic(model: &str, extra: &str) -> String {
    format!("global: {{model_name: {model}, max_llm_recall: 0}}\n{ONE_AGENT}{extra}")
}

#[test]
fn ollama_variables_are_read_in_their_ecosystems_forms() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: \"from ollama\"}\n");
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let test = test.file("t.yaml", &tactic("ollama/llama3.2", ""));
    let run = |variables: &[(&str, String)]| {
        let mut command = test.command(&["run", "t.yaml", "--task", "hi", "--no-record"]);
        for (name, value) in variables {
            command.env(name, value);
        }
        common::Output::of(command.output().unwrap())
    };
    // Ollama's own variable: host:port, no scheme; a bind address means this machine.
    for host in [format!("127.0.0.1:{port}"), format!("0.0.0.0:{port}")] {
        let output = run(&[("OLLAMA_HOST", host.clone())]);
        output.expect_code(0);
        assert_eq!(output.stdout, "from ollama\n", "OLLAMA_HOST={host}");
    }
    // promptfoo's OLLAMA_BASE_URL and LiteLLM's OLLAMA_API_BASE: a URL
    // without `/v1` (a trailing `/v1`, as some tools write it, is fine too).
    for (name, value) in [
        ("OLLAMA_BASE_URL", server.url.clone()),
        ("OLLAMA_BASE_URL", server.base_url()),
        ("OLLAMA_API_BASE", format!("{}/", server.url)),
    ] {
        let output = run(&[(name, value.clone())]);
        output.expect_code(0);
        assert_eq!(output.stdout, "from ollama\n", "{name}={value}");
    }
    // The clients' variables win over the server's (often set to 0.0.0.0
    // in the same shell so that the server listens everywhere).
    let output = run(&[
        ("OLLAMA_HOST", format!("127.0.0.1:{}", closed_port())),
        ("OLLAMA_BASE_URL", server.url.clone()),
    ]);
    output.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    assert!(
        requests
            .iter()
            .all(|request| request["path"] == "/v1/chat/completions")
    );
}

#[test]
fn a_refused_connection_names_the_url_and_the_variable() {
    let port = closed_port();
    let test = Test::new()
        .file("t.yaml", &tactic("ollama/llama3.2", ""))
        .env("OLLAMA_HOST", &format!("127.0.0.1:{port}"));
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--no-record"]);
    output.expect_code(1);
    let expected = format!(
        "cannot connect to `http://127.0.0.1:{port}/v1/chat/completions` (base URL from OLLAMA_HOST)"
    );
    assert!(output.stderr.contains(&expected), "{}", output.stderr);
}

#[test]
fn a_404_names_the_url_and_the_setting() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: never}\n");
    // The base URL without `/v1`: the server has no `/chat/completions`.
    let providers = format!("providers:\n  local: {{base_url: \"{}\"}}\n", server.url);
    let test = test.file("t.yaml", &tactic("local/m", &providers));
    let output = test.run(&["run", "t.yaml", "--task", "hi", "--record", "r.json"]);
    output.expect_code(1);
    let expected = format!(
        "HTTP 404 from {}/chat/completions (base URL from `providers.local.base_url`)",
        server.url
    );
    assert!(output.stderr.contains(&expected), "{}", output.stderr);
    let record = test.read_json("r.json");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&expected),
        "{}",
        record["error"]
    );
}

fn names_sent(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .iter()
        .flat_map(|request| {
            request["body"]["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|message| message.get("name").cloned())
        .collect()
}

#[test]
fn message_names_go_only_where_the_api_takes_them() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let local = format!(
        "providers:\n  local: {{base_url: \"{}\"}}\n",
        server.base_url()
    );
    let named = format!(
        "providers:\n  local: {{base_url: \"{}\", send_name: true}}\n",
        server.base_url()
    );
    let test = test
        .file("plain.yaml", &tactic("local/m", &local))
        .file("named.yaml", &tactic("local/m", &named))
        .file("mistral.yaml", &tactic("mistral/mistral-small-latest", ""))
        .env("MISTRAL_API_KEY", "k")
        .env("MISTRAL_BASE_URL", &server.base_url());
    // An OpenAI-compatible server by default, and the Mistral preset: no `name`.
    for file in ["plain.yaml", "mistral.yaml"] {
        test.run(&["run", file, "--task", "hi", "--no-record"])
            .expect_code(0);
        assert!(names_sent(&server).is_empty(), "{file}");
    }
    // `send_name: true` sends the names of user and assistant messages.
    test.run(&["run", "named.yaml", "--task", "hi", "--no-record"])
        .expect_code(0);
    assert_eq!(names_sent(&server), vec![Value::from("user")]);
}

#[test]
fn a_self_hosted_model_is_not_billed_at_a_hosted_price() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default:\n  text: ok\n  usage: {prompt_tokens: 1000000, completion_tokens: 0}\n",
    );
    let local = format!(
        "providers:\n  local: {{base_url: \"{}\"}}\n",
        server.base_url()
    );
    let priced = format!(
        "{local}pricing:\n  local/gpt-4o-mini: {{input_per_million: 0.01, output_per_million: 0.02}}\n"
    );
    let test = test
        .file("local.yaml", &tactic("local/gpt-4o-mini", &local))
        .file("priced.yaml", &tactic("local/gpt-4o-mini", &priced))
        .file("moved.yaml", &tactic("openai/gpt-4o-mini", ""))
        .env("OPENAI_API_KEY", "sk-k")
        .env("OPENAI_BASE_URL", &server.base_url());
    let cost = |file: &str| {
        let output = test.run(&["run", file, "--task", "hi", "--record", "r.json"]);
        output.expect_code(0);
        let record = test.read_json("r.json");
        (
            record["cost"]["cost"].clone(),
            record["cost"]["cost_known"].clone(),
            output.stderr,
        )
    };
    // Same model name as OpenAI's, but a self-hosted server: no bundled price.
    let (dollars, known, stderr) = cost("local.yaml");
    assert_eq!((dollars, known), (Value::Null, Value::Bool(false)));
    assert!(
        stderr.contains("no price known for `local/gpt-4o-mini`"),
        "{stderr}"
    );
    // OPENAI_BASE_URL pointing at another server is not OpenAI either.
    let (dollars, known, _) = cost("moved.yaml");
    assert_eq!((dollars, known), (Value::Null, Value::Bool(false)));
    // A price the user gives for `provider/model` applies.
    let (dollars, known, _) = cost("priced.yaml");
    assert_eq!(known, Value::Bool(true));
    assert!((dollars.as_f64().unwrap() - 0.01).abs() < 1e-9, "{dollars}");
}

#[test]
fn a_base_url_s_query_stays_on_every_request() {
    // Azure OpenAI takes its API version in the query. `{base}/chat/completions`
    // appended the path to the query: the request went to `/v1` (a 404).
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: fine}\n");
    let providers = format!(
        "providers:\n  az: {{api: openai, base_url: \"{url}/v1?api-version=2024-06-01\"}}\n  \
         claude: {{api: anthropic, base_url: \"{url}/?gateway=a%20b\", api_key_env: TEST_KEY}}\n",
        url = server.url
    );
    let responses = format!(
        "global: {{model_name: az/m, max_llm_recall: 0, api_type: response}}\n{ONE_AGENT}{providers}"
    );
    let test = test
        .file("chat.yaml", &tactic("az/m", &providers))
        .file("responses.yaml", &responses)
        .file("anthropic.yaml", &tactic("claude/m", &providers))
        .env("TEST_KEY", "sk-test-key-1234");
    for file in ["chat.yaml", "responses.yaml", "anthropic.yaml"] {
        let output = test.run(&["run", file, "--task", "hi", "--no-record"]);
        output.expect_code(0);
        assert_eq!(output.stdout, "fine\n", "{file}: {}", output.stderr);
    }
    let arrived: Vec<(String, String)> = server
        .requests()
        .iter()
        .map(|request| {
            let text = |key: &str| request[key].as_str().unwrap_or_default().to_string();
            (text("path"), text("query"))
        })
        .collect();
    let expected = [
        ("/v1/chat/completions", "api-version=2024-06-01"),
        ("/v1/responses", "api-version=2024-06-01"),
        ("/v1/messages", "gateway=a%20b"),
    ]
    .map(|(path, query)| (path.to_string(), query.to_string()));
    assert_eq!(arrived, expected);
}
