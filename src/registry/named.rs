//! The registry's tools, parsers, handlers and renderers (issue 13), and
//! context managers with typed options: what a program adds by name for YAML
//! and prompt front matter to use. Checking the names a tactic uses is the
//! tactic's business (`tactic/mod.rs`); this file only keeps them.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;

use super::Registry;
use crate::agent::context::{ContextManager, ContextSettings};
use crate::agent::{Handler, Handlers};
use crate::prompt::{Extensions, Parse, Render};
use crate::tool::{FunctionTool, Tool, ToolFunction};

/// The tools, parsers, handlers and renderers a registry holds.
#[derive(Clone, Default)]
pub(crate) struct Named {
    pub(crate) tools: Arc<IndexMap<String, Arc<dyn Tool>>>,
    pub(crate) prompts: Arc<Extensions>,
    pub(crate) handlers: Handlers,
}

impl Named {
    /// Adds everything `other` adds; panics on a name both register.
    pub(crate) fn merge(&mut self, other: &Named) {
        for tool in other.tools.values() {
            self.add_tool(tool.clone());
        }
        for (name, parser) in &other.prompts.parsers {
            registered(Arc::make_mut(&mut self.prompts).add_parser(name, parser.clone()));
        }
        for (name, renderer) in &other.prompts.renderers {
            registered(Arc::make_mut(&mut self.prompts).add_renderer(name, renderer.clone()));
        }
        for (name, handler) in other.handlers.added() {
            registered(self.handlers.insert(name, handler.clone()));
        }
    }

    fn add_tool(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        assert!(
            !self.tools.contains_key(&name),
            "tool `{name}` is registered twice"
        );
        Arc::make_mut(&mut self.tools).insert(name, tool);
    }
}

/// Registering one name twice is a programmer's error (axum's `route` panics too).
#[track_caller]
fn registered(result: Result<(), String>) {
    if let Err(problem) = result {
        panic!("{problem}");
    }
}

impl Registry {
    /// Registers an async function (or a closure returning a future) as the
    /// tool `name`, which agents and prompts name in `tools:` like a command
    /// tool: it is offered, called and recorded the same way. The argument
    /// type's JSON schema (schemars) is the tool's parameters, its doc comment
    /// the tool's description; a returned string is what the model sees, any
    /// other value is shown as JSON, and an `Err` (or a panic) is a tool
    /// error the model sees. A function of several arguments, or a sync
    /// one, becomes a tool with `#[lllm::tool]` and [`Registry::tool_impl`].
    ///
    /// ```
    /// use lllm::Registry;
    /// use lllm::schemars::{self, JsonSchema};
    /// use serde::Deserialize;
    ///
    /// /// Count the words in a text.
    /// #[derive(Deserialize, JsonSchema)]
    /// struct WordCount {
    ///     /// The text whose words are counted.
    ///     text: String,
    /// }
    ///
    /// async fn word_count(args: WordCount) -> Result<usize, std::convert::Infallible> {
    ///     Ok(args.text.split_whitespace().count())
    /// }
    ///
    /// let registry = Registry::new().tool("word_count", word_count);
    /// assert_eq!(registry.tool_names().collect::<Vec<_>>(), ["word_count"]);
    /// ```
    ///
    /// A tactic using it, run on the offline scripted model:
    ///
    /// ```
    /// # use lllm::schemars::{self, JsonSchema};
    /// # use serde::Deserialize;
    /// # /// Count the words in a text.
    /// # #[derive(Deserialize, JsonSchema)]
    /// # struct WordCount { text: String }
    /// # async fn word_count(args: WordCount) -> Result<usize, String> {
    /// #     Ok(args.text.split_whitespace().count())
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("script.yaml"), r#"
    /// replies:
    ///   - tool_calls: [{name: word_count, arguments: {text: "one two three"}}]
    ///   - text: three words
    /// "#)?;
    /// std::fs::write(dir.path().join("tactic.yaml"), r#"
    /// tactic_type: counter
    /// providers: {mock: {script: script.yaml}}
    /// agent_configs:
    ///   - name: counter
    ///     model_name: mock/script
    ///     system_prompt: Count words with the tool.
    ///     tools: [word_count]
    /// "#)?;
    /// let registry = lllm::Registry::new().tool("word_count", word_count);
    /// let config = lllm::config::load(&dir.path().join("tactic.yaml"))?;
    /// let tactic = lllm::Tactic::build_with(config, &|_| None, &registry)?;
    /// let record = tactic.run(lllm::Task::new("How many words?")).await;
    /// assert_eq!(record.delivery.as_deref(), Some("three words"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// When `name` is registered already, or when the argument type is not
    /// a struct or a map (providers require an object of parameters).
    pub fn tool<Args, F>(self, name: &str, function: F) -> Registry
    where
        F: ToolFunction<Args>,
    {
        self.tool_impl(FunctionTool::new(name, None, function))
    }

