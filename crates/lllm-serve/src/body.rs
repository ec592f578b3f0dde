//! A request body into the task it asks for (D19; docs/serve.md, "Bodies").
//!
//! Three forms: a JSON object with `input` or `context` is upstream's
//! envelope (`input`, else `task`, is the tactic's input; `context` carries
//! `request_id`, `trace_id`, `tags`, `metadata`, …); any other JSON object
//! is lllm's task line, read by the batch's own parser
//! (`lllm::batch::tasks::parse_line`); a JSON string (or a `text/plain`
//! body) is the task text. A body is untrusted: its attachments are URLs or
//! inline bytes only (a path is refused, nothing here opens a file), and a
//! task line may not name a tactic file or another model. Checking the task
//! against the tactic is the caller's (`routes`).

use lllm::Task;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::kind;

/// What one request asks: the task, and the request's id (the caller's, or
/// a new UUID).
#[derive(Debug)]
pub struct Call {
    /// The task, its id the request id, its tags holding `request_id`.
    pub task: Task,
    /// The request's id: the envelope's `context.request_id` (or
    /// `call_id`), a task line's `id`, else a new UUID.
    pub request_id: String,
}

/// The longest request id taken from a caller.
const MAX_REQUEST_ID: usize = 128;

/// Reads `body` (sent with `content_type`) as a call; a 400 `SchemaError`
/// saying what is wrong otherwise.
pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<Call, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|error| ApiError::bad_input(format!("the body is not UTF-8 text: {error}")))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_input(
            "the body is empty; send a JSON object (`{\"input\": …}` or a task line) or a JSON string",
        ));
    }
    let media = content_type
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    if media
        .as_deref()
        .is_some_and(|media| media.starts_with("text/"))
    {
        return Ok(call(Task::new(text), None));
    }
    let value: Value = serde_json::from_str(text).map_err(|error| {
        ApiError::bad_input(format!(
            "the body is not JSON (line {}, column {}): {}",
            error.line(),
            error.column(),
            strip_position(&error.to_string())
        ))
    })?;
    match value {
        Value::String(text) => Ok(call(Task::new(text), None)),
        Value::Object(object) if object.contains_key("input") || object.contains_key("context") => {
            envelope(object)
        }
        Value::Object(_) => task_line(text),
        other => Err(ApiError::bad_input(format!(
            "a body is a JSON object or a JSON string, not {}",
            kind(&other)
        ))),
    }
}

/// The task of an input value, as the contract reads one (`Task::from_input`).
pub fn input_task(value: Value) -> Result<Task, ApiError> {
    Task::from_input(value).map_err(|error| ApiError::bad_input(format!("`input`: {error}")))
}

/// Upstream's envelope: `{"input"|"task": …, "context": {…}}`.
fn envelope(mut object: Map<String, Value>) -> Result<Call, ApiError> {
    if let Some(key) = object
        .keys()
        .find(|key| !matches!(key.as_str(), "input" | "task" | "context"))
    {
        return Err(ApiError::bad_input(format!(
            "unknown key `{}` in the envelope (it has `input`, `task` and `context`){}",
            lllm::suggest::printable(key),
            lllm::suggest::hint(key, ["input", "task", "context"])
        )));
    }
    let input = match (object.remove("input"), object.remove("task")) {
        (Some(Value::Null) | None, Some(task)) => task,
        (Some(input), _) => input,
        (None, None) => Value::Null,
    };
    if input.is_null() {
        return Err(ApiError::bad_input(
            "the envelope has no `input` (the value the tactic answers)",
        ));
    }
    let mut task = input_task(input)?;
    let mut request_id = None;
    match object.remove("context") {
        None | Some(Value::Null) => {}
        Some(Value::Object(context)) => {
            request_id = read_context(context, &mut task)?;
        }
        Some(other) => {
            return Err(ApiError::bad_input(format!(
                "`context` is an object, not {}",
                kind(&other)
            )));
        }
    }
    Ok(call(task, request_id))
}

