//! Prompts: the behaviour contract of one turn — template, parser, structured
//! output format, tools, handler texts and renderer (seed 001).
//!
//! `render` compiles and renders templates, `parser` checks replies,
//! `registry` loads prompt files; handler texts live here with the prompt.
//! A handler registered by name (`handler: NAME`) sees the call session, so
//! it lives with the agent loop (`agent::Handler`); a prompt holds its name.

mod builtins;
mod check;
mod expression;
mod extensions;
mod parser;
pub(crate) mod placeholders;
mod registry;
pub(crate) mod render;
mod walk;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use expression::Expression;
pub use extensions::Extensions;
pub use parser::{JsonParser, NamedParser, Parse, ParseFailure, Parser, TagParser};
pub use registry::Registry;
pub use render::{NamedRenderer, OUT_OF_FUEL, RENDER_FUEL, Render, Renderer};

use crate::redact::terminal_line;
use crate::sha256::Sha256;
use render::Compiled;

/// What can go wrong with a prompt: its template, its arguments, its file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The template does not compile.
    #[error("prompt `{prompt}`{}: {}", line.map(|line| format!(" line {line}")).unwrap_or_default(), terminal_line(message))]
    Syntax {
        /// The prompt's key.
        prompt: String,
        /// The template's line, when known.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// Rendering lacked variables the template needs.
    #[error(
        "prompt `{prompt}` needs {}; missing: {} (pass it as a step argument, `--var`, or a task argument)",
        list(needed),
        list(missing)
    )]
    /// Rendering lacks variables the template needs.
    MissingVariables {
        /// The prompt's key.
        prompt: String,
        /// The needed names the arguments lack.
        missing: Vec<String>,
        /// Every name the template needs.
        needed: Vec<String>,
    },
    /// Rendering failed (a renderer's own error, a value of the wrong shape).
    #[error("prompt `{prompt}`: {}", terminal_line(message))]
    Render {
        /// The prompt's key.
        prompt: String,
        /// What is wrong.
        message: String,
    },
    /// No prompt has this key.
    #[error("unknown prompt `{key}`{hint}")]
    UnknownPrompt {
        /// The key asked for.
        key: String,
        /// A "did you mean", or what the registry holds.
        hint: String,
    },
    /// Arguments to render with that are not a JSON object.
    #[error("prompt `{prompt}`: {source}")]
    Args {
        /// The prompt's key.
        prompt: String,
        /// What was given instead.
        source: crate::args::ArgsError,
    },
    /// The key's file exists but failed to load (its problem is reported by
    /// `Registry::load_all`).
    #[error("prompt `{key}` could not be loaded")]
    Broken {
        /// The key of the broken file.
        key: String,
    },
    /// A prompt file is unreadable or its front matter is wrong.
    #[error("{}: {}", terminal_line(path), terminal_line(message))]
    File {
        /// The file (with `:line:column` when known).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A prompt's setting is wrong (its format, an `extend`).
    #[error("prompt `{path}`: {}", terminal_line(message))]
    Invalid {
        /// The prompt's key.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A prompt operation's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("`{}`", crate::suggest::printable(name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Repair and tool-result texts (seed `DefaultSimpleHandler`), in the prompt's
/// own template syntax (Jinja for a prompt with a registered renderer).
/// `exception` sees `error_message`, `interrupt` sees `call_results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandlerTexts {
    /// The repair prompt after a reply that does not parse.
    pub exception: String,
    /// The text of each tool result.
    pub interrupt: String,
    /// The prompt asking for a final answer when the tool rounds are spent.
    pub interrupt_final: String,
}

impl HandlerTexts {
    /// The seeds' texts, in `renderer`'s syntax.
    pub fn defaults(renderer: &Renderer) -> HandlerTexts {
        let (error, results) = match renderer {
            Renderer::Format => ("{error_message}", "{call_results}"),
            Renderer::Jinja | Renderer::Custom(_) => ("{{ error_message }}", "{{ call_results }}"),
        };
        HandlerTexts {
            exception: format!("Error: {error}. Please fix."),
            interrupt: results.to_string(),
            interrupt_final:
                "You are reaching the limit of tool calls. Provide the final response.".to_string(),
        }
    }
}

/// One turn's behaviour contract. Cloning is cheap: the compiled template is shared.
///
/// Templates are Jinja with strict undefined (a missing variable is an error
/// naming it); `Renderer::Format` reads the Python framework's `str.format`
/// syntax. A file in the prompt directory adds front matter: parser,
/// format, tools, handler, metadata, renderer.
///
/// ```
/// use lllm::prompt::{Prompt, Renderer};
/// use serde_json::{Map, Value, json};
///
/// let prompt = Prompt::new("research/summarize", "Summarize {{ topic }} for {{ audience }}.")?;
/// assert_eq!(prompt.template_vars().iter().collect::<Vec<_>>(), ["audience", "topic"]);
///
/// let mut args: Map<String, Value> = Map::new();
/// args.insert("topic".into(), json!("native runtime"));
/// assert_eq!(prompt.validate_args(&args), ["audience"]);
/// assert!(prompt.render(&args).unwrap_err().to_string().contains("missing: `audience`"));
///
/// args.insert("audience".into(), json!("maintainers"));
/// assert_eq!(prompt.render(&args)?, "Summarize native runtime for maintainers.");
///
/// // Ported as written in Python: `renderer: format` in a prompt file.
/// let ported = Prompt::with_renderer("research/ported", "Summarize {topic} for {audience}.", Renderer::Format)?;
/// assert_eq!(ported.render(&args)?, "Summarize native runtime for maintainers.");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Prompt {
    /// Registry key, e.g. `writer/draft`.
    pub path: String,
    /// The template as written (`Prompt::template`; fixed at creation, as
    /// the compiled form is made from it).
    template: String,
    /// Front matter `metadata`, for experiment tracking.
    pub metadata: Map<String, Value>,
    /// How replies are parsed (front matter `parser`).
    pub parser: Option<Parser>,
    /// JSON schema of a structured reply (D9): `Prompt::format`, set with
    /// `set_format`, which compiles its validator.
    format: Option<Value>,
    /// Tools this prompt offers besides the agent's (D1), by name.
    pub tools: Vec<String>,
    /// MCP servers whose tools this prompt offers, by name.
    pub mcp_servers: Vec<String>,
    /// The repair and tool-result texts (front matter `handler: {exception: …}`).
    pub handler: HandlerTexts,
    /// A handler registered by name (front matter `handler: NAME`); when set,
    /// it writes those texts instead (`agent::Handler`).
    pub handler_name: Option<String>,
    /// The template's syntax (front matter `renderer`): `Prompt::renderer`.
    renderer: Renderer,
    compiled: Compiled,
    template_vars: BTreeSet<String>,
    /// Attributes the template reads on context names (`draft.content`).
    attributes: Arc<BTreeSet<(String, String)>>,
    format_parser: Option<JsonParser>,
}

