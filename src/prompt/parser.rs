//! Reply parsers: the tag parser (xml tags, markdown fences, signal tags) and
//! the JSON parser with optional JSON-schema validation (also used for a
//! prompt's `format`, D9). A parse failure's text goes to the model in the
//! exception handler, so it says what to fix.
//!
//! A program adds its own parsers through the [`Parse`] trait (registered by
//! name with `lllm::Registry::parser`); the built-ins implement it too.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Why a reply was rejected; shown to the model as `error_message`.
///
/// Made from text, so `?` works on `Option::ok_or("…")` in a parser:
///
/// ```
/// use lllm::prompt::ParseFailure;
///
/// fn first_word(reply: &str) -> Result<&str, ParseFailure> {
///     Ok(reply.split_whitespace().next().ok_or("the reply is empty")?)
/// }
/// assert_eq!(first_word("  ").unwrap_err().to_string(), "the reply is empty");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ParseFailure(pub String);

impl From<&str> for ParseFailure {
    fn from(text: &str) -> ParseFailure {
        ParseFailure(text.to_string())
    }
}

impl From<String> for ParseFailure {
    fn from(text: String) -> ParseFailure {
        ParseFailure(text)
    }
}

/// A reply parser a prompt names with `parser: NAME` in its front matter
/// (registered with `lllm::Registry::parser`). `Ok` becomes the message's
/// `parsed` (an object, or `{raw, value}` for any other JSON); `Err` goes to
/// the repair loop, its text shown to the model as built-in parsers' are.
///
/// `args` are the call's parser arguments (empty unless the call sets some).
/// Any `Fn(&str) -> Result<Value, ParseFailure>` is a parser:
///
/// ```
/// use lllm::prompt::{Parse, ParseFailure};
/// use serde_json::{Map, Value, json};
///
/// /// `<verdict>ok</verdict>` → `{"verdict": "ok"}`.
/// fn verdict(reply: &str) -> Result<Value, ParseFailure> {
///     let (_, rest) = reply.split_once("<verdict>").ok_or("no <verdict> tag")?;
///     let (verdict, _) = rest.split_once("</verdict>").ok_or("unclosed <verdict>")?;
///     Ok(json!({ "verdict": verdict.trim() }))
/// }
///
/// let parsed = verdict.parse("<verdict> ok </verdict>", &Map::new()).unwrap();
/// assert_eq!(parsed["verdict"], "ok");
/// assert_eq!(verdict.parse("fine", &Map::new()).unwrap_err().to_string(), "no <verdict> tag");
///
/// /// A parser with state and per-call arguments implements the trait.
/// struct AtMost(usize);
/// impl Parse for AtMost {
///     fn parse(&self, reply: &str, args: &Map<String, Value>) -> Result<Value, ParseFailure> {
///         let limit = args.get("words").and_then(Value::as_u64).map_or(self.0, |n| n as usize);
///         let words = reply.split_whitespace().count();
///         if words > limit {
///             return Err(format!("{words} words; write at most {limit}").into());
///         }
///         Ok(json!({ "words": words }))
///     }
/// }
/// assert!(AtMost(3).parse("one two three four", &Map::new()).is_err());
/// ```
pub trait Parse: Send + Sync + 'static {
    /// Parses `reply` (the model's text) given the call's parser `args`.
    fn parse(&self, reply: &str, args: &Map<String, Value>) -> Result<Value, ParseFailure>;
}

impl<F> Parse for F
where
    F: Fn(&str) -> Result<Value, ParseFailure> + Send + Sync + 'static,
{
    fn parse(&self, reply: &str, _args: &Map<String, Value>) -> Result<Value, ParseFailure> {
        self(reply)
    }
}

/// A parser registered by name, as a prompt holds it.
#[derive(Clone)]
pub struct NamedParser {
    /// The name the prompt's front matter gives.
    pub name: String,
    parser: Arc<dyn Parse>,
}

impl NamedParser {
    /// `parser` under `name`.
    pub fn new(name: impl Into<String>, parser: Arc<dyn Parse>) -> NamedParser {
        NamedParser {
            name: name.into(),
            parser,
        }
    }
}

impl std::fmt::Debug for NamedParser {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "NamedParser({})", self.name)
    }
}

impl PartialEq for NamedParser {
    fn eq(&self, other: &NamedParser) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.parser, &other.parser)
    }
}

