//! Template renderers: minijinja with strict undefined (the default), and
//! Python `str.format` syntax for prompts ported from LLLM. A template is
//! compiled once, when its prompt is made; rendering only walks it.
//!
//! A program adds its own renderers through the [`Render`] trait
//! (`lllm::Registry::renderer`); their templates are opaque to us: not
//! checked before a run, and their variables unknown.

use std::collections::BTreeSet;
use std::sync::Arc;

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

use crate::suggest::printable;

/// A template syntax a prompt file picks with `renderer: NAME` in its front
/// matter (registered with `lllm::Registry::renderer`). `Err` is the problem,
/// reported like a built-in renderer's (`prompt `KEY`: …`).
///
/// ```
/// use lllm::prompt::Render;
/// use serde_json::{Map, Value, json};
///
/// /// `$name` placeholders.
/// struct Dollar;
/// impl Render for Dollar {
///     fn render(&self, template: &str, args: &Map<String, Value>) -> Result<String, String> {
///         let mut text = template.to_string();
///         for (name, value) in args {
///             let value = value.as_str().map_or_else(|| value.to_string(), str::to_string);
///             text = text.replace(&format!("${name}"), &value);
///         }
///         match text.find('$') {
///             Some(at) => Err(format!("no value for the placeholder at byte {at}")),
///             None => Ok(text),
///         }
///     }
/// }
/// let args = json!({"who": "owls"}).as_object().cloned().unwrap();
/// assert_eq!(Dollar.render("Why do $who hunt?", &args).unwrap(), "Why do owls hunt?");
/// ```
pub trait Render: Send + Sync + 'static {
    /// Renders `template` with `args` (the prompt's arguments).
    fn render(&self, template: &str, args: &Map<String, Value>) -> Result<String, String>;
}

/// The syntax of a prompt's template.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Renderer {
    /// minijinja with strict undefined (the default).
    #[default]
    /// minijinja, with strict undefined: `{{ name }}` (the default).
    Jinja,
    /// Python `str.format` (`{var}`, `{{` / `}}` escapes), for ported prompts.
    Format,
    /// A renderer registered by name.
    Custom(NamedRenderer),
}

impl Renderer {
    /// The name front matter gives it: `jinja`, `format` or the registered name.
    pub fn name(&self) -> &str {
        match self {
            Renderer::Jinja => "jinja",
            Renderer::Format => "format",
            Renderer::Custom(named) => &named.name,
        }
    }
}

/// A renderer registered by name, as a prompt holds it.
#[derive(Clone)]
pub struct NamedRenderer {
    /// The name the prompt's front matter gives.
    pub name: String,
    renderer: Arc<dyn Render>,
}

impl NamedRenderer {
    /// `renderer` under `name`.
    pub fn new(name: impl Into<String>, renderer: Arc<dyn Render>) -> NamedRenderer {
        NamedRenderer {
            name: name.into(),
            renderer,
        }
    }
}

impl std::fmt::Debug for NamedRenderer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "NamedRenderer({})", self.name)
    }
}

impl PartialEq for NamedRenderer {
    fn eq(&self, other: &NamedRenderer) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.renderer, &other.renderer)
    }
}

