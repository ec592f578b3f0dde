//! The agent loop against an in-process fake provider and fake tools: repairs,
//! tool rounds, repeat detection, interrupt-final, provider recalls, D1–D8.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::*;
use crate::dialog::{FunctionCall, Message, Role};
use crate::provider::registry::Resolved;
use crate::provider::retry::RetryPolicy;
use crate::provider::{ChatRequest, ErrorKind, Provider, ProviderError, ToolSpec};
use crate::tool::{Tool, Toolbox};

/// What the fake provider saw: the messages and the offered tool names.
#[derive(Debug, Clone)]
struct Seen {
    messages: Vec<Message>,
    tools: Vec<String>,
}

struct FakeProvider {
    replies: Mutex<VecDeque<Result<Message, ProviderError>>>,
    seen: Mutex<Vec<Seen>>,
    /// Out of replies: never answer (a held request) instead of an error.
    hang: std::sync::atomic::AtomicBool,
}

impl Provider for FakeProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        self.seen.lock().unwrap().push(Seen {
            messages: request.messages.iter().map(|m| Message::clone(m)).collect(),
            tools: request.tools.iter().map(|tool| tool.name.clone()).collect(),
        });
        let reply = self.replies.lock().unwrap().pop_front();
        if reply.is_none() && self.hang.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        let reply = reply
            .unwrap_or_else(|| Err(ProviderError::permanent("fake provider: no more replies")));
        Box::pin(async move { reply })
    }
}

struct FakeTool {
    spec: ToolSpec,
    calls: AtomicUsize,
    fail_first: bool,
    /// When set, every call waits here: two calls pass only if they run at once.
    barrier: Option<tokio::sync::Barrier>,
    /// Calls running now, and the most that ever ran at once.
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>> {
        let count = self.calls.fetch_add(1, Ordering::SeqCst);
        let result = if self.fail_first && count == 0 {
            Err("temporary failure".to_string())
        } else {
            Ok(format!("looked up {}", Value::Object(arguments.clone())))
        };
        Box::pin(async move {
            let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_running.fetch_max(running, Ordering::SeqCst);
            if let Some(barrier) = &self.barrier {
                barrier.wait().await;
            }
            // Pending once: calls started together are all running here.
            tokio::task::yield_now().await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            result
        })
    }
}

fn text(content: &str) -> Result<Message, ProviderError> {
    Ok(Message::assistant("model", content))
}

fn tool_call(name: &str, arguments: &str) -> Result<Message, ProviderError> {
    let mut message = Message::assistant("model", "");
    message.function_calls = vec![FunctionCall::from_model(
        format!("call_{name}"),
        name,
        arguments,
    )];
    Ok(message)
}

fn transient() -> Result<Message, ProviderError> {
    Err(ProviderError::transient("HTTP 500: boom"))
}

struct Fixture {
    provider: Arc<FakeProvider>,
    tool: Arc<FakeTool>,
    agent: Agent,
}

fn fixture(
    replies: Vec<Result<Message, ProviderError>>,
    limits: Limits,
    fail_first: bool,
) -> Fixture {
    fixture_with(replies, limits, fail_first, false)
}

fn fixture_with(
    replies: Vec<Result<Message, ProviderError>>,
    limits: Limits,
    fail_first: bool,
    barrier: bool,
) -> Fixture {
    let provider = Arc::new(FakeProvider {
        replies: Mutex::new(replies.into()),
        seen: Mutex::new(Vec::new()),
        hang: Default::default(),
    });
    let tool = Arc::new(FakeTool {
        spec: ToolSpec {
            name: "lookup".into(),
            description: "look a thing up".into(),
            parameters: json!({"type": "object"}),
        },
        calls: AtomicUsize::new(0),
        fail_first,
        barrier: barrier.then(|| tokio::sync::Barrier::new(2)),
        running: AtomicUsize::new(0),
        most_running: AtomicUsize::new(0),
    });
    let mut toolbox = Toolbox::default();
    toolbox.insert(tool.clone());
    let runtime = Arc::new(Runtime {
        toolbox,
        mcp: Default::default(),
        prices: Arc::new(crate::provider::models::ModelTable::bundled().clone()),
        price_warnings: Default::default(),
        handlers: Default::default(),
        secrets: Default::default(),
    });
    let spec = AgentSpec {
        name: "researcher".into(),
        system_prompt: Arc::new(Prompt::new("researcher/system", "You research.").unwrap()),
        model_name: "mock/fake".into(),
        model: Resolved {
            provider: provider.clone(),
            provider_name: "mock".into(),
            model: "fake".into(),
            retry: RetryPolicy {
                base: Duration::from_millis(1),
                cap: Duration::from_millis(2),
                jitter: 0.0,
            },
            service: None,
            cache: None,
            timeout: None,
        },
        model_args: json!({"temperature": 0, "seed": 7})
            .as_object()
            .cloned()
            .unwrap(),
        mcp_servers: Vec::new(),
        tools: vec!["lookup".into()],
        limits,
        context_manager: None,
        api_type: Default::default(),
    };
    let mut agent = Agent::new(Arc::new(spec), runtime);
    agent.open_with("main", (), true).unwrap();
    Fixture {
        provider,
        tool,
        agent,
    }
}

