//! A context manager registered by name through the library and picked in YAML.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lllm::Registry;
use lllm::agent::context::ContextManager;
use lllm::dialog::Dialog;
use lllm::tactic::{Tactic, Task};

struct Counting(Arc<AtomicUsize>);

impl ContextManager for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog> {
        self.0.fetch_add(1, Ordering::SeqCst);
        // Keep the system message and the newest message only.
        Some(dialog.fork(1, 1))
    }
}

#[tokio::test]
async fn a_registered_manager_is_picked_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(
        &path,
        "global: {model_name: mock/echo, context_manager: {type: counting}}\nagent_configs:\n  - name: a\n",
    )
    .unwrap();
    let config = lllm::config::load(&path).unwrap();
    let env = |_: &str| None;
    let error = Tactic::build(config.clone(), &env)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("unknown context manager `counting`"),
        "{error}"
    );

    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let registry =
        Registry::new().context_manager("counting", move |_| Ok(Counting(counter.clone())));
    let tactic = Tactic::build_with(config, &env, &registry).unwrap();
    let record = tactic
        .run(Task {
            task: "hello".into(),
            ..Task::default()
        })
        .await;
    assert_eq!(record.delivery.as_deref(), Some("hello"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        record.dialogs.len(),
        3,
        "canonical, working fork and the manager's fork"
    );
}