impl Prompt {
    /// A minijinja prompt; a syntax error names the prompt and the line.
    ///
    /// ```
    /// use lllm::Prompt;
    /// use serde_json::json;
    ///
    /// let prompt = Prompt::new("greet", "Hello, {{ name }}!")?;
    /// let args = json!({ "name": "Ada" }).as_object().cloned().unwrap_or_default();
    /// assert_eq!(prompt.render(&args)?, "Hello, Ada!");
    /// assert!(Prompt::new("broken", "Hello, {{ name").is_err());
    /// # Ok::<(), lllm::prompt::Error>(())
    /// ```
    pub fn new(path: impl Into<String>, template: impl Into<String>) -> Result<Prompt> {
        Prompt::with_renderer(path, template, Renderer::Jinja)
    }

    /// A prompt in `renderer`'s syntax; a syntax error names the prompt
    /// and the line (a registered renderer's templates are not checked).
    pub fn with_renderer(
        path: impl Into<String>,
        template: impl Into<String>,
        renderer: Renderer,
    ) -> Result<Prompt> {
        let path = path.into();
        let template = template.into();
        let (compiled, needs) =
            render::compile(&template, &renderer).map_err(|(message, line)| Error::Syntax {
                prompt: path.clone(),
                line,
                message,
            })?;
        Ok(Prompt {
            path,
            template,
            metadata: Map::new(),
            parser: None,
            format: None,
            tools: Vec::new(),
            mcp_servers: Vec::new(),
            handler: HandlerTexts::defaults(&renderer),
            handler_name: None,
            renderer,
            compiled,
            template_vars: needs.variables,
            attributes: Arc::new(needs.attributes),
            format_parser: None,
        })
    }

