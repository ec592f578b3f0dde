//! The named extensions a tactic can use beyond the built-ins: context
//! managers here, programmed tactics in `registry/flows.rs` (registered by
//! `tactic/program.rs`, which owns their type); tools from Rust
//! functions, parsers, handlers and renderers in `registry/named.rs`. YAML
//! and prompt files name them; a name the registry lacks is a load error with
//! a "did you mean".
//!
//! Built by value, like axum's `Router`: `Registry::new().context_manager(…)`.
//! Registering one name twice is a programmer's error and panics at once.

mod flows;
mod named;

use std::sync::Arc;

use crate::agent::context::{ContextManager, ContextManagers, ContextSettings};

/// What a program adds to lllm by name; [`Registry::new`] holds the built-ins.
///
/// ```
/// use lllm::Registry;
///
/// let registry = Registry::new();
/// assert!(registry.context_manager_names().any(|name| name == "last_n"));
/// ```
#[derive(Clone)]
pub struct Registry {
    pub(crate) context_managers: Arc<ContextManagers>,
    /// Tools, parsers, handlers and renderers (`registry/named.rs`).
    pub(crate) named: named::Named,
    /// Programmed tactics by name (`flows.rs`).
    pub(crate) flows: flows::Flows,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Registry")
            .field(
                "context_managers",
                &self.context_manager_names().collect::<Vec<_>>(),
            )
            .field("tools", &self.tool_names().collect::<Vec<_>>())
            .field("parsers", &self.parser_names().collect::<Vec<_>>())
            .field("handlers", &self.handler_names().collect::<Vec<_>>())
            .field("renderers", &self.renderer_names().collect::<Vec<_>>())
            .field("flows", &self.flow_names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The built-ins only: context managers `default` and `last_n`.
    pub fn new() -> Registry {
        Registry {
            context_managers: Arc::new(ContextManagers::with_builtins()),
            named: named::Named::default(),
            flows: flows::Flows::default(),
        }
    }

    /// Registers a context manager a tactic picks with
    /// `context_manager: {type: NAME, …}`; `factory` gets the settings (the
    /// model's window, the YAML's other keys) and returns the manager or a
    /// problem to report.
    ///
    /// # Panics
    /// When `name` is registered already.
    pub fn context_manager<M, F>(mut self, name: &str, factory: F) -> Registry
    where
        M: ContextManager + 'static,
        F: Fn(&ContextSettings) -> Result<M, String> + Send + Sync + 'static,
    {
        assert!(
            !self.context_manager_names().any(|known| known == name),
            "context manager `{name}` is registered twice"
        );
        Arc::make_mut(&mut self.context_managers).register(
            name,
            Arc::new(move |settings: &ContextSettings| {
                factory(settings).map(|manager| Arc::new(manager) as Arc<dyn ContextManager>)
            }),
        );
        self
    }

    /// The names of the context managers, built-ins included, sorted.
    pub fn context_manager_names(&self) -> impl Iterator<Item = &str> {
        self.context_managers.names()
    }

    /// Adds everything `other` registers (another crate's `registry()`).
    ///
    /// # Panics
    /// When both register one name (built-ins aside).
    pub fn merge(mut self, other: Registry) -> Registry {
        self.merge_flows(&other);
        let builtins = ContextManagers::with_builtins();
        for (name, factory) in other.context_managers.entries() {
            if builtins.names().any(|builtin| builtin == name) {
                continue;
            }
            assert!(
                !self.context_manager_names().any(|known| known == name),
                "context manager `{name}` is registered twice"
            );
            Arc::make_mut(&mut self.context_managers).register(name, factory.clone());
        }
        self.named.merge(&other.named);
        self
    }
}
