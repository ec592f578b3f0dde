use std::path::Path;

use serde_json::json;

use crate::agent::{CallError, Fork};
use crate::tactic::{Ctx, Flow, FlowResult, LoadOptions, RunState, Tactic, Task};
use crate::{Registry, SessionRecord};

/// Writes `yaml` (and `files`, relative to it) into a temp dir and loads it.
fn load(
    dir: &Path,
    yaml: &str,
    files: &[(&str, &str)],
    registry: &Registry,
) -> Result<Tactic, String> {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let path = dir.join("tactic.yaml");
    std::fs::write(&path, yaml).unwrap();
    let options = LoadOptions {
        model: None,
        prices: None,
        model_args: None,
        env: &|_| None,
        dry_run: None,
        warn: &|_| {},
        budget: None,
        registry,
        cache: None,
        batch_api: None,
        defaults: None,
    };
    crate::tactic::load(&path, &options, None).map_err(|error| error.to_string())
}

fn run(tactic: &Tactic, task: &str) -> SessionRecord {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(tactic.run(Task::new(task)))
}

/// Two agents, a loop and a fork, on `mock/script`.
struct Loop;

impl Flow for Loop {
    const NAME: &'static str = "loop";
    const AGENTS: &'static [&'static str] = &["writer", "critic"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let [writer, critic] = cx.agents(["writer", "critic"])?;
        writer.open("draft")?;
        critic.open("review")?;
        writer.receive(task.text())?;
        let mut draft = writer.respond().await?;
        for round in 0..3 {
            critic.receive_prompt("review", json!({ "draft": draft.content }))?;
            let review = critic.respond().metadata(json!({ "round": round })).await?;
            if review.content.contains("ok") {
                break;
            }
            writer.receive(&review.content)?;
            draft = writer.respond().args(json!({ "temperature": 0.5 })).await?;
        }
        writer.fork("draft", "short")?;
        writer.receive("Shorter.")?;
        let short = writer.respond().await?;
        Ok(format!("{} | {}", draft.content, short.content))
    }
}

const LOOP_YAML: &str = "
tactic_type: loop
global: {model_name: mock/script, model_args: {temperature: 0}}
agent_configs:
  - {name: writer, system_prompt: 'You write about {{ task }}.'}
  - {name: critic, system_prompt: You review.}
providers:
  mock: {script: script.yaml}
";

const SCRIPT: &str = "
replies:
  - first draft
  - fix the ending
  - second draft
  - ok
  - short one
";

#[test]
fn a_programmed_run_lands_in_the_record_like_a_yaml_flow() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new().flow(Loop);
    let files = [
        ("script.yaml", SCRIPT),
        (
            "prompts/review.md",
            "Review this: {{ draft }} (task: {{ task }})",
        ),
    ];
    let tactic = load(dir.path(), LOOP_YAML, &files, &registry).unwrap();
    let record = run(&tactic, "owls");
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    assert_eq!(record.delivery.as_deref(), Some("second draft | short one"));
    assert_eq!(record.tactic.name, "loop");
    assert_eq!(record.tactic.body.as_deref(), Some("rust:loop"));
    let calls: Vec<(&str, &str)> = record
        .agent_calls
        .iter()
        .map(|call| (call.agent.as_str(), call.dialog_alias.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("writer", "draft"),
            ("critic", "review"),
            ("writer", "draft"),
            ("critic", "review"),
            ("writer", "short"),
        ]
    );
    // Metadata on the call; the call's model args over the agent's.
    assert_eq!(record.agent_calls[3].metadata["round"], 1);
    assert_eq!(
        record.agent_calls[2].invokes[0].request.model_args["temperature"],
        0.5
    );
    assert_eq!(
        record.agent_calls[0].invokes[0].request.model_args["temperature"],
        0
    );
    // The system prompt saw the task; the prompt by key saw its args and the task.
    let messages = |alias_owner: &str| {
        record
            .dialogs
            .iter()
            .find(|dialog| dialog.tree_node.dialog_id == alias_owner)
            .unwrap()
            .messages
            .iter()
            .map(|message| message.content.clone())
            .collect::<Vec<_>>()
    };
    let writer_draft = messages(&record.agent_calls[0].dialog_id);
    assert_eq!(writer_draft[0], "You write about owls.");
    let critic_review = messages(&record.agent_calls[1].dialog_id);
    assert_eq!(critic_review[1], "Review this: first draft (task: owls)");
    // The fork is a child of `draft` in the record's tree.
    let short = record
        .dialogs
        .iter()
        .find(|dialog| dialog.tree_node.dialog_id == record.agent_calls[4].dialog_id)
        .unwrap();
    assert_eq!(
        short.tree_node.parent_id.as_deref(),
        Some(record.agent_calls[0].dialog_id.as_str())
    );
    // Prompts of the registry are on record.
    assert!(record.prompts.value().get("review").is_some());
}

