//! Agents: a model, a system prompt and tools, owning named dialogs.
//!
//! This file holds the agent and its dialog API (open, fork, close, switch,
//! receive…); `call` runs the agent loop on a dialog, `session` records it,
//! `context` and `tokens` keep requests inside the model's window.

mod call;
pub mod context;
mod handler;
pub mod session;
pub mod tokens;

use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::dialog::{Dialog, ImageSource, Message, Role};
use crate::prompt::Prompt;
use crate::provider::models::ModelTable;
use crate::provider::pricing::UnknownPriceWarnings;
use crate::provider::registry::Resolved;
use crate::tool::Toolbox;

pub use context::ContextManager;
pub use handler::{DefaultHandler, Handler, Handlers};
pub use session::{AgentCallSession, CallState, InvokeTrace, RequestDigest};

/// Receives the text of streamed replies as it arrives.
pub type SharedTextSink = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("agent `{agent}` has no dialog `{alias}` (open: {available})")]
    NoDialog {
        agent: String,
        alias: String,
        available: String,
    },
    #[error("agent `{agent}` already has a dialog `{alias}`; fork or close it first")]
    DialogExists { agent: String, alias: String },
    #[error("agent `{agent}` has no active dialog; open one first")]
    NoActiveDialog { agent: String },
    #[error("agent `{agent}`: {source}")]
    Dialog {
        agent: String,
        source: crate::dialog::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What every agent of a run shares: the tools, the MCP servers, the price
/// table and its warnings.
pub struct Runtime {
    pub toolbox: Toolbox,
    pub mcp: crate::tool::McpServers,
    pub prices: Arc<ModelTable>,
    pub price_warnings: UnknownPriceWarnings,
    /// The handlers prompts may name (`handler: NAME`).
    pub handlers: Handlers,
}

/// Loop limits of an agent (seed names).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_exception_retry: u32,
    /// 0 means unlimited up to a hard cap of 100 rounds (D3).
    pub max_interrupt_steps: u32,
    pub max_llm_recall: u32,
}

/// Everything an agent is made of, before it owns any dialog.
pub struct AgentSpec {
    pub name: String,
    pub system_prompt: Arc<Prompt>,
    /// As configured: `provider/model`.
    pub model_name: String,
    pub model: Resolved,
    pub model_args: Map<String, Value>,
    pub tools: Vec<String>,
    /// MCP servers whose tools the agent is offered (agent config `mcp_servers`).
    pub mcp_servers: Vec<String>,
    pub limits: Limits,
    pub context_manager: Option<Arc<dyn ContextManager>>,
    pub api_type: crate::dialog::ApiType,
}

pub struct Agent {
    spec: Arc<AgentSpec>,
    runtime: Arc<Runtime>,
    dialogs: IndexMap<String, Dialog>,
    active_alias: Option<String>,
    /// Dialogs no longer reachable by alias (working forks, pruned copies,
    /// closed dialogs), kept so the session record holds the whole tree.
    archive: Vec<Dialog>,
    text_sink: Option<SharedTextSink>,
}

