//! What the expansions of `#[lllm::tool]` and `#[derive(lllm::JsonSchema)]`
//! call (`lllm::__private`, not an API): the crates they derive through, so
//! a user's Cargo.toml needs only `lllm`, and the glue of a tool call.

use std::fmt::Display;

use serde::Serialize;

pub use schemars;
pub use serde;

/// Runs a sync tool function on tokio's blocking pool (it may block: read a
/// file, run a computation) and gives its value; a panic in it goes on
/// unwinding here, where the tool's `catch_unwind` makes it a tool error.
pub async fn blocking<R, F>(function: F) -> R
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    match tokio::task::spawn_blocking(function).await {
        Ok(value) => value,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => panic!("the runtime shut down while the tool ran"),
        },
    }
}

/// An async tool function's future, which a run may move between threads.
pub fn sendable<F: std::future::Future + Send>(future: F) -> F {
    future
}

/// A tool function's return value; the bound says at its return type that
/// the model sees it as JSON.
pub fn value<T: Serialize>(value: T) -> T {
    value
}

/// A tool function's `Result`; the bounds say at its return type that the
/// model sees `Ok` as JSON and `Err` as text.
pub fn result<T: Serialize, E: Display>(result: Result<T, E>) -> Result<T, E> {
    result
}
