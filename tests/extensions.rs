//! A program's own tools, parsers, handlers and renderers, registered by name
//! and named from tactic YAML and prompt front matter (issue 13): offline on
//! the scripted model, at load time (bad names), and on the wire (an
//! `lllm-mock` server over HTTP on 127.0.0.1 sees the Rust tool's schema).

use std::path::Path;

use lllm::agent::{AgentCallSession, Handler};
use lllm::prompt::{ParseFailure, Render};
use lllm::schemars::{self, JsonSchema};
use lllm::{Registry, Tactic, Task};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Count the words in a text.
#[derive(Deserialize, JsonSchema)]
struct WordCount {
    /// The text whose words are counted.
    text: String,
    /// Count only words at least this long.
    min_length: Option<usize>,
}

async fn word_count(args: WordCount) -> Result<usize, String> {
    if args.text.is_empty() {
        return Err("the text is empty".into());
    }
    let min = args.min_length.unwrap_or(0);
    Ok(args
        .text
        .split_whitespace()
        .filter(|word| word.len() >= min)
        .count())
}

/// Always fails loudly.
#[derive(Deserialize, JsonSchema)]
struct Nothing {}

async fn explode(_: Nothing) -> Result<String, String> {
    panic!("the tool blew up")
}

fn verdict(reply: &str) -> Result<Value, ParseFailure> {
    let (_, rest) = reply
        .split_once("<verdict>")
        .ok_or("no <verdict> tag: reply <verdict>…</verdict>")?;
    let (verdict, _) = rest.split_once("</verdict>").ok_or("unclosed <verdict>")?;
    Ok(json!({ "verdict": verdict.trim() }))
}

/// `$name` placeholders.
struct Dollar;

impl Render for Dollar {
    fn render(&self, template: &str, args: &Map<String, Value>) -> Result<String, String> {
        let mut text = template.to_string();
        for (name, value) in args {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string);
            text = text.replace(&format!("${name}"), &value);
        }
        match text.find('$') {
            Some(at) => Err(format!("no value for the placeholder at byte {at}")),
            None => Ok(text),
        }
    }
}

/// Writes its own repair and tool-result texts, counting what it saw.
struct Strict;

impl Handler for Strict {
    fn on_exception(&self, error: &str, call: &AgentCallSession) -> String {
        format!(
            "STRICT repair {} after {} invoke(s): {error}",
            call.exception_retry_count() + 1,
            call.invokes.len()
        )
    }

    fn on_interrupt(&self, results: &str, _call: &AgentCallSession) -> String {
        format!("TOOL RESULT\n{results}")
    }
}

fn registry() -> Registry {
    Registry::new()
        .tool("word_count", word_count)
        .tool_described("explode", "Blows up.", explode)
        .parser("verdict", verdict)
        .renderer("dollar", Dollar)
        .handler("strict", Strict)
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

const TACTIC: &str = r#"tactic_type: review
global: {model_name: mock/script}
providers: {mock: {script: script.yaml}}
agent_configs:
  - name: critic
    system_prompt: You count and judge.
    tools: [word_count, explode]
flow:
  - step: review
    agent: critic
    prompt: review
    args: {draft: "{{ task }}"}
"#;

const REVIEW: &str =
    "---\nparser: verdict\nrenderer: dollar\nhandler: strict\n---\nCount the words of: $draft\n";

fn load(dir: &Path, registry: &Registry) -> Result<Tactic, String> {
    let config = lllm::config::load(&dir.join("tactic.yaml")).map_err(|error| error.to_string())?;
    Tactic::build_with(config, &|_| None, registry).map_err(|error| error.to_string())
}

#[tokio::test]
async fn a_rust_tool_a_custom_parser_renderer_and_handler_run_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"replies:
  - tool_calls:
      - {name: word_count, arguments: {text: "the owl hunts at night", min_length: 4}}
      - {name: word_count, arguments: {text: ""}}
      - {name: explode, arguments: {}}
      - {name: word_count, arguments: {text: 7}}
  - text: three, I think
  - text: "<verdict> 2 words </verdict>"
"#;
    write(
        dir.path(),
        &[
            ("tactic.yaml", TACTIC),
            ("script.yaml", script),
            ("prompts/review.md", REVIEW),
        ],
    );
    let tactic = load(dir.path(), &registry()).unwrap();
    let record = tactic.run(Task::new("the owl hunts at night")).await;
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(
        record.delivery.as_deref(),
        Some("<verdict> 2 words </verdict>"),
        "{json:#}"
    );

    let call = &record.agent_calls[0];
    let calls = &json["agent_calls"][0]["interrupts"][0]["calls"];
    assert_eq!(calls[0]["result"], "2", "the Rust tool's result: {calls:#}");
    assert_eq!(calls[1]["error_message"], "the text is empty");
    assert_eq!(
        calls[2]["error_message"],
        "the tool `explode` panicked: the tool blew up"
    );
    let bad = calls[3]["error_message"].as_str().unwrap();
    assert!(
        bad.starts_with(
            "the arguments of `word_count` do not fit its parameters at `text`: invalid type"
        ),
        "{bad}"
    );
    assert_eq!(call.exception_retry_count(), 1, "one repair");
    let messages: Vec<&Value> = json["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|dialog| dialog["messages"].as_array().unwrap())
        .collect();
    assert!(
        messages
            .iter()
            .any(|message| message["parsed"]["verdict"] == "2 words"),
        "the custom parser's result is the reply's `parsed`"
    );

    let texts: Vec<&str> = messages
        .iter()
        .filter_map(|message| message["content"].as_str())
        .collect();
    assert!(
        texts.contains(&"Count the words of: the owl hunts at night\n"),
        "the dollar renderer wrote the prompt: {texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|text| text.starts_with("TOOL RESULT\nReturn of calling function word_count")),
        "the handler wrote the tool results: {texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|text| text.starts_with("STRICT repair 1 after 2 invoke(s): no <verdict> tag")),
        "the handler wrote the repair: {texts:#?}"
    );

    let review = &json["prompts"]["review"];
    assert_eq!(review["parser"], "verdict");
    assert_eq!(review["handler"], "strict");
    assert_eq!(review["renderer"], "dollar");
}

#[tokio::test]
async fn a_repair_budget_spent_on_a_custom_parser_fails_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = TACTIC.replace(
        "global: {model_name: mock/script}",
        "global: {model_name: mock/script, max_exception_retry: 1}",
    );
    write(
        dir.path(),
        &[
            ("tactic.yaml", &tactic),
            ("script.yaml", "replies: [no tag, still none]\n"),
            ("prompts/review.md", REVIEW),
        ],
    );
    let record = load(dir.path(), &registry())
        .unwrap()
        .run(Task::new("x"))
        .await;
    let error = record.error.unwrap_or_default();
    assert!(
        error.contains("still does not parse after 1 repair: no <verdict> tag"),
        "{error}"
    );
}