    /// [`Registry::tool`] with the description given here instead of the
    /// argument type's doc comment.
    ///
    /// # Panics
    /// As [`Registry::tool`].
    pub fn tool_described<Args, F>(self, name: &str, description: &str, function: F) -> Registry
    where
        F: ToolFunction<Args>,
    {
        self.tool_impl(FunctionTool::new(name, Some(description), function))
    }

    /// Registers a tool implementing [`Tool`] (one with state, say a client
    /// or a cache), under the name its spec gives; `word_count::tool()` of a
    /// function marked `#[lllm::tool]` is one.
    ///
    /// ```
    /// use futures_util::future::BoxFuture;
    /// use lllm::provider::ToolSpec;
    /// use serde_json::{Map, Value, json};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// /// Hands out ticket numbers: a tool with state.
    /// struct Tickets {
    ///     spec: ToolSpec,
    ///     next: AtomicU64,
    /// }
    ///
    /// impl lllm::Tool for Tickets {
    ///     fn spec(&self) -> &ToolSpec {
    ///         &self.spec
    ///     }
    ///     fn call<'a>(&'a self, _arguments: &'a Map<String, Value>) -> BoxFuture<'a, Result<String, String>> {
    ///         let number = self.next.fetch_add(1, Ordering::SeqCst);
    ///         Box::pin(async move { Ok(format!("ticket {number}")) })
    ///     }
    /// }
    ///
    /// let spec = ToolSpec {
    ///     name: "ticket".into(),
    ///     description: "Take the next ticket number.".into(),
    ///     parameters: json!({"type": "object", "properties": {}}),
    /// };
    /// let registry = lllm::Registry::new().tool_impl(Tickets { spec, next: AtomicU64::new(1) });
    /// assert_eq!(registry.tool_names().collect::<Vec<_>>(), ["ticket"]);
    /// ```
    ///
    /// # Panics
    /// When that name is registered already.
    pub fn tool_impl(mut self, tool: impl Tool + 'static) -> Registry {
        self.named.add_tool(Arc::new(tool));
        self
    }

    /// Registers a reply parser a prompt names with `parser: NAME` in its
    /// front matter. A rejected reply goes to the repair loop, as with the
    /// built-in `tags` and `json` parsers; see [`Parse`] for the trait and
    /// the closures it covers.
    ///
    /// ```
    /// use lllm::prompt::ParseFailure;
    /// use serde_json::{Value, json};
    ///
    /// fn verdict(reply: &str) -> Result<Value, ParseFailure> {
    ///     let (_, rest) = reply.split_once("<verdict>").ok_or("no <verdict> tag")?;
    ///     let (verdict, _) = rest.split_once("</verdict>").ok_or("unclosed <verdict>")?;
    ///     Ok(json!({ "verdict": verdict.trim() }))
    /// }
    ///
    /// let registry = lllm::Registry::new().parser("verdict", verdict);
    /// assert_eq!(registry.parser_names().collect::<Vec<_>>(), ["verdict"]);
    /// ```
    ///
    /// # Panics
    /// When `name` is registered already or is a built-in (`tags`, `json`).
    pub fn parser(mut self, name: &str, parser: impl Parse) -> Registry {
        registered(Arc::make_mut(&mut self.named.prompts).add_parser(name, Arc::new(parser)));
        self
    }

