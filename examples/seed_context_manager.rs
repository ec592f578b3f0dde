//! A context manager of your own, registered by name and picked in YAML:
//! `cargo run --example seed_context_manager`.
//!
//! `keep_last` sends the system message and the newest `keep` messages;
//! `global` gives it to every agent, and an agent entry's
//! `context_manager: null` turns it off. The canonical dialog keeps every
//! message either way: only what is sent is pruned. Offline on `mock/echo`.

use lllm::agent::ContextManager;
use lllm::dialog::Dialog;
use lllm::{BoxError, Ctx, Flow, FlowResult, Registry, Tactic, Task};
use serde::Deserialize;

/// The options under `context_manager:` besides `type`.
#[derive(Deserialize)]
struct KeepLastOptions {
    keep: usize,
}

/// Sends the first message and the newest `keep`.
struct KeepLast(usize);

impl ContextManager for KeepLast {
    fn name(&self) -> &str {
        "keep_last"
    }

    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog> {
        // `None` sends the dialog as it is; a fork is sent instead of it.
        (dialog.len() > self.0 + 1).then(|| dialog.fork(self.0, 1))
    }
}

/// Three turns with each agent.
struct Chat;

impl Flow for Chat {
    const NAME: &'static str = "chat";
    const AGENTS: &'static [&'static str] = &["forgetful", "mindful"];

    async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
        for name in Self::AGENTS {
            let agent = cx.agent(name)?;
            agent.open("chat")?;
            for turn in ["one", "two", "three"] {
                agent.receive(turn)?;
                agent.respond().await?;
            }
            assert_eq!(agent.current_dialog()?.len(), 7, "the dialog keeps all");
        }
        Ok("done".into())
    }
}

const TACTIC: &str = "
tactic_type: chat
global:
  model_name: mock/echo
  context_manager: {type: keep_last, keep: 2}
agent_configs:
  - name: forgetful
  - name: mindful
    context_manager: null
";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let registry = Registry::new()
        .flow(Chat)
        .context_manager_with("keep_last", |_settings, options: KeepLastOptions| {
            Ok(KeepLast(options.keep))
        });
    let tactic = Tactic::from_yaml(TACTIC, ".", &registry)?;
    let record = tactic.call_record("chat").await;
    println!("{record}");
    assert!(record.is_success(), "{record}");

    // How many messages each request sent (system, then user and assistant turns).
    let sent = |agent: &str| -> Vec<usize> {
        let calls = record.agent_calls.iter().filter(|call| call.agent == agent);
        calls.map(|call| call.invokes[0].request.messages).collect()
    };
    println!("forgetful sent {:?} messages", sent("forgetful"));
    println!("mindful sent   {:?} messages", sent("mindful"));
    assert_eq!(sent("forgetful"), [2, 3, 3]);
    assert_eq!(sent("mindful"), [2, 4, 6]);
    Ok(())
}
