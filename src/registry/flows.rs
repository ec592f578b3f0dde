//! The registry's programmed tactics: `Registry::flow` and what the tactic
//! builder asks of it. A tactic file whose `tactic_type` is a registered
//! flow's name runs that flow; any other `tactic_type` stays a plain label.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Registry;
use crate::tactic::Flow;
use crate::tactic::program::DynFlow;

/// Name → flow, shared by the clones of a registry.
pub(crate) type Flows = Arc<BTreeMap<String, Arc<dyn DynFlow>>>;

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
        Arc::make_mut(&mut self.flows).insert(F::NAME.to_string(), Arc::new(flow));
        self
    }

    /// The names of the registered flows, sorted.
    pub fn flow_names(&self) -> impl Iterator<Item = &str> {
        self.flows.keys().map(String::as_str)
    }

    /// The flow a tactic named `name` runs, if one is registered.
    pub(crate) fn flow_named(&self, name: &str) -> Option<Arc<dyn DynFlow>> {
        self.flows.get(name).cloned()
    }

    /// Adds the flows of `other` (for `merge`).
    ///
    /// # Panics
    /// When both register one name.
    pub(super) fn merge_flows(&mut self, other: &Registry) {
        for (name, flow) in other.flows.iter() {
            assert!(
                !self.flows.contains_key(name),
                "flow `{name}` is registered twice"
            );
            Arc::make_mut(&mut self.flows).insert(name.clone(), flow.clone());
        }
    }
}
