//! The top-level error of a command and the exit code it maps to (docs/formats.md §7).
//!
//! Every layer has its own error type; here they meet, and each is sorted into
//! "bad input, nothing was sent" (exit 2) or something that happened while
//! running (exit 1). This module names no other room (issue 28): a layer's
//! error becomes [`Error::Input`] through the `From` its own module writes
//! (`config`, `tactic`, `replay`), so every room may return this type without
//! pulling the rest.

/// A command's error: what it prints (`error: …`) and its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A layer's bad-input error (a tactic that cannot be used, a record that
    /// cannot be replayed, …): shown as it is, exit 2. Each layer converts
    /// its own error with a `From` next to it.
    #[error(transparent)]
    Input(Box<dyn std::error::Error + Send + Sync>),
    /// Bad command-line usage or input files.
    #[error("{0}")]
    Usage(String),
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a command ended with, mapped to the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every task succeeded.
    Success,
    /// At least one task failed.
    Failed,
    /// Stopped by Ctrl-C; what finished is on disk.
    Interrupted,
    /// The pass rate of the scored tasks is below `--fail-under` (issue 32).
    BelowFailUnder,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed => 1,
            Outcome::Interrupted => 130,
            Outcome::BelowFailUnder => 3,
        }
    }
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) | Error::Usage(_) => 2,
            Error::Write { .. } => 1,
        }
    }
}