/// Extracts XML tags, fenced blocks and signal tags from a reply (D11).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// Extracts tags from a reply: `<tag>…</tag>`, ```` ```lang ```` fences and bare signal words (D11).
pub struct TagParser {
    /// `<tag>…</tag>` blocks extracted when present.
    pub xml_tags: Vec<String>,
    /// ```` ```tag ```` fenced blocks extracted when present.
    pub md_tags: Vec<String>,
    /// `<TAG>` markers reported as present or not.
    pub signal_tags: Vec<String>,
    /// XML tags the reply must have.
    pub required_xml_tags: Vec<String>,
    /// Fenced blocks the reply must have.
    pub required_md_tags: Vec<String>,
}

impl TagParser {
    /// `{raw, xml_tags: {tag: [..]}, md_tags: {tag: [..]}, signal_tags: {TAG: bool}}`.
    /// Listed tags are extracted when present; `required_*` tags must be (D11).
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        let mut errors = Vec::new();
        let mut xml = Map::new();
        for tag in self.xml_tags.iter().chain(&self.required_xml_tags) {
            if xml.contains_key(tag) {
                continue;
            }
            let (blocks, placeholders) = answers(xml_blocks(content, tag));
            if blocks.is_empty() && self.required_xml_tags.contains(tag) {
                // Issue 27: the hint holds no complete tag, so a model
                // that echoes it gives no parse.
                errors.push(if placeholders {
                    format!(
                        "the <{tag}> tag holds only a placeholder: write the actual answer inside it"
                    )
                } else {
                    format!(
                        "missing required XML tag `{tag}`: put the answer after an opening <{tag}> tag and close it with the matching closing tag"
                    )
                });
            }
            xml.insert(tag.clone(), json!(blocks));
        }
        let mut markdown = Map::new();
        for tag in self.md_tags.iter().chain(&self.required_md_tags) {
            if markdown.contains_key(tag) {
                continue;
            }
            let (blocks, placeholders) = answers(md_blocks(content, tag));
            if blocks.is_empty() && self.required_md_tags.contains(tag) {
                errors.push(if placeholders {
                    format!(
                        "the `{tag}` block holds only a placeholder: write the actual answer inside it"
                    )
                } else {
                    format!(
                        "missing required markdown block `{tag}`: put it in a fenced code block whose opening fence line names the language `{tag}`"
                    )
                });
            }
            markdown.insert(tag.clone(), json!(blocks));
        }
        let signals: Map<String, Value> = self
            .signal_tags
            .iter()
            .map(|tag| {
                (
                    tag.clone(),
                    Value::Bool(content.contains(&format!("<{tag}>"))),
                )
            })
            .collect();
        if !errors.is_empty() {
            return Err(ParseFailure(format!(
                "parsing errors:\n{}",
                errors.join("\n")
            )));
        }
        Ok(json!({"raw": content, "xml_tags": xml, "md_tags": markdown, "signal_tags": signals}))
    }
}

impl Parse for TagParser {
    fn parse(&self, reply: &str, _args: &Map<String, Value>) -> Result<Value, ParseFailure> {
        TagParser::parse(self, reply)
    }
}

impl Parse for JsonParser {
    fn parse(&self, reply: &str, _args: &Map<String, Value>) -> Result<Value, ParseFailure> {
        JsonParser::parse(self, reply)
    }
}

/// The blocks that hold an answer, and whether any held only a placeholder
/// (`...`, `…`): the ellipsis of an example, which is no answer (issue 27).
fn answers(blocks: Vec<String>) -> (Vec<String>, bool) {
    let placeholder = |block: &String| {
        let text = block.trim();
        !text.is_empty() && text.chars().all(|c| matches!(c, '.' | '…' | ' '))
    };
    let found = blocks.iter().any(placeholder);
    let kept = blocks
        .into_iter()
        .filter(|block| !placeholder(block))
        .collect();
    (kept, found)
}

/// Every `<tag>…</tag>` block, inner text trimmed.
fn xml_blocks(content: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut blocks = Vec::new();
    let mut rest = content;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        blocks.push(after[..end].trim().to_string());
        rest = &after[end + close.len()..];
    }
    blocks
}

/// Every fenced block whose language is exactly `tag` (D11: no prefix match).
fn md_blocks(content: &str, tag: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = content.lines();
    while let Some(line) = lines.next() {
        let Some(language) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let is_match = language.trim() == tag;
        let mut body = Vec::new();
        for line in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            body.push(line);
        }
        if is_match {
            blocks.push(body.join("\n"));
        }
    }
    blocks
}

