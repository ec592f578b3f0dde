//! Reading user YAML — tactic files, prompt front matter, mock scripts, price
//! files, the user config file — into JSON values. serde-saphyr (pure Rust,
//! fuzzed, no unsafe) parses; this module adds what lllm's files need:
//!
//! - collections nested deeper than [`MAX_DEPTH`] are refused at the line and
//!   column of one past the limit, and so are documents past serde-saphyr's
//!   budgets for size and aliases (a "billion laughs" is refused, not
//!   expanded), each with a message of ours;
//! - a key repeated in one mapping is an error at the repeated key, naming
//!   the mapping's path, not the last one silently winning;
//! - numbers without a JSON form stay text, so a numeric key rejects them by
//!   name: `.inf`, `-.inf` and `.nan` become those strings instead of `null`
//!   (which means "the default"), and an integer past 64 bits its digits
//!   instead of a rounded float;
//! - YAML 1.2's scalars: `yes`, `no`, `on` and `off` are text.
//!
//! [`parse_located`] also gives where each node is written ([`Positions`],
//! `located.rs`), so a problem found after reading names its `line:column`
//! too. What the values mean is each caller's business.
//!
//! Until issue 28 this was serde_yaml_ng (libyaml) behind a hand-written
//! pre-scan bounding flow nesting, as libyaml's scanner is quadratic in it;
//! `docs/decisions.md` has the measurements behind the change.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

mod located;

pub use located::Positions;
use located::Recorder;
pub(crate) use located::{child_index, child_key, join as join_path, parent as parent_path};

/// Why YAML text could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Where, from 1, when the parser knows.
    pub location: Option<Location>,
    /// What is wrong, without the location.
    pub message: String,
}

/// A line and a column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column (in characters), from 1.
    pub column: usize,
}

