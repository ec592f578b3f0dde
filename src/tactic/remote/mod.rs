//! Tactics served over HTTP, from the client's side (issue 30): a
//! [`RemoteTactic`] calls a tactic that `lllm serve` (or upstream
//! lllm-core's `lllm serve`) puts behind HTTP, and a tactic's flow steps and
//! tools can name one by URL.
//!
//! - `url` turns the URL a user gives into the tactic's routes (D21);
//! - `sse` reads a `/stream`'s events in both dialects (D17, D18);
//! - `client` is [`RemoteTactic`]: `info`, `run`, `events`; `answer` reads
//!   what comes back ([`RemoteAnswer`], [`RemoteError`]);
//! - `exchange` records each remote call in the run's session record and,
//!   in `lllm replay --rerun`, serves the recorded answer instead of calling.
//!
//! The server is another crate's (`lllm-serve`): this library stays free of
//! a web framework. The module sits in the tactic layer (it runs tasks and
//! keeps their records) and is `lllm::remote` from outside.

mod answer;
mod client;
pub(crate) mod exchange;
mod sse;
mod url;

pub use client::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_TIMEOUT_S, RemoteAnswer, RemoteError, RemoteEvents,
    RemoteTactic,
};
pub use exchange::RemoteCall;

use crate::tactic::Task;
use serde_json::Value;

pub use crate::tactic::TacticInfo;

/// Whether a `tactic:` value names a served tactic rather than a file.
pub(crate) use crate::config::is_served_url as is_url;

/// The input a task gives a served tactic: its `args` as an object when it
/// has any, else its `task` value.
pub(crate) fn task_input(task: &Task) -> Value {
    task.input()
}