/// Parses the reply as JSON and validates it against a schema when given
/// (a schema needs the `jsonschema` feature: without it [`JsonParser::new`]
/// refuses one rather than accept replies unchecked; `non_exhaustive` keeps
/// that build's all-public fields from being filled in around `new`).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct JsonParser {
    /// The JSON schema replies must match, if any.
    pub schema: Option<Value>,
    #[cfg(feature = "jsonschema")]
    validator: Option<Arc<jsonschema::Validator>>,
    /// The type a typed call reads the reply as (`Tactic::call_typed`),
    /// checked after the schema: a reply it cannot read is repaired like
    /// one the schema rejects.
    reads_as: Option<ReadsAs>,
}

/// Whether a JSON value reads as a caller's type, with the type's name.
#[derive(Clone)]
pub(crate) struct ReadsAs {
    name: String,
    check: Arc<ReadCheck>,
}

/// Why a value does not read as the type, if it does not.
type ReadCheck = dyn Fn(&Value) -> Result<(), String> + Send + Sync;

impl ReadsAs {
    /// The check that a value deserializes as `T`.
    pub(crate) fn of<T: serde::de::DeserializeOwned>() -> ReadsAs {
        let name = std::any::type_name::<T>();
        // `my_crate::module::Verdict<u8>` → `Verdict<u8>`: the name the model may know.
        let short = name.split('<').next().unwrap_or(name);
        let short = short.rsplit("::").next().unwrap_or(short);
        let name = format!("{short}{}", &name[name.find('<').unwrap_or(name.len())..]);
        ReadsAs {
            name,
            check: Arc::new(|value: &Value| {
                T::deserialize(value)
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            }),
        }
    }
}

impl std::fmt::Debug for JsonParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonParser")
            .field("schema", &self.schema)
            .field(
                "reads_as",
                &self.reads_as.as_ref().map(|reads_as| &reads_as.name),
            )
            .finish()
    }
}

impl PartialEq for JsonParser {
    fn eq(&self, other: &JsonParser) -> bool {
        let name = |parser: &JsonParser| parser.reads_as.as_ref().map(|reads| reads.name.clone());
        self.schema == other.schema && name(self) == name(other)
    }
}

impl JsonParser {
    /// Compiles the schema once; an invalid schema is an error naming why.
    #[cfg(feature = "jsonschema")]
    pub fn new(schema: Option<Value>) -> Result<JsonParser, String> {
        let validator = match &schema {
            Some(schema) => Some(Arc::new(
                jsonschema::validator_for(schema)
                    .map_err(|error| format!("invalid JSON schema: {error}"))?,
            )),
            None => None,
        };
        Ok(JsonParser {
            schema,
            validator,
            reads_as: None,
        })
    }

    /// No schema to compile: a parser without one; a schema is an error
    /// naming the feature.
    #[cfg(not(feature = "jsonschema"))]
    pub fn new(schema: Option<Value>) -> Result<JsonParser, String> {
        match schema {
            None => Ok(JsonParser {
                schema,
                reads_as: None,
            }),
            Some(_) => Err(crate::features::missing(
                "validating replies against a JSON schema",
                "jsonschema",
            )),
        }
    }

    /// A parser of `schema` that reads replies as `T`: with the `jsonschema`
    /// feature the schema is compiled and checked too; without it, `schema`
    /// is only what a provider is asked for, and reading as `T` is the check
    /// (a typed call needs no feature).
    pub(crate) fn reading_as<T: serde::de::DeserializeOwned>(
        schema: Value,
    ) -> Result<JsonParser, String> {
        #[cfg(feature = "jsonschema")]
        let parser = JsonParser::new(Some(schema))?;
        #[cfg(not(feature = "jsonschema"))]
        let parser = JsonParser {
            schema: Some(schema),
            reads_as: None,
        };
        Ok(parser.read_as::<T>())
    }

    /// This parser, reading replies as `T` after its schema's check.
    pub(crate) fn read_as<T: serde::de::DeserializeOwned>(mut self) -> JsonParser {
        self.reads_as = Some(ReadsAs::of::<T>());
        self
    }

