//! Tools from Rust functions (the seeds' `Function.from_callable`): an async
//! function or closure whose argument type derives `Deserialize` and
//! `JsonSchema` becomes a [`Tool`] like any command tool. The schema comes
//! from schemars; the description from the argument type's doc comment.
//!
//! Registration (by name) is `lllm::Registry::tool`'s business; offering,
//! calling and recording are the agent loop's, the same as for every tool.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Tool;
use crate::provider::ToolSpec;

/// An async function a tool can be made of: `async fn(Args) -> Result<T, E>`
/// (or a closure returning such a future), with `Args: Deserialize +
/// JsonSchema + Send`, `T: Serialize` (what the model sees: a string as is,
/// anything else as JSON) and `E: Display` (a tool error the model sees).
///
/// Implemented for every such function; see `lllm::Registry::tool`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool",
    label = "not an async function of one argument returning `Result<T, E>`",
    note = "a tool is `async fn(Args) -> Result<T, E>` (or a closure returning such a future) with \
            Args: Deserialize + JsonSchema + Send + 'static, T: Serialize, E: Display, and a future \
            that is Send + 'static"
)]
pub trait ToolFunction<Args>: Send + Sync + 'static {
    /// The JSON schema of the arguments object, as providers receive it.
    fn parameters(&self) -> Value;

    /// Reads `arguments` as `Args` and calls the function: the outer `Err`
    /// says where the arguments do not fit (`` at `a.b`: … ``); the future
    /// gives the text the model sees, or the tool error.
    fn call(&self, arguments: Value) -> Result<BoxFuture<'static, Result<String, String>>, String>;
}

impl<F, Fut, Args, T, E> ToolFunction<Args> for F
where
    F: Fn(Args) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    Args: DeserializeOwned + JsonSchema + Send + 'static,
    T: Serialize,
    E: Display,
{
    fn parameters(&self) -> Value {
        schema_of::<Args>()
    }

    fn call(&self, arguments: Value) -> Result<BoxFuture<'static, Result<String, String>>, String> {
        let args: Args = serde_path_to_error::deserialize(arguments).map_err(|error| {
            let path = error.path().to_string();
            let place = if path == "." {
                String::new()
            } else {
                format!(" at `{path}`")
            };
            format!("{place}: {}", error.inner())
        })?;
        let future = self(args);
        Ok(Box::pin(async move {
            match future.await {
                Ok(value) => result_text(&value),
                Err(error) => Err(error.to_string()),
            }
        }))
    }
}

/// What a tool's `Ok` value becomes for the model: a string as is, anything
/// else as compact JSON.
fn result_text<T: Serialize>(value: &T) -> Result<String, String> {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => Ok(text),
        Ok(other) => Ok(other.to_string()),
        Err(error) => Err(format!(
            "the tool's result cannot be shown as JSON: {error}"
        )),
    }
}

/// The JSON schema of `Args` as a tool's `parameters`: subschemas inlined
/// where they can be (some OpenAI-compatible servers reject `$ref`), and no
/// `$schema` or `title`, which providers do not expect. The root's
/// description (the type's doc comment) is left in; `describe` takes it out.
pub(crate) fn schema_of<Args: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<Args>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// A tool function with its argument type erased: JSON arguments in, the
/// result text or the tool error out.
type ErasedCall =
    dyn Fn(&Map<String, Value>) -> BoxFuture<'static, Result<String, String>> + Send + Sync;

/// A tool made from a Rust function: its spec and the erased function.
pub struct FunctionTool {
    spec: ToolSpec,
    call: Arc<ErasedCall>,
}

impl std::fmt::Debug for FunctionTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("FunctionTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl FunctionTool {
    /// The tool `name` calling `function`; its description is `description`
    /// or, when `None`, the doc comment of the argument type.
    ///
    /// # Panics
    /// When the argument type's schema is not an object (`type: object`, as
    /// every provider requires of a tool's parameters): a struct or a map is;
    /// or when `name` is not 1 to 64 ASCII letters, digits, `_` or `-` (what
    /// the OpenAI and Anthropic APIs accept).
    pub fn new<Args, F>(name: &str, description: Option<&str>, function: F) -> FunctionTool
    where
        F: ToolFunction<Args>,
    {
        assert!(
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'),
            "tool name `{}` must be 1 to 64 ASCII letters, digits, `_` or `-`",
            name.escape_debug()
        );
        let mut parameters = function.parameters();
        let documented = match &mut parameters {
            Value::Object(map) => map
                .remove("description")
                .and_then(|text| text.as_str().map(str::to_string)),
            _ => None,
        };
        assert!(
            parameters.get("type").and_then(Value::as_str) == Some("object"),
            "tool `{name}`: its argument type must be a struct or a map (a JSON object), \
             its schema is {parameters}"
        );
        let spec = ToolSpec {
            name: name.to_string(),
            description: description
                .map(str::to_string)
                .or(documented)
                .unwrap_or_default(),
            parameters,
        };
        let function = Arc::new(function);
        let tool_name = name.to_string();
        let call = move |arguments: &Map<String, Value>| {
            let arguments = Value::Object(arguments.clone());
            // A panicking tool is a tool error the model sees, not a crashed
            // run: the call (and its future) run behind `catch_unwind`.
            let called = std::panic::catch_unwind(AssertUnwindSafe(|| function.call(arguments)));
            let name = tool_name.clone();
            match called {
                Ok(Ok(future)) => {
                    Box::pin(AssertUnwindSafe(future).catch_unwind().map(move |result| {
                        result.unwrap_or_else(|panic| Err(panicked(&name, &*panic)))
                    })) as BoxFuture<'static, _>
                }
                Ok(Err(misfit)) => {
                    let message =
                        format!("the arguments of `{name}` do not fit its parameters{misfit}");
                    Box::pin(async move { Err(message) })
                }
                Err(panic) => {
                    let error = panicked(&name, &*panic);
                    Box::pin(async move { Err(error) })
                }
            }
        };
        FunctionTool {
            spec,
            call: Arc::new(call),
        }
    }
}