#[track_caller]
fn load_error(files: &[(&str, &str)], registry: &Registry) -> String {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    match load(dir.path(), registry) {
        Ok(_) => panic!("the tactic loaded"),
        Err(error) => error,
    }
}

#[test]
fn unknown_and_clashing_names_are_load_errors() {
    let registry = registry();
    let with = |from: &str, to: &str| TACTIC.replace(from, to);

    let error = load_error(
        &[
            ("tactic.yaml", &with("[word_count, explode]", "[word_cont]")),
            ("prompts/review.md", REVIEW),
        ],
        &registry,
    );
    assert!(
        error.contains("agent `critic` names tool `word_cont`")
            && error.contains("did you mean `word_count`?"),
        "{error}"
    );

    let clash = with(
        "flow:",
        "tools:\n  - name: word_count\n    command: [wc, -w]\n    parameters: {type: object}\nflow:",
    );
    let error = load_error(
        &[("tactic.yaml", &clash), ("prompts/review.md", REVIEW)],
        &registry,
    );
    assert!(
        error.contains("tool `word_count` is both defined in the tactic (`tools:` or `builtin_tools:`) and registered by the program"),
        "{error}"
    );

    let error = load_error(
        &[
            ("tactic.yaml", TACTIC),
            (
                "prompts/review.md",
                &REVIEW.replace("parser: verdict", "parser: verdcit"),
            ),
        ],
        &registry,
    );
    assert!(
        error.contains("review.md:2:1: `parser: verdcit` is neither a built-in parser nor registered; did you mean `verdict`?"),
        "{error}"
    );

    let error = load_error(
        &[
            ("tactic.yaml", TACTIC),
            (
                "prompts/review.md",
                &REVIEW.replace("renderer: dollar", "renderer: dolar"),
            ),
        ],
        &registry,
    );
    assert!(
        error.contains("`renderer: dolar` must be `jinja`, `format` or a registered renderer; did you mean `dollar`?"),
        "{error}"
    );

    let error = load_error(
        &[
            ("tactic.yaml", TACTIC),
            (
                "prompts/review.md",
                &REVIEW.replace("handler: strict", "handler: strct"),
            ),
        ],
        &registry,
    );
    assert!(
        error.contains("prompt `review` names handler `strct`, which is not registered; did you mean `strict`? (known: `default`, `strict`)"),
        "{error}"
    );

    // Without the registry, the same tactic names what it lacks.
    let error = load_error(
        &[("tactic.yaml", TACTIC), ("prompts/review.md", REVIEW)],
        &Registry::new(),
    );
    assert!(error.contains("names tool `word_count`"), "{error}");
    assert!(error.contains("`renderer: dollar` must be"), "{error}");
}

#[tokio::test]
async fn a_prompt_names_a_rust_tool_in_its_front_matter() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = TACTIC.replace("    tools: [word_count, explode]\n", "");
    let review = "---\ntools: [word_count]\n---\nCount: {{ draft }}\n";
    let script = r#"replies:
  - tool_calls: [{name: word_count, arguments: {text: "a b c"}}]
  - text: three