#[test]
fn a_failed_call_awaited_as_a_message_is_an_error_holding_its_session() {
    struct Strict;
    impl Flow for Strict {
        const NAME: &'static str = "strict";
        const AGENTS: &'static [&'static str] = &["a"];
        async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
            let a = cx.agent("a")?;
            a.open("main")?;
            a.receive_prompt("json", json!(null))?;
            match a.respond().await {
                Err(CallError::Failed(session)) => {
                    assert_eq!(session.invokes.len(), 2);
                    Err(CallError::Failed(session).into())
                }
                other => panic!("expected a failed call, got {other:?}"),
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
tactic_type: strict
agent_configs: [{name: a, model_name: mock/script, max_exception_retry: 1}]
providers: {mock: {script: script.yaml}}
";
    let files = [
        ("script.yaml", "replies: [not json, still not]\n"),
        (
            "prompts/json.md",
            "---\nformat: {type: object}\n---\nAnswer in JSON.",
        ),
    ];
    let registry = Registry::new().flow(Strict);
    let tactic = load(dir.path(), yaml, &files, &registry).unwrap();
    let record = run(&tactic, "x");
    assert_eq!(record.state, RunState::Failure);
    let error = record.error.unwrap();
    assert!(
        error.starts_with("agent `a` failed on dialog `main`"),
        "{error}"
    );
    // The failed call is on record, with its invokes (D7).
    assert_eq!(record.agent_calls.len(), 1);
    assert_eq!(record.agent_calls[0].invokes.len(), 2);
}

#[test]
fn ctx_refuses_unknown_and_repeated_agents() {
    struct Misuse;
    impl Flow for Misuse {
        const NAME: &'static str = "misuse";
        const AGENTS: &'static [&'static str] = &["writer"];
        async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
            let unknown = cx.agent("writr").err().unwrap().to_string();
            let twice = cx.agents(["writer", "writer"]).err().unwrap().to_string();
            let writer = cx.agent("writer")?;
            let no_dialog = writer.receive("x").unwrap_err().to_string();
            writer.open("main")?;
            let again = writer.open("main").err().unwrap().to_string();
            let bad_args = writer
                .receive_prompt("nope", json!(3))
                .unwrap_err()
                .to_string();
            let no_prompt = writer
                .receive_prompt("nope", json!({}))
                .unwrap_err()
                .to_string();
            let bad_option = writer
                .respond()
                .args(json!([1]))
                .await
                .unwrap_err()
                .to_string();
            Ok([
                unknown, twice, no_dialog, again, bad_args, no_prompt, bad_option,
            ]
            .join("\n"))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml = "tactic_type: misuse\nagent_configs: [{name: writer, model_name: mock/echo}]\n";
    let registry = Registry::new().flow(Misuse);
    let tactic = load(dir.path(), yaml, &[], &registry).unwrap();
    let record = run(&tactic, "x");
    let lines = record.delivery.unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(
        lines[0],
        "tactic `misuse` has no agent `writr` (its agents: `writer`); did you mean `writer`?"
    );
    assert_eq!(
        lines[1],
        "agent `writer` is asked for twice; `agents` lends each agent once"
    );
    assert_eq!(
        lines[2],
        "agent `writer` has no active dialog; open one first"
    );
    assert_eq!(
        lines[3],
        "agent `writer` already has a dialog `main`; fork or close it first"
    );
    assert_eq!(
        lines[4],
        "agent `writer`: prompt arguments must be a JSON object (a `json!({..})`, a struct or a map), found a number"
    );
    assert!(lines[5].starts_with("agent `writer`: "), "{}", lines[5]);
    assert!(lines[5].contains("nope"), "{}", lines[5]);
    assert_eq!(
        lines[6],
        "agent `writer`: model arguments must be a JSON object (a `json!({..})`, a struct or a map), found an array"
    );
    assert!(record.agent_calls.is_empty());
}

#[test]
fn fork_with_keeps_the_seed_options() {
    struct Forks;
    impl Flow for Forks {
        const NAME: &'static str = "forks";
        const AGENTS: &'static [&'static str] = &["a"];
        async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
            let a = cx.agent("a")?;
            a.open("main")?;
            for text in ["one", "two", "three"] {
                a.receive(text)?;
            }
            let options = Fork {
                last_n: 1,
                switch: false,
                ..Fork::default()
            };
            a.fork_with("main", "tail", options)?;
            assert_eq!(a.active_alias(), Some("main"));
            let tail: Vec<String> = a
                .dialog("tail")
                .unwrap()
                .messages()
                .iter()
                .map(|message| message.content.clone())
                .collect();
            a.close("tail")?;
            Ok(tail.join(","))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml =
        "tactic_type: forks\nagent_configs: [{name: a, model_name: mock/echo, system_prompt: S}]\n";
    let tactic = load(dir.path(), yaml, &[], &Registry::new().flow(Forks)).unwrap();
    let record = run(&tactic, "x");
    assert_eq!(record.delivery.as_deref(), Some("S,three"));
    // A closed dialog stays on record.
    assert_eq!(record.dialogs.len(), 2);
}

#[test]
fn load_reports_every_problem_of_a_programmed_tactic_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
tactic_type: loop
agent_configs: [{name: writer, model_name: mock/echo}, {name: critc, model_name: mock/echo}]
flow:
  - {step: a, agent: writer, text: hi}
";
    let Err(error) = load(dir.path(), yaml, &[], &Registry::new().flow(Loop)) else {
        panic!("the tactic loaded");
    };
    let lines: Vec<&str> = error.lines().collect();
    assert_eq!(lines.len(), 2, "{error}");
    assert!(
        lines[0].ends_with(
            "`tactic_type: loop` is the programmed tactic `loop` (registered in this binary), \
             which never runs a `flow:`; remove `flow:`, or rename `tactic_type` to run the YAML flow"
        ),
        "{error}"
    );
    assert!(
        lines[1].ends_with(
            "programmed tactic `loop` uses agent `critic`, which is not under `agent_configs`; \
             did you mean `critc`?"
        ),
        "{error}"
    );
}

