//! The Anthropic Messages API (`POST /v1/messages`): `system` and content
//! blocks in, a `message` with `text` / `tool_use` blocks out, or its
//! `message_start` … `message_stop` SSE events. Errors use Anthropic's
//! `{"type": "error", "error": {...}}` body.
//!
//! A request is held to what the API takes ([`check`]): the fields of
//! anthropic-sdk-python's `MessageCreateParams` and no others, `tools` with
//! an object `input_schema`, a `tool_choice` of the API's four kinds naming
//! an offered tool, and `output_config.format` as the SDK sends it, its
//! schema within what structured outputs support (every object closed with
//! `additionalProperties: false`; no keyword the SDK's `transform_schema`
//! moves into descriptions). A request that forces a tool gets a scripted
//! text as that tool's call ([`forced`]), as the API never answers it with text.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::{
    Event, Incoming, Reference, Usage, arguments_value, finish_reason, halves, pieces, text_of,
};
use lllm::mock::script::{ScriptMessage, ScriptToolCall};

/// The request fields of the Messages API (anthropic-sdk-python's
/// `MessageCreateParams`, without beta headers).
const FIELDS: [&str; 18] = [
    "model",
    "messages",
    "max_tokens",
    "cache_control",
    "container",
    "inference_geo",
    "metadata",
    "output_config",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];

/// The fields of a tool (`ToolParam`).
const TOOL_FIELDS: [&str; 10] = [
    "name",
    "description",
    "input_schema",
    "cache_control",
    "strict",
    "type",
    "input_examples",
    "defer_loading",
    "allowed_callers",
    "eager_input_streaming",
];

/// The keywords a structured-output schema may hold: what the SDK's
/// `transform_schema` keeps.
const SCHEMA_KEYWORDS: [&str; 13] = [
    "type",
    "anyOf",
    "allOf",
    "$ref",
    "$defs",
    "enum",
    "description",
    "title",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "minItems",
];

/// The string formats structured outputs take.
const STRING_FORMATS: [&str; 10] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// What the API refuses before it answers, in its `path: problem` words.
pub fn check(request: &Value) -> Result<(), String> {
    // A body that is no object is refused before (`server::checked`), and
    // a header check passes none.
    let Some(fields) = request.as_object() else {
        return Ok(());
    };
    if let Some(key) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    let names = check_tools(fields.get("tools"))?;
    if let Some(choice) = fields.get("tool_choice") {
        check_tool_choice(choice, &names)?;
    }
    if let Some(config) = fields.get("output_config") {
        check_output_config(config)?;
    }
    super::images::check_anthropic(request)
}

/// The names of the offered tools.
fn check_tools(tools: Option<&Value>) -> Result<Vec<String>, String> {
    let Some(tools) = tools else {
        return Ok(Vec::new());
    };
    let tools = tools
        .as_array()
        .ok_or("tools: Input should be a valid list")?;
    let mut names = Vec::new();
    for (at, tool) in tools.iter().enumerate() {
        let tool = tool
            .as_object()
            .ok_or_else(|| format!("tools.{at}: Input should be a valid dictionary"))?;
        if let Some(key) = tool.keys().find(|key| !TOOL_FIELDS.contains(&key.as_str())) {
            return Err(format!(
                "tools.{at}.custom.{key}: Extra inputs are not permitted"
            ));
        }
        let name = match tool.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name.clone(),
            _ => return Err(format!("tools.{at}.custom.name: Field required")),
        };
        if names.contains(&name) {
            return Err(format!(
                "tools: Tool names must be unique; `{name}` is repeated"
            ));
        }
        match tool.get("input_schema") {
            None => return Err(format!("tools.{at}.custom.input_schema: Field required")),
            Some(schema) if schema.get("type") != Some(&json!("object")) => {
                return Err(format!(
                    "tools.{at}.custom.input_schema.type: Input should be 'object'"
                ));
            }
            Some(_) => {}
        }
        names.push(name);
    }
    Ok(names)
}

fn check_tool_choice(choice: &Value, tools: &[String]) -> Result<(), String> {
    let choice = choice
        .as_object()
        .ok_or("tool_choice: Input should be a valid dictionary")?;
    let kind = choice.get("type").and_then(Value::as_str).unwrap_or("");
    let allowed: &[&str] = match kind {
        "auto" | "any" => &["type", "disable_parallel_tool_use"],
        "tool" => &["type", "name", "disable_parallel_tool_use"],
        "none" => &["type"],
        _ => {
            return Err(
                "tool_choice.type: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
                    .into(),
            );
        }
    };
    if let Some(key) = choice.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(format!(
            "tool_choice.{kind}.{key}: Extra inputs are not permitted"
        ));
    }
    if matches!(kind, "any" | "tool") && tools.is_empty() {
        return Err("tool_choice: may only be specified while providing tools".into());
    }
    if kind == "tool" {
        let name = choice.get("name").and_then(Value::as_str).unwrap_or("");
        if !tools.iter().any(|tool| tool == name) {
            return Err(format!(
                "tool_choice.tool.name: `{name}` is not the name of a tool in `tools`"
            ));
        }
    }
    Ok(())
}