    /// An empty prompt with no parser, format or tools: what governs a turn
    /// started with plain text.
    /// Compiled once and cloned (the compiled template is shared): every
    /// plain-text turn makes one, and a batch makes thousands a second.
    pub fn bare(path: impl Into<String>) -> Prompt {
        static EMPTY: std::sync::OnceLock<Prompt> = std::sync::OnceLock::new();
        let mut prompt = EMPTY
            .get_or_init(|| match Prompt::new("", "") {
                Ok(prompt) => prompt,
                // An empty template always compiles; keep a usable value regardless.
                Err(_) => unreachable!("an empty template compiles"),
            })
            .clone();
        prompt.path = path.into();
        prompt
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The template's syntax (front matter `renderer`).
    pub fn renderer(&self) -> &Renderer {
        &self.renderer
    }

    /// JSON schema of a structured reply (D9): sent to the provider, and the
    /// reply is validated against it when no parser is set.
    pub fn format(&self) -> Option<&Value> {
        self.format.as_ref()
    }

    /// This prompt with `parser` parsing its replies (front matter `parser`).
    ///
    /// ```
    /// use lllm::prompt::{Parser, Prompt};
    ///
    /// let prompt = Prompt::new("answer", "Reply in JSON.")?
    ///     .with_parser(Parser::from_value(&serde_json::json!({"type": "json"}))?);
    /// assert!(prompt.parse("not json").is_err());
    /// assert_eq!(prompt.parse(r#"{"a": 1}"#).unwrap()["a"], 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_parser(mut self, parser: Parser) -> Prompt {
        self.parser = Some(parser);
        self
    }

