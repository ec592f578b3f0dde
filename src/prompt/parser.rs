//! Reply parsers: the tag parser (xml tags, markdown fences, signal tags) and
//! the JSON parser with optional JSON-schema validation (also used for a
//! prompt's `format`, D9). A parse failure's text goes to the model in the
//! exception handler, so it says what to fix.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Why a reply was rejected; shown to the model as `error_message`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ParseFailure(pub String);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
/// Extracts tags from a reply: `<tag>…</tag>`, ```` ```lang ```` fences and bare signal words (D11).
pub struct TagParser {
    /// XML tags extracted when present.
    pub xml_tags: Vec<String>,
    /// Markdown fence languages extracted when present.
    pub md_tags: Vec<String>,
    /// Words whose presence is reported as `true`/`false`.
    pub signal_tags: Vec<String>,
    /// XML tags the reply must have (else a repair).
    pub required_xml_tags: Vec<String>,
    /// Fence languages the reply must have.
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
            let blocks = xml_blocks(content, tag);
            if blocks.is_empty() && self.required_xml_tags.contains(tag) {
                errors.push(format!(
                    "missing required XML tag <{tag}>: write it as <{tag}>...</{tag}>"
                ));
            }
            xml.insert(tag.clone(), json!(blocks));
        }
        let mut markdown = Map::new();
        for tag in self.md_tags.iter().chain(&self.required_md_tags) {
            if markdown.contains_key(tag) {
                continue;
            }
            let blocks = md_blocks(content, tag);
            if blocks.is_empty() && self.required_md_tags.contains(tag) {
                errors.push(format!(
                    "missing required markdown block `{tag}`: write it as ```{tag} ... ```"
                ));
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

/// Parses the reply as JSON and validates it against a schema when given.
#[derive(Clone, Default)]
pub struct JsonParser {
    /// The JSON schema a reply must follow, if any.
    pub schema: Option<Value>,
    validator: Option<Arc<jsonschema::Validator>>,
}

impl std::fmt::Debug for JsonParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonParser")
            .field("schema", &self.schema)
            .finish()
    }
}

impl PartialEq for JsonParser {
    fn eq(&self, other: &JsonParser) -> bool {
        self.schema == other.schema
    }
}

impl JsonParser {
    /// Compiles the schema once; an invalid schema is an error naming why.
    pub fn new(schema: Option<Value>) -> Result<JsonParser, String> {
        let validator = match &schema {
            Some(schema) => Some(Arc::new(
                jsonschema::validator_for(schema)
                    .map_err(|error| format!("invalid JSON schema: {error}"))?,
            )),
            None => None,
        };
        Ok(JsonParser { schema, validator })
    }

    /// `{raw, json}` plus the object's own keys at top level (so templates can
    /// write `step.parsed.verdict`), unless a key is `raw` or `json`.
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        let text = strip_fence(content);
        let value: Value = serde_json::from_str(text)
            .map_err(|error| ParseFailure(format!("reply is not valid JSON: {error}")))?;
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
    /// Tags (`type: tags`).
    Tags(TagParser),
    /// JSON (`type: json`).
    Json(JsonParser),
}

impl Parser {
    /// Parses a reply; a failure is shown to the model to repair.
    pub fn parse(&self, content: &str) -> Result<Value, ParseFailure> {
        match self {
            Parser::Tags(parser) => parser.parse(content),
            Parser::Json(parser) => parser.parse(content),
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
                                "`parser`: unknown key `{key}` for a json parser (it takes `schema`)"
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
            failure.0.contains("missing required XML tag <verdict>"),
            "{failure}"
        );
        let parser = tags(json!({"required_md_tags": ["json"]}));
        assert!(parser.parse("```jsonc\n{}\n```").is_err());
        assert!(parser.parse("```json\n{}\n```").is_ok());
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
