//! One argument convention, puts by role, and `Display` (issue 29), from a
//! user's side: arguments and metadata as a `json!`, a struct or a map
//! everywhere, a clear error (never a panic) for what is not an object, and
//! the one-line prints of a call session and a session record, after a
//! scripted call with a retry, a tool round and a failure. Offline, on
//! `mock/script`; time is paused, so the retry's back-off waits for nothing.

use std::collections::BTreeMap;

use lllm::dialog::{Dialog, Role};
use lllm::{Agent, AgentCallSession, ArgsError, Prompt, Task};
use serde::Serialize;
use serde_json::json;

#[derive(Serialize)]
struct Draft {
    topic: &'static str,
    words: u32,
}

/// An agent on `mock/script` serving `script`, with a `word_count` tool.
fn scripted(dir: &tempfile::TempDir, script: &str) -> Agent {
    let path = dir.path().join("script.yaml");
    std::fs::write(&path, script).unwrap();
    Agent::builder("mock/script")
        .name("writer")
        .system("You write about {{ topic }}.")
        .provider("mock", json!({ "script": path }))
        .tool("word_count", |args: WordCount| async move {
            Ok::<_, String>(args.text.split_whitespace().count())
        })
        .build()
        .unwrap()
}

#[derive(serde::Deserialize, lllm::JsonSchema)]
struct WordCount {
    /// The text.
    text: String,
}

#[test]
fn every_map_of_arguments_takes_a_json_a_struct_or_a_map() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = scripted(&dir, "default: {echo: true}");
    agent
        .open_with("owls", json!({"topic": "owls"}), true)
        .unwrap();
    agent
        .open_with("bats", BTreeMap::from([("topic", "bats")]), false)
        .unwrap();
    assert_eq!(
        agent.dialog("bats").unwrap().head().unwrap().content,
        "You write about bats."
    );
    assert_eq!(agent.active_alias(), Some("owls"));

    let draft = Prompt::new("writer/draft", "{{ words }} words on {{ topic }}.").unwrap();
    let asked = agent
        .receive_prompt(
            draft.clone(),
            Draft {
                topic: "owls",
                words: 50,
            },
        )
        .unwrap();
    assert_eq!(asked.content, "50 words on owls.");
    assert_eq!(
        draft
            .render(Draft {
                topic: "bats",
                words: 9
            })
            .unwrap(),
        "9 words on bats."
    );

    let task = Task::new("Review this.")
        .arg("tone", "dry")
        .args(Draft {
            topic: "owls",
            words: 50,
        })
        .unwrap()
        .tags(json!({"team": "docs"}))
        .unwrap()
        .metadata(BTreeMap::from([("ticket", "LL-29")]))
        .unwrap()
        .model_args(json!({"temperature": 0}))
        .unwrap();
    assert_eq!(
        serde_json::Value::Object(task.args.clone()),
        json!({"tone": "dry", "topic": "owls", "words": 50}),
        "merged over what `arg` set"
    );
    assert_eq!(task.tags["team"], "docs");
    assert_eq!(task.metadata["ticket"], "LL-29");
    assert_eq!(task.model_args["temperature"], 0);
}

#[test]
fn what_is_not_an_object_is_an_error_naming_what_and_nothing_changes() {
    let not = "must be a JSON object (a `json!({..})`, a struct or a map), found";
    let dir = tempfile::tempdir().unwrap();
    let mut agent = scripted(&dir, "default: {echo: true}");

    let error = agent.open_with("main", "owls", true).err().unwrap();
    assert_eq!(
        error.to_string(),
        format!("agent `writer`: prompt arguments {not} a string")
    );
    assert!(agent.dialogs().is_empty(), "no dialog was opened");

    agent
        .open_with("main", json!({"topic": "owls"}), true)
        .unwrap();
    let prompt = Prompt::new("p", "Hi.").unwrap();
    let error = agent.receive_prompt(prompt, [1, 2]).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("agent `writer`: prompt arguments {not} an array")
    );
    assert_eq!(agent.current_dialog().unwrap().len(), 1, "nothing appended");

    let error = Task::new("x").tags(7).unwrap_err();
    assert_eq!(
        error,
        ArgsError {
            what: "tags",
            found: "a number".into()
        }
    );
    let error = Task::new("x")
        .metadata(std::collections::HashMap::from([((1, 2), "pair")]))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("metadata {not} a value that does not serialize: key must be a string")
    );

    let mut dialog = Dialog::new("writer", "main");
    let error = dialog
        .put(Role::User)
        .metadata("round 1")
        .text("hi")
        .unwrap_err();
    assert_eq!(error.to_string(), format!("metadata {not} a string"));
    assert!(dialog.is_empty());

    let error = Agent::builder("mock/echo")
        .args(json!("hot"))
        .build()
        .err()
        .unwrap();
    assert_eq!(error.to_string(), format!("model arguments {not} a string"));
    let error = Agent::builder("mock/script")
        .provider("mock", "script.yaml")
        .build()
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        format!("provider settings {not} a string")
    );
}

