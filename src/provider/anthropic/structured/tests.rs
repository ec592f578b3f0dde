//! The three ways a format goes on the Messages API, the schema fitting of
//! the Python SDK (fixtures made by its own `transform_schema`), and the
//! answer tool's call read back as the reply.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::*;
use crate::dialog::{FunctionCall, Message};

fn request<'a>(
    model: &'a str,
    messages: &'a [Arc<Message>],
    tools: &'a [ToolSpec],
    format: Option<&'a Value>,
    model_args: &'a Map<String, Value>,
) -> ChatRequest<'a> {
    ChatRequest {
        model,
        messages,
        tools,
        format,
        model_args,
        api_type: Default::default(),
        stream: None,
    }
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: String::new(),
        parameters: json!({"type": "object"}),
    }
}

#[test]
fn schemas_are_fitted_as_the_python_sdk_fits_them() {
    // Each pair: a schema, and what anthropic-sdk-python's
    // `lib/_parse/_transform.py::transform_schema` returns for it (run on
    // the SDK's own code, 009b035).
    let cases = [
        (
            json!({"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10, "description": "A number"}, "verdict": {"type": "string", "enum": ["ok", "fix"]}}, "required": ["score"]}),
            json!({"type": "object", "properties": {"score": {"type": "integer", "description": "A number\n\n{minimum: 1, maximum: 10}"}, "verdict": {"type": "string", "enum": ["ok", "fix"]}}, "additionalProperties": false, "required": ["score"]}),
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 2, "format": "email"}, "minItems": 3}, "when": {"type": "string", "format": "date-time"}, "note": {"type": "string", "pattern": "^a"}}, "additionalProperties": true, "title": "T"}),
            json!({"type": "object", "title": "T", "properties": {"tags": {"type": "array", "items": {"type": "string", "format": "email", "description": "{minLength: 2}"}, "description": "{minItems: 3}"}, "when": {"type": "string", "format": "date-time"}, "note": {"type": "string", "description": "{pattern: ^a}"}}, "additionalProperties": false}),
        ),
        (
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
        ),
        (
            json!({"type": "object", "properties": {"a": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, "b": {"$ref": "#/$defs/B"}}, "$defs": {"B": {"type": "object", "properties": {"c": {"type": "number", "multipleOf": 2}}}}}),
            json!({"$defs": {"B": {"type": "object", "properties": {"c": {"type": "number", "description": "{multipleOf: 2}"}}, "additionalProperties": false}}, "type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "b": {"$ref": "#/$defs/B"}}, "additionalProperties": false}),
        ),
        (
            json!({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}, "minItems": 1}),
            json!({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": false}, "minItems": 1}),
        ),
    ];
    for (schema, expected) in cases {
        assert_eq!(transform(&schema), Some(expected), "{schema}");
    }
    // The SDK refuses these too: no type, a list of types, nesting past the limit.
    assert_eq!(transform(&json!({"const": 1})), None);
    assert_eq!(transform(&json!({"type": ["string", "null"]})), None);
    let mut deep = json!({"type": "string"});
    for _ in 0..100 {
        deep = json!({"type": "array", "items": deep});
    }
    assert_eq!(transform(&deep), None);
}

#[test]
fn auto_sends_output_config_to_a_model_that_has_it_and_a_tool_to_others() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let none = Map::new();
    let fitted = transform(&schema).unwrap();
    let plan_for = |model: &str, schema: &Value| {
        plan(
            &request(model, &[], &[], Some(schema), &none),
            StructuredOutput::Auto,
        )
    };
    assert_eq!(
        plan_for("claude-haiku-4-5", &schema),
        Some(Plan::OutputConfig(fitted.clone()))
    );
    // A dated snapshot is the same model.
    assert_eq!(
        plan_for("claude-sonnet-4-5-20250929", &schema),
        Some(Plan::OutputConfig(fitted))
    );
    for model in ["claude-3-5-haiku", "claude-sonnet-4", "qwen2.5-coder"] {
        assert!(
            matches!(
                plan_for(model, &schema),
                Some(Plan::Tool { forced: true, .. })
            ),
            "{model}"
        );
    }
    // A schema the API cannot take, or whose root is no object, goes as a tool.
    for odd in [
        json!({"type": ["string", "null"]}),
        json!({"type": "array"}),
    ] {
        assert!(matches!(
            plan_for("claude-haiku-4-5", &odd),
            Some(Plan::Tool { .. })
        ));
    }
    assert_eq!(
        plan(
            &request("claude-haiku-4-5", &[], &[], None, &none),
            StructuredOutput::Auto
        ),
        None
    );
}

