//! A task's own conversation, attachments, model and model arguments
//! (issue 15) reach the run as documented: the first dialog opened for the
//! task starts with the task's system message in place of the agent's and
//! its history after it; the task's user turn carries the attachments; the
//! model arguments go over every agent's; a model the tactic was not built
//! for fails the run, saying how to build it. All offline (`mock/echo`).

use lllm::dialog::{ContentPart, Message, Role};
use lllm::tactic::RunState;
use lllm::{Registry, Tactic, Task};

const GIF: &[u8] = b"GIF89a-owl";

fn tactic(yaml: &str) -> (tempfile::TempDir, Tactic) {
    let dir = tempfile::tempdir().unwrap();
    let tactic = Tactic::from_yaml(yaml, dir.path(), &Registry::new()).unwrap();
    (dir, tactic)
}

fn task() -> Task {
    Task::new("Which bird?")
        .message(Message::system("From the line."))
        .message(Message::user("Earlier question"))
        .message(Message::assistant("assistant", "Earlier answer"))
        .attach(ContentPart::image_bytes(GIF).unwrap())
        .model_arg("temperature", 0)
}

fn run(tactic: &Tactic, task: Task) -> lllm::SessionRecord {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(tactic.run(task))
}

#[test]
fn a_tactic_without_a_flow_answers_in_the_tasks_conversation() {
    let (_dir, tactic) = tactic(
        "tactic_type: t\nagent_configs:\n  - {name: a, model_name: mock/echo, system_prompt: Configured.}\n",
    );
    let record = run(&tactic, task());
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    assert_eq!(record.delivery.as_deref(), Some("Which bird?"));
    let messages = &record.dialogs[0].messages;
    let said: Vec<(Role, String)> = messages
        .iter()
        .map(|message| (message.role, message.content.clone()))
        .collect();
    assert_eq!(said[0], (Role::System, "From the line.".to_string()));
    assert_eq!(said[1], (Role::User, "Earlier question".to_string()));
    assert_eq!(said[2], (Role::Assistant, "Earlier answer".to_string()));
    assert_eq!(said[3], (Role::User, "Which bird?".to_string()));
    assert_eq!(messages[3].parts[1].to_string(), "<image image/gif>");
    // The model arguments went over the agent's, and the record keeps what
    // the task brought, for a re-run.
    let again = record.task_input();
    assert_eq!(again.model_args["temperature"], 0);
    assert_eq!(again.messages.len(), 3);
    assert_eq!(again.attachments.len(), 1);
    let written = serde_json::to_value(&record).unwrap();
    assert_eq!(written["model_args"]["temperature"], 0);
    assert_eq!(written["attachments"][0]["type"], "image_url");
}

#[test]
fn only_the_first_step_gets_the_conversation() {
    let (_dir, tactic) = tactic(
        "tactic_type: t
agent_configs:
  - {name: a, model_name: mock/echo, system_prompt: First.}
  - {name: b, model_name: mock/echo, system_prompt: Second.}
flow:
  - {step: one, agent: a, text: '{{ task }}'}
  - {step: two, agent: b, text: 'again: {{ one.content }}'}
",
    );
    let record = run(&tactic, task());
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    let first = &record.dialogs[0].messages;
    assert_eq!(first[0].content, "From the line.");
    assert_eq!(first[3].parts.len(), 2, "the step's turn carries the image");
    let second = &record
        .dialogs
        .iter()
        .find(|dialog| dialog.owner == "b")
        .unwrap()
        .messages;
    assert_eq!(second[0].content, "Second.");
    assert_eq!(second[1].content, "again: Which bird?");
    assert!(second[1].parts.is_empty());
}

#[test]
fn a_model_the_tactic_was_not_built_for_fails_the_run_with_a_hint() {
    let (_dir, tactic) =
        tactic("tactic_type: t\nagent_configs:\n  - {name: a, model_name: mock/echo}\n");
    let record = run(&tactic, Task::new("hi").model("openai/gpt-4o-mini"));
    assert_eq!(record.state, RunState::Failure);
    let error = record.error.unwrap();
    assert!(
        error.contains("names model `openai/gpt-4o-mini`"),
        "{error}"
    );
    assert!(error.contains("LoadOptions"), "{error}");
    // The model it already runs is fine.
    let record = run(&tactic, Task::new("hi").model("mock/echo"));
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
}