impl Agent {
    pub fn new(spec: Arc<AgentSpec>, runtime: Arc<Runtime>) -> Agent {
        Agent {
            spec,
            runtime,
            dialogs: IndexMap::new(),
            active_alias: None,
            archive: Vec::new(),
            text_sink: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &AgentSpec {
        &self.spec
    }

    /// Streams the text of every reply to `sink` as it arrives.
    pub fn set_text_sink(&mut self, sink: Option<SharedTextSink>) {
        self.text_sink = sink;
    }

    /// Creates dialog `alias`, seeded with the system prompt rendered with `args`.
    pub fn open(
        &mut self,
        alias: &str,
        args: &Map<String, Value>,
        switch: bool,
    ) -> Result<&mut Agent> {
        if self.dialogs.contains_key(alias) {
            return Err(Error::DialogExists {
                agent: self.spec.name.clone(),
                alias: alias.into(),
            });
        }
        let mut dialog = Dialog::new(
            self.spec.name.clone(),
            format!("{}_{alias}", self.spec.name),
        );
        dialog
            .put_prompt(
                self.spec.system_prompt.clone(),
                args,
                Role::System,
                "system",
                Map::new(),
            )
            .map_err(|source| self.dialog_error(source))?;
        self.dialogs.insert(alias.to_string(), dialog);
        if switch {
            self.active_alias = Some(alias.to_string());
        }
        Ok(self)
    }

    /// Branches dialog `alias` into `child_alias` (see `Dialog::fork`).
    pub fn fork(
        &mut self,
        alias: &str,
        child_alias: &str,
        last_n: usize,
        first_k: usize,
        switch: bool,
    ) -> Result<&mut Agent> {
        if self.dialogs.contains_key(child_alias) {
            return Err(Error::DialogExists {
                agent: self.spec.name.clone(),
                alias: child_alias.into(),
            });
        }
        let child = self.dialog_mut(Some(alias))?.fork(last_n, first_k);
        self.dialogs.insert(child_alias.to_string(), child);
        if switch {
            self.active_alias = Some(child_alias.to_string());
        }
        Ok(self)
    }

    /// Removes dialog `alias` and returns it; if it was active, none is.
    pub fn close(&mut self, alias: &str) -> Result<Dialog> {
        let dialog = self
            .dialogs
            .shift_remove(alias)
            .ok_or_else(|| self.no_dialog(alias))?;
        if self.active_alias.as_deref() == Some(alias) {
            self.active_alias = None;
        }
        self.archive.push(dialog.clone());
        Ok(dialog)
    }

    pub fn switch(&mut self, alias: &str) -> Result<&mut Agent> {
        if !self.dialogs.contains_key(alias) {
            return Err(self.no_dialog(alias));
        }
        self.active_alias = Some(alias.to_string());
        Ok(self)
    }

    /// Appends text to the active (or named) dialog.
    pub fn receive(&mut self, text: &str, alias: Option<&str>) -> Result<&Message> {
        Ok(self
            .dialog_mut(alias)?
            .put_text(text, Role::User, "user", Map::new()))
    }

    /// Renders `prompt` into the active (or named) dialog and makes it govern the next turn.
    pub fn receive_prompt(
        &mut self,
        prompt: Arc<Prompt>,
        args: &Map<String, Value>,
        alias: Option<&str>,
    ) -> Result<&Message> {
        let agent = self.spec.name.clone();
        self.dialog_mut(alias)?
            .put_prompt(prompt, args, Role::User, "user", Map::new())
            .map_err(|source| Error::Dialog { agent, source })
    }

    pub fn receive_image(
        &mut self,
        image: ImageSource<'_>,
        caption: Option<&str>,
        alias: Option<&str>,
    ) -> Result<&Message> {
        let agent = self.spec.name.clone();
        self.dialog_mut(alias)?
            .put_image(image, caption, Role::User, "user", Map::new())
            .map_err(|source| Error::Dialog { agent, source })
    }

    /// Runs the agent loop on the active (or named) dialog. A failed call is a
    /// session in state `failure`, not an `Err`: `Err` means there was no dialog.
    pub async fn respond(&mut self, alias: Option<&str>) -> Result<AgentCallSession> {
        let alias = self.alias_or_active(alias)?;
        let Some(dialog) = self.dialogs.get_mut(&alias) else {
            return Err(self.no_dialog(&alias));
        };
        let call = call::Call {
            spec: &self.spec,
            runtime: &self.runtime,
            text_sink: self.text_sink.as_deref(),
            alias: &alias,
            parser_args: &Map::new(),
        };
        Ok(call.run(dialog, &mut self.archive).await)
    }

    pub fn current_dialog(&self) -> Result<&Dialog> {
        let alias = self
            .active_alias
            .as_deref()
            .ok_or_else(|| Error::NoActiveDialog {
                agent: self.spec.name.clone(),
            })?;
        self.dialogs.get(alias).ok_or_else(|| self.no_dialog(alias))
    }

    pub fn dialog(&self, alias: &str) -> Option<&Dialog> {
        self.dialogs.get(alias)
    }

    /// Alias → dialog, in the order they were opened.
    pub fn dialogs(&self) -> &IndexMap<String, Dialog> {
        &self.dialogs
    }

    pub fn active_alias(&self) -> Option<&str> {
        self.active_alias.as_deref()
    }

    /// Every dialog this agent made, open or not, oldest first.
    pub fn all_dialogs(&self) -> impl Iterator<Item = &Dialog> {
        self.dialogs.values().chain(self.archive.iter())
    }

    /// Every dialog, as `all_dialogs` orders them, taken out of the agent.
    pub fn into_dialogs(self) -> impl Iterator<Item = Dialog> {
        self.dialogs.into_values().chain(self.archive)
    }

    fn dialog_mut(&mut self, alias: Option<&str>) -> Result<&mut Dialog> {
        let alias = self.alias_or_active(alias)?;
        if !self.dialogs.contains_key(&alias) {
            return Err(self.no_dialog(&alias));
        }
        Ok(self.dialogs.get_mut(&alias).expect("checked above"))
    }

    /// `alias`, or the active dialog's alias when none is given.
    fn alias_or_active(&self, alias: Option<&str>) -> Result<String> {
        match alias {
            Some(alias) => Ok(alias.to_string()),
            None => self
                .active_alias
                .clone()
                .ok_or_else(|| Error::NoActiveDialog {
                    agent: self.spec.name.clone(),
                }),
        }
    }

    fn no_dialog(&self, alias: &str) -> Error {
        let available: Vec<String> = self
            .dialogs
            .keys()
            .map(|alias| format!("`{alias}`"))
            .collect();
        Error::NoDialog {
            agent: self.spec.name.clone(),
            alias: alias.to_string(),
            available: if available.is_empty() {
                "none".into()
            } else {
                available.join(", ")
            },
        }
    }

    fn dialog_error(&self, source: crate::dialog::Error) -> Error {
        Error::Dialog {
            agent: self.spec.name.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests;