/// A compiled template. Cloning shares the compiled form.
#[derive(Clone)]
pub(crate) enum Compiled {
    Jinja(Arc<Environment<'static>>),
    /// A Jinja template without a single `{`: its text, rendered once.
    Text(Arc<str>),
    Format(Arc<Vec<Segment>>),
    /// A registered renderer and the template it renders.
    Custom(Arc<dyn Render>, Arc<str>),
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compiled::Jinja(_) => f.write_str("Compiled::Jinja"),
            Compiled::Text(_) => f.write_str("Compiled::Text"),
            Compiled::Format(segments) => {
                write!(f, "Compiled::Format({} segments)", segments.len())
            }
            Compiled::Custom(..) => f.write_str("Compiled::Custom"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Segment {
    Literal(String),
    Field { name: String, path: Vec<Accessor> },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Accessor {
    Key(String),
    Index(usize),
}

const TEMPLATE_NAME: &str = "prompt";

/// The work one render (or one expression) may do, in minijinja fuel: about
/// one unit per instruction and per 64 bytes of data it makes. A template
/// that loops without end or builds an enormous value fails with
/// `OUT_OF_FUEL` instead of hanging. Measured: a 1 MB task inserted costs
/// 16k, a loop over 10,000 items with two filters each 250k, a prompt with 50
/// few-shot examples 1.2k; the limit leaves 40 times the largest of those
/// (and stops at ~640 MB of text, far past any model's context window).
pub const RENDER_FUEL: u64 = 10_000_000;

/// The error when `RENDER_FUEL` runs out.
pub const OUT_OF_FUEL: &str = "the template did more work than one render may (10 million steps \
     or ~640 MB of text): a loop that does not end, or a value far too large";

/// A minijinja environment as every template and expression is rendered in:
/// strict undefined, bounded by `RENDER_FUEL`.
pub(crate) fn environment() -> Environment<'static> {
    let mut environment = Environment::new();
    environment.set_undefined_behavior(UndefinedBehavior::Strict);
    environment.set_fuel(Some(RENDER_FUEL));
    environment
}

/// A minijinja error as one line: its detail (or the whole text), or
/// `OUT_OF_FUEL`.
pub(crate) fn error_text(error: &minijinja::Error) -> String {
    if error.kind() == minijinja::ErrorKind::OutOfFuel {
        return OUT_OF_FUEL.to_string();
    }
    error
        .detail()
        .map_or_else(|| error.to_string(), str::to_string)
}

/// What compiling a template found: the top-level names it needs and the
/// attributes it reads on them (`draft.content` → (`draft`, `content`)).
#[derive(Debug, Default, Clone)]
pub(crate) struct Needs {
    pub variables: BTreeSet<String>,
    pub attributes: BTreeSet<(String, String)>,
}

/// Compiles `template` and checks it (`check.rs`); `Err` carries the message
/// (every problem, `; `-separated) and, when known, the line of the first.
pub(crate) fn compile(
    template: &str,
    renderer: &Renderer,
) -> Result<(Compiled, Needs), (String, Option<usize>)> {
    match renderer {
        Renderer::Custom(named) => Ok((
            Compiled::Custom(named.renderer.clone(), template.into()),
            Needs::default(),
        )),
        Renderer::Jinja => {
            if let Some((message, line)) = super::check::overlong_chain(template, false) {
                return Err((message, Some(line)));
            }
            let mut environment = environment();
            environment
                .add_template_owned(TEMPLATE_NAME, template.to_string())
                .map_err(|error| {
                    (
                        error.detail().unwrap_or("syntax error").to_string(),
                        error.line(),
                    )
                })?;
            let analysis = super::check::template(template).map_err(|error| {
                (
                    error.detail().unwrap_or("syntax error").to_string(),
                    error.line(),
                )
            })?;
            if let Some((_, line)) = analysis.problems.first() {
                let messages: Vec<&str> = analysis
                    .problems
                    .iter()
                    .map(|(message, _)| message.as_str())
                    .collect();
                return Err((messages.join("; "), Some(*line).filter(|line| *line > 0)));
            }
            let needs = Needs {
                variables: analysis.required,
                attributes: analysis.attributes,
            };
            let compiled = Compiled::Jinja(Arc::new(environment));
            if !template.contains('{') {
                // No expression, statement or comment: every render gives the
                // same text (minijinja's own, trailing-newline rule included).
                let text = render(&compiled, &Map::new()).map_err(|message| (message, None))?;
                return Ok((Compiled::Text(text.into()), needs));
            }
            Ok((compiled, needs))
        }
        Renderer::Format => {
            let segments = parse_format(template).map_err(|message| (message, None))?;
            let mut needs = Needs::default();
            for segment in &segments {
                if let Segment::Field { name, path } = segment {
                    needs.variables.insert(name.clone());
                    if let Some(Accessor::Key(key)) = path.first() {
                        needs.attributes.insert((name.clone(), key.clone()));
                    }
                }
            }
            Ok((Compiled::Format(Arc::new(segments)), needs))
        }
    }
}

/// Renders a compiled template; `Err` is minijinja's message.
pub(crate) fn render(compiled: &Compiled, args: &Map<String, Value>) -> Result<String, String> {
    match compiled {
        Compiled::Jinja(environment) => {
            let template = environment
                .get_template(TEMPLATE_NAME)
                .map_err(|error| error.to_string())?;
            template
                .render(minijinja::Value::from(minijinja::value::Serde(args)))
                .map_err(|error| error_text(&error))
        }
        Compiled::Text(text) => Ok(text.to_string()),
        Compiled::Custom(renderer, template) => renderer.render(template, args),
        Compiled::Format(segments) => {
            let mut out = String::new();
            for segment in segments.iter() {
                match segment {
                    Segment::Literal(text) => out.push_str(text),
                    Segment::Field { name, path } => {
                        let mut value = args
                            .get(name)
                            .ok_or_else(|| format!("undefined value `{}`", printable(name)))?;
                        for accessor in path {
                            value = match (accessor, value) {
                                (Accessor::Key(key), Value::Object(map)) => map.get(key),
                                (Accessor::Index(index), Value::Array(items)) => items.get(*index),
                                (Accessor::Key(key), Value::Array(items)) => {
                                    key.parse::<usize>().ok().and_then(|index| items.get(index))
                                }
                                _ => None,
                            }
                            .ok_or_else(|| {
                                format!(
                                    "`{}` has no `{}`",
                                    printable(name),
                                    printable(&describe(path))
                                )
                            })?;
                        }
                        match value {
                            Value::String(text) => out.push_str(text),
                            other => out.push_str(&other.to_string()),
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

fn describe(path: &[Accessor]) -> String {
    path.iter()
        .map(|accessor| match accessor {
            Accessor::Key(key) => format!(".{key}"),
            Accessor::Index(index) => format!("[{index}]"),
        })
        .collect()
}

/// Python `str.format` fields: `{name}`, `{name.attr}`, `{name[key]}`,
/// `{name[0]}`, an ignored `!conversion` / `:spec`, and `{{` / `}}` escapes.
fn parse_format(template: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((position, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|(_, next)| *next) == Some('{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek().map(|(_, next)| *next) == Some('}') => {
                chars.next();
                literal.push('}');
            }
            '}' => {
                return Err(format!(
                    "single `}}` at byte {position}; write `}}}}` for a literal brace"
                ));
            }
            '{' => {
                let mut field = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    field.push(c);
                }
                if !closed {
                    return Err(format!(
                        "unclosed `{{` at byte {position}; write `{{{{` for a literal brace"
                    ));
                }
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(parse_field(&field, position)?);
            }
            other => literal.push(other),
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

fn parse_field(field: &str, position: usize) -> Result<Segment, String> {
    let field = field.split(['!', ':']).next().unwrap_or_default().trim();
    let shown = printable(field);
    let name_end = field.find(['.', '[']).unwrap_or(field.len());
    let name = &field[..name_end];
    if name.is_empty() {
        return Err(format!(
            "empty or positional field `{{{shown}}}` at byte {position}; name it"
        ));
    }
    let mut path = Vec::new();
    let mut rest = &field[name_end..];
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            path.push(Accessor::Key(after[..end].to_string()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| format!("unclosed `[` in field `{{{shown}}}`"))?;
            let key = &after[..end];
            path.push(match key.parse::<usize>() {
                Ok(index) => Accessor::Index(index),
                Err(_) => Accessor::Key(key.to_string()),
            });
            rest = &after[end + 1..];
        } else {
            return Err(format!(
                "cannot read field `{{{shown}}}` at byte {position}"
            ));
        }
    }
    Ok(Segment::Field {
        name: name.to_string(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[track_caller]
    fn vars_case(template: &str, renderer: Renderer, expected: &[&str]) {
        let (_, needs) = compile(template, &renderer).unwrap();
        let variables = needs.variables;
        let expected: BTreeSet<String> = expected.iter().map(|name| name.to_string()).collect();
        assert_eq!(variables, expected, "{template}");
    }

    #[test]
    fn template_variables_are_the_top_level_names_a_template_needs() {
        vars_case("Hello {{ name }}", Renderer::Jinja, &["name"]);
        vars_case(
            "{{ draft.content }} {{ items[0] | upper }}",
            Renderer::Jinja,
            &["draft", "items"],
        );
        vars_case(
            "{% for x in xs %}{{ x }}{{ loop.index }}{% endfor %}",
            Renderer::Jinja,
            &["xs"],
        );
        vars_case("{% set y = 1 %}{{ y }}{{ z }}", Renderer::Jinja, &["z"]);
        vars_case("no variables", Renderer::Jinja, &[]);
        vars_case(
            "{topic} for {audience.name} {items[0]} {{literal}}",
            Renderer::Format,
            &["topic", "audience", "items"],
        );
        vars_case("{x:>10} {y!r}", Renderer::Format, &["x", "y"]);
    }

    #[track_caller]
    fn render_case(template: &str, renderer: Renderer, values: Value, expected: &str) {
        let (compiled, _) = compile(template, &renderer).unwrap();
        assert_eq!(render(&compiled, &args(values)).unwrap(), expected);
    }

    #[test]
    fn plain_text_renders_as_minijinja_would_without_being_walked() {
        for template in ["Answer in one word.", "two lines\nend\n", "", "50% off\r\n"] {
            let (compiled, _) = compile(template, &Renderer::Jinja).unwrap();
            assert!(matches!(compiled, Compiled::Text(_)), "{template:?}");
            let mut environment = Environment::new();
            environment.add_template("t", template).unwrap();
            let expected = environment.get_template("t").unwrap().render(()).unwrap();
            assert_eq!(render(&compiled, &Map::new()).unwrap(), expected);
        }
        let (compiled, _) = compile("{# note #}text", &Renderer::Jinja).unwrap();
        assert!(matches!(compiled, Compiled::Jinja(_)));
    }

    #[test]
    fn renders_nested_values_in_both_syntaxes() {
        let values =
            json!({"draft": {"content": "text", "parsed": {"n": 2}}, "xs": ["a", "b"], "n": 3});
        render_case(
            "{{ draft.content }} {{ draft.parsed.n }} {{ xs[1] }}",
            Renderer::Jinja,
            values.clone(),
            "text 2 b",
        );
        render_case(
            "{draft.content} {draft[parsed][n]} {xs[1]} {n} {{x}}",
            Renderer::Format,
            values.clone(),
            "text 2 b 3 {x}",
        );
        render_case("{draft.parsed}", Renderer::Format, values, "{\"n\":2}");
    }

    #[test]
    fn runaway_templates_stop_at_the_render_limit() {
        for template in [
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "{% set s = namespace(t='x') %}{% for i in range(60) %}{% set s.t = s.t ~ s.t %}{% endfor %}{{ s.t | length }}",
            "{% macro grow(n) %}{{ n }}{{ grow(n) }}{{ grow(n) }}{% endmacro %}{{ grow(1) }}",
        ] {
            let (compiled, _) = compile(template, &Renderer::Jinja).unwrap();
            let error = render(&compiled, &Map::new()).unwrap_err();
            assert!(
                error == OUT_OF_FUEL || error.contains("recursion"),
                "{template}: {error}"
            );
        }
        // A realistic loop is far inside the limit.
        let items: Vec<Value> = (0..10_000)
            .map(|index| json!({"name": format!("item {index}"), "score": index}))
            .collect();
        let (compiled, _) = compile(
            "{% for item in items %}{{ loop.index }}: {{ item.name | upper }} {{ item.score }}\n{% endfor %}",
            &Renderer::Jinja,
        )
        .unwrap();
        assert!(render(&compiled, &args(json!({"items": items}))).is_ok());
    }

    #[test]
    fn a_tag_chaining_thousands_of_operators_is_an_error_not_a_stack_overflow() {
        use super::super::check::MAX_CHAIN;
        // Each of these overflowed minijinja's compiler (`as_const`) at
        // 10,000-20,000 operators: the process died of SIGSEGV.
        for operator in [
            " + 1",
            " ~ 'a'",
            " and 1",
            " if 1 else 1",
            " < 1",
            "|upper",
            ".a",
            "[0]",
            "(1)",
        ] {
            let chain = format!("intro\n{{{{ x{} }}}}", operator.repeat(20_000));
            let (message, line) = compile(&chain, &Renderer::Jinja).unwrap_err();
            assert!(
                message.starts_with(&format!("more than {MAX_CHAIN} operators")),
                "{operator}: {message}"
            );
            assert_eq!(line, Some(2), "{operator}");
            let statement = format!("{{% if 1{} %}}x{{% endif %}}", " or 1".repeat(20_000));
            assert!(compile(&statement, &Renderer::Jinja).is_err());
        }
        // At the limit, on a test's 2 MiB thread in a debug build: compiled and
        // rendered. The count starts again at each tag.
        let at_limit = format!("{{{{ 1{} }}}}", " + 1".repeat(MAX_CHAIN));
        let (compiled, _) = compile(&format!("{at_limit} {at_limit}"), &Renderer::Jinja).unwrap();
        let total = (MAX_CHAIN + 1).to_string();
        assert_eq!(
            render(&compiled, &Map::new()).unwrap(),
            format!("{total} {total}")
        );
        // A long literal is wide, not deep: its commas and colons do not count.
        let items: Vec<String> = (0..5_000).map(|n| format!("'k{n}': {n}")).collect();
        let wide = format!("{{{{ {{{}}} | length }}}}", items.join(", "));
        let (compiled, _) = compile(&wide, &Renderer::Jinja).unwrap();
        assert_eq!(render(&compiled, &Map::new()).unwrap(), "5000");
        // A standalone expression (`if:`, `until:`) has the same limit.
        let expression = format!("x{}", " and x".repeat(20_000));
        let error = super::super::Expression::new(&expression, "step `a`: if")
            .err()
            .unwrap();
        assert!(error.starts_with("step `a`: if: more than"), "{error}");
    }

    #[test]
    fn missing_values_and_bad_templates_are_errors() {
        let (compiled, _) = compile("{{ missing }}", &Renderer::Jinja).unwrap();
        assert!(render(&compiled, &Map::new()).is_err(), "strict undefined");
        let (compiled, _) = compile("{{ a.b }}", &Renderer::Jinja).unwrap();
        assert!(render(&compiled, &args(json!({"a": {}}))).is_err());
        let (compiled, _) = compile("{a.b}", &Renderer::Format).unwrap();
        assert!(render(&compiled, &args(json!({"a": {}}))).is_err());
        assert!(compile("{{ unclosed", &Renderer::Jinja).is_err());
        assert!(compile("{unclosed", &Renderer::Format).is_err());
        assert!(compile("single } brace", &Renderer::Format).is_err());
        assert!(compile("{}", &Renderer::Format).is_err());
        let (_, line) = compile("ok\nok\n{% if %}", &Renderer::Jinja).unwrap_err();
        assert_eq!(line, Some(3));
    }
}