/// The envelope's `context` into `task`'s tags and metadata; its request id.
fn read_context(
    mut context: Map<String, Value>,
    task: &mut Task,
) -> Result<Option<String>, ApiError> {
    let object = |context: &mut Map<String, Value>, key: &str| match context.remove(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(ApiError::bad_input(format!(
            "`context.{key}` is an object, not {}",
            kind(&other)
        ))),
    };
    task.tags = object(&mut context, "tags")?;
    task.metadata = object(&mut context, "metadata")?;
    // `call_id` is upstream's older name; an empty id asks for a new one.
    let mut id = None;
    for key in ["request_id", "call_id"] {
        match context.remove(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(given)) => {
                if id.is_none() && !given.is_empty() {
                    id = Some(request_id(&given, &format!("context.{key}"))?);
                }
            }
            Some(other) => {
                return Err(ApiError::bad_input(format!(
                    "`context.{key}` is a string, not {}",
                    kind(&other)
                )));
            }
        }
    }
    // Who called, and the trace it belongs to: kept with the record.
    for key in ["trace_id", "span_id", "caller"] {
        match context.remove(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                task.metadata.insert(key.to_string(), Value::String(text));
            }
            Some(other) => {
                return Err(ApiError::bad_input(format!(
                    "`context.{key}` is a string, not {}",
                    kind(&other)
                )));
            }
        }
    }
    Ok(id)
}

/// lllm's task line, by the batch's rules; no file is read.
fn task_line(text: &str) -> Result<Call, ApiError> {
    let scope = lllm::dialog::AttachmentScope::default();
    let line = lllm::batch::tasks::parse_line(text, 1, &scope)
        .map_err(|problem| ApiError::bad_input(format!("task line: {problem}")))?
        .ok_or_else(|| ApiError::bad_input("the body is empty"))?;
    if line.tactic.is_some() {
        return Err(ApiError::bad_input(
            "task line: `tactic` names a tactic file, and a served call runs the tactic of its route",
        ));
    }
    if line.input.model.is_some() {
        return Err(ApiError::bad_input(
            "task line: `model`: a served tactic runs the models it was loaded with",
        ));
    }
    // The line's own id (not the `line-1` the parser gives a line without one).
    let own_id = serde_json::from_str::<Map<String, Value>>(text)
        .ok()
        .and_then(|object| object.get("id").or(object.get("custom_id")).cloned())
        .is_some();
    let request_id = match own_id {
        true => Some(request_id(&line.id, "id")?),
        false => None,
    };
    Ok(call(line.input, request_id))
}

/// The call of `task` (made from a chat request), with a new request id.
pub fn called(task: Task) -> Call {
    call(task, None)
}

/// The call of `task`, its request id given or new.
fn call(mut task: Task, request_id: Option<String>) -> Call {
    let request_id = request_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    task.id = Some(request_id.clone());
    task.tags
        .insert("request_id".into(), Value::String(request_id.clone()));
    Call { task, request_id }
}

/// A caller's request id, if it is a token upstream's client takes: at most
/// 128 characters, no white space, control character, `%`, `/`, `\`, `:`
/// or `;`.
pub fn request_id(id: &str, key: &str) -> Result<String, ApiError> {
    let bad = id.is_empty()
        || id.len() > MAX_REQUEST_ID
        || matches!(id, "." | "..")
        || id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "%/\\:;".contains(c));
    if bad {
        return Err(ApiError::bad_input(format!(
            "`{key}` `{}` is not a request id: 1 to {MAX_REQUEST_ID} characters, without white \
             space, `%`, `/`, `\\`, `:` or `;`",
            lllm::suggest::printable(&id.chars().take(MAX_REQUEST_ID).collect::<String>())
        )));
    }
    Ok(id.to_string())
}