fn limits(max_exception_retry: u32, max_interrupt_steps: u32, max_llm_recall: u32) -> Limits {
    Limits {
        max_exception_retry,
        max_interrupt_steps,
        max_llm_recall,
    }
}

/// A prompt whose replies must be JSON objects with an integer `answer`.
fn json_prompt() -> Arc<Prompt> {
    let mut prompt = Prompt::new("ask", "{{ question }}").unwrap();
    prompt
        .set_format(Some(json!({
            "type": "object",
            "properties": {"answer": {"type": "integer"}},
            "required": ["answer"]
        })))
        .unwrap();
    Arc::new(prompt)
}

fn question() -> Map<String, Value> {
    json!({"question": "6 x 7?"}).as_object().cloned().unwrap()
}

fn roles(dialog: &crate::dialog::Dialog) -> Vec<Role> {
    dialog
        .messages()
        .iter()
        .map(|message| message.role)
        .collect()
}

#[tokio::test]
async fn a_plain_answer_is_appended_to_the_dialog() {
    let mut fixture = fixture(vec![text("hello")], limits(3, 5, 3), false);
    fixture.agent.receive("hi").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.delivery().unwrap().content, "hello");
    assert_eq!(session.delivery().unwrap().name, "researcher");
    assert_eq!(session.invokes.len(), 1);
    let dialog = fixture.agent.current_dialog().unwrap();
    assert_eq!(roles(dialog), [Role::System, Role::User, Role::Assistant]);
    // One reply in memory for the trace, the working fork and the call's
    // dialog (stamped with the call's dialog); the history the fork was asked
    // with is shared, not copied.
    let working = fixture.agent.all_dialogs().last().unwrap();
    let held = &working.messages()[2];
    assert!(Arc::ptr_eq(
        session.invokes[0].response.as_ref().unwrap(),
        held
    ));
    assert!(Arc::ptr_eq(&working.messages()[0], &dialog.messages()[0]));
    assert!(Arc::ptr_eq(&dialog.messages()[2], held));
    assert_eq!(held.metadata["dialog_id"], json!(dialog.dialog_id()));
}

