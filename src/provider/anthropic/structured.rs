//! A prompt's `format` on the Messages API (D9), sent the way the API
//! enforces it rather than as a sentence in the system prompt (issue 27: 0 of
//! 5 runs passed that way on real models).
//!
//! Three ways, picked per provider (`structured_output:` under `providers:`):
//! - `output_config`: the API's structured-output parameter, as Anthropic's
//!   SDKs send it (`output_config: {format: {type: json_schema, schema}}`,
//!   no beta header), the schema made to fit the API as the Python SDK's
//!   `transform_schema` does ([`transform`]). The reply is a text block of JSON.
//! - `tool`: a forced tool call, as instructor, LangChain and the Vercel AI
//!   SDK do for models without the parameter: a tool (`answer`) whose input
//!   schema is the format, `tool_choice` naming it; its `input` is the reply
//!   ([`lift_answer`]). With the agent's own tools on the turn, the answer
//!   tool joins them and `tool_choice` is `any`: the model calls a tool on
//!   every turn, the answer tool when it is done. With extended `thinking`
//!   (which refuses a forced tool choice) the choice is `auto` and the system
//!   prompt asks for the tool.
//! - `prompt`: the schema as a sentence of the system prompt (what every
//!   server takes, and none enforces).
//!
//! `auto` (the default) is `output_config` for a model the model table marks
//! (`structured_output`, Claude 4.5 and later) when the schema fits the API,
//! else `tool`. Whatever was sent, the reply is validated against the schema
//! as written, and a violation goes to the repair loop (`agent::call`).
//! Leaves HTTP, and the rest of the body, to `anthropic`.

use serde_json::{Map, Value, json};

use crate::dialog::Message;
use crate::provider::{ChatRequest, ToolSpec};

// The setting is the config's (a provider's `structured_output:`); its old
// place, where the Messages API uses it, keeps the name.
pub use crate::config::StructuredOutput;

/// The answer tool's name when no offered tool has it.
const ANSWER_TOOL: &str = "answer";

/// The property a schema whose root is not an object is wrapped in (a
/// tool's input is an object).
const WRAPPED: &str = "value";

/// How deep a schema is followed; a deeper one is sent as a tool's input
/// schema unchanged (a user's file must not exhaust the stack).
const MAX_DEPTH: usize = 64;

/// The string formats the API keeps (the SDK's `SupportedStringFormats`).
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

/// How one request carries its format.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// `output_config.format` with this (transformed) schema.
    OutputConfig(Value),
    /// The answer tool, forced unless `forced` is false (extended thinking).
    Tool {
        /// The tool as the API takes it.
        tool: Value,
        /// Its name.
        name: String,
        /// Whether `tool_choice` makes the model call a tool.
        forced: bool,
    },
    /// A sentence of the system prompt.
    Prompt(String),
}

/// How `request`'s format goes on the wire under `setting`; `None` without a format.
pub fn plan(request: &ChatRequest<'_>, setting: StructuredOutput) -> Option<Plan> {
    let schema = request.format?;
    let tool = || {
        let name = answer_tool_name(request.tools);
        Plan::Tool {
            tool: json!({
                "name": name,
                "description": "Give your final answer: call this tool once, with the answer as its input.",
                "input_schema": tool_schema(schema),
            }),
            name,
            forced: !thinking(request.model_args),
        }
    };
    Some(match setting {
        StructuredOutput::Prompt => Plan::Prompt(format!(
            "Reply with only a JSON value that follows this JSON schema:\n{schema}"
        )),
        StructuredOutput::Tool => tool(),
        StructuredOutput::OutputConfig => {
            Plan::OutputConfig(transform(schema).unwrap_or_else(|| schema.clone()))
        }
        StructuredOutput::Auto => match transform(schema) {
            Some(fitted) if has_output_config(request.model) && is_object(schema) => {
                Plan::OutputConfig(fitted)
            }
            _ => tool(),
        },
    })
}

/// Whether the bundled model table says `model` takes `output_config.format`.
pub fn has_output_config(model: &str) -> bool {
    crate::provider::models::ModelTable::bundled()
        .lookup("anthropic", model)
        .and_then(|info| info.structured_output)
        .unwrap_or(false)
}

/// Whether `model_args` turn extended thinking on, which the API refuses
/// with a forced tool choice.
fn thinking(model_args: &Map<String, Value>) -> bool {
    model_args
        .get("thinking")
        .and_then(|thinking| thinking.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|kind| kind != "disabled")
}