/// serde_json appends ` at line 1 column 7`; the message names the place.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |index| &message[..index])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn parsed(body: &str) -> Call {
        parse(body.as_bytes(), Some("application/json")).unwrap()
    }

    #[track_caller]
    fn refused(body: &str, expected: &str) {
        let error = parse(body.as_bytes(), Some("application/json")).unwrap_err();
        assert_eq!(error.kind, "SchemaError");
        assert!(
            error.message.contains(expected),
            "{:?} does not contain {expected:?}",
            error.message
        );
    }

    #[test]
    fn the_three_forms_of_a_body() {
        // A JSON string: the task text, a new request id.
        let call = parsed(r#""What is 2 + 2?""#);
        assert_eq!(call.task.task, "What is 2 + 2?");
        assert_eq!(call.task.id.as_deref(), Some(call.request_id.as_str()));
        assert_eq!(call.task.tags["request_id"], json!(call.request_id));
        // Upstream's envelope, with its context.
        let call = parsed(
            r#"{"input": {"ticket": "down"}, "context": {"request_id": "r-1",
                "trace_id": "t-9", "tags": {"team": "ops"}, "metadata": {"n": 1}}}"#,
        );
        assert_eq!(call.request_id, "r-1");
        assert_eq!(call.task.args["ticket"], "down");
        assert_eq!(call.task.tags["team"], "ops");
        assert_eq!(call.task.tags["request_id"], "r-1");
        assert_eq!(call.task.metadata["trace_id"], "t-9");
        assert_eq!(call.task.metadata["n"], 1);
        // `call_id` is upstream's older name; `task` stands in for `input`.
        let call = parsed(r#"{"task": "hi", "context": {"call_id": "c-2"}}"#);
        assert_eq!(
            (call.request_id.as_str(), &call.task.task),
            ("c-2", &json!("hi"))
        );
        // D19: an input holding `task` goes through the envelope unchanged.
        let call = parsed(r#"{"input": {"task": "x"}}"#);
        assert_eq!(call.task.task, json!({"task": "x"}));
        // lllm's task line: its id is the request id.
        let call =
            parsed(r#"{"id": "line-7", "task": "hi", "args": {"n": 2}, "tags": {"a": "b"}}"#);
        assert_eq!(call.request_id, "line-7");
        assert_eq!(
            (call.task.args["n"].clone(), call.task.tags["a"].clone()),
            (json!(2), json!("b"))
        );
        // Without one, a new id (not the parser's `line-1`).
        assert_ne!(parsed(r#"{"task": "hi"}"#).request_id, "line-1");
        // A text body.
        let call = parse(b"plain words", Some("text/plain; charset=utf-8")).unwrap();
        assert_eq!(call.task.task, "plain words");
    }

    #[test]
    fn bad_bodies_are_refused_saying_why() {
        refused("", "the body is empty");
        refused("{\"task\": ", "not JSON (line 1, column 9)");
        refused("[1, 2]", "not an array");
        refused(
            r#"{"input": "x", "extra": 1}"#,
            "unknown key `extra` in the envelope",
        );
        refused(r#"{"context": {}}"#, "no `input`");
        refused(r#"{"input": "x", "context": []}"#, "`context` is an object");
        refused(
            r#"{"input": "x", "context": {"request_id": "a b"}}"#,
            "is not a request id",
        );
        refused(
            r#"{"input": "x", "context": {"tags": "x"}}"#,
            "`context.tags` is an object",
        );
        refused(
            r#"{"task": "x", "tactic": "/etc/t.yaml"}"#,
            "`tactic` names a tactic file",
        );
        refused(r#"{"task": "x", "model": "openai/gpt-4o"}"#, "`model`");
        refused(r#"{"task": "x", "colour": 1}"#, "unknown key `colour`");
        refused(r#"{"id": "../x", "task": "x"}"#, "is not a request id");
    }

    #[test]
    fn attachments_are_never_read_from_the_servers_files() {
        refused(
            r#"{"task": "x", "attachments": ["/etc/hostname"]}"#,
            "files are not read here",
        );
        refused(
            r#"{"task": "x", "attachments": [{"path": "notes.txt"}]}"#,
            "files are not read here",
        );
        // Inline bytes are taken.
        let call = parsed(r#"{"task": "x", "attachments": ["data:text/plain;base64,b3dscw=="]}"#);
        assert_eq!(call.task.attachments.len(), 1);
    }
}
