//! A tactic's contract keys (issue 30): `input_schema`, `examples` and
//! `metadata`, read and checked as the rest of the file is, each problem at
//! its place. `input_schema` must compile, like `output_schema`; an
//! example's `input` must fit it. The compiled schema ([`InputSchema`]) is
//! what the tactic layer checks tasks with (`Tactic::check_input`); what a
//! contract is as a whole (`TacticInfo`) is the tactic layer's.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::places::Problems;
use super::raw::RawTactic;
use super::resolve::{describe_value, json_schema_problem};
use crate::suggest::printable;
use crate::yaml::{child_index, child_key, join_path};

/// The contract keys as resolved.
#[derive(Debug, Default)]
pub(super) struct Contract {
    pub input_schema: Option<Value>,
    pub examples: Vec<Map<String, Value>>,
    pub metadata: Map<String, Value>,
}

/// Reads `input_schema`, `examples` and `metadata` from `raw`; a problem of
/// one leaves it out and is reported at its place.
pub(super) fn resolve(raw: &RawTactic, problems: &mut Problems) -> Contract {
    let input_schema = raw.input_schema.clone().and_then(|schema| {
        json_schema_problem("input_schema", &schema)
            .map_err(|(at, problem)| problems.at(join_path("input_schema", &at), problem))
            .ok()
            .map(|()| schema)
    });
    let compiled = input_schema
        .as_ref()
        .and_then(|schema| InputSchema::compile(schema).ok());
    let examples = examples(raw.examples.as_ref(), compiled.as_ref(), problems);
    let metadata = match &raw.metadata {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(metadata)) => metadata.clone(),
        Some(other) => {
            problems.at(
                "metadata",
                format!(
                    "`metadata` is {}; write a mapping of public notes such as \
                     `{{owner: support-team}}`",
                    describe_value(other)
                ),
            );
            Map::new()
        }
    };
    Contract {
        input_schema,
        examples,
        metadata,
    }
}

/// `examples`: a list of mappings (free-form, as upstream's), each `input`
/// fitting `schema` when there is one.
fn examples(
    written: Option<&Value>,
    schema: Option<&InputSchema>,
    problems: &mut Problems,
) -> Vec<Map<String, Value>> {
    let entries = match written {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            problems.at(
                "examples",
                format!(
                    "`examples` is {}; write a list of mappings such as \
                     `[{{input: {{…}}, output: {{…}}}}]`",
                    describe_value(other)
                ),
            );
            return Vec::new();
        }
    };
    let mut examples = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let at = child_index("examples", index);
        let Value::Object(example) = entry else {
            problems.at(
                at,
                format!(
                    "an example is {}; write a mapping such as `{{input: {{…}}, output: {{…}}}}`",
                    describe_value(entry)
                ),
            );
            continue;
        };
        if let (Some(schema), Some(input)) = (schema, example.get("input")) {
            let input_at = child_key(&at, "input");
            for (pointer, message) in schema.problems(input) {
                let place = yaml_path(&input_at, &pointer);
                let inside = if pointer.is_empty() {
                    String::new()
                } else {
                    format!(" at `{}`", printable(&pointer))
                };
                problems.at(
                    place,
                    format!(
                        "this example's `input` does not fit `input_schema`{inside}: {message}"
                    ),
                );
            }
        }
        examples.push(example.clone());
    }
    examples
}

/// The document path of the node `pointer` (a JSON pointer) names inside
/// the node at `base`.
fn yaml_path(base: &str, pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
        .fold(base.to_string(), |path, segment| {
            match segment.parse::<usize>() {
                Ok(index) => child_index(&path, index),
                Err(_) => child_key(&path, &segment),
            }
        })
}

/// A value longer than this (as JSON) is cut in a problem's message.
#[cfg(feature = "jsonschema")]
const SHOWN_VALUE: usize = 60;

/// A compiled `input_schema`: what a task's input is checked against.
/// Cheap to clone. Without the `jsonschema` feature there is none (the key
/// is refused when the tactic is read).
#[derive(Clone)]
pub(crate) struct InputSchema {
    #[cfg(feature = "jsonschema")]
    validator: Arc<jsonschema::Validator>,
    #[cfg(not(feature = "jsonschema"))]
    _none: Arc<()>,
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InputSchema")
    }
}

impl InputSchema {
    /// Compiles `schema`; why not, when it does not.
    pub(crate) fn compile(schema: &Value) -> Result<InputSchema, String> {
        #[cfg(feature = "jsonschema")]
        return jsonschema::validator_for(schema)
            .map(|validator| InputSchema {
                validator: Arc::new(validator),
            })
            .map_err(|error| format!("`input_schema` is not a valid JSON Schema: {error}"));
        #[cfg(not(feature = "jsonschema"))]
        {
            let _ = schema;
            Err(crate::features::missing("`input_schema`", "jsonschema"))
        }
    }

    /// Every problem of `input` against the schema, in the order found:
    /// the JSON pointer of the value it is about (`""`: the whole input)
    /// and what was expected, on one line, a long value cut short.
    pub(crate) fn problems(&self, input: &Value) -> Vec<(String, String)> {
        #[cfg(feature = "jsonschema")]
        return self
            .validator
            .iter_errors(input)
            .map(|error| {
                let shown = shown_value(error.instance());
                let message = error.masked_with(shown).to_string();
                (
                    error.instance_path().to_string(),
                    printable(&message).into_owned(),
                )
            })
            .collect();
        #[cfg(not(feature = "jsonschema"))]
        {
            let _ = input;
            Vec::new()
        }
    }
}

