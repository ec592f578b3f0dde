//! lllm: run LLM agents from YAML tactic configs.
//!
//! The data flows one way: cli → config → prompt registry → tactic (flow) →
//! agent loop → provider → HTTP, and every invoke lands in the session record.

pub mod suggest;
pub mod dialog;
pub mod prompt;
pub mod provider;
