//! Handlers registered by name (the seeds' `on_exception` / `on_interrupt` /
//! `on_interrupt_final`): what the agent loop sends after a reply that does
//! not parse, with each tool result, and when the tool rounds are spent.
//!
//! A prompt names one with `handler: NAME` in its front matter; without one,
//! the prompt's own handler texts (`prompt::HandlerTexts`) are rendered as
//! before. Registration is `lllm::Registry::handler`'s business.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::session::AgentCallSession;

/// What the agent loop sends next at its three turning points. Each method
/// sees the call so far (its invokes, repairs and tool rounds) and defaults
/// to the seeds' text, so a handler writes only what it changes.
///
/// ```
/// use lllm::agent::{AgentCallSession, Handler};
///
/// /// Repairs that escalate: the second one quotes the rules again.
/// struct Strict;
/// impl Handler for Strict {
///     fn on_exception(&self, error: &str, call: &AgentCallSession) -> String {
///         match call.exception_retry_count() {
///             0 => format!("Error: {error}. Please fix."),
///             _ => format!("Error again: {error}. Reply with JSON only, no prose."),
///         }
///     }
/// }
///
/// let registry = lllm::Registry::new().handler("strict", Strict);
/// assert!(registry.handler_names().any(|name| name == "strict"));
/// ```
pub trait Handler: Send + Sync + 'static {
    /// The repair request after a reply the parser rejected with `error`.
    fn on_exception(&self, error: &str, call: &AgentCallSession) -> String {
        let _ = call;
        format!("Error: {error}. Please fix.")
    }

    /// The text of one tool result (`results`: the call, its arguments and
    /// what it returned, as `tool::result_text` writes them).
    fn on_interrupt(&self, results: &str, call: &AgentCallSession) -> String {
        let _ = call;
        results.to_string()
    }

    /// The request for a final answer once the tool rounds are spent (no
    /// tools are offered with it).
    fn on_interrupt_final(&self, call: &AgentCallSession) -> String {
        let _ = call;
        "You are reaching the limit of tool calls. Provide the final response.".to_string()
    }
}

/// The seeds' texts: every method's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultHandler;

impl Handler for DefaultHandler {}

/// The handlers of a run, by name (`default` is built in).
#[derive(Clone)]
pub struct Handlers {
    handlers: Arc<BTreeMap<String, Arc<dyn Handler>>>,
}

impl Default for Handlers {
    fn default() -> Handlers {
        let mut handlers: BTreeMap<String, Arc<dyn Handler>> = BTreeMap::new();
        handlers.insert("default".into(), Arc::new(DefaultHandler));
        Handlers {
            handlers: Arc::new(handlers),
        }
    }
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.names()).finish()
    }
}

impl Handlers {
    /// Adds `handler` under `name`; `Err` when the name is taken.
    pub(crate) fn insert(&mut self, name: &str, handler: Arc<dyn Handler>) -> Result<(), String> {
        if self.handlers.contains_key(name) {
            return Err(format!(
                "handler `{name}` is registered twice (or is a built-in)"
            ));
        }
        Arc::make_mut(&mut self.handlers).insert(name.to_string(), handler);
        Ok(())
    }

    /// The handler named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(name)
    }

    /// The names, built-in `default` included, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }

    /// The handlers other than the built-ins, with their names.
    pub(crate) fn added(&self) -> impl Iterator<Item = (&str, &Arc<dyn Handler>)> {
        self.handlers
            .iter()
            .filter(|(name, _)| name.as_str() != "default")
            .map(|(name, handler)| (name.as_str(), handler))
    }
}