fn is_object(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// `answer`, or `answer_2`, `answer_3`, … when an offered tool has that name.
pub fn answer_tool_name(tools: &[ToolSpec]) -> String {
    let taken = |name: &str| tools.iter().any(|tool| tool.name == name);
    if !taken(ANSWER_TOOL) {
        return ANSWER_TOOL.to_string();
    }
    (2..)
        .map(|number| format!("{ANSWER_TOOL}_{number}"))
        .find(|name| !taken(name))
        .unwrap_or_default()
}

/// The answer tool's input schema: the format itself when its root is an
/// object, else the format as the one property `value` (its `$defs` moved
/// to the root, where its references point).
fn tool_schema(schema: &Value) -> Value {
    if is_object(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    let mut wrapper = Map::new();
    wrapper.insert("type".into(), json!("object"));
    if let Value::Object(inner) = &mut inner {
        for key in ["$defs", "definitions"] {
            if let Some(definitions) = inner.shift_remove(key) {
                wrapper.insert(key.into(), definitions);
            }
        }
    }
    wrapper.insert("properties".into(), json!({ WRAPPED: inner }));
    wrapper.insert("required".into(), json!([WRAPPED]));
    Value::Object(wrapper)
}

/// `schema` made to fit the API's structured outputs, as the Python SDK's
/// `transform_schema` makes it: every object closed
/// (`additionalProperties: false`), `oneOf` read as `anyOf`, string formats
/// and `minItems` kept where the API takes them, and every other keyword
/// (`minimum`, `pattern`, `maxLength`, …) moved into the description
/// (`{minimum: 1, maximum: 10}`), where the model reads it. The reply is
/// still validated against the schema as written. `None` for a schema the
/// SDK refuses too (one without `type`, `anyOf`, `oneOf`, `allOf` or
/// `$ref`, or with a list of types) or one nested past `MAX_DEPTH`.
pub fn transform(schema: &Value) -> Option<Value> {
    transform_at(schema, 0)
}

fn transform_at(schema: &Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut rest = schema.as_object()?.clone();
    let mut strict = Map::new();
    if let Some(definitions) = rest.shift_remove("$defs") {
        let mut fitted = Map::new();
        for (name, definition) in definitions.as_object()? {
            fitted.insert(name.clone(), transform_at(definition, depth + 1)?);
        }
        strict.insert("$defs".into(), Value::Object(fitted));
    }
    if let Some(reference) = rest.shift_remove("$ref") {
        strict.insert("$ref".into(), reference);
        return Some(Value::Object(strict));
    }
    let kind = rest.shift_remove("type");
    let any_of = rest.shift_remove("anyOf");
    let one_of = rest.shift_remove("oneOf");
    let all_of = rest.shift_remove("allOf");
    let variants = |list: &Value| -> Option<Value> {
        list.as_array()?
            .iter()
            .map(|variant| transform_at(variant, depth + 1))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array)
    };
    let kind = match kind {
        Some(Value::String(kind)) => Some(kind),
        Some(_) => return None,
        None => None,
    };
    if let Some(list @ Value::Array(_)) = &any_of {
        strict.insert("anyOf".into(), variants(list)?);
    } else if let Some(list @ Value::Array(_)) = &one_of {
        strict.insert("anyOf".into(), variants(list)?);
    } else if let Some(list @ Value::Array(_)) = &all_of {
        strict.insert("allOf".into(), variants(list)?);
    } else {
        strict.insert("type".into(), json!(kind.as_ref()?));
    }
    if let Some(values @ Value::Array(_)) = rest.shift_remove("enum") {
        strict.insert("enum".into(), values);
    }
    if let Some(description) = rest.shift_remove("description") {
        strict.insert("description".into(), description);
    }
    if let Some(title) = rest.shift_remove("title") {
        strict.insert("title".into(), title);
    }
    match kind.as_deref() {
        Some("object") => {
            let mut properties = Map::new();
            if let Some(Value::Object(given)) = rest.shift_remove("properties") {
                for (name, property) in &given {
                    properties.insert(name.clone(), transform_at(property, depth + 1)?);
                }
            }
            strict.insert("properties".into(), Value::Object(properties));
            rest.shift_remove("additionalProperties");
            strict.insert("additionalProperties".into(), json!(false));
            if let Some(required) = rest.shift_remove("required") {
                strict.insert("required".into(), required);
            }
        }
        Some("string") => {
            if let Some(format) = rest.shift_remove("format") {
                if format
                    .as_str()
                    .is_some_and(|name| STRING_FORMATS.contains(&name))
                {
                    strict.insert("format".into(), format);
                } else {
                    rest.insert("format".into(), format);
                }
            }
        }
        Some("array") => {
            if let Some(items) = rest.shift_remove("items") {
                strict.insert("items".into(), transform_at(&items, depth + 1)?);
            }
            if let Some(least) = rest.shift_remove("minItems") {
                if least == json!(0) || least == json!(1) {
                    strict.insert("minItems".into(), least);
                } else {
                    rest.insert("minItems".into(), least);
                }
            }
        }
        Some("boolean" | "integer" | "number" | "null") | None => {}
        // The SDK refuses any other type.
        Some(_) => return None,
    }
    if !rest.is_empty() {
        // What the API does not enforce, for the model to read.
        let listed = rest
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => format!("{key}: {text}"),
                other => format!("{key}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let description = match strict.get("description").and_then(Value::as_str) {
            Some(description) => format!("{description}\n\n{{{listed}}}"),
            None => format!("{{{listed}}}"),
        };
        strict.insert("description".into(), json!(description));
    }
    Some(Value::Object(strict))
}

/// `reply` with a call of the answer tool (the `tool` way) made its answer:
/// the call's input becomes the text the prompt's parser reads (the
/// wrapped `value` for a schema whose root is not an object), the call
/// leaves the reply (it is no tool to run, and no result must answer it),
/// and the reply is marked `answer_tool` in its metadata. Any text the
/// model wrote before the call is kept as `text_before_answer`. A reply to
/// a request without a format, or without that call, is returned as it is.
pub fn lift_answer(mut reply: Message, request: &ChatRequest<'_>) -> Message {
    let Some(schema) = request.format else {
        return reply;
    };
    let name = answer_tool_name(request.tools);
    let Some(at) = reply
        .function_calls
        .iter()
        .position(|call| call.name == name)
    else {
        return reply;
    };
    let call = reply.function_calls.remove(at);
    // Only the first answer counts; a second call of it answers nothing.
    reply.function_calls.retain(|other| other.name != name);
    let answer = match call.raw_arguments {
        Some(raw) => raw,
        None => {
            let input = Value::Object(call.arguments);
            match (is_object(schema), input.get(WRAPPED)) {
                (false, Some(value)) => value.to_string(),
                _ => input.to_string(),
            }
        }
    };
    let before = std::mem::replace(&mut reply.content, answer);
    if !before.trim().is_empty() {
        reply
            .metadata
            .insert("text_before_answer".into(), Value::String(before));
    }
    reply.parts.clear();
    reply
        .metadata
        .insert("answer_tool".into(), Value::String(name));
    // The turn ended with its answer, as a text reply's would.
    if reply.function_calls.is_empty()
        && reply.metadata.get("finish_reason").and_then(Value::as_str) == Some("tool_use")
    {
        reply
            .metadata
            .insert("finish_reason".into(), json!("end_turn"));
    }
    reply
}

/// Says once per session store that the server at `source` answered
/// `model` without calling the answer tool its request forced: Anthropic's
/// API never does, a compatible server that drops `tool_choice` (or forces
/// tools only for chat templates that take them) does, and then nothing
/// enforces the format there. llama-server's `/v1/messages` is one: it keeps
/// neither `output_config` nor a forced tool (read in its `server-chat.cpp`;
/// SmolLM2 answered prose, issue 27), while its chat completions turn
/// `response_format` into a grammar.
pub fn warn_answer_tool_ignored(model: &str, source: &str) {
    let model = crate::redact::terminal_line(model);
    if crate::report::first_in_store(&format!("answer-tool-ignored {source} {model}")) {
        crate::report::warn(&format!(
            "the server at {source} answered `{model}` without the `{ANSWER_TOOL}` tool its \
             request forced, so it does not enforce `format:` on the Messages API; replies are \
             still checked against the schema and repaired. A server with OpenAI-compatible \
             chat completions (llama-server, vLLM, Ollama) enforces it there: use `openai/` \
             with its base URL, or its preset (`llamacpp/`)"
        ));
    }
}

#[cfg(test)]
mod tests;