    /// This prompt with `schema` as its structured-output format (`set_format`).
    ///
    /// ```
    /// use lllm::prompt::Prompt;
    /// use serde_json::json;
    ///
    /// let schema = json!({"type": "object", "required": ["city"],
    ///                     "properties": {"city": {"type": "string"}}});
    /// let prompt = Prompt::new("where", "Which city?")?.with_format(schema)?;
    /// assert!(prompt.parse("not json").is_err());
    /// assert!(prompt.parse(r#"{"city": "Paris"}"#).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_format(mut self, schema: Value) -> Result<Prompt> {
        self.set_format(Some(schema))?;
        Ok(self)
    }

    /// This prompt offering `tools` (by name) besides the agent's (D1).
    #[must_use]
    pub fn with_tools<I, S>(mut self, tools: I) -> Prompt
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the structured-output schema, compiling its validator once.
    pub fn set_format(&mut self, schema: Option<Value>) -> Result<()> {
        self.format_parser =
            match &schema {
                Some(schema) => Some(JsonParser::new(Some(schema.clone())).map_err(|message| {
                    Error::Invalid {
                        path: self.path.clone(),
                        message: format!("`format`: {message}"),
                    }
                })?),
                None => None,
            };
        self.format = schema;
        Ok(())
    }

    /// This prompt governing the call that delivers a tactic's run: its
    /// replies are held to `output` (the tactic's `output_schema`, or the
    /// type of `call_typed`) as to a `format`, which it replaces, and are
    /// repaired the same way. A prompt with its own `parser` keeps it (the
    /// delivery is checked after the run then).
    pub(crate) fn held_to(&self, output: &JsonParser) -> Prompt {
        Prompt {
            format: output.schema.clone(),
            format_parser: Some(output.clone()),
            ..self.clone()
        }
    }

    /// Top-level names the template needs (a name it only reads behind
    /// `is defined` or `| default` is not needed).
    pub fn template_vars(&self) -> &BTreeSet<String> {
        &self.template_vars
    }

    /// `(name, attribute)` pairs the template reads directly on context names
    /// (`draft.content`, `draft['parsed']`).
    pub fn attributes_read(&self) -> &BTreeSet<(String, String)> {
        &self.attributes
    }

    /// The needed names `args` does not have, sorted.
    pub fn validate_args(&self, args: &Map<String, Value>) -> Vec<String> {
        self.template_vars
            .iter()
            .filter(|name| !args.contains_key(*name))
            .cloned()
            .collect()
    }

    /// Renders with `args` (a `json!`, a struct or a map; `()` for none)
    /// with strict undefined. A template may guard a name with `is
    /// defined`; a name it really uses and `args` lacks is a
    /// `MissingVariables` error naming what it needs; arguments that are not
    /// a JSON object are an `Args` error.
    ///
    /// ```
    /// use lllm::prompt::Prompt;
    /// use serde::Serialize;
    ///
    /// #[derive(Serialize)]
    /// struct Topic { topic: &'static str }
    ///
    /// let prompt = Prompt::new("writer/draft", "Write about {{ topic }}.")?;
    /// assert_eq!(prompt.render(Topic { topic: "owls" })?, "Write about owls.");
    /// assert_eq!(prompt.render(serde_json::json!({"topic": "bats"}))?, "Write about bats.");
    /// assert!(prompt.render("owls").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn render(&self, args: impl serde::Serialize) -> Result<String> {
        let args = crate::args::object(args, "prompt arguments").map_err(|source| Error::Args {
            prompt: self.path.clone(),
            source,
        })?;
        self.render_map(&args)
    }

    /// `render` of arguments already a map (the engine's own, no copy).
    pub(crate) fn render_map(&self, args: &Map<String, Value>) -> Result<String> {
        render::render(&self.compiled, args).map_err(|message| {
            let missing = self.validate_args(args);
            if missing.is_empty() {
                Error::Render {
                    prompt: self.path.clone(),
                    message,
                }
            } else {
                Error::MissingVariables {
                    prompt: self.path.clone(),
                    missing,
                    needed: self.template_vars.iter().cloned().collect(),
                }
            }
        })
    }

    /// Parses a reply: with the parser, else against `format`, else `{raw}`.
    /// The result always has `raw`.
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        self.parse_with(content, &Map::new())
    }

    /// `parse` with the call's parser arguments (they reach a registered parser).
    pub fn parse_with(
        &self,
        content: &str,
        parser_args: &Map<String, Value>,
    ) -> Result<Value, ParseFailure> {
        let parsed = match (&self.parser, &self.format_parser) {
            (Some(parser), _) => parser.parse_with(content, parser_args)?,
            (None, Some(format)) => format.parse(content)?,
            (None, None) => return Ok(json!({"raw": content})),
        };
        Ok(match parsed {
            Value::Object(mut map) => {
                map.entry("raw")
                    .or_insert_with(|| Value::String(content.to_string()));
                Value::Object(map)
            }
            other => json!({"raw": content, "value": other}),
        })
    }

    /// With a `format` and no `parser`, the JSON a reply carries in one
    /// fenced block inside prose, which is then
    /// the reply's answer: `None` when the reply is JSON itself, or the
    /// prompt parses replies its own way.
    pub fn json_in_prose(&self, content: &str) -> Option<String> {
        match (&self.parser, &self.format_parser) {
            (None, Some(_)) => parser::json_block(content),
            _ => None,
        }
    }

    /// A copy under a new path (required and different), to be changed further.
    pub fn extend(&self, path: impl Into<String>) -> Result<Prompt> {
        let path = path.into();
        if path.trim().is_empty() || path == self.path {
            return Err(Error::Invalid {
                path: self.path.clone(),
                message: "extend() needs a new, different path".into(),
            });
        }
        let mut prompt = self.clone();
        prompt.path = path;
        Ok(prompt)
    }

    /// This prompt with another template (same renderer), recompiled.
    pub fn with_template(&self, template: impl Into<String>) -> Result<Prompt> {
        let template = template.into();
        let (compiled, needs) =
            render::compile(&template, &self.renderer).map_err(|(message, line)| {
                Error::Syntax {
                    prompt: self.path.clone(),
                    line,
                    message,
                }
            })?;
        Ok(Prompt {
            template,
            compiled,
            template_vars: needs.variables,
            attributes: Arc::new(needs.attributes),
            ..self.clone()
        })
    }

    /// A JSON snapshot for experiment tracking.
    pub fn info(&self) -> Value {
        json!({
            "path": self.path,
            "prompt_hash": &self.sha256()[..12],
            "metadata": self.metadata,
            "tools": self.tools,
            "mcp_servers": self.mcp_servers,
            "has_parser": self.parser.is_some(),
            "has_format": self.format.is_some(),
            "parser": self.parser.as_ref().map(Parser::to_value),
            "handler": self.handler_name,
            "renderer": self.renderer.name(),
        })
    }

    /// Hex SHA-256 of the template.
    pub fn sha256(&self) -> String {
        crate::sha256::hex(&Sha256::digest(self.template.as_bytes()))
    }

    /// The repair prompt (`error_message`); keeps tools, parser and format (D2:
    /// the snapshotted prompt still governs the call).
    pub fn on_exception(&self) -> Prompt {
        self.handler_prompt("exception", &self.handler.exception, true)
    }

    /// The tool-result prompt (`call_results`); keeps tools.
    pub fn on_interrupt(&self) -> Prompt {
        self.handler_prompt("interrupt", &self.handler.interrupt, true)
    }

    /// The "stop calling tools" prompt; offers no tools.
    pub fn on_interrupt_final(&self) -> Prompt {
        self.handler_prompt("interrupt_final", &self.handler.interrupt_final, false)
    }

    /// The prompt for a handler's text, already written (a registered
    /// handler's): the text is sent as is. `suffix` is `exception`,
    /// `interrupt` or `interrupt_final`; only the last offers no tools.
    pub fn handler_reply(&self, suffix: &str, text: String) -> Prompt {
        let mut prompt = self.handler_prompt(suffix, "", suffix != "interrupt_final");
        prompt.compiled = render::Compiled::Text(text.as_str().into());
        prompt.template = text;
        prompt.template_vars = BTreeSet::new();
        prompt.attributes = Arc::new(BTreeSet::new());
        prompt
    }

    /// A handler text as a template: in this prompt's syntax, or Jinja when
    /// the prompt has a registered renderer (its syntax is unknown to us).
    pub(crate) fn handler_template(&self, text: &str) -> Result<Prompt> {
        match &self.renderer {
            Renderer::Custom(_) => Prompt {
                renderer: Renderer::Jinja,
                ..self.clone()
            }
            .with_template(text),
            _ => self.with_template(text),
        }
    }

    fn handler_prompt(&self, suffix: &str, text: &str, keep_tools: bool) -> Prompt {
        // D2: names never grow (`a#exception`, never `a#exception#exception`).
        let base = self.path.split('#').next().unwrap_or(&self.path);
        let path = format!("{base}#{suffix}");
        let mut prompt = match self.handler_template(text) {
            Ok(prompt) => prompt,
            // Handler texts are checked when the prompt file loads; a text that
            // still fails to compile is shown to the model as is.
            Err(_) => {
                let mut plain = Prompt::bare(path.clone());
                plain.template = text.to_string();
                plain
            }
        };
        prompt.path = path;
        if !keep_tools {
            prompt.tools.clear();
            prompt.mcp_servers.clear();
        }
        prompt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn missing_variables_name_the_prompt_and_what_it_needs() {
        let prompt = Prompt::new("writer/draft", "{{ task }}: {{ text }}").unwrap();
        assert_eq!(prompt.validate_args(&args(json!({"task": 1}))), ["text"]);
        let error = prompt.render(json!({"task": "t"})).unwrap_err().to_string();
        assert_eq!(
            error,
            "prompt `writer/draft` needs `task`, `text`; missing: `text` (pass it as a step argument, `--var`, or a task argument)"
        );
        assert_eq!(
            prompt.render(json!({"task": "t", "text": "x"})).unwrap(),
            "t: x"
        );
    }

    #[test]
    fn names_with_line_breaks_keep_the_error_on_one_line() {
        // Found by fuzzing `prompt_file`: a `str.format` field may hold any
        // text, and the error listed it raw over two lines.
        let prompt = Prompt::with_renderer("p", "{a\nb} {c}", Renderer::Format).unwrap();
        let error = prompt.render(()).unwrap_err().to_string();
        assert_eq!(
            error,
            "prompt `p` needs `a\\nb`, `c`; missing: `a\\nb`, `c` (pass it as a step argument, `--var`, or a task argument)"
        );
    }

    #[test]
    fn file_and_syntax_errors_stay_on_one_line() {
        // Found by fuzzing `prompt_file`: a filter name the template checker
        // quoted held a newline, and the load error broke over two lines.
        let error = Error::File {
            path: "p.md:5".into(),
            message: "unknown filter `a.\nb`\r".into(),
        };
        assert_eq!(error.to_string(), "p.md:5: unknown filter `a.\\nb`\\r");
        let error = Error::Syntax {
            prompt: "p".into(),
            line: Some(2),
            message: "bad\u{1b}[2J".into(),
        };
        assert_eq!(error.to_string(), "prompt `p` line 2: bad\\x1b[2J");
    }

    #[test]
    fn handler_prompts_keep_their_names_short() {
        let mut prompt = Prompt::new("ask", "{{ q }}").unwrap();
        prompt.tools = vec!["lookup".into()];
        let repair = prompt.on_exception();
        assert_eq!(repair.path, "ask#exception");
        assert_eq!(repair.on_exception().path, "ask#exception");
        assert_eq!(repair.tools, ["lookup"]);
        assert_eq!(
            repair.render(json!({"error_message": "bad"})).unwrap(),
            "Error: bad. Please fix."
        );
        let last = prompt.on_interrupt().on_interrupt_final();
        assert_eq!(last.path, "ask#interrupt_final");
        assert!(last.tools.is_empty());
        let ported = Prompt::with_renderer("p", "{x}", Renderer::Format).unwrap();
        assert_eq!(
            ported
                .on_interrupt()
                .render(json!({"call_results": "r"}))
                .unwrap(),
            "r"
        );
    }

    #[test]
    fn parse_uses_the_parser_then_the_format() {
        let plain = Prompt::new("p", "").unwrap();
        assert_eq!(plain.parse("hi").unwrap(), json!({"raw": "hi"}));
        let mut structured = Prompt::new("p", "").unwrap();
        structured
            .set_format(Some(json!({"type": "object", "required": ["a"]})))
            .unwrap();
        assert_eq!(structured.parse("{\"a\": 1}").unwrap()["a"], json!(1));
        assert!(structured.parse("{}").is_err());
        assert!(structured.set_format(Some(json!({"type": 5}))).is_err());
    }

    #[test]
    fn a_registered_parser_gets_the_calls_parser_args() {
        struct Longest;
        impl Parse for Longest {
            fn parse(&self, reply: &str, args: &Map<String, Value>) -> Result<Value, ParseFailure> {
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(100);
                if reply.len() as u64 > limit {
                    return Err(format!("{} characters; at most {limit}", reply.len()).into());
                }
                Ok(json!({"length": reply.len()}))
            }
        }
        let mut prompt = Prompt::new("p", "").unwrap();
        prompt.parser = Some(Parser::Custom(NamedParser::new(
            "longest",
            Arc::new(Longest),
        )));
        assert_eq!(
            prompt.parse("hello").unwrap(),
            json!({"length": 5, "raw": "hello"})
        );
        let failure = prompt
            .parse_with("hello", &args(json!({"limit": 3})))
            .unwrap_err();
        assert_eq!(failure.to_string(), "5 characters; at most 3");
        assert_eq!(prompt.info()["parser"], "longest");
    }

    #[test]
    fn a_registered_renderer_renders_and_its_handler_texts_stay_jinja() {
        struct Reverse;
        impl Render for Reverse {
            fn render(&self, template: &str, _: &Map<String, Value>) -> Result<String, String> {
                if template.is_empty() {
                    return Err("nothing to reverse".into());
                }
                Ok(template.chars().rev().collect())
            }
        }
        let renderer = Renderer::Custom(NamedRenderer::new("reverse", Arc::new(Reverse)));
        let prompt = Prompt::with_renderer("p", "{{ not jinja", renderer.clone()).unwrap();
        assert!(prompt.template_vars().is_empty());
        assert_eq!(prompt.render(()).unwrap(), "ajnij ton {{");
        let empty = Prompt::with_renderer("q", "", renderer).unwrap();
        assert_eq!(
            empty.render(()).unwrap_err().to_string(),
            "prompt `q`: nothing to reverse"
        );
        let repair = prompt.on_exception();
        assert_eq!(
            repair.render(json!({"error_message": "bad"})).unwrap(),
            "Error: bad. Please fix."
        );
        let written = prompt.handler_reply("interrupt_final", "{{ literal }}".into());
        assert_eq!(written.path, "p#interrupt_final");
        assert_eq!(written.render(()).unwrap(), "{{ literal }}");
    }

    #[test]
    fn extend_needs_a_new_path_and_info_summarizes() {
        let prompt = Prompt::new("a", "text").unwrap();
        assert!(prompt.extend("a").is_err());
        assert!(prompt.extend(" ").is_err());
        let child = prompt
            .extend("b")
            .unwrap()
            .with_template("{{ more }}")
            .unwrap();
        assert_eq!(child.path, "b");
        assert!(child.template_vars().contains("more"));
        let info = prompt.info();
        assert_eq!(info["path"], "a");
        assert_eq!(info["prompt_hash"].as_str().unwrap().len(), 12);
        assert_eq!(prompt.sha256().len(), 64);
    }
}