    /// `{raw, json}` plus the object's own keys at top level (so templates can
    /// write `step.parsed.verdict`), unless a key is `raw` or `json`.
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        let value = json_in(content).map_err(|error| {
            ParseFailure(format!(
                "reply is not valid JSON: {error}; answer with the JSON value alone"
            ))
        })?;
        #[cfg(feature = "jsonschema")]
        if let Some(validator) = &self.validator {
            let problems: Vec<String> = validator
                .iter_errors(&value)
                .map(|error| {
                    let path = error.instance_path().to_string();
                    let path = if path.is_empty() {
                        "/".to_string()
                    } else {
                        path
                    };
                    format!("`{path}`: {error}")
                })
                .collect();
            if !problems.is_empty() {
                return Err(ParseFailure(format!(
                    "reply does not match the JSON schema:\n{}",
                    problems.join("\n")
                )));
            }
        }
        if let Some(reads_as) = &self.reads_as {
            (reads_as.check)(&value).map_err(|error| {
                ParseFailure(format!(
                    "reply does not read as `{}`: {error}",
                    reads_as.name
                ))
            })?;
        }
        let mut parsed = Map::new();
        parsed.insert("raw".into(), Value::String(content.to_string()));
        if let Value::Object(object) = &value {
            for (key, item) in object {
                if key != "raw" && key != "json" {
                    parsed.insert(key.clone(), item.clone());
                }
            }
        }
        parsed.insert("json".into(), value);
        Ok(Value::Object(parsed))
    }
}

/// The JSON value of a reply: the whole reply, or the JSON inside one
/// surrounding ```` ```json ```` (or bare ```` ``` ````) fence, or else the
/// one fenced block of JSON in prose around it ([`json_block`]). The error
/// is the whole reply's.
fn json_in(content: &str) -> Result<Value, serde_json::Error> {
    let error = match serde_json::from_str(strip_fence(content)) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    json_block(content)
        .and_then(|block| serde_json::from_str(&block).ok())
        .ok_or(error)
}

/// The one fenced block of JSON in a reply that is prose around it ("Here
/// is the JSON: ```json … ``` It names …", as small models answer even when
/// asked for JSON alone; LangChain's and instructor's JSON parsers read such
/// replies too), when the reply is not JSON itself. A block is taken only
/// when it is the reply's one ```` ```json ```` block, or its one fenced
/// block when none is labelled: with two candidates, which one the model
/// meant is a guess.
pub fn json_block(content: &str) -> Option<String> {
    if serde_json::from_str::<serde::de::IgnoredAny>(strip_fence(content)).is_ok() {
        return None;
    }
    let labelled = md_blocks(content, "json");
    let block = match labelled.as_slice() {
        [one] => one.clone(),
        [] => match md_blocks(content, "").as_slice() {
            [one] => one.clone(),
            _ => return None,
        },
        _ => return None,
    };
    serde_json::from_str::<serde::de::IgnoredAny>(&block)
        .is_ok()
        .then_some(block)
}

/// The JSON inside one surrounding ```` ```json ```` (or bare ```` ``` ````) fence.
fn strip_fence(content: &str) -> &str {
    let trimmed = content.trim();
    let Some(inner) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(inner) = inner.strip_suffix("```") else {
        return trimmed;
    };
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    inner.trim()
}

/// How a prompt parses replies.
#[derive(Debug, Clone, PartialEq)]
pub enum Parser {
    /// `parser: tags` (or a mapping with `type: tags`).
    Tags(TagParser),
    /// `parser: json` (or a mapping with `type: json` and a `schema`).
    Json(JsonParser),
    /// `parser: NAME`, registered with `lllm::Registry::parser`.
    Custom(NamedParser),
}

