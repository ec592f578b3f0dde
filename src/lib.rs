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
pub(crate) mod args;
#[doc(hidden)]
pub mod batch;
pub mod config;
pub mod dialog;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod eval;
pub mod event;
#[doc(hidden)]
pub mod fds;
pub(crate) mod features;
#[doc(hidden)]
pub mod file;
pub mod jsonl;
pub mod mock;
#[doc(hidden)]
pub mod output;
pub mod prompt;
pub mod provider;
pub mod quick;
pub mod records;
#[doc(hidden)]
pub mod redact;
pub mod registry;
pub mod replay;
#[doc(hidden)]
pub mod report;
pub(crate) mod sha256;
/// The session store: an SQLite index over session records (`lllm logs`).
#[cfg(feature = "store")]
pub mod store;
#[doc(hidden)]
pub mod suggest;
pub mod tactic;
/// OpenTelemetry export of runs (feature `otel`): spans by the GenAI
/// semantic conventions and metrics over OTLP, configured by the standard
/// `OTEL_*` variables (docs/telemetry.md).
#[cfg(feature = "otel")]
pub mod telemetry;
pub(crate) mod time;
pub mod tool;
pub mod trace_context;
pub mod words;
#[doc(hidden)]
pub mod yaml;

pub use agent::{Agent, AgentCallSession, Handler};
pub use args::ArgsError;
pub use dialog::{Dialog, Message, Role};
pub use event::{Event, EventKind};
pub use prompt::{Parse, ParseFailure, Prompt, Render};
pub use quick::quick;
pub use records::Records;
pub use registry::Registry;
/// The JSON-schema crate a Rust tool's argument type derives with,
/// re-exported so its version matches ours; `#[derive(lllm::JsonSchema)]`
/// derives through it with nothing more in the user's Cargo.toml.
pub use schemars;
pub use tactic::TacticInfo;
/// Tactics served over HTTP, from the client's side: [`remote::RemoteTactic`].
pub use tactic::remote;
pub use tactic::{Ctx, Flow, FlowResult, RunError, SessionRecord, Tactic, Task, TypedError};
pub use tool::Tool;
#[doc(hidden)]
pub use tool::macro_support as __private;

/// Makes an ordinary function a tool: sync or async, any number of
/// arguments, returning a value or a `Result`. Next to the function (which
/// stays callable as written) it puts `NAME::tool()`, the tool to register
/// with [`Registry::tool_impl`]:
///
/// ```
/// /// Count the words of a text, or of its first `limit` lines.
/// #[lllm::tool]
/// fn word_count(
///     /// The text whose words are counted.
///     text: &str,
///     /// Count only this many lines.
///     limit: Option<usize>,
/// ) -> usize {
///     let lines = text.lines().take(limit.unwrap_or(usize::MAX));
///     lines.map(|line| line.split_whitespace().count()).sum()
/// }
///
/// let registry = lllm::Registry::new().tool_impl(word_count::tool());
/// assert_eq!(registry.tool_names().collect::<Vec<_>>(), ["word_count"]);
///
/// let spec = lllm::Tool::spec(&word_count::tool()).clone();
/// assert_eq!(spec.description, "Count the words of a text, or of its first `limit` lines.");
/// assert_eq!(spec.parameters["required"], serde_json::json!(["text"]));
/// assert_eq!(spec.parameters["properties"]["text"]["description"], "The text whose words are counted.");
/// assert_eq!(word_count("one two\nthree", Some(1)), 2); // still a function
/// ```
///
/// - **Name**: the function's, or `#[lllm::tool(name = "count_words")]`.
/// - **Description**: the function's doc comment up to its first heading
///   (`# Examples` and the like are for people, not the model).
/// - **Parameters**: one per argument, named as the argument, its JSON
///   schema the type's (schemars: a struct of yours derives
///   [`JsonSchema`](derive@JsonSchema) and `Deserialize`); an `Option` is not
///   required. `&str`, `&[T]` and `&T` are read as `String`, `Vec<T>` and
///   `T` and lent for the call. An argument's description is a `///` line
///   on it or, for rustdoc to show too, its entry in an `# Arguments`
///   section of the function's doc comment (``* `text` - The text.``); the
///   line on the argument wins.
/// - **Result**: a string is what the model sees as is, any other
///   `Serialize` value is shown as JSON; a `Result`'s `Err` (any `Display`)
///   is the tool error the model sees, and so is a panic. A return type is
///   a `Result` when its path ends in `Result` (`Result<T, E>`,
///   `io::Result<T>`, `anyhow::Result<T>`).
/// - **Sync or async**: an `async fn` is awaited on the run's task; a sync
///   function runs on tokio's blocking pool, so it may block.
///
/// A method (`self`), a generic function, an argument that is a pattern
/// rather than a name, an `unsafe` or `extern` function and a function
/// returning nothing, `()` or `impl Trait` are refused at compile time with
/// the reason, at the place:
///
/// ```compile_fail
/// #[lllm::tool]
/// fn longest<T: AsRef<str>>(words: Vec<T>) -> usize {
///     words.iter().map(|word| word.as_ref().len()).max().unwrap_or(0)
/// }
/// ```
///
/// The tool builds with [`tool::FunctionTool::new`], as [`Registry::tool`]
/// does for an `async fn(Args) -> Result<T, E>`; the two shapes register
/// the same kind of tool.
#[cfg(feature = "macros")]
pub use lllm_macros::tool;

/// schemars' `JsonSchema` derive with only `lllm` in Cargo.toml:
/// `#[derive(lllm::JsonSchema)]` gives the schema `#[derive(JsonSchema)]`
/// gives with schemars as a dependency, its `#[schemars(…)]` and
/// `#[serde(…)]` attributes and doc comments included. (schemars' own
/// derive names the crate `schemars`, which a program reaching it as
/// `lllm::schemars` does not have; this one names `lllm::schemars`.)
///
/// ```
/// use serde::Deserialize;
///
/// /// A place on the map.
/// #[derive(Deserialize, lllm::JsonSchema)]
/// struct Place {
///     /// Its name.
///     name: String,
///     #[serde(default)]
///     zoom: u8,
/// }
///
/// /// The distance between two places, in km.
/// #[lllm::tool]
/// async fn distance(from: Place, to: Place) -> Result<f64, String> {
///     if from.name == to.name { Ok(0.0) } else { Err(format!("no road to {}", to.name)) }
/// }
///
/// let spec = lllm::Tool::spec(&distance::tool()).clone();
/// let from = &spec.parameters["properties"]["from"];
/// assert_eq!(from["description"], "A place on the map.");
/// assert_eq!(from["properties"]["name"]["description"], "Its name.");
/// assert_eq!(from["required"], serde_json::json!(["name"]));
/// ```
#[cfg(feature = "macros")]
pub use lllm_macros::JsonSchema;

/// Any error, boxed: what a programmed tactic or a Rust tool may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