/// `value` as JSON for a message, cut to [`SHOWN_VALUE`] characters.
#[cfg(feature = "jsonschema")]
fn shown_value(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_VALUE {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_VALUE - 1).collect();
    format!("{cut}…")
}

#[cfg(all(test, feature = "jsonschema"))]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn case(schema: Value, input: Value, expected: &[(&str, &str)]) {
        let schema = InputSchema::compile(&schema).unwrap();
        let got = schema.problems(&input);
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(pointer, message)| (pointer.to_string(), message.to_string()))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn problems_name_the_pointer_and_what_was_expected() {
        let ticket = json!({
            "type": "object",
            "required": ["ticket"],
            "properties": {"ticket": {"type": "string"}, "priority": {"type": "integer"}},
        });
        case(ticket.clone(), json!({"ticket": "Printer on fire"}), &[]);
        case(
            ticket.clone(),
            json!({"priority": "7"}),
            &[
                ("", r#""ticket" is a required property"#),
                ("/priority", r#""7" is not of type "integer""#),
            ],
        );
        case(
            ticket,
            json!("just text"),
            &[("", r#""just text" is not of type "object""#)],
        );
        // A long value is cut; a control character is shown escaped.
        let long = "x".repeat(500);
        let schema = json!({"type": "integer"});
        let got = InputSchema::compile(&schema)
            .unwrap()
            .problems(&json!(long));
        let shown = format!("\"{}…", "x".repeat(SHOWN_VALUE - 2));
        assert_eq!(
            got,
            [(
                String::new(),
                format!(r#"{shown} is not of type "integer""#)
            )]
        );
        case(
            json!({"type": "integer"}),
            json!("a\u{1b}b"),
            &[("", r#""a\u001bb" is not of type "integer""#)],
        );
    }

    #[track_caller]
    fn problems_of(yaml: &str) -> Vec<String> {
        match crate::config::from_yaml(yaml, ".") {
            Ok(_) => Vec::new(),
            Err(error) => error.to_string().lines().map(str::to_string).collect(),
        }
    }

    #[test]
    fn the_contract_keys_are_read_and_each_problem_placed() {
        let agent = "agent_configs: [{name: a, model_name: mock/echo}]\n";
        let config = crate::config::from_yaml(
            &format!(
                "{agent}input_schema: {{type: object, required: [ticket]}}\n\
                 examples:\n  - {{input: {{ticket: Printer on fire}}, output: {{urgent: true}}}}\n\
                 metadata: {{owner: support, tier: 2}}\n"
            ),
            ".",
        )
        .unwrap();
        assert_eq!(
            config.input_schema,
            Some(json!({"type": "object", "required": ["ticket"]}))
        );
        assert_eq!(config.examples[0]["output"], json!({"urgent": true}));
        assert_eq!(config.metadata["tier"], 2);

        assert_eq!(
            problems_of(&format!("{agent}input_schema: a ticket\n")),
            [
                "<yaml>:2:1: `input_schema` is a string, not a JSON Schema; write a mapping such as \
              `{type: object, properties: {…}}`"
            ]
        );
        let problems = problems_of(&format!(
            "{agent}input_schema:\n  type: object\n  properties:\n    n: {{type: 5}}\n"
        ));
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with(
                "<yaml>:5:9: `input_schema` is not a valid JSON Schema at `/properties/n/type`: "
            ),
            "{problems:?}"
        );
        assert_eq!(
            problems_of(&format!(
                "{agent}input_schema:\n  type: object\n  properties: {{n: {{type: integer}}}}\n\
                 examples:\n  - input: {{n: 1}}\n  - input:\n      n: seven\n  - just text\n"
            )),
            [
                "<yaml>:8:7: this example's `input` does not fit `input_schema` at `/n`: \
                 \"seven\" is not of type \"integer\"",
                "<yaml>:9:5: an example is a string; write a mapping such as \
                 `{input: {…}, output: {…}}`",
            ]
        );
        assert_eq!(
            problems_of(&format!("{agent}examples: {{input: 1}}\nmetadata: [a]\n")),
            [
                "<yaml>:2:1: `examples` is a mapping; write a list of mappings such as \
                 `[{input: {…}, output: {…}}]`",
                "<yaml>:3:1: `metadata` is a list; write a mapping of public notes such as \
                 `{owner: support-team}`",
            ]
        );
        // A misspelt key is still caught, with the new ones known.
        assert!(
            problems_of(&format!("{agent}input_shema: {{}}\n"))[0]
                .contains("did you mean `input_schema`"),
        );
    }

    #[test]
    fn yaml_paths_follow_the_pointer() {
        assert_eq!(yaml_path("examples[0].input", ""), "examples[0].input");
        assert_eq!(
            yaml_path("examples[0].input", "/tags/1"),
            "examples[0].input.tags[1]"
        );
        assert_eq!(
            yaml_path("examples[0].input", "/a~1b"),
            child_key("examples[0].input", "a/b")
        );
    }
}