impl Parser {
    /// Parses a reply with no parser arguments.
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        self.parse_with(content, &Map::new())
    }

    /// Parses a reply; `args` reach a custom parser (the built-ins take none).
    pub fn parse_with(
        &self,
        content: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, ParseFailure> {
        match self {
            Parser::Tags(parser) => parser.parse(content),
            Parser::Json(parser) => parser.parse(content),
            Parser::Custom(named) => named.parser.parse(content, args),
        }
    }

    /// `from_value`, where a name that is no built-in is looked up in
    /// `named` (the registered parsers); an unknown one is an error with a
    /// "did you mean".
    pub(crate) fn from_value_with(
        value: &Value,
        named: &std::collections::BTreeMap<String, Arc<dyn Parse>>,
    ) -> Result<Parser, String> {
        match value {
            Value::String(name) if name != "tags" && name != "json" => match named.get(name) {
                Some(parser) => Ok(Parser::Custom(NamedParser::new(name, parser.clone()))),
                None => {
                    let known = ["tags", "json"]
                        .into_iter()
                        .chain(named.keys().map(String::as_str));
                    let hint = crate::suggest::hint(name, known.clone());
                    let hint = if hint.is_empty() {
                        format!(
                            " (known: {})",
                            known
                                .map(|name| format!("`{name}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    } else {
                        hint
                    };
                    Err(format!(
                        "`parser: {}` is neither a built-in parser nor registered{hint}",
                        crate::suggest::printable(name)
                    ))
                }
            },
            other => Parser::from_value(other),
        }
    }

    /// From front matter: `tags`, `json`, `{type: tags, xml_tags: […], …}` or
    /// `{type: json, schema: {…}}`.
    pub fn from_value(value: &Value) -> Result<Parser, String> {
        match value {
            Value::String(kind) if kind == "tags" => Ok(Parser::Tags(TagParser::default())),
            Value::String(kind) if kind == "json" => Ok(Parser::Json(JsonParser::default())),
            Value::Object(map) => {
                let mut map = map.clone();
                let kind = map
                    .remove("type")
                    .and_then(|kind| kind.as_str().map(str::to_string));
                match kind.as_deref() {
                    Some("tags") => serde_json::from_value(Value::Object(map))
                        .map(Parser::Tags)
                        .map_err(|error| format!("`parser`: {error}")),
                    Some("json") => {
                        let schema = map.remove("schema");
                        if let Some(key) = map.keys().next() {
                            return Err(format!(
                                "`parser`: unknown key `{}` for a json parser (it takes `schema`)",
                                crate::suggest::printable(key)
                            ));
                        }
                        JsonParser::new(schema).map(Parser::Json)
                    }
                    _ => Err("`parser` needs `type: tags` or `type: json`".to_string()),
                }
            }
            other => Err(format!(
                "`parser` must be `tags`, `json` or a mapping with `type`, not {other}"
            )),
        }
    }

    /// The parser as written in front matter (for `info` and records).
    pub fn to_value(&self) -> Value {
        match self {
            Parser::Tags(parser) => {
                let mut value = serde_json::to_value(parser).unwrap_or_default();
                if let Value::Object(map) = &mut value {
                    map.insert("type".into(), json!("tags"));
                }
                value
            }
            Parser::Json(parser) => json!({"type": "json", "schema": parser.schema}),
            Parser::Custom(named) => Value::String(named.name.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(value: Value) -> TagParser {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn tag_parser_extracts_listed_tags_and_signals() {
        let parser = tags(
            json!({"xml_tags": ["answer", "note"], "md_tags": ["python"], "signal_tags": ["DONE"]}),
        );
        let content = "<answer> 1 </answer>\n<answer>2</answer>\n```python\nprint(1)\n```\n```py\nno\n```\n<DONE>";
        let parsed = parser.parse(content).unwrap();
        assert_eq!(parsed["raw"], content);
        assert_eq!(parsed["xml_tags"]["answer"], json!(["1", "2"]));
        assert_eq!(
            parsed["xml_tags"]["note"],
            json!([]),
            "absent listed tags are empty, not errors"
        );
        assert_eq!(
            parsed["md_tags"]["python"],
            json!(["print(1)"]),
            "the fence language must match exactly"
        );
        assert_eq!(parsed["signal_tags"]["DONE"], json!(true));
    }

    #[test]
    fn required_tags_must_be_present() {
        // D11: `required_xml_tags` alone works (the Python version always failed).
        let parser = tags(json!({"required_xml_tags": ["verdict"]}));
        assert_eq!(
            parser.parse("<verdict>ok</verdict>").unwrap()["xml_tags"]["verdict"],
            json!(["ok"])
        );
        let failure = parser.parse("no verdict").unwrap_err();
        assert!(
            failure.0.contains("missing required XML tag `verdict`"),
            "{failure}"
        );
        let parser = tags(json!({"required_md_tags": ["json"]}));
        assert!(parser.parse("```jsonc\n{}\n```").is_err());
        assert!(parser.parse("```json\n{}\n```").is_ok());
    }

    #[test]
    fn a_hint_echoed_back_is_no_answer() {
        // Issue 27: Qwen echoed the repair hint, whose example parsed.
        for parser in [
            tags(json!({"required_xml_tags": ["verdict"]})),
            tags(json!({"required_md_tags": ["json"]})),
            tags(json!({"required_xml_tags": ["a"], "required_md_tags": ["py"]})),
        ] {
            let hint = parser.parse("").unwrap_err().0;
            let repair = format!("Error: {hint}. Please fix.");
            for echo in [&hint, &repair] {
                assert!(parser.parse(echo).is_err(), "{echo}");
            }
        }
        // An example's placeholder is no answer either, nor is it extracted.
        let parser = tags(json!({"required_xml_tags": ["verdict"], "md_tags": ["json"]}));
        for placeholder in ["<verdict>...</verdict>", "<verdict> … </verdict>"] {
            let failure = parser.parse(placeholder).unwrap_err();
            assert!(failure.0.contains("only a placeholder"), "{failure}");
        }
        let parsed = parser
            .parse("<verdict>...</verdict><verdict>ok</verdict>\n```json\n...\n```")
            .unwrap();
        assert_eq!(parsed["xml_tags"]["verdict"], json!(["ok"]));
        assert_eq!(parsed["md_tags"]["json"], json!([]));
        // A sentence that ends in an ellipsis is an answer.
        assert!(parser.parse("<verdict>fine...</verdict>").is_ok());
    }

    #[test]
    fn json_parser_validates_and_lifts_keys() {
        let schema = json!({"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]});
        let parser = JsonParser::new(Some(schema)).unwrap();
        let parsed = parser
            .parse("```json\n{\"score\": 3, \"raw\": \"x\"}\n```")
            .unwrap();
        assert_eq!(parsed["score"], json!(3));
        assert_eq!(parsed["json"]["raw"], json!("x"));
        assert!(parsed["raw"].as_str().unwrap().starts_with("```json"));
        let failure = parser.parse("{\"score\": \"high\"}").unwrap_err();
        assert!(
            failure.0.contains("`/score`") && failure.0.contains("integer"),
            "{failure}"
        );
        let failure = parser.parse("not json").unwrap_err();
        assert!(
            failure.0.starts_with("reply is not valid JSON"),
            "{failure}"
        );
        assert!(JsonParser::new(Some(json!({"type": 12}))).is_err());
    }

    #[test]
    fn json_parser_reads_the_one_json_block_of_a_reply_in_prose() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let parser = JsonParser::new(Some(schema)).unwrap();
        // As SmolLM2 answered through llama-server (issue 27).
        let reply = "Here is a JSON object with the keys \"city\":\n\n```json\n{\n    \"city\": \"Tokyo\"\n}\n```\n\nThis is a JSON object.";
        let parsed = parser.parse(reply).unwrap();
        assert_eq!(parsed["city"], json!("Tokyo"));
        assert_eq!(parsed["raw"], json!(reply));
        // One bare block when none is labelled.
        assert!(
            parser
                .parse("Sure:\n```\n{\"city\": \"Oslo\"}\n```")
                .is_ok()
        );
        // The block still has to fit the schema.
        let failure = parser
            .parse("So:\n```json\n{\"town\": \"Oslo\"}\n```")
            .unwrap_err();
        assert!(
            failure.0.contains("does not match the JSON schema"),
            "{failure}"
        );
        // Two candidates: no guess; the error is the whole reply's, with what to do.
        let two = "```json\n{\"city\": \"A\"}\n```\nor\n```json\n{\"city\": \"B\"}\n```";
        let failure = parser.parse(two).unwrap_err();
        assert!(
            failure.0.starts_with("reply is not valid JSON")
                && failure.0.ends_with("answer with the JSON value alone"),
            "{failure}"
        );
        // A labelled block wins over a bare one, and prose alone is no JSON.
        let mixed = "```\nnot json\n```\n```json\n{\"city\": \"C\"}\n```";
        assert_eq!(parser.parse(mixed).unwrap()["city"], json!("C"));
        assert!(parser.parse("The city is Tokyo.").is_err());
    }

    #[test]
    fn parsers_come_from_front_matter_values() {
        assert!(matches!(
            Parser::from_value(&json!("json")),
            Ok(Parser::Json(_))
        ));
        assert!(matches!(
            Parser::from_value(&json!({"type": "tags", "xml_tags": ["a"]})),
            Ok(Parser::Tags(_))
        ));
        assert!(Parser::from_value(&json!({"type": "tags", "xml_tag": ["a"]})).is_err());
        assert!(Parser::from_value(&json!({"type": "yaml"})).is_err());
        assert!(Parser::from_value(&json!({"type": "json", "scheme": {}})).is_err());
    }
}