    /// Registers a handler a prompt names with `handler: NAME` in its front
    /// matter: it writes the repair request, the tool results and the final
    /// request of every call that prompt governs (see [`Handler`]).
    ///
    /// ```
    /// use lllm::{AgentCallSession, Handler};
    ///
    /// /// Repairs that say what to send.
    /// struct Strict;
    /// impl Handler for Strict {
    ///     fn on_exception(&self, error: &str, _call: &AgentCallSession) -> String {
    ///         format!("{error}. Reply with <answer>…</answer> and nothing else.")
    ///     }
    /// }
    ///
    /// // A prompt's front matter names it: `handler: strict`.
    /// let registry = lllm::Registry::new().handler("strict", Strict);
    /// assert!(registry.handler_names().any(|name| name == "strict"));
    /// ```
    ///
    /// # Panics
    /// When `name` is registered already or is the built-in `default`.
    pub fn handler(mut self, name: &str, handler: impl Handler) -> Registry {
        registered(self.named.handlers.insert(name, Arc::new(handler)));
        self
    }

    /// Registers a template renderer a prompt file picks with
    /// `renderer: NAME` in its front matter (see [`Render`]). Its templates
    /// are not checked before a run (their syntax is the renderer's); a
    /// render error is reported as a built-in renderer's is.
    ///
    /// ```
    /// use lllm::prompt::Render;
    /// use serde_json::{Map, Value};
    ///
    /// /// Shouts the template, arguments ignored.
    /// struct Shout;
    /// impl Render for Shout {
    ///     fn render(&self, template: &str, _args: &Map<String, Value>) -> Result<String, String> {
    ///         Ok(template.to_uppercase())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// std::fs::create_dir(dir.path().join("prompts"))?;
    /// std::fs::write(dir.path().join("prompts/ask.md"), "---\nrenderer: shout\n---\nhello there")?;
    /// std::fs::write(dir.path().join("tactic.yaml"), r#"
    /// agent_configs: [{name: echo, model_name: mock/echo, system_prompt: Echo.}]
    /// flow: [{step: ask, agent: echo, prompt: ask}]
    /// "#)?;
    /// let registry = lllm::Registry::new().renderer("shout", Shout);
    /// let config = lllm::config::load(&dir.path().join("tactic.yaml"))?;
    /// let tactic = lllm::Tactic::build_with(config, &|_| None, &registry)?;
    /// let record = tactic.run(lllm::Task::new("")).await;
    /// assert_eq!(record.delivery.as_deref(), Some("HELLO THERE"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// When `name` is registered already or is a built-in (`jinja`, `format`).
    pub fn renderer(mut self, name: &str, renderer: impl Render) -> Registry {
        registered(Arc::make_mut(&mut self.named.prompts).add_renderer(name, Arc::new(renderer)));
        self
    }

    /// [`Registry::context_manager`] with the YAML's other keys deserialized
    /// into `Opts`: `context_manager: {type: NAME, keep: 4}` gives the
    /// factory an `Opts` with `keep: 4`, and a bad option is a load error
    /// naming it (`context manager `NAME`: missing field `keep``).
    ///
    /// ```
    /// use lllm::agent::ContextManager;
    /// use lllm::dialog::Dialog;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize)]
    /// #[serde(deny_unknown_fields)]
    /// struct KeepOptions {
    ///     keep: usize,
    /// }
    ///
    /// /// Sends only the newest `keep` messages' dialog as it is (a sketch).
    /// struct Keep(usize);
    /// impl ContextManager for Keep {
    ///     fn name(&self) -> &str { "keep" }
    ///     fn apply(&self, _dialog: &mut Dialog) -> Option<Dialog> { None }
    /// }
    ///
    /// let registry = lllm::Registry::new()
    ///     .context_manager_with("keep", |_settings, options: KeepOptions| Ok(Keep(options.keep)));
    /// assert!(registry.context_manager_names().any(|name| name == "keep"));
    /// ```
    ///
    /// # Panics
    /// When `name` is registered already.
    pub fn context_manager_with<Opts, M, F>(self, name: &str, factory: F) -> Registry
    where
        Opts: DeserializeOwned,
        M: ContextManager + 'static,
        F: Fn(&ContextSettings, Opts) -> Result<M, String> + Send + Sync + 'static,
    {
        self.context_manager(name, move |settings: &ContextSettings| {
            let options = serde_json::Value::Object(settings.options.clone());
            let options: Opts = serde_path_to_error::deserialize(options).map_err(|error| {
                let path = error.path().to_string();
                if path == "." {
                    error.inner().to_string()
                } else {
                    format!("`context_manager.{path}`: {}", error.inner())
                }
            })?;
            factory(settings, options)
        })
    }