fn check_output_config(config: &Value) -> Result<(), String> {
    let config = config
        .as_object()
        .ok_or("output_config: Input should be a valid dictionary")?;
    if let Some(key) = config
        .keys()
        .find(|key| !["effort", "format", "task_budget"].contains(&key.as_str()))
    {
        return Err(format!(
            "output_config.{key}: Extra inputs are not permitted"
        ));
    }
    let format = match config.get("format") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(format)) => format,
        Some(_) => return Err("output_config.format: Input should be a valid dictionary".into()),
    };
    if let Some(key) = format
        .keys()
        .find(|key| !["type", "schema"].contains(&key.as_str()))
    {
        return Err(format!(
            "output_config.format.{key}: Extra inputs are not permitted"
        ));
    }
    if format.get("type") != Some(&json!("json_schema")) {
        return Err("output_config.format.type: Input should be 'json_schema'".into());
    }
    match format.get("schema") {
        Some(schema @ Value::Object(_)) => check_schema(schema, "output_config.format.schema", 0),
        Some(_) => Err("output_config.format.schema: Input should be a valid dictionary".into()),
        None => Err("output_config.format.schema: Field required".into()),
    }
}

/// A structured-output schema: closed objects, supported keywords only.
fn check_schema(schema: &Value, place: &str, depth: usize) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("{place}: the schema is nested too deeply"));
    }
    let Some(schema) = schema.as_object() else {
        return Err(format!("{place}: a schema must be an object"));
    };
    for key in schema.keys() {
        let supported = SCHEMA_KEYWORDS.contains(&key.as_str())
            || (key == "format"
                && schema
                    .get("format")
                    .and_then(Value::as_str)
                    .is_some_and(|format| STRING_FORMATS.contains(&format)));
        if !supported {
            return Err(format!(
                "{place}: `{key}` is not supported in structured outputs (move it to the description)"
            ));
        }
    }
    if let Some(least) = schema.get("minItems")
        && least != &json!(0)
        && least != &json!(1)
    {
        return Err(format!("{place}.minItems: only 0 and 1 are supported"));
    }
    if schema.get("type") == Some(&json!("object"))
        && schema.get("additionalProperties") != Some(&json!(false))
    {
        return Err(format!(
            "{place}: for 'object' type, 'additionalProperties' must be explicitly set to false"
        ));
    }
    let children = |key: &str| -> Vec<(String, &Value)> {
        match schema.get(key) {
            Some(Value::Object(map)) => map
                .iter()
                .map(|(name, child)| (format!("{place}.{key}.{name}"), child))
                .collect(),
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(at, child)| (format!("{place}.{key}.{at}"), child))
                .collect(),
            _ => Vec::new(),
        }
    };
    for key in ["properties", "$defs", "anyOf", "allOf"] {
        for (child_place, child) in children(key) {
            check_schema(child, &child_place, depth + 1)?;
        }
    }
    if let Some(items) = schema.get("items") {
        check_schema(items, &format!("{place}.items"), depth + 1)?;
    }
    Ok(())
}

/// The tool a request makes the model call, if it makes it call one.
fn forced_tool(request: &Value) -> Option<String> {
    let tools = request.get("tools").and_then(Value::as_array)?;
    let choice = request.get("tool_choice")?;
    match choice.get("type").and_then(Value::as_str)? {
        "tool" => choice
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string),
        "any" if tools.len() == 1 => tools[0]
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

/// A scripted reply to a request that forces `tool`: a text becomes the
/// tool's call with the text as its input (a JSON object, or the text
/// itself as a string when it is not one, as a model's malformed input
/// reaches a client), `stop_reason: tool_use`; a reply with tool calls
/// stays as scripted.
pub fn forced<'m>(message: &'m ScriptMessage, tool: &str, index: usize) -> Cow<'m, ScriptMessage> {
    if !message.tool_calls.is_empty() {
        return Cow::Borrowed(message);
    }
    Cow::Owned(ScriptMessage {
        text: None,
        tool_calls: vec![ScriptToolCall {
            id: format!("toolu_mock_{index}"),
            name: tool.to_string(),
            arguments: message.text.clone().unwrap_or_default(),
        }],
        usage: message.usage,
        finish_reason: message.finish_reason.clone(),
    })
}