#[tokio::test]
async fn a_bad_reply_is_repaired_on_a_working_fork() {
    let mut fixture = fixture(
        vec![text("forty-two"), text(r#"{"answer": 42}"#)],
        limits(3, 5, 3),
        false,
    );
    fixture
        .agent
        .receive_prompt(json_prompt(), question())
        .unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.exception_retries.len(), 1);
    assert_eq!(session.delivery().unwrap().parsed["answer"], json!(42));
    assert!(session.invokes[0].parse_error.is_some());
    // The second request carried the bad reply and the repair prompt.
    let seen = fixture.provider.seen.lock().unwrap().clone();
    let repair = seen[1].messages.last().unwrap();
    assert_eq!(repair.role, Role::User);
    assert!(repair.content.starts_with("Error: "), "{}", repair.content);
    assert_eq!(
        seen[1].messages[seen[1].messages.len() - 2].content,
        "forty-two"
    );
    // The canonical dialog holds only the accepted reply.
    let dialog = fixture.agent.current_dialog().unwrap();
    assert_eq!(roles(dialog), [Role::System, Role::User, Role::Assistant]);
    assert_eq!(
        fixture.agent.all_dialogs().count(),
        2,
        "the working fork is kept for the record"
    );
}

#[tokio::test]
async fn exhausted_repairs_fail_with_every_invoke_recorded() {
    let replies = vec![text("a"), text("b"), text("c"), text(r#"{"answer": 1}"#)];
    let mut fixture = fixture(replies, limits(2, 5, 3), false);
    fixture
        .agent
        .receive_prompt(json_prompt(), question())
        .unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Failure);
    assert_eq!(
        session.invokes.len(),
        3,
        "the first reply and two repairs (D7)"
    );
    assert!(
        session.error.as_ref().unwrap().contains("after 2 repairs"),
        "{:?}",
        session.error
    );
    let dialog = fixture.agent.current_dialog().unwrap();
    assert_eq!(
        roles(dialog),
        [Role::System, Role::User],
        "nothing bad reaches the canonical dialog"
    );
}

#[tokio::test]
async fn tool_calls_are_executed_and_answered_in_order() {
    let replies = vec![
        tool_call("lookup", r#"{"q": "owls"}"#),
        text("Owls are birds."),
    ];
    let mut fixture = fixture(replies, limits(3, 5, 3), false);
    fixture.agent.receive("Tell me about owls").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.interrupts.len(), 1);
    assert_eq!(
        session.interrupts[0].calls[0].result,
        Some(json!("looked up {\"q\":\"owls\"}"))
    );
    let dialog = fixture.agent.current_dialog().unwrap();
    assert_eq!(
        roles(dialog),
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    let tool_message = &dialog.messages()[3];
    assert_eq!(tool_message.tool_call_id(), Some("call_lookup"));
    assert_eq!(tool_message.name, "lookup");
    assert_eq!(
        tool_message.content,
        "Return of calling function lookup with arguments {\"q\":\"owls\"}:\n---\nlooked up {\"q\":\"owls\"}\n---\n"
    );
    // D1: plain text did not take the agent's tools away.
    let seen = fixture.provider.seen.lock().unwrap().clone();
    assert_eq!(seen[0].tools, ["lookup"]);
}

#[tokio::test]
async fn unknown_tools_and_malformed_arguments_are_answered_not_aborted() {
    let replies = vec![
        tool_call("search", r#"{"q": 1}"#),
        tool_call("lookup", r#"{"q": "#),
        text("done"),
    ];
    let mut fixture = fixture(replies, limits(3, 5, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    let dialog = fixture.agent.current_dialog().unwrap();
    let tool_results: Vec<&str> = dialog
        .messages()
        .iter()
        .filter(|message| message.role == Role::Tool)
        .map(|message| message.content.as_str())
        .collect();
    // D4
    assert_eq!(
        tool_results[0],
        "Error: there is no tool `search`; available tools: lookup"
    );
    // D8
    assert!(
        tool_results[1].starts_with("Error: the arguments of `lookup` are not a JSON object"),
        "{}",
        tool_results[1]
    );
    assert_eq!(fixture.tool.calls.load(Ordering::SeqCst), 0, "no tool ran");
}

#[tokio::test]
async fn only_successful_calls_count_as_repeated() {
    let same = r#"{"q": "x"}"#;
    let replies = vec![
        tool_call("lookup", same),
        tool_call("lookup", same),
        tool_call("lookup", same),
        text("ok"),
    ];
    let mut fixture = fixture(replies, limits(3, 5, 3), true);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    // First call failed (D5: may be retried), second succeeded, third is a repeat.
    assert_eq!(fixture.tool.calls.load(Ordering::SeqCst), 2);
    let last_round = &session.interrupts[2].calls[0];
    assert!(
        last_round
            .result_str
            .as_ref()
            .unwrap()
            .contains("has been called earlier")
    );
}

#[tokio::test]
async fn the_interrupt_final_prompt_ends_the_tool_loop() {
    let replies = vec![
        tool_call("lookup", r#"{"q": 1}"#),
        tool_call("lookup", r#"{"q": 2}"#),
        text("final"),
    ];
    let mut fixture = fixture(replies, limits(3, 1, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    // The second tool call came on the final round, where no tools are offered:
    // it is answered with an error, and since the model was told to stop, the call fails.
    assert_eq!(session.state, CallState::Failure, "{:?}", session.error);
    let seen = fixture.provider.seen.lock().unwrap().clone();
    assert_eq!(seen[0].tools, ["lookup"]);
    assert!(seen[1].tools.is_empty(), "no tools on the final round");
    let final_prompt = seen[1].messages.last().unwrap();
    assert_eq!(final_prompt.role, Role::User);
    assert!(
        final_prompt.content.contains("limit of tool calls"),
        "{}",
        final_prompt.content
    );

    let replies = vec![tool_call("lookup", r#"{"q": 1}"#), text("final")];
    let mut fixture = super::tests::fixture(replies, limits(3, 1, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.delivery().unwrap().content, "final");
}

#[tokio::test]
async fn zero_interrupt_steps_means_unlimited_rounds() {
    let mut replies: Vec<_> = (0..7)
        .map(|n| tool_call("lookup", &format!(r#"{{"q": {n}}}"#)))
        .collect();
    replies.push(text("done"));
    let mut fixture = fixture(replies, limits(3, 0, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.interrupts.len(), 7);
    let seen = fixture.provider.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|request| request.tools == ["lookup"]),
        "D3: no final prompt after one round"
    );
}

#[tokio::test]
async fn provider_errors_are_retried_within_the_recall_budget() {
    let mut fixture = fixture(
        vec![transient(), transient(), text("ok")],
        limits(3, 5, 3),
        false,
    );
    fixture.agent.receive("hi").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(session.llm_recalls.len(), 2);
    assert_eq!(session.invokes.len(), 3);
    assert_eq!(session.invokes[2].attempt, 3);

    let mut fixture = super::tests::fixture(
        vec![transient(), transient(), text("ok")],
        limits(3, 5, 1),
        false,
    );
    fixture.agent.receive("hi").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Failure);
    assert_eq!(session.invokes.len(), 2, "one try and one recall");
    assert!(
        session
            .invokes
            .iter()
            .all(|invoke| invoke.error.as_ref().map(|e| e.kind) == Some(ErrorKind::Transient))
    );
}

#[tokio::test]
async fn dialogs_are_managed_by_alias() {
    let mut fixture = fixture(vec![], limits(3, 5, 3), false);
    let agent = &mut fixture.agent;
    assert!(
        agent.open_with("main", (), true).is_err(),
        "aliases are unique"
    );
    agent.receive("one").unwrap();
    agent
        .fork_with(
            "main",
            "alt",
            super::Fork {
                last_n: 1,
                first_k: 1,
                switch: true,
            },
        )
        .unwrap();
    assert_eq!(agent.active_alias(), Some("alt"));
    assert_eq!(agent.current_dialog().unwrap().len(), 2);
    agent.switch("main").unwrap();
    let error = agent
        .switch("nope")
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("no dialog `nope`") && error.contains("`main`"),
        "{error}"
    );
    let closed = agent.close("main").unwrap();
    assert_eq!(closed.len(), 2);
    assert_eq!(agent.active_alias(), None);
    assert!(
        agent.receive("x").is_err(),
        "no active dialog after closing it"
    );
    assert_eq!(agent.dialogs().keys().collect::<Vec<_>>(), ["alt"]);
}

#[tokio::test]
async fn tool_calls_of_one_turn_run_concurrently_and_answer_in_order() {
    let mut message = Message::assistant("model", "");
    message.function_calls = vec![
        FunctionCall::from_model("a", "lookup", r#"{"q": 1}"#),
        FunctionCall::from_model("b", "lookup", r#"{"q": 2}"#),
        FunctionCall::from_model("c", "lookup", r#"{"q": 1}"#),
    ];
    let mut fixture = fixture(vec![Ok(message), text("done")], limits(3, 5, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(
        fixture.tool.calls.load(Ordering::SeqCst),
        2,
        "the same call is not run twice in one turn"
    );
    let dialog = fixture.agent.current_dialog().unwrap();
    let answers: Vec<(Option<&str>, &str)> = dialog
        .messages()
        .iter()
        .filter(|message| message.role == Role::Tool)
        .map(|message| (message.tool_call_id(), message.content.as_str()))
        .collect();
    assert_eq!(answers.len(), 3);
    assert_eq!(
        answers.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [Some("a"), Some("b"), Some("c")]
    );
    assert!(answers[1].1.contains("looked up {\"q\":2}"));
    assert!(answers[2].1.contains("has been called earlier"));
}

#[tokio::test]
async fn the_calls_of_a_turn_really_run_at_the_same_time() {
    let mut message = Message::assistant("model", "");
    message.function_calls = vec![
        FunctionCall::from_model("a", "lookup", r#"{"q": 1}"#),
        FunctionCall::from_model("b", "lookup", r#"{"q": 2}"#),
    ];
    // Each call waits for the other at a barrier: run one after the other, they never finish.
    let mut fixture = fixture_with(
        vec![Ok(message), text("done")],
        limits(3, 5, 3),
        false,
        true,
    );
    fixture.agent.receive("go").unwrap();
    let session = tokio::time::timeout(Duration::from_secs(10), fixture.agent.respond().session())
        .await
        .expect("the two tool calls ran concurrently")
        .unwrap();
    assert_eq!(session.state, CallState::Success);
}

#[tokio::test]
async fn a_reply_s_tool_calls_run_a_few_at_a_time_and_past_the_cap_not_at_all() {
    // 200 calls, the second the same as the first: the first 128 are
    // answered as always (127 run, the repeat gets the repeat answer), 8 at
    // a time; the other 72 are answered with an error, so every call has
    // its answer, in call order.
    let count = 200;
    let mut message = Message::assistant("model", "");
    message.function_calls = (0..count)
        .map(|index| {
            let q = if index == 1 { 0 } else { index };
            FunctionCall::from_model(format!("c{index}"), "lookup", &format!(r#"{{"q": {q}}}"#))
        })
        .collect();
    let mut fixture = fixture(vec![Ok(message), text("done")], limits(3, 5, 3), false);
    fixture.agent.receive("go").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert_eq!(session.state, CallState::Success);
    assert_eq!(
        fixture.tool.calls.load(Ordering::SeqCst),
        call::MAX_TOOL_CALLS_PER_REPLY - 1
    );
    assert_eq!(
        fixture.tool.most_running.load(Ordering::SeqCst),
        call::TOOL_CALLS_AT_ONCE
    );
    let calls = &session.interrupts[0].calls;
    assert_eq!(calls.len(), count);
    let seen = fixture.provider.seen.lock().unwrap().clone();
    let answers: Vec<&Message> = seen[1]
        .messages
        .iter()
        .filter(|message| message.role == Role::Tool)
        .collect();
    assert_eq!(answers.len(), count, "every call answered");
    for (index, answer) in answers.iter().enumerate() {
        assert_eq!(answer.tool_call_id(), Some(format!("c{index}").as_str()));
        let content = &answer.content;
        match index {
            1 => assert!(content.contains("has been called earlier"), "{content}"),
            0..128 => assert!(content.contains("looked up {\"q\":"), "{content}"),
            _ => {
                assert!(
                    content.contains(
                        "Error: not run: a reply may call at most 128 tools and this one called 200"
                    ),
                    "{content}"
                );
                assert!(calls[index].error_message.is_some());
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_midway_is_kept_as_interrupted_with_what_came_back() {
    let mut paid = tool_call("lookup", r#"{"q": 1}"#).unwrap();
    paid.usage = json!({"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500})
        .as_object()
        .cloned()
        .unwrap();
    let mut fixture = fixture(vec![Ok(paid)], limits(3, 5, 3), false);
    fixture.provider.hang.store(true, Ordering::SeqCst);
    fixture.agent.receive("go").unwrap();
    // The second request is never answered: the call is dropped (Ctrl-C).
    let respond = fixture.agent.respond().session();
    let dropped = tokio::time::timeout(Duration::from_secs(60), respond).await;
    assert!(dropped.is_err(), "the call was still waiting");
    assert_eq!(fixture.provider.seen.lock().unwrap().len(), 2);
    let interrupted = fixture.agent.take_interrupted();
    assert_eq!(interrupted.len(), 1);
    let call = &interrupted[0];
    assert_eq!(call.state, CallState::Failure);
    assert_eq!(call.error.as_deref(), Some("interrupted"));
    assert_eq!(call.invokes.len(), 1, "the request that came back");
    assert_eq!(call.interrupts.len(), 1, "its tool round");
    assert_eq!(call.cost.prompt_tokens, 1000);
    assert_eq!(call.cost.completion_tokens, 500);
    assert!(call.ended_at.is_some());
    assert!(fixture.agent.take_interrupted().is_empty(), "taken once");
    // A call that ends is not kept there.
    fixture.provider.hang.store(false, Ordering::SeqCst);
    fixture
        .provider
        .replies
        .lock()
        .unwrap()
        .push_back(text("done"));
    fixture.agent.receive("again").unwrap();
    let session = fixture.agent.respond().session().await.unwrap();
    assert!(session.is_success());
    assert!(fixture.agent.take_interrupted().is_empty());
}

#[test]
fn a_request_digest_is_the_hex_sha256_of_its_parts() {
    use sha2::{Digest, Sha256};
    let messages = [Arc::new(Message::user("hi"))];
    let model_args = Map::new();
    let request = ChatRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        format: None,
        model_args: &model_args,
        api_type: crate::dialog::ApiType::Completion,
        stream: None,
    };
    let mut hasher = Sha256::new();
    for part in ["m", "user", "user", "hi", "", "", "{}"] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    assert_eq!(
        session::request_sha256(&request),
        format!("{:x}", hasher.finalize())
    );
}

#[tokio::test]
async fn respond_takes_the_calls_options_and_awaits_to_the_message() {
    let mut fixture = fixture(vec![text("one"), text("two")], limits(3, 5, 3), false);
    fixture.agent.receive("hi").unwrap();
    let reply = fixture.agent.respond().await.unwrap();
    assert_eq!(reply.content, "one");
    // On another dialog, with model args over the agent's, parser args and metadata.
    fixture
        .agent
        .fork_with(
            "main",
            "side",
            Fork {
                switch: false,
                ..Fork::default()
            },
        )
        .unwrap();
    let session = fixture
        .agent
        .respond()
        .dialog("side")
        .args(json!({"temperature": 0.9}))
        .parser_args(json!({"strict": true}))
        .metadata(json!({"why": "test"}))
        .session()
        .await
        .unwrap();
    assert_eq!(fixture.agent.active_alias(), Some("main"));
    assert_eq!(session.dialog_alias, "side");
    assert_eq!(
        Value::Object(session.invokes[0].request.model_args.clone()),
        json!({"temperature": 0.9, "seed": 7})
    );
    assert_eq!(
        Value::Object(session.parser_args.clone()),
        json!({"strict": true})
    );
    assert_eq!(
        Value::Object(session.metadata.clone()),
        json!({"why": "test"})
    );
    let written = serde_json::to_value(&session).unwrap();
    assert_eq!(written["metadata"], json!({"why": "test"}));
}

#[tokio::test]
async fn a_failed_call_awaited_as_a_message_holds_its_session() {
    let permanent = || Err(ProviderError::permanent("no such model"));
    let mut fixture = fixture(vec![permanent()], limits(3, 5, 3), false);
    fixture.agent.receive("hi").unwrap();
    let Err(CallError::Failed(session)) = fixture.agent.respond().await else {
        panic!("the call did not fail");
    };
    assert_eq!(session.state, CallState::Failure);
    assert_eq!(session.invokes.len(), 1);
    // Misuse is an `Agent` error, without a session.
    let error = fixture.agent.respond().dialog("nope").await.unwrap_err();
    assert!(error.session().is_none());
    assert_eq!(
        error.to_string(),
        "agent `researcher` has no dialog `nope` (open: `main`)"
    );
}

#[test]
fn receive_as_and_receive_prompt_put_what_the_seed_puts() {
    let mut fixture = fixture(Vec::new(), limits(3, 5, 3), false);
    let agent = &mut fixture.agent;
    let message = agent
        .receive_as(Role::System, "moderator", "Be brief.")
        .unwrap();
    assert_eq!(
        (message.role, message.name.as_str()),
        (Role::System, "moderator")
    );
    let message = agent
        .receive_prompt(json_prompt(), json!({"question": "1 + 1?"}))
        .unwrap();
    assert_eq!(message.content, "1 + 1?");
    let top = agent.current_dialog().unwrap().top_prompt.clone().unwrap();
    assert_eq!(top.path, "ask");
    assert!(matches!(
        agent.receive_prompt(json_prompt(), json!("text")),
        Err(Error::Args { .. })
    ));
    // A standalone agent has no registry to look keys up in.
    let error = agent.receive_prompt("ask", Value::Null).unwrap_err();
    assert_eq!(
        error.to_string(),
        "agent `researcher` has no prompt registry to find `ask` in; pass a `Prompt` instead"
    );
}
