//! lllm: run LLM agents from YAML tactic configs.
//!
//! The data flows one way: cli → config → prompt registry → tactic (flow) →
//! agent loop → provider → HTTP, and every invoke lands in the session record.
//!
//! A tactic's program is a YAML `flow:` or Rust code: implement [`Flow`],
//! register it with [`Registry::flow`], and name it in the tactic file with
//! `tactic_type`; [`Ctx`] hands out the file's agents with the seeds' verbs.

pub mod agent;
pub mod batch;
pub mod config;
pub mod dialog;
pub mod error;
#[doc(hidden)]
pub mod file;
pub mod json;
pub mod mock;
pub mod output;
pub mod prompt;
pub mod provider;
pub mod redact;
pub mod registry;
pub mod replay;
pub mod report;
pub mod suggest;
pub mod tactic;
pub mod tool;

pub use agent::Agent;
pub use registry::Registry;
pub use tactic::{Ctx, Flow, FlowResult, SessionRecord, Tactic, Task};

/// Any error, boxed: what a programmed tactic or a Rust tool may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