    /// The names of the registered tools, in registration order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.named.tools.keys().map(String::as_str)
    }

    /// The names of the registered parsers, sorted (built-ins aside).
    pub fn parser_names(&self) -> impl Iterator<Item = &str> {
        self.named.prompts.parser_names()
    }

    /// The names of the handlers, built-in `default` included, sorted.
    pub fn handler_names(&self) -> impl Iterator<Item = &str> {
        self.named.handlers.names()
    }

    /// The names of the registered renderers, sorted (built-ins aside).
    pub fn renderer_names(&self) -> impl Iterator<Item = &str> {
        self.named.prompts.renderer_names()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

    fn verdict(reply: &str) -> Result<Value, crate::prompt::ParseFailure> {
        Ok(json!({ "verdict": reply.trim() }))
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Text {
        text: String,
    }

    async fn echo(args: Text) -> Result<String, String> {
        Ok(args.text)
    }

    struct Upper;
    impl Render for Upper {
        fn render(&self, template: &str, _: &Map<String, Value>) -> Result<String, String> {
            Ok(template.to_uppercase())
        }
    }

    #[test]
    fn merge_adds_the_other_registrys_names() {
        let ours = Registry::new()
            .tool("echo", echo)
            .parser("verdict", verdict);
        let theirs = Registry::new()
            .renderer("upper", Upper)
            .handler("plain", crate::agent::DefaultHandler);
        let merged = ours.merge(theirs);
        assert_eq!(merged.tool_names().collect::<Vec<_>>(), ["echo"]);
        assert_eq!(merged.parser_names().collect::<Vec<_>>(), ["verdict"]);
        assert_eq!(merged.renderer_names().collect::<Vec<_>>(), ["upper"]);
        assert_eq!(
            merged.handler_names().collect::<Vec<_>>(),
            ["default", "plain"]
        );
    }

    #[test]
    #[should_panic(expected = "tool `echo` is registered twice")]
    fn a_tool_registered_twice_panics() {
        let _ = Registry::new()
            .tool("echo", echo)
            .merge(Registry::new().tool("echo", echo));
    }

    #[test]
    #[should_panic(expected = "parser `json` is registered twice (or is a built-in)")]
    fn a_built_in_parsers_name_is_taken() {
        let _ = Registry::new().parser("json", verdict);
    }

    #[test]
    fn typed_context_manager_options_name_the_bad_key() {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Options {
            keep: usize,
        }
        struct Keep;
        impl ContextManager for Keep {
            fn name(&self) -> &str {
                "keep"
            }
            fn apply(&self, _: &mut crate::dialog::Dialog) -> Option<crate::dialog::Dialog> {
                None
            }
        }
        let registry = Registry::new().context_manager_with("keep", |_, _: Options| Ok(Keep));
        let build = |options: Value| {
            registry
                .context_managers
                .build(&ContextSettings {
                    kind: "keep".into(),
                    model_provider: "mock".into(),
                    model: "echo".into(),
                    max_tokens: None,
                    options: options.as_object().cloned().unwrap_or_default(),
                })
                .map(|_| ())
        };
        assert!(build(json!({"keep": 3})).is_ok());
        assert_eq!(
            build(json!({})).unwrap_err(),
            "context manager `keep`: missing field `keep`"
        );
        let wrong = build(json!({"keep": "three"})).unwrap_err();
        assert!(
            wrong.starts_with("context manager `keep`: `context_manager.keep`: invalid type"),
            "{wrong}"
        );
        let unknown = build(json!({"keep": 1, "kepp": 2})).unwrap_err();
        assert!(unknown.contains("unknown field `kepp`"), "{unknown}");
    }
}