"#;
    write(
        dir.path(),
        &[
            ("tactic.yaml", &tactic),
            ("script.yaml", script),
            ("prompts/review.md", review),
        ],
    );
    let record = load(dir.path(), &registry())
        .unwrap()
        .run(Task::new("a b c"))
        .await;
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(record.delivery.as_deref(), Some("three"), "{json:#}");
    assert_eq!(
        json["agent_calls"][0]["interrupts"][0]["calls"][0]["result"],
        "3"
    );
}

/// The wire: an `lllm-mock` server (OpenAI chat completions over HTTP on
/// 127.0.0.1) receives the Rust tool as a valid `tools` entry, and the
/// arguments it sends back are what the tool's schema describes.
#[tokio::test]
async fn the_rust_tools_schema_reaches_the_chat_completions_api() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"replies:
  - tool_calls: [{name: word_count, arguments: {text: "one two three"}}]
  - text: three words
"#;
    write(dir.path(), &[("script.yaml", script)]);
    let options = lllm_mock::server::ServerOptions {
        script: dir.path().join("script.yaml"),
        host: "127.0.0.1".into(),
        port: 0,
        latency_ms: None,
        log: Some(dir.path().join("requests.jsonl")),
        ..Default::default()
    };
    let server = lllm_mock::server::Server::bind(&options).await.unwrap();
    let url = server.url();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let tactic = format!(
        r#"global: {{model_name: local/gpt-4o-mini}}
providers: {{local: {{api: openai, base_url: "{url}/v1", api_key_env: LOCAL_KEY}}}}
agent_configs:
  - name: counter
    system_prompt: Count words with the tool.
    tools: [word_count]
"#
    );
    write(dir.path(), &[("tactic.yaml", &tactic)]);
    let config = lllm::config::load(&dir.path().join("tactic.yaml")).unwrap();
    let env = |name: &str| (name == "LOCAL_KEY").then(|| "sk-local-test".to_string());
    let tactic = Tactic::build_with(config, &env, &registry()).unwrap();
    let record = tactic.run(Task::new("How many words?")).await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    assert_eq!(
        record.delivery.as_deref(),
        Some("three words"),
        "{:?}",
        record.error
    );

    let log = std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap();
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["path"], "/v1/chat/completions");
    let tools = first["body"]["tools"].as_array().unwrap();
    let entry = tools
        .iter()
        .find(|tool| tool["function"]["name"] == "word_count")
        .unwrap_or_else(|| panic!("no word_count in {tools:#?}"));
    assert_eq!(entry["type"], "function");
    assert_eq!(
        entry["function"]["description"],
        "Count the words in a text."
    );
    let parameters = &entry["function"]["parameters"];
    assert_eq!(
        parameters["type"], "object",
        "OpenAI wants an object: {parameters}"
    );
    assert_eq!(parameters["required"], json!(["text"]));
    assert_eq!(
        parameters["properties"]["text"]["description"],
        "The text whose words are counted."
    );
    assert!(
        jsonschema::meta::is_valid(parameters),
        "a valid JSON schema: {parameters}"
    );
    let validator = jsonschema::validator_for(parameters).unwrap();
    assert!(validator.is_valid(&json!({"text": "one two three"})));
    assert!(!validator.is_valid(&json!({"min_length": 2})));
}

/// Asks for the answer its own way when the tool rounds are spent.
struct Wrapping;

impl Handler for Wrapping {
    fn on_interrupt_final(&self, call: &AgentCallSession) -> String {
        format!(
            "WRAP UP after {} tool round(s), no more tools.",
            call.interrupt_count()
        )
    }
}

#[tokio::test]
async fn a_handler_writes_the_final_request_and_the_defaults_stay() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = TACTIC.replace(
        "global: {model_name: mock/script}",
        "global: {model_name: mock/script, max_interrupt_steps: 1}",
    );
    let review = "---\nhandler: wrapping\n---\nCount: {{ draft }}\n";
    let script = r#"replies:
  - tool_calls: [{name: word_count, arguments: {text: "a b"}}]
  - text: two
"#;
    write(
        dir.path(),
        &[
            ("tactic.yaml", &tactic),
            ("script.yaml", script),
            ("prompts/review.md", review),
        ],
    );
    let registry = registry().handler("wrapping", Wrapping);
    let record = load(dir.path(), &registry)
        .unwrap()
        .run(Task::new("a b"))
        .await;
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(record.delivery.as_deref(), Some("two"), "{json:#}");
    let texts: Vec<&str> = json["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|dialog| dialog["messages"].as_array().unwrap())
        .filter_map(|message| message["content"].as_str())
        .collect();
    assert!(
        texts.contains(&"WRAP UP after 1 tool round(s), no more tools."),
        "{texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|text| text.starts_with("Return of calling function word_count")),
        "the default tool-result text: {texts:#?}"
    );
}