impl Location {
    /// Where serde-saphyr says, when it knows.
    fn of(location: &serde_saphyr::Location) -> Option<Location> {
        let (line, column) = (location.line(), location.column());
        (line > 0).then(|| Location {
            line: usize::try_from(line).unwrap_or(usize::MAX),
            column: usize::try_from(column.max(1)).unwrap_or(usize::MAX),
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str(&self.message)?;
        if let Some(Location { line, column }) = self.location {
            write!(formatter, " at line {line} column {column}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<serde_saphyr::Error> for Error {
    fn from(error: serde_saphyr::Error) -> Error {
        let location = error.location().as_ref().and_then(Location::of);
        // An error met while an alias was replayed is that error, placed at
        // the alias.
        let mut cause = error.without_snippet();
        let mut through_alias = false;
        while let serde_saphyr::Error::AliasError { error, .. } = cause {
            cause = error.without_snippet();
            through_alias = true;
        }
        let message = match cause {
            serde_saphyr::Error::Budget { breach, .. } => {
                let message = budget_message(breach);
                if through_alias {
                    format!("{message}, repeated by aliases (`*name`)")
                } else {
                    message
                }
            }
            serde_saphyr::Error::ExternalMessage { source, .. } if too_deep(source) => {
                budget_message(&serde_saphyr::budget::BudgetBreach::Depth {
                    depth: MAX_DEPTH + 1,
                })
            }
            serde_saphyr::Error::MultipleDocuments { .. } => {
                "more than one YAML document (a second `---`); a file holds one".to_string()
            }
            _ => without_location(&error.to_string()).to_string(),
        };
        Error { location, message }
    }
}

/// Whether the parser refused flow collections nested past its bound
/// (`Budget::flow_nesting_limit`).
fn too_deep(source: &serde_saphyr::ExternalMessageSource) -> bool {
    matches!(
        source,
        serde_saphyr::ExternalMessageSource::Parser(scan)
            if matches!(scan.kind(), serde_saphyr::granit_parser::ErrorKind::RecursionLimitExceeded)
    )
}

/// What a breached budget means, in the user's words.
fn budget_message(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach;
    match breach {
        BudgetBreach::Depth { .. } => {
            format!("collections nested deeper than {MAX_DEPTH} levels")
        }
        BudgetBreach::Aliases { aliases } => {
            format!("too many aliases (`*name`): {aliases}")
        }
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "{aliases} aliases (`*name`) of {anchors} anchors: aliases that repeat the \
             document many times over are refused"
        ),
        BudgetBreach::Anchors { anchors } => format!("too many anchors (`&name`): {anchors}"),
        BudgetBreach::Nodes { nodes } => {
            format!(
                "too large a document: more than {} nodes",
                nodes.saturating_sub(1)
            )
        }
        BudgetBreach::Events { events } => format!("too large a document: {events} events"),
        BudgetBreach::ScalarBytes { total_scalar_bytes } => {
            format!("too large a document: {total_scalar_bytes} bytes of text")
        }
        BudgetBreach::MergeKeys { merge_keys } => {
            format!("too many merge keys (`<<`): {merge_keys}")
        }
        other => format!("too large a document ({other:?})"),
    }
}

/// `message` without the ` at line L, column C` serde-saphyr ends it with:
/// [`Error`] keeps the place apart.
fn without_location(message: &str) -> &str {
    let Some(cut) = message.rfind(" at line ") else {
        return message;
    };
    let place = &message[cut + " at line ".len()..];
    let numbers = place.split_once(", column ").filter(|(line, column)| {
        [line, column]
            .iter()
            .all(|number| !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()))
    });
    match numbers {
        Some(_) => &message[..cut],
        None => message,
    }
}

/// The deepest nesting of collections read, block and flow alike:
/// serde-saphyr's own default, far past what a tactic, a prompt's front
/// matter or a JSON schema in one needs (serde_yaml_ng allowed 128 flow
/// levels). Reading recurses once a level, hence the reading thread's own 16 MiB stack.
pub const MAX_DEPTH: usize = 64;

/// The stack of the thread that reads a document (see [`Reader::read`]).
const READING_STACK: usize = 16 << 20;

/// How serde-saphyr reads user YAML: the module documentation's rules.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // The scanner, which reads ahead of the depth check, refuses flow
        // nesting past the limit too: at its default (256) it named a
        // bracket far past the first one too deep.
        budget: serde_saphyr::budget! { max_depth: MAX_DEPTH, flow_nesting_limit: MAX_DEPTH },
        // A repeated key is refused by `Reader`, with lllm's message.
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        // YAML 1.2: `yes`, `no`, `on`, `off` are text.
        strict_booleans: true,
        // A key `~` or `null` is that text, as JSON keys are strings.
        null_as_string: true,
        with_snippet: false,
    }
}

/// Parses YAML into a JSON value (see the module documentation for what
/// it does beyond `serde_saphyr::from_str::<Value>`).
/// A leading byte order mark is dropped (`file::without_bom`).
pub fn parse(text: &str) -> Result<Value, Error> {
    let text = crate::file::without_bom(text);
    Reader::new(text, None).read()
}

/// [`parse`], with where each node is written ([`Positions`]): what a
/// problem found after reading names as `line:column`.
pub fn parse_located(text: &str) -> Result<(Value, Positions), Error> {
    let text = crate::file::without_bom(text);
    let mut recorder = Recorder::new(text.len());
    let value = Reader::new(text, Some(&mut recorder)).read()?;
    Ok((value, recorder.finish()))
}

/// A node as serde-saphyr gives it, each child with where it is written.
enum Node {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(String),
    List(Vec<Spanned<Node>>),
    Mapping(Vec<(Spanned<String>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Node, E> {
        Ok(Node::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Node, E> {
        Ok(Node::Signed(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Node, E> {
        Ok(Node::Unsigned(value))
    }

    fn visit_i128<E>(self, value: i128) -> Result<Node, E> {
        Ok(Node::Text(value.to_string()))
    }

    fn visit_u128<E>(self, value: u128) -> Result<Node, E> {
        Ok(Node::Text(value.to_string()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Node, E> {
        Ok(Node::Float(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Node, E> {
        Ok(Node::Text(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Node, E> {
        Ok(Node::Text(value))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Node, A::Error> {
        let mut pairs = Vec::new();
        while let Some(pair) = entries.next_entry()? {
            pairs.push(pair);
        }
        Ok(Node::Mapping(pairs))
    }
}

/// Turns the nodes of one document into a JSON value: refuses repeated
/// keys, keeps integers past 64 bits as their digits, and records where
/// each node is when given a recorder.
struct Reader<'t, 'r> {
    text: &'t str,
    recorder: Option<&'r mut Recorder>,
    /// The path of the node being turned, for a repeated key's message.
    path: Vec<Step>,
}

/// One step of [`Reader::path`].
enum Step {
    Key(String),
    Index(usize),
}

impl<'t, 'r> Reader<'t, 'r> {
    fn new(text: &'t str, recorder: Option<&'r mut Recorder>) -> Reader<'t, 'r> {
        Reader {
            text,
            recorder,
            path: Vec::new(),
        }
    }

    fn read(mut self) -> Result<Value, Error> {
        let text = self.text;
        // Reading recurses once per level, and a debug build's frames take
        // ~35 KB a level: more than a 2 MiB thread (a test's, a tokio
        // worker's) has at [`MAX_DEPTH`]. A thread of its own costs ~20-30 µs.
        let root = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("yaml".into())
                .stack_size(READING_STACK)
                .spawn_scoped(scope, || {
                    serde_saphyr::from_str_with_options::<Spanned<Node>>(text, options())
                })
                .map(|reading| reading.join())
        });
        let root = match root {
            Ok(Ok(root)) => root?,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(error) => {
                return Err(Error {
                    location: None,
                    message: format!("cannot start a thread to read YAML: {error}"),
                });
            }
        };
        // The root is a document with nothing in it when there is no node.
        let root = match root.value {
            Node::Mapping(pairs) if pairs.is_empty() && self.text.trim().is_empty() => Node::Null,
            node => node,
        };
        self.value(root, None)
    }
}

impl Reader<'_, '_> {
    /// The JSON value of `node`, written at `at`.
    fn value(&mut self, node: Node, at: Option<&serde_saphyr::Location>) -> Result<Value, Error> {
        Ok(match node {
            Node::Null => Value::Null,
            Node::Bool(value) => Value::Bool(value),
            Node::Unsigned(value) => Value::Number(value.into()),
            Node::Signed(value) => Value::Number(value.into()),
            Node::Float(value) => self.float(value, at),
            Node::Text(text) => Value::String(text),
            Node::List(items) => {
                let mut values = Vec::with_capacity(items.len());
                for (index, item) in items.into_iter().enumerate() {
                    self.path.push(Step::Index(index));
                    let back = self
                        .recorder
                        .as_deref_mut()
                        .map(|recorder| recorder.enter_item(index, Location::of(&item.defined)));
                    values.push(self.value(item.value, Some(&item.defined))?);
                    self.leave(back);
                    self.path.pop();
                }
                Value::Array(values)
            }
            Node::Mapping(pairs) => {
                let mut map = Map::with_capacity(pairs.len());
                for (key, value) in pairs {
                    if map.contains_key(&key.value) {
                        return Err(self.repeated(&key));
                    }
                    let back = self
                        .recorder
                        .as_deref_mut()
                        .map(|recorder| recorder.enter_key(&key.value, Location::of(&key.defined)));
                    self.path.push(Step::Key(key.value));
                    let value = self.value(value.value, Some(&value.defined))?;
                    self.leave(back);
                    if let Some(Step::Key(key)) = self.path.pop() {
                        map.insert(key, value);
                    }
                }
                Value::Object(map)
            }
        })
    }

    /// Back at the node around the one just turned.
    fn leave(&mut self, back: Option<usize>) {
        if let (Some(recorder), Some(length)) = (self.recorder.as_deref_mut(), back) {
            recorder.leave(length);
        }
    }

    /// A float, or the digits of an integer past 64 bits (which serde-saphyr
    /// reads as the nearest float) as written.
    fn float(&self, value: f64, at: Option<&serde_saphyr::Location>) -> Value {
        let written = at.and_then(|at| {
            let span = at.span();
            let start = usize::try_from(span.byte_offset()?).ok()?;
            let length = usize::try_from(span.byte_len()?).ok()?;
            self.text.get(start..start.checked_add(length)?)
        });
        if let Some(written) = written {
            let digits = written.strip_prefix(['-', '+']).unwrap_or(written);
            if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
                return Value::String(written.to_string());
            }
        }
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }

    /// The error for `key`, repeated in the mapping at the current path.
    fn repeated(&self, key: &Spanned<String>) -> Error {
        let mut path = String::new();
        for step in &self.path {
            match step {
                Step::Key(key) => path = child_key(&path, key),
                Step::Index(index) => path = child_index(&path, *index),
            }
        }
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}: ")
        };
        Error {
            location: Location::of(&key.defined),
            message: format!(
                "{prefix}duplicate key `{}`; a key may appear once in a mapping",
                key.value
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_without_a_json_form_stay_text() {
        let value = parse(
            "a: .inf\nb: -.inf\nc: .nan\nd: 1e20\ne: [1, -2, 2.5, x, null, true]\nf: {g: .NaN}\n\
             h: 99999999999999999999999999999\ni: -99999999999999999999999999999\n",
        )
        .unwrap();
        assert_eq!(
            value,
            json!({"a": ".inf", "b": "-.inf", "c": ".nan", "d": 1e20,
                   "e": [1, -2, 2.5, "x", null, true], "f": {"g": ".nan"},
                   "h": "99999999999999999999999999999",
                   "i": "-99999999999999999999999999999"})
        );
        // Past 128 bits too; a quoted number and a float written with an
        // exponent stay what they are.
        let value = parse(
            "a: 123456789012345678901234567890123456789012345
b: '1'
c: 1.5e300
",
        )
        .unwrap();
        assert_eq!(
            value,
            json!({"a": "123456789012345678901234567890123456789012345", "b": "1", "c": 1.5e300})
        );
        // YAML 1.2's scalars, as serde_yaml_ng read them: `yes` and `on` are
        // text, `~` is null, hexadecimal and octal are numbers.
        assert_eq!(
            parse("x: 1\ny: 'two'\nz:\n  - {a: 1.5, b: ~}\nw: [yes, no, on, off, True]\nv: [0x1F, 0o17]\n")
                .unwrap(),
            json!({"x": 1, "y": "two", "z": [{"a": 1.5, "b": null}],
                   "w": ["yes", "no", "on", "off", true], "v": [31, 15]})
        );
    }

    #[test]
    fn the_located_reading_reads_what_parse_reads() {
        for text in [
            "a: .inf\nb: [1, x, {c: ~}]\nd: 99999999999999999999999999999\n",
            "\u{feff}a: 1\n",
            "t: |\n  block\n'q': \"esc\\t\"\n",
            "a: &x {k: v}\nb: *x\n",
            "- 1\n- [2, 3]\n",
            "",
            "a: [1, 2",
            "a: 1\nb: 2\na: 3\n",
            "a: {b: 1, b: 2}\n",
        ] {
            assert_eq!(
                parse_located(text).map(|(value, _)| value),
                parse(text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_byte_order_mark_is_no_document() {
        // serde_yaml_ng read it as a second document (issue 26).
        assert_eq!(
            parse("\u{feff}a: 1\nb: [x]\n").unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(parse("\u{feff}").unwrap(), Value::Null);
    }

    #[track_caller]
    fn error_case(text: &str, expected: &str) {
        assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text:?}");
    }

    #[test]
    fn errors_carry_the_place() {
        // At the bracket left open (serde_yaml_ng named the end of the text).
        error_case("a: [1, 2", "unclosed bracket '[' at line 1 column 4");
        error_case(
            "a: 1\nb: 2\na: 3\n",
            "duplicate key `a`; a key may appear once in a mapping at line 3 column 1",
        );
        error_case(
            "agents:\n  - {name: x, model: y, name: z}\n",
            "agents[0]: duplicate key `name`; a key may appear once in a mapping at line 2 column 25",
        );
        error_case(
            "a:\n  b: 1\n  c:\n    d: 1\n    d: 2\n",
            "a.c: duplicate key `d`; a key may appear once in a mapping at line 5 column 5",
        );
        // The same key in two mappings is no repeat.
        assert!(parse("- {a: 1}\n- {a: 2}\n").is_ok());
        error_case(
            "a: 1\n---\nb: 2\n",
            "more than one YAML document (a second `---`); a file holds one at line 3 column 1",
        );
    }

    #[test]
    fn nesting_past_the_limit_is_refused_where_it_starts() {
        // The root mapping is the first level: 63 brackets fit.
        let nested = |depth: usize| format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        assert!(parse(&nested(MAX_DEPTH - 1)).is_ok());
        let too_deep = format!("collections nested deeper than {MAX_DEPTH} levels");
        error_case(
            &nested(MAX_DEPTH),
            &format!("{too_deep} at line 1 column {}", MAX_DEPTH + 3),
        );
        // Far past it, and in block mappings.
        assert!(parse(&nested(200_000)).unwrap_err().message == too_deep);
        let block: String = (0..=MAX_DEPTH)
            .map(|level| format!("{}k:\n", " ".repeat(level)))
            .collect();
        error_case(
            &block,
            &format!(
                "{too_deep} at line {} column {}",
                MAX_DEPTH + 1,
                MAX_DEPTH + 1
            ),
        );
    }

    #[test]
    fn aliases_that_repeat_the_document_are_refused() {
        // A "billion laughs": nine levels of ten aliases each.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let error = parse(&text).unwrap_err();
        assert!(error.message.contains("aliases"), "{error}");
        assert!(error.location.is_some(), "{error}");
        // A merge key merges (serde_yaml_ng kept `<<` as a key); the
        // mapping's own entries win.
        assert_eq!(
            parse("base: &base {model: m, rpm: 1}\np:\n  <<: *base\n  rpm: 2\n").unwrap(),
            json!({"base": {"model": "m", "rpm": 1}, "p": {"rpm": 2, "model": "m"}})
        );
        // A few aliases read as their anchors.
        assert_eq!(
            parse("a: &x {k: v}\nb: *x\n").unwrap(),
            json!({"a": {"k": "v"}, "b": {"k": "v"}})
        );
    }
}
