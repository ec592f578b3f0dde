#![doc = include_str!("../docs/guide.md")]
//!
//! # Where things are
//!
//! The data flows one way: config → prompt registry → tactic (a YAML flow or a
//! programmed [`Flow`]) → agent loop → provider → HTTP, and every invoke lands
//! in the session record. Modules hidden from these docs are the engine's and
//! the `lllm` binary's own (batch, replay, output), not a stable API.

#![deny(missing_docs)]

pub mod agent;
#[doc(hidden)]
pub mod batch;
pub mod config;
pub mod dialog;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod fds;
pub(crate) mod features;
#[doc(hidden)]
pub mod file;
#[doc(hidden)]
pub mod json;
pub mod jsonl;
pub mod mock;
#[doc(hidden)]
pub mod output;
pub mod prompt;
pub mod provider;
pub mod quick;
#[doc(hidden)]
pub mod redact;
pub mod registry;
#[doc(hidden)]
pub mod replay;
#[doc(hidden)]
pub mod report;
/// The session store: an SQLite index over session records (`lllm logs`).
#[cfg(feature = "store")]
pub mod store;
#[doc(hidden)]
pub mod suggest;
pub mod tactic;
pub(crate) mod time;
pub mod tool;
pub mod words;
#[doc(hidden)]
pub mod yaml;

pub use agent::{Agent, AgentCallSession, Handler};
pub use dialog::{Dialog, Message, Role};
pub use prompt::{Parse, ParseFailure, Prompt, Render};
pub use quick::quick;
pub use registry::Registry;
/// The JSON-schema derive a Rust tool's argument type uses
/// (`#[derive(JsonSchema)]`), re-exported so its version matches ours.
pub use schemars;
pub use tactic::{Ctx, Flow, FlowResult, RunError, SessionRecord, Tactic, Task};
pub use tool::Tool;

/// Any error, boxed: what a programmed tactic or a Rust tool may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
