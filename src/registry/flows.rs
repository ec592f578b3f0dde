//! The registry's programmed tactics, by name: what a tactic file's
//! `tactic_type` runs when a flow of that name is registered (any other
//! `tactic_type` stays a plain label).
//!
//! The registry keeps each flow without its type: the [`Flow`](crate::Flow)
//! trait belongs to the tactic room, which consults the registry, so
//! `Registry::flow` (register one) and `Registry::flow_named` (look one up)
//! are written there, in `tactic/program.rs`, and this room never names the
//! tactic (issue 28: no circle between top-level modules).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::Registry;

/// Name → flow, shared by the clones of a registry. Each value is the
/// tactic room's boxed flow (an `Arc<dyn DynFlow>`), held as `Any`.
pub(crate) type Flows = Arc<BTreeMap<String, Arc<dyn Any + Send + Sync>>>;

impl Registry {
    /// The names of the registered flows, sorted.
    pub fn flow_names(&self) -> impl Iterator<Item = &str> {
        self.flows.keys().map(String::as_str)
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