#[test]
fn the_setting_picks_the_way_whatever_the_model() {
    let schema = json!({"type": "object"});
    let none = Map::new();
    let with = |setting| {
        plan(
            &request("claude-3-5-haiku", &[], &[], Some(&schema), &none),
            setting,
        )
    };
    assert_eq!(
        with(StructuredOutput::OutputConfig),
        Some(Plan::OutputConfig(
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        ))
    );
    assert!(
        matches!(with(StructuredOutput::Prompt), Some(Plan::Prompt(text)) if text.contains("JSON schema"))
    );
    let thinking: Map<String, Value> =
        json!({"thinking": {"type": "enabled", "budget_tokens": 2000}})
            .as_object()
            .cloned()
            .unwrap();
    let planned = plan(
        &request("claude-haiku-4-5", &[], &[], Some(&schema), &thinking),
        StructuredOutput::Tool,
    );
    assert!(matches!(planned, Some(Plan::Tool { forced: false, .. })));
    for name in StructuredOutput::NAMES {
        assert!(StructuredOutput::from_name(name).is_some(), "{name}");
    }
    assert_eq!(StructuredOutput::from_name("json"), None);
}

#[test]
fn the_answer_tool_wraps_a_schema_whose_root_is_no_object() {
    let schema = json!({"type": "array", "items": {"$ref": "#/$defs/x"}, "$defs": {"x": {"type": "integer"}}});
    let none = Map::new();
    let Some(Plan::Tool { tool, name, .. }) = plan(
        &request("m", &[], &[], Some(&schema), &none),
        StructuredOutput::Tool,
    ) else {
        panic!("a tool plan");
    };
    assert_eq!(name, "answer");
    assert_eq!(
        tool["input_schema"],
        json!({"type": "object", "$defs": {"x": {"type": "integer"}},
               "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/x"}}},
               "required": ["value"]})
    );
}

#[test]
fn the_answer_tool_never_takes_an_offered_tools_name() {
    assert_eq!(answer_tool_name(&[tool("search")]), "answer");
    assert_eq!(answer_tool_name(&[tool("answer")]), "answer_2");
    assert_eq!(
        answer_tool_name(&[tool("answer"), tool("answer_2")]),
        "answer_3"
    );
}

#[track_caller]
fn lifted(schema: &Value, tools: &[ToolSpec], reply: Message) -> Message {
    let none = Map::new();
    lift_answer(reply, &request("m", &[], tools, Some(schema), &none))
}

#[test]
fn a_call_of_the_answer_tool_becomes_the_replys_text() {
    let object = json!({"type": "object"});
    let mut reply = Message::assistant("assistant", "Here it is.");
    reply.function_calls = vec![FunctionCall::from_model(
        "toolu_1",
        "answer",
        r#"{"score": 3}"#,
    )];
    reply
        .metadata
        .insert("finish_reason".into(), json!("tool_use"));
    let reply = lifted(&object, &[], reply);
    assert_eq!(reply.content, r#"{"score":3}"#);
    assert!(reply.function_calls.is_empty());
    assert_eq!(reply.metadata["answer_tool"], "answer");
    assert_eq!(reply.metadata["text_before_answer"], "Here it is.");
    assert_eq!(reply.metadata["finish_reason"], "end_turn");

    // A wrapped answer is unwrapped; malformed input stays as written.
    let array = json!({"type": "array"});
    let mut reply = Message::assistant("assistant", "");
    reply.function_calls = vec![FunctionCall::from_model(
        "t",
        "answer",
        r#"{"value": [1, 2]}"#,
    )];
    assert_eq!(lifted(&array, &[], reply).content, "[1,2]");
    let mut reply = Message::assistant("assistant", "");
    reply.function_calls = vec![FunctionCall::from_model("t", "answer", r#"{"score": "#)];
    assert_eq!(lifted(&object, &[], reply).content, r#"{"score": "#);

    // Another tool's call is left to run, beside the answer that came with it.
    let mut reply = Message::assistant("assistant", "");
    reply.function_calls = vec![
        FunctionCall::from_model("t1", "answer", r#"{"a": 1}"#),
        FunctionCall::from_model("t2", "search", r#"{"q": "x"}"#),
    ];
    reply
        .metadata
        .insert("finish_reason".into(), json!("tool_use"));
    let reply = lifted(&object, &[tool("search")], reply);
    assert_eq!(reply.function_calls.len(), 1);
    assert_eq!(reply.function_calls[0].name, "search");
    assert_eq!(reply.metadata["finish_reason"], "tool_use");

    // Without a format, or with the answer tool named otherwise, nothing changes.
    let mut reply = Message::assistant("assistant", "");
    reply.function_calls = vec![FunctionCall::from_model("t", "answer", "{}")];
    let none = Map::new();
    let unchanged = lift_answer(reply.clone(), &request("m", &[], &[], None, &none));
    assert_eq!(unchanged.function_calls.len(), 1);
    let unchanged = lifted(&object, &[tool("answer")], reply);
    assert_eq!(unchanged.function_calls[0].name, "answer");
}