#[tokio::test]
async fn respond_and_quick_take_structs_and_report_misuse_when_awaited() {
    #[derive(Serialize)]
    struct Round {
        round: u32,
    }
    let mut agent = Agent::builder("mock/echo").build().unwrap();
    agent.open("main").unwrap();
    agent.receive("hi").unwrap();
    let session = agent
        .respond()
        .args(BTreeMap::from([("temperature", 0)]))
        .metadata(Round { round: 2 })
        .session()
        .await
        .unwrap();
    assert_eq!(session.metadata["round"], 2);
    let error = agent
        .respond()
        .parser_args(true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("parser arguments must be a JSON object"),
        "{error}"
    );

    let reply = lllm::quick("Hello")
        .model("mock/echo")
        .args(json!({"max_tokens": 20}))
        .await
        .unwrap();
    assert_eq!(reply.to_string(), "Hello", "a reply prints what it says");
    let error = lllm::quick("Hello")
        .model("mock/echo")
        .args(vec![1])
        .await
        .unwrap_err();
    assert!(matches!(error, lllm::quick::Error::Args(_)), "{error:?}");
}

#[test]
fn puts_take_a_role_and_what_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let owl = dir.path().join("owl.gif");
    std::fs::write(&owl, b"GIF89a...").unwrap();

    let mut dialog = Dialog::new("vision", "main");
    dialog.put_text(Role::System, "You name birds.");
    let by_path = dialog.put_image(Role::User, &owl).unwrap();
    assert_eq!(by_path.parts[0].to_string(), "<image image/gif>");
    dialog.put_image(Role::User, owl.to_str().unwrap()).unwrap();
    let bytes = std::fs::read(&owl).unwrap();
    dialog.put_image(Role::User, &bytes).unwrap();
    let url = dialog
        .put_image(Role::User, "https://example.com/owl.png")
        .unwrap();
    assert!(matches!(
        url.parts[0].image_ref(),
        Some(lllm::dialog::ImageRef::Url("https://example.com/owl.png"))
    ));
    let captioned = dialog
        .put(Role::User)
        .name("ann")
        .metadata(json!({"round": 1}))
        .caption("Which bird?")
        .detail("low")
        .image(&owl)
        .unwrap();
    assert_eq!(captioned.name, "ann");
    assert_eq!(captioned.content, "Which bird?");
    assert_eq!(captioned.metadata["round"], 1);
    let lllm::dialog::ContentPart::ImageUrl { image_url } = &captioned.parts[0] else {
        panic!("an image part first: {:?}", captioned.parts);
    };
    assert_eq!(image_url.detail.as_deref(), Some("low"));

    let error = dialog
        .put_image(Role::User, dir.path().join("missing.png").as_path())
        .unwrap_err();
    assert!(
        error.to_string().starts_with("cannot read image `"),
        "{error}"
    );
    assert_eq!(dialog.len(), 6, "the failed put appended nothing");
    assert_eq!(
        dialog.top_prompt.as_ref().unwrap().path,
        "__text",
        "an image turn is governed by the bare prompt"
    );
}

/// A 429 then a tool call then a reply: one retry, one tool round.
const BUSY_THEN_TOOL: &str = r#"
replies:
  - fault: {status: 429, retry_after_s: 0}
  - tool_calls: [{name: word_count, arguments: {text: "one two three"}}]
    usage: {prompt_tokens: 10, completion_tokens: 2}
  - text: three words
    usage: {prompt_tokens: 20, completion_tokens: 3}
"#;

#[tokio::test(start_paused = true)]
async fn a_call_session_prints_one_line_with_its_calls_retries_rounds_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = scripted(&dir, BUSY_THEN_TOOL);
    agent
        .open_with("main", json!({"topic": "owls"}), true)
        .unwrap();
    agent.receive("How many words in 'one two three'?").unwrap();
    let session: AgentCallSession = agent.respond().session().await.unwrap();
    assert_eq!(
        (
            session.invoke_count(),
            session.retry_count(),
            session.interrupt_count()
        ),
        (3, 1, 1)
    );
    assert_eq!(session.llm_recall_count(), 1);
    assert_eq!(session.exception_retry_count(), 0);
    assert_eq!(session.cache_hit_count(), 0);
    assert_eq!(
        session.to_string(),
        format!(
            "writer (mock/script) on `main`: success, 3 calls (1 retry), 1 tool round, {}",
            session.cost
        )
    );
    assert!(
        session
            .cost
            .to_string()
            .starts_with("35 tokens (30 in, 5 out), "),
        "{}",
        session.cost
    );
}

#[tokio::test]
async fn a_failed_call_and_its_record_print_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "default: {fault: {status: 400}}",
    )
    .unwrap();
    let yaml = "
tactic_type: scripted
agent_configs: [{name: writer, model_name: mock/script}]
providers: {mock: {script: script.yaml}}
";
    let tactic = lllm::Tactic::from_yaml(yaml, dir.path(), &lllm::Registry::new()).unwrap();
    let record = tactic.run(Task::new("hi").id("t7")).await;
    assert!(!record.is_success());
    let call = &record.agent_calls[0];
    let error = call.error.clone().unwrap();
    assert_eq!(
        call.to_string(),
        format!(
            "writer (mock/script) on `main`: failure, 1 call, {}; {error}",
            call.cost
        )
    );
    assert_eq!(
        record.to_string(),
        format!(
            "scripted t7: failure, 1 call, {} (session {}); {}",
            record.cost,
            record.session_id,
            record.error.as_deref().unwrap()
        )
    );
}
