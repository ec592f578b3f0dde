//! Prompts: the behaviour contract of one turn — template, parser, structured
//! output format, tools, handler texts and renderer (seed 001).
//!
//! `render` compiles and renders templates, `parser` checks replies,
//! `registry` loads prompt files; handler texts live here with the prompt.

mod builtins;
mod check;
mod expression;
mod parser;
pub(crate) mod placeholders;
mod registry;
pub(crate) mod render;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

pub use expression::Expression;
pub use parser::{JsonParser, ParseFailure, Parser, TagParser};
pub use registry::Registry;
pub use render::{OUT_OF_FUEL, RENDER_FUEL, Renderer};

use render::Compiled;

/// What can go wrong making, loading or rendering a prompt; each names the
/// prompt (or file) and what would fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The template does not compile.
    #[error("prompt `{prompt}`{}: {message}", line.map(|line| format!(" line {line}")).unwrap_or_default())]
    Syntax {
        /// The prompt's key.
        prompt: String,
        /// The template line, when known.
        line: Option<usize>,
        /// The compiler's message.
        message: String,
    },
    /// Rendering lacked variables the template needs.
    #[error(
        "prompt `{prompt}` needs {}; missing: {} (pass it as a step argument, `--var`, or a task argument)",
        list(needed),
        list(missing)
    )]
    MissingVariables {
        /// The prompt's key.
        prompt: String,
        /// The needed names the arguments lack.
        missing: Vec<String>,
        /// Every name the template needs.
        needed: Vec<String>,
    },
    /// Rendering failed for another reason (a filter's error, out of fuel).
    #[error("prompt `{prompt}`: {message}")]
    Render {
        /// The prompt's key.
        prompt: String,
        /// The renderer's message.
        message: String,
    },
    /// No prompt has this key.
    #[error("unknown prompt `{key}`{hint}")]
    UnknownPrompt {
        /// The key asked for.
        key: String,
        /// `; did you mean …?`, or the keys there are.
        hint: String,
    },
    /// The key's file exists but failed to load (its problem is reported by
    /// `Registry::load_all`).
    #[error("prompt `{key}` could not be loaded")]
    Broken {
        /// The key.
        key: String,
    },
    /// A prompt file is unreadable or its front matter is wrong.
    #[error("{path}: {message}")]
    File {
        /// The file, with `:line:column` when known.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A prompt's setting is wrong (a `format` schema, an `extend` path).
    #[error("prompt `{path}`: {message}")]
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
/// own template syntax. `exception` sees `error_message`, `interrupt` sees
/// `call_results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handler {
    /// The repair prompt after a reply fails to parse; sees `error_message`.
    pub exception: String,
    /// The prompt that hands tool results back; sees `call_results`.
    pub interrupt: String,
    /// The prompt that asks for a final answer when tool rounds run out.
    pub interrupt_final: String,
}

impl Handler {
    /// The seeds' default texts, in `renderer`'s syntax.
    pub fn defaults(renderer: Renderer) -> Handler {
        let (error, results) = match renderer {
            Renderer::Jinja => ("{{ error_message }}", "{{ call_results }}"),
            Renderer::Format => ("{error_message}", "{call_results}"),
        };
        Handler {
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
    /// The template text.
    pub template: String,
    /// Anything for experiment tracking (version, origin); never rendered.
    pub metadata: Map<String, Value>,
    /// How replies are parsed; `None`: by `format`, else kept as `raw`.
    pub parser: Option<Parser>,
    /// JSON schema of a structured reply (D9): sent to the provider, and the
    /// reply is validated against it when no parser is set.
    pub format: Option<Value>,
    /// Names of the tactic's tools offered on turns this prompt governs.
    pub tools: Vec<String>,
    /// Names of MCP servers whose tools are offered on those turns.
    pub mcp_servers: Vec<String>,
    /// The repair and tool-result texts.
    pub handler: Handler,
    /// The template syntax: Jinja, or Python `str.format`.
    pub renderer: Renderer,
    compiled: Compiled,
    template_vars: BTreeSet<String>,
    /// Attributes the template reads on context names (`draft.content`).
    attributes: Arc<BTreeSet<(String, String)>>,
    format_parser: Option<JsonParser>,
}

impl Prompt {
    /// A minijinja prompt; a syntax error names the prompt and the line.
    pub fn new(path: impl Into<String>, template: impl Into<String>) -> Result<Prompt> {
        Prompt::with_renderer(path, template, Renderer::Jinja)
    }

    /// A prompt with the given template syntax; a syntax error names the prompt and the line.
    pub fn with_renderer(
        path: impl Into<String>,
        template: impl Into<String>,
        renderer: Renderer,
    ) -> Result<Prompt> {
        let path = path.into();
        let template = template.into();
        let (compiled, needs) =
            render::compile(&template, renderer).map_err(|(message, line)| Error::Syntax {
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
            handler: Handler::defaults(renderer),
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

    /// Renders with strict undefined. A template may guard a name with
    /// `is defined`; a name it really uses and `args` lacks is a
    /// `MissingVariables` error naming what it needs.
    pub fn render(&self, args: &Map<String, Value>) -> Result<String> {
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
        let parsed = match (&self.parser, &self.format_parser) {
            (Some(parser), _) => parser.parse(content)?,
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
            render::compile(&template, self.renderer).map_err(|(message, line)| Error::Syntax {
                prompt: self.path.clone(),
                line,
                message,
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
        })
    }

    /// Hex SHA-256 of the template.
    pub fn sha256(&self) -> String {
        format!("{:x}", Sha256::digest(self.template.as_bytes()))
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

    fn handler_prompt(&self, suffix: &str, text: &str, keep_tools: bool) -> Prompt {
        // D2: names never grow (`a#exception`, never `a#exception#exception`).
        let base = self.path.split('#').next().unwrap_or(&self.path);
        let path = format!("{base}#{suffix}");
        let mut prompt = match self.with_template(text) {
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
        let error = prompt
            .render(&args(json!({"task": "t"})))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "prompt `writer/draft` needs `task`, `text`; missing: `text` (pass it as a step argument, `--var`, or a task argument)"
        );
        assert_eq!(
            prompt
                .render(&args(json!({"task": "t", "text": "x"})))
                .unwrap(),
            "t: x"
        );
    }

    #[test]
    fn names_with_line_breaks_keep_the_error_on_one_line() {
        // Found by fuzzing `prompt_file`: a `str.format` field may hold any
        // text, and the error listed it raw over two lines.
        let prompt = Prompt::with_renderer("p", "{a\nb} {c}", Renderer::Format).unwrap();
        let error = prompt.render(&Map::new()).unwrap_err().to_string();
        assert_eq!(
            error,
            "prompt `p` needs `a\\nb`, `c`; missing: `a\\nb`, `c` (pass it as a step argument, `--var`, or a task argument)"
        );
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
            repair
                .render(&args(json!({"error_message": "bad"})))
                .unwrap(),
            "Error: bad. Please fix."
        );
        let last = prompt.on_interrupt().on_interrupt_final();
        assert_eq!(last.path, "ask#interrupt_final");
        assert!(last.tools.is_empty());
        let ported = Prompt::with_renderer("p", "{x}", Renderer::Format).unwrap();
        assert_eq!(
            ported
                .on_interrupt()
                .render(&args(json!({"call_results": "r"})))
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
