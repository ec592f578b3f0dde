//! Programmed tactics: the [`Flow`] trait a Rust developer implements (the
//! seeds' "subclass `Tactic`, write `call`"), and its private boxed form the
//! registry keeps (`Registry::flow` is written here). The YAML file supplies
//! the agents (`tactic_type: NAME`, `agent_configs`, prompts, providers,
//! tools); the flow supplies the control.
//!
//! The run around a flow — its agents, the session record, batch, replay —
//! is the engine's (`flow.rs`, `ctx.rs`); this file only defines the trait.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Ctx, Task};
use crate::Registry;

/// What a programmed tactic returns: the delivery, or any error (its
/// `Display` is the record's `error`; `?` works on the agents' errors, on
/// `&str` and `String`, and on anyhow's).
pub type FlowResult = Result<String, crate::BoxError>;

/// A tactic whose program is Rust code: `call` gets the run's [`Ctx`] (its
/// agents, built from the YAML's `agent_configs` as a YAML flow's are) and
/// the task, and returns the delivery.
///
/// Register it with [`Registry::flow`](crate::Registry::flow); a tactic file
/// runs it when its `tactic_type` is the flow's `NAME` (and it has no
/// `flow:`). Every call its agents make lands in the session record as a YAML
/// flow's does, so `lllm replay` shows it, `--rerun` re-executes it (in a
/// binary that registers the flow) and `lllm batch` runs it.
///
/// ```
/// use lllm::{Ctx, Flow, FlowResult, Registry, Task};
///
/// /// The writer drafts; the critic reviews; the writer revises once.
/// struct DraftReview;
///
/// impl Flow for DraftReview {
///     const NAME: &'static str = "draft_review";
///     const AGENTS: &'static [&'static str] = &["writer", "critic"];
///
///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
///         let [writer, critic] = cx.agents(["writer", "critic"])?;
///         writer.open("draft")?;
///         critic.open("review")?;
///         writer.receive(task.text())?;
///         let draft = writer.respond().await?;
///         critic.receive(format!("Review: {}", draft.content))?;
///         let review = critic.respond().await?;
///         writer.receive(&review.content)?;
///         Ok(writer.respond().await?.content)
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("draft_review.yaml");
/// std::fs::write(&path, "
/// tactic_type: draft_review
/// global: {model_name: mock/echo}
/// agent_configs:
///   - {name: writer, system_prompt: You write.}
///   - {name: critic, system_prompt: You review.}
/// ")?;
/// let registry = Registry::new().flow(DraftReview);
/// let tactic = lllm::Tactic::load(&path, &registry)?;
/// let record = tokio::runtime::Runtime::new()?.block_on(tactic.run("Owls.".into()));
/// // mock/echo answers with the last message: the critic's words, echoed.
/// assert_eq!(record.delivery.as_deref(), Some("Review: Owls."));
/// assert_eq!(record.agent_calls.len(), 3);
/// assert_eq!(record.tactic.body.as_deref(), Some("rust:draft_review"));
/// # Ok(())
/// # }
/// ```
pub trait Flow: Send + Sync + 'static {
    /// The name a tactic file gives as `tactic_type`.
    const NAME: &'static str;
    /// The agents `call` uses: each must be under the file's `agent_configs`
    /// (checked when the tactic loads).
    const AGENTS: &'static [&'static str];

    /// Runs one task. An `async fn` satisfies this; the compiler checks that
    /// its future is `Send`.
    fn call(&self, cx: &mut Ctx, task: Task) -> impl Future<Output = FlowResult> + Send;
}

/// The object-safe form of a [`Flow`] the registry keeps.
pub(crate) trait DynFlow: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn agents(&self) -> &'static [&'static str];
    fn call<'a>(&'a self, cx: &'a mut Ctx, task: Task) -> BoxFuture<'a, FlowResult>;
}

impl<F: Flow> DynFlow for F {
    fn name(&self) -> &'static str {
        F::NAME
    }

    fn agents(&self) -> &'static [&'static str] {
        F::AGENTS
    }

    fn call<'a>(&'a self, cx: &'a mut Ctx, task: Task) -> BoxFuture<'a, FlowResult> {
        Box::pin(Flow::call(self, cx, task))
    }
}

/// Registering and finding flows: written here rather than in `registry`,
/// which keeps them without their type and so names nothing of the tactic
/// room (issue 28).
impl Registry {
    /// Registers the programmed tactic `flow` under its `NAME`: a tactic
    /// file with `tactic_type: NAME` (and no `flow:`) runs it.
    ///
    /// ```
    /// use lllm::{Ctx, Flow, FlowResult, Registry, Task};
    ///
    /// struct Answer;
    ///
    /// impl Flow for Answer {
    ///     const NAME: &'static str = "answer";
    ///     const AGENTS: &'static [&'static str] = &["assistant"];
    ///
    ///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
    ///         let assistant = cx.agent("assistant")?;
    ///         assistant.open("main")?;
    ///         assistant.receive(task.text())?;
    ///         Ok(assistant.respond().await?.content)
    ///     }
    /// }
    ///
    /// let registry = Registry::new().flow(Answer);
    /// assert_eq!(registry.flow_names().collect::<Vec<_>>(), ["answer"]);
    /// ```
    ///
    /// # Panics
    /// When a flow of that name is registered already.
    pub fn flow<F: Flow>(mut self, flow: F) -> Registry {
        assert!(
            !self.flows.contains_key(F::NAME),
            "flow `{}` is registered twice",
            F::NAME
        );
        let boxed: Arc<dyn DynFlow> = Arc::new(flow);
        Arc::make_mut(&mut self.flows).insert(F::NAME.to_string(), Arc::new(boxed));
        self
    }

    /// The flow a tactic named `name` runs, if one is registered.
    pub(crate) fn flow_named(&self, name: &str) -> Option<Arc<dyn DynFlow>> {
        self.flows
            .get(name)
            .and_then(|flow| flow.downcast_ref::<Arc<dyn DynFlow>>())
            .cloned()
    }
}