pub fn read(request: &Value) -> Incoming {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let system = request
        .get("system")
        .map_or(0, |system| text_of(system).len());
    let (last_role, last_text) = messages
        .last()
        .map(message_text)
        .unwrap_or(("user", String::new()));
    Incoming {
        last_text,
        last_role: last_role.to_string(),
        forced_tool: forced_tool(request),
        message_count: messages.len(),
        prompt_chars: system
            + messages
                .iter()
                .map(|message| message_text(message).1.len())
                .sum::<usize>(),
        ..Incoming::default()
    }
}

/// The role and text of a message; a user message carrying tool results is
/// `tool`, with the results' text, as in the other APIs.
fn message_text(message: &Value) -> (&str, String) {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user");
    let content = message.get("content").unwrap_or(&Value::Null);
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    let results: Vec<String> = blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| block.get("content").map(text_of).unwrap_or_default())
        .collect();
    if results.is_empty() {
        (role, text_of(content))
    } else {
        ("tool", results.join("\n"))
    }
}

/// OpenAI's finish reasons in Anthropic's words; others pass through.
fn stop_reason(message: &ScriptMessage) -> &str {
    match finish_reason(message) {
        "stop" => "end_turn",
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        other => other,
    }
}

fn usage_value(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

fn has_text_block(message: &ScriptMessage) -> bool {
    message.text.is_some() || message.tool_calls.is_empty()
}

fn message_value(
    reference: Reference<'_>,
    content: Vec<Value>,
    stop: Option<&str>,
    usage: Value,
) -> Value {
    json!({
        "id": format!("msg_mock_{}", reference.index),
        "type": "message",
        "role": "assistant",
        "model": reference.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage,
    })
}

pub fn body(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Value {
    let mut content = Vec::new();
    if has_text_block(message) {
        content.push(json!({"type": "text", "text": message.text.as_deref().unwrap_or_default()}));
    }
    for call in &message.tool_calls {
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": arguments_value(&call.arguments)}));
    }
    message_value(
        reference,
        content,
        Some(stop_reason(message)),
        usage_value(usage.input, usage.output),
    )
}

pub fn events(reference: Reference<'_>, message: &ScriptMessage, usage: Usage) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |name: &'static str, data: Value| {
        let mut fields = Map::new();
        fields.insert("type".into(), json!(name));
        if let Value::Object(rest) = data {
            fields.extend(rest);
        }
        events.push(Event {
            name: Some(name),
            data: Value::Object(fields),
        });
    };
    push(
        "message_start",
        json!({"message": message_value(reference, Vec::new(), None, usage_value(usage.input, 1))}),
    );
    push("ping", json!({}));
    let mut index = 0;
    if has_text_block(message) {
        push(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "text", "text": ""}}),
        );
        for piece in pieces(message.text.as_deref().unwrap_or_default(), 4) {
            push(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "text_delta", "text": piece}}),
            );
        }
        push("content_block_stop", json!({"index": index}));
        index += 1;
    }
    for call in &message.tool_calls {
        push(
            "content_block_start",
            json!({"index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        );
        for part in halves(&call.arguments) {
            push(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
        }
        push("content_block_stop", json!({"index": index}));
        index += 1;
    }
    push(
        "message_delta",
        json!({"delta": {"stop_reason": stop_reason(message), "stop_sequence": null},
               "usage": {"output_tokens": usage.output}}),
    );
    push("message_stop", json!({}));
    events
}

/// `code` from the script overrides the error type the status implies.
pub fn error_body(status: u16, code: Option<&str>, message: &str) -> Value {
    let kind = code.unwrap_or(match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    });
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use lllm::mock::script::ScriptToolCall;

    #[track_caller]
    fn read_case(request: Value, text: &str, role: &str) {
        let incoming = read(&request);
        assert_eq!(
            (incoming.last_text.as_str(), incoming.last_role.as_str()),
            (text, role)
        );
    }

    #[test]
    fn reads_the_last_message() {
        read_case(
            json!({"system": "s", "messages": [{"role": "user", "content": "hi"}]}),
            "hi",
            "user",
        );
        read_case(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
            "a\nb",
            "user",
        );
        read_case(
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "42"}]}]}]}),
            "42",
            "tool",
        );
    }

    #[test]
    fn malformed_arguments_still_reach_the_client() {
        let reference = Reference {
            index: 0,
            model: "m",
            created: 0,
        };
        let message = ScriptMessage {
            text: None,
            tool_calls: vec![ScriptToolCall {
                id: "t1".into(),
                name: "f".into(),
                arguments: "{\"a\": ".into(),
            }],
            usage: None,
            finish_reason: None,
        };
        let usage = Usage {
            input: 1,
            output: 1,
        };
        let whole = body(reference, &message, usage);
        assert_eq!(
            whole["content"],
            json!([{"type": "tool_use", "id": "t1", "name": "f", "input": "{\"a\": "}])
        );
        assert_eq!(whole["stop_reason"], "tool_use");
        let partial: String = events(reference, &message, usage)
            .iter()
            .filter_map(|event| event.data["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(partial, "{\"a\": ");
    }

    #[track_caller]
    fn refused(request: Value, expected: &str) {
        let error = check(&request).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }

    #[test]
    fn requests_are_held_to_what_the_api_takes() {
        let schema = json!({"type": "object", "properties": {"score": {"type": "integer", "description": "{minimum: 1}"},
                                                           "when": {"type": "string", "format": "date-time"},
                                                           "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
                            "additionalProperties": false, "required": ["score"]});
        let base = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
        let with = |key: &str, value: Value| {
            let mut request = base.clone();
            request[key] = value;
            request
        };
        // What the SDK sends as `output_config`, and a forced tool.
        check(&with(
            "output_config",
            json!({"format": {"type": "json_schema", "schema": schema}, "effort": "low"}),
        ))
        .unwrap();
        let mut forced = with(
            "tools",
            json!([{"name": "answer", "description": "d", "input_schema": {"type": "object"}}]),
        );
        forced["tool_choice"] = json!({"type": "tool", "name": "answer"});
        check(&forced).unwrap();
        assert_eq!(forced_tool(&forced).as_deref(), Some("answer"));
        forced["tool_choice"] = json!({"type": "any"});
        assert_eq!(forced_tool(&forced).as_deref(), Some("answer"));
        forced["tool_choice"] = json!({"type": "auto"});
        assert_eq!(forced_tool(&forced), None);

        refused(
            with("response_format", json!({})),
            "response_format: Extra inputs are not permitted",
        );
        refused(
            with(
                "output_config",
                json!({"format": {"type": "json_schema", "name": "x", "schema": schema}}),
            ),
            "output_config.format.name: Extra inputs are not permitted",
        );
        refused(
            with(
                "output_config",
                json!({"format": {"type": "json_schema", "schema": {"type": "object"}}}),
            ),
            "'additionalProperties' must be explicitly set to false",
        );
        refused(
            with(
                "output_config",
                json!({"format": {"type": "json_schema", "schema":
                {"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integer", "minimum": 1}}}}}),
            ),
            "output_config.format.schema.properties.n: `minimum` is not supported",
        );
        refused(
            with(
                "output_config",
                json!({"format": {"type": "json", "schema": schema}}),
            ),
            "output_config.format.type: Input should be 'json_schema'",
        );
        refused(
            with(
                "tools",
                json!([{"name": "f", "input_schema": {"type": "array"}}]),
            ),
            "tools.0.custom.input_schema.type: Input should be 'object'",
        );
        refused(
            with("tool_choice", json!({"type": "any"})),
            "may only be specified while providing tools",
        );
        let mut unknown = forced.clone();
        unknown["tool_choice"] = json!({"type": "tool", "name": "other"});
        refused(unknown, "`other` is not the name of a tool");
    }

    #[test]
    fn a_forced_tool_answers_with_its_call() {
        let message = ScriptMessage {
            text: Some("{\"score\": 3}".into()),
            tool_calls: Vec::new(),
            usage: None,
            finish_reason: None,
        };
        let reference = Reference {
            index: 4,
            model: "m",
            created: 0,
        };
        let usage = Usage {
            input: 1,
            output: 1,
        };
        let shaped = forced(&message, "answer", 4);
        let whole = body(reference, &shaped, usage);
        assert_eq!(
            whole["content"],
            json!([{"type": "tool_use", "id": "toolu_mock_4", "name": "answer", "input": {"score": 3}}])
        );
        assert_eq!(whole["stop_reason"], "tool_use");
        let streamed: String = events(reference, &shaped, usage)
            .iter()
            .filter_map(|event| event.data["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(streamed, "{\"score\": 3}");
    }

    #[test]
    fn errors_have_anthropic_types() {
        assert_eq!(
            error_body(529, None, "busy")["error"]["type"],
            "overloaded_error"
        );
        assert_eq!(
            error_body(400, Some("x"), "m")["error"],
            json!({"type": "x", "message": "m"})
        );
    }
}