#[test]
fn a_tactic_type_no_flow_registers_stays_a_label() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "tactic_type: loop\nagent_configs: [{name: writer, model_name: mock/echo}]\n";
    // Without the flow registered, `loop` is a plain name: the first agent answers.
    let tactic = load(dir.path(), yaml, &[], &Registry::new()).unwrap();
    let record = run(&tactic, "plain");
    assert_eq!(record.delivery.as_deref(), Some("plain"));
    assert_eq!(record.tactic.body, None);
}

#[test]
#[should_panic(expected = "flow `loop` is registered twice")]
fn a_flow_registered_twice_panics() {
    let _ = Registry::new().flow(Loop).merge(Registry::new().flow(Loop));
}

#[test]
fn a_yaml_flow_runs_a_programmed_tactic_as_a_step() {
    struct Shout;
    impl Flow for Shout {
        const NAME: &'static str = "shout";
        const AGENTS: &'static [&'static str] = &["echo"];
        async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
            let echo = cx.agent("echo")?;
            echo.open("main")?;
            echo.receive(task.text())?;
            Ok(echo.respond().await?.content.to_uppercase())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
tactic_type: parent
agent_configs: [{name: writer, model_name: mock/echo}]
flow:
  - {step: draft, agent: writer, text: 'quiet {{ task }}'}
  - {step: loud, tactic: child.yaml, task: '{{ draft.content }}'}
";
    let child = "tactic_type: shout\nagent_configs: [{name: echo, model_name: mock/echo}]\n";
    let registry = Registry::new().flow(Shout);
    let tactic = load(dir.path(), yaml, &[("child.yaml", child)], &registry).unwrap();
    let record = run(&tactic, "owls");
    assert_eq!(
        record.delivery.as_deref(),
        Some("QUIET OWLS"),
        "{:?}",
        record.error
    );
    let sub = &record.sub_tactic_sessions[0];
    assert_eq!(sub.tactic.body.as_deref(), Some("rust:shout"));
    assert_eq!(sub.agent_calls.len(), 1);
}