/// The tool error for a panic: its message when it has one.
fn panicked(name: &str, panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned());
    match message {
        Some(message) => format!("the tool `{name}` panicked: {message}"),
        None => format!("the tool `{name}` panicked"),
    }
}

impl Tool for FunctionTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<String, String>> {
        (self.call)(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// Looks a word up.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Lookup {
        /// The word.
        word: String,
        /// At most this many senses.
        limit: Option<u32>,
        /// Where to look.
        source: Source,
    }

    /// A dictionary.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Source {
        name: String,
        #[serde(default)]
        tags: Vec<String>,
    }

    async fn lookup(args: Lookup) -> Result<Value, String> {
        if args.word == "fail" {
            return Err("no such word".into());
        }
        if args.word == "panic" {
            panic!("lookup exploded");
        }
        Ok(json!({"word": args.word, "limit": args.limit, "source": args.source.name}))
    }

    fn arguments(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_schema_is_an_object_with_nested_and_optional_fields_inlined() {
        let tool = FunctionTool::new("lookup", None, lookup);
        let spec = tool.spec();
        assert_eq!(spec.description, "Looks a word up.");
        let parameters = &spec.parameters;
        assert_eq!(parameters["type"], "object");
        assert!(parameters.get("$schema").is_none() && parameters.get("title").is_none());
        assert!(parameters.get("description").is_none());
        assert_eq!(parameters["required"], json!(["word", "source"]));
        assert_eq!(parameters["properties"]["word"]["type"], "string");
        assert_eq!(parameters["properties"]["word"]["description"], "The word.");
        assert_eq!(
            parameters["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        let source = &parameters["properties"]["source"];
        assert_eq!(source["type"], "object", "{parameters}");
        assert_eq!(source["required"], json!(["name"]));
        assert!(
            !parameters.to_string().contains("$ref"),
            "nested types are inlined: {parameters}"
        );
    }

    #[tokio::test]
    async fn calls_answer_results_errors_bad_arguments_and_panics() {
        let tool = FunctionTool::new("lookup", Some("Find words."), lookup);
        assert_eq!(tool.spec().description, "Find words.");
        let ok = tool
            .call(&arguments(
                json!({"word": "owl", "source": {"name": "oed"}}),
            ))
            .await;
        assert_eq!(ok.unwrap(), r#"{"word":"owl","limit":null,"source":"oed"}"#);
        let failed = tool
            .call(&arguments(
                json!({"word": "fail", "source": {"name": "oed"}}),
            ))
            .await;
        assert_eq!(failed.unwrap_err(), "no such word");
        let bad = tool
            .call(&arguments(json!({"word": "owl", "source": {"name": 3}})))
            .await;
        let bad = bad.unwrap_err();
        assert!(
            bad.starts_with(
                "the arguments of `lookup` do not fit its parameters at `source.name`: invalid type"
            ),
            "{bad}"
        );
        let panicked = tool
            .call(&arguments(
                json!({"word": "panic", "source": {"name": "oed"}}),
            ))
            .await;
        assert_eq!(
            panicked.unwrap_err(),
            "the tool `lookup` panicked: lookup exploded"
        );
    }

    #[tokio::test]
    async fn strings_are_shown_as_is_and_closures_work() {
        #[derive(Deserialize, JsonSchema)]
        struct Text {
            text: String,
        }
        let prefix = String::from("> ");
        let tool = FunctionTool::new("quote", None, move |args: Text| {
            let quoted = format!("{prefix}{}", args.text);
            async move { Ok::<_, std::convert::Infallible>(quoted) }
        });
        assert_eq!(tool.spec().description, "");
        let result = tool.call(&arguments(json!({"text": "hi"}))).await;
        assert_eq!(result.unwrap(), "> hi");
    }

    #[test]
    #[should_panic(expected = "tool name `word count` must be 1 to 64 ASCII letters")]
    fn a_name_providers_reject_is_refused_at_registration() {
        let _ = FunctionTool::new("word count", None, lookup);
    }

    #[test]
    #[should_panic(expected = "must be a struct or a map")]
    fn an_argument_that_is_not_an_object_is_refused_at_registration() {
        async fn shout(text: String) -> Result<String, String> {
            Ok(text.to_uppercase())
        }
        let _ = FunctionTool::new("shout", None, shout);
    }
}
