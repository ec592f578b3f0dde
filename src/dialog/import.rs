//! Messages written in the providers' own request shapes — OpenAI chat
//! completions (`{role, content, name, tool_calls, tool_call_id}`) and
//! Anthropic Messages (`{role, content: [blocks]}` with a top-level
//! `system`) — read into ours (issue 15), so a task line or a provider batch
//! file can carry a conversation. Images are checked by their bytes on the
//! way in (D10): a `data:` URL whose bytes are not an image is refused here,
//! not by the provider.
//!
//! Errors are one line each, naming the message (`messages[2]`) and the
//! field; the caller adds the file and line.

use serde_json::{Map, Value};

use super::{Attachment, AttachmentScope, ContentPart, FunctionCall, Message, Role};

/// Reads OpenAI chat-completions messages (`messages` of a request body).
///
/// ```
/// use lllm::dialog::{Role, import};
/// use serde_json::json;
///
/// let messages = import::openai_messages(&json!([
///     {"role": "system", "content": "Be terse."},
///     {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
/// ]))?;
/// assert_eq!((messages[0].role, messages[1].content.as_str()), (Role::System, "Hi"));
/// # Ok::<(), String>(())
/// ```
pub fn openai_messages(value: &Value) -> Result<Vec<Message>, String> {
    let list = value
        .as_array()
        .ok_or_else(|| format!("`messages` is a list, not {}", kind(value)))?;
    let mut messages: Vec<Message> = Vec::with_capacity(list.len());
    for (index, entry) in list.iter().enumerate() {
        let place = format!("messages[{index}]");
        let message = openai_message(entry, &messages, &place)?;
        messages.push(message);
    }
    Ok(messages)
}

fn openai_message(entry: &Value, earlier: &[Message], place: &str) -> Result<Message, String> {
    let object = entry
        .as_object()
        .ok_or_else(|| format!("{place} is an object, not {}", kind(entry)))?;
    let role = match object.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some(other) => {
            return Err(format!(
                "{place}.role `{}` is not one of `system`, `developer`, `user`, `assistant`, `tool`",
                crate::suggest::printable(other)
            ));
        }
        None => return Err(format!("{place} has no `role`")),
    };
    let parts = match object.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![ContentPart::text(text.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(number, part)| openai_part(part, &format!("{place}.content[{number}]")))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "{place}.content is a string or a list of parts, not {}",
                kind(other)
            ));
        }
    };
    let name = match object.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(other) => return Err(format!("{place}.name is a string, not {}", kind(other))),
    };
    let has_image = parts.iter().any(|part| part.image_ref().is_some());
    if has_image && role != Role::User {
        return Err(format!("{place}: only a user message may hold images"));
    }
    let mut message = if has_image {
        Message::with_parts(role, name.unwrap_or_else(|| "user".into()), parts)
    } else {
        let text: Vec<&str> = parts.iter().filter_map(ContentPart::as_text).collect();
        let default_name = match role {
            Role::System => "system",
            Role::User => "user",
            _ => "assistant",
        };
        Message::new(
            role,
            name.unwrap_or_else(|| default_name.into()),
            text.join("\n"),
        )
    };
    match role {
        Role::Assistant => {
            if let Some(calls) = object.get("tool_calls").filter(|calls| !calls.is_null()) {
                message.function_calls = openai_tool_calls(calls, place)?;
            }
        }
        Role::Tool => {
            let id = object
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{place}: a tool message needs `tool_call_id`"))?;
            let tool = called_tool(earlier, id).ok_or_else(|| {
                format!(
                    "{place}: no earlier assistant message calls `{}`",
                    crate::suggest::printable(id)
                )
            })?;
            message = Message::tool(tool, id, message.content);
        }
        _ => {}
    }
    Ok(message)
}

fn openai_tool_calls(calls: &Value, place: &str) -> Result<Vec<FunctionCall>, String> {
    let calls = calls
        .as_array()
        .ok_or_else(|| format!("{place}.tool_calls is a list"))?;
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let at = format!("{place}.tool_calls[{index}]");
            let id = call.get("id").and_then(Value::as_str);
            let function = call.get("function");
            let name = function
                .and_then(|function| function.get("name"))
                .and_then(Value::as_str);
            let arguments = function
                .and_then(|function| function.get("arguments"))
                .and_then(Value::as_str)
                .unwrap_or("{}");
            match (id, name) {
                (Some(id), Some(name)) => Ok(FunctionCall::from_model(id, name, arguments)),
                _ => Err(format!("{at} needs `id` and `function.name`")),
            }
        })
        .collect()
}

fn openai_part(part: &Value, place: &str) -> Result<ContentPart, String> {
    match part.get("type").and_then(Value::as_str) {
        Some("text") => part
            .get("text")
            .and_then(Value::as_str)
            .map(ContentPart::text)
            .ok_or_else(|| format!("{place}: a text part needs `text`")),
        Some("image_url") => {
            let (url, detail) = match part.get("image_url") {
                Some(Value::String(url)) => (url.as_str(), None),
                Some(Value::Object(image)) => (
                    image.get("url").and_then(Value::as_str).unwrap_or_default(),
                    image.get("detail").and_then(Value::as_str),
                ),
                _ => ("", None),
            };
            if url.is_empty() {
                return Err(format!("{place}: an image_url part needs `image_url.url`"));
            }
            let mut image = image_part(url, place)?;
            if let (ContentPart::ImageUrl { image_url }, Some(detail)) = (&mut image, detail) {
                image_url.detail = Some(detail.to_string());
            }
            Ok(image)
        }
        Some(other) => Err(format!(
            "{place}: part type `{}` is not read (`text` and `image_url` are)",
            crate::suggest::printable(other)
        )),
        None => Err(format!("{place}: a part needs `type`")),
    }
}

/// An image part from a URL: an `http(s)` URL as it is, a `data:` URL
/// checked and re-typed by its bytes.
fn image_part(url: &str, place: &str) -> Result<ContentPart, String> {
    if !(url.starts_with("data:") || url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!(
            "{place}: an image is an http(s) URL or a base64 data: URL"
        ));
    }
    // No file is read for a message's image, whatever the URL says.
    let part = Attachment::parse(url)
        .and_then(|attachment| attachment.to_part(&AttachmentScope::default()))
        .map_err(|error| format!("{place}: {error}"))?;
    if part.image_ref().is_none() {
        return Err(format!(
            "{place}: the data: URL's bytes are not an image (PNG, JPEG, GIF or WebP)"
        ));
    }
    Ok(part)
}

/// Reads an Anthropic Messages request's `system` and `messages`. A user
/// turn's `tool_result` blocks become tool messages; `tool_use` blocks the
/// assistant's tool calls.
///
/// ```
/// use lllm::dialog::{Role, import};
/// use serde_json::json;
///
/// let messages = import::anthropic_messages(Some(&json!("Be terse.")), &json!([
///     {"role": "user", "content": [
///         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "R0lGODlhAQ=="}},
///         {"type": "text", "text": "Which bird?"}]},
/// ]))?;
/// assert_eq!(messages[0].role, Role::System);
/// assert_eq!(messages[1].parts[0].to_string(), "<image image/gif>"); // told by the bytes
/// # Ok::<(), String>(())
/// ```
pub fn anthropic_messages(system: Option<&Value>, value: &Value) -> Result<Vec<Message>, String> {
    let mut messages = Vec::new();
    match system {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(Message::system(text.clone())),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::new();
            for (index, block) in blocks.iter().enumerate() {
                match block.get("text").and_then(Value::as_str) {
                    Some(text) if block.get("type").and_then(Value::as_str) == Some("text") => {
                        texts.push(text)
                    }
                    _ => return Err(format!("system[{index}] is a text block")),
                }
            }
            messages.push(Message::system(texts.join("\n\n")));
        }
        Some(other) => {
            return Err(format!(
                "`system` is a string or a list of text blocks, not {}",
                kind(other)
            ));
        }
    }
    let list = value
        .as_array()
        .ok_or_else(|| format!("`messages` is a list, not {}", kind(value)))?;
    for (index, entry) in list.iter().enumerate() {
        let place = format!("messages[{index}]");
        let role = match entry.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some(other) => {
                return Err(format!(
                    "{place}.role `{}` is not `user` or `assistant`",
                    crate::suggest::printable(other)
                ));
            }
            None => return Err(format!("{place} has no `role`")),
        };
        let blocks = match entry.get("content") {
            Some(Value::String(text)) => {
                vec![serde_json::json!({"type": "text", "text": text})]
            }
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => return Err(format!("{place}.content is a string or a list of blocks")),
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (number, block) in blocks.iter().enumerate() {
            let at = format!("{place}.content[{number}]");
            match block.get("type").and_then(Value::as_str) {
                Some("text") => parts.push(ContentPart::text(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("{at}: a text block needs `text`"))?,
                )),
                Some("image") if role == Role::User => {
                    parts.push(anthropic_image(block.get("source"), &at)?)
                }
                Some("tool_use") if role == Role::Assistant => {
                    let id = block.get("id").and_then(Value::as_str);
                    let name = block.get("name").and_then(Value::as_str);
                    let (Some(id), Some(name)) = (id, name) else {
                        return Err(format!("{at}: a tool_use block needs `id` and `name`"));
                    };
                    let input = block
                        .get("input")
                        .cloned()
                        .unwrap_or(Value::Object(Map::new()));
                    calls.push(FunctionCall::from_model(id, name, &input.to_string()));
                }
                Some("tool_result") if role == Role::User => {
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("{at}: a tool_result block needs `tool_use_id`"))?;
                    let tool = called_tool(&messages, id).ok_or_else(|| {
                        format!(
                            "{at}: no earlier tool_use has id `{}`",
                            crate::suggest::printable(id)
                        )
                    })?;
                    let content = match block.get("content") {
                        Some(Value::String(text)) => text.clone(),
                        Some(Value::Array(inner)) => inner
                            .iter()
                            .filter_map(|block| block.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("\n"),
                        _ => String::new(),
                    };
                    messages.push(Message::tool(tool, id, content));
                }
                Some(other) => {
                    return Err(format!(
                        "{at}: block type `{}` is not read in a {} turn",
                        crate::suggest::printable(other),
                        role.as_str()
                    ));
                }
                None => return Err(format!("{at}: a block needs `type`")),
            }
        }
        if parts.is_empty() && calls.is_empty() {
            continue;
        }
        let message = if role == Role::User {
            if parts.iter().any(|part| part.image_ref().is_some()) {
                Message::with_parts(role, "user", parts)
            } else {
                Message::new(role, "user", text_of(&parts))
            }
        } else {
            let mut message = Message::assistant("assistant", text_of(&parts));
            message.function_calls = calls;
            message
        };
        messages.push(message);
    }
    Ok(messages)
}

fn anthropic_image(source: Option<&Value>, place: &str) -> Result<ContentPart, String> {
    let source = source.ok_or_else(|| format!("{place}: an image block needs `source`"))?;
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let data = source
                .get("data")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{place}: a base64 image needs `source.data`"))?;
            image_part(&format!("data:image/*;base64,{data}"), place)
        }
        Some("url") => {
            let url = source
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{place}: a url image needs `source.url`"))?;
            image_part(url, place)
        }
        _ => Err(format!(
            "{place}: an image's `source.type` is `base64` or `url`"
        )),
    }
}

fn text_of(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(ContentPart::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tool an earlier assistant message called under `id`.
fn called_tool(earlier: &[Message], id: &str) -> Option<String> {
    earlier.iter().rev().find_map(|message| {
        message
            .function_calls
            .iter()
            .find(|call| call.id == id)
            .map(|call| call.name.clone())
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn openai_fails(messages: Value, expected: &str) {
        let error = openai_messages(&messages).unwrap_err();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
    }

    #[test]
    fn openai_conversations_read_with_tools_and_images() {
        let messages = openai_messages(&json!([
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "Count: a b", "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "wc", "arguments": "{\"t\":\"a b\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
            {"role": "user", "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,R0lGODlhAQ==", "detail": "low"}}]},
        ]))
        .unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[0].role, Role::System);
        assert_eq!(messages[1].name, "ann");
        assert_eq!(messages[2].function_calls[0].arguments["t"], "a b");
        assert_eq!(messages[3].tool_call_id(), Some("c1"));
        assert_eq!(messages[3].name, "wc");
        let ContentPart::ImageUrl { image_url } = &messages[4].parts[1] else {
            panic!("not an image");
        };
        assert!(image_url.url.starts_with("data:image/gif;base64,"));
        assert_eq!(image_url.detail.as_deref(), Some("low"));
    }

    #[test]
    fn bad_openai_messages_name_the_place() {
        openai_fails(json!({"role": "user"}), "is a list");
        openai_fails(json!([{"content": "x"}]), "messages[0] has no `role`");
        openai_fails(
            json!([{"role": "bot", "content": "x"}]),
            "messages[0].role `bot`",
        );
        openai_fails(
            json!([{"role": "tool", "tool_call_id": "x", "content": "1"}]),
            "no earlier assistant message calls `x`",
        );
        // An id from the file is echoed on one line, control characters escaped.
        openai_fails(
            json!([{"role": "tool", "tool_call_id": "c\nO1", "content": "1"}]),
            "no earlier assistant message calls `c\\nO1`",
        );
        openai_fails(
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]),
            "messages[0].content[0]: the data: URL's bytes are not an image",
        );
        openai_fails(
            json!([{"role": "user", "content": [{"type": "input_audio"}]}]),
            "part type `input_audio` is not read",
        );
        // A message's image never names a local file (issue 26).
        for url in [
            "owl.png",
            "/etc/hostname",
            "file:///etc/hostname",
            "../keys.json",
        ] {
            openai_fails(
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]),
                "http(s) URL or a base64 data: URL",
            );
            let error = anthropic_messages(
                None,
                &json!([{"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": url}}]}]),
            )
            .unwrap_err();
            assert!(
                error.contains("http(s) URL or a base64 data: URL"),
                "{error}"
            );
        }
    }

    #[test]
    fn anthropic_conversations_read_with_tools_and_images() {
        let messages = anthropic_messages(
            Some(&json!([{"type": "text", "text": "Be terse."}])),
            &json!([
                {"role": "user", "content": "Count: a b"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Counting."},
                    {"type": "tool_use", "id": "t1", "name": "wc", "input": {"t": "a b"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "2"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "text", "text": "Now this."}]},
            ]),
        )
        .unwrap();
        let roles: Vec<Role> = messages.iter().map(|message| message.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::User
            ]
        );
        assert_eq!(messages[2].function_calls[0].name, "wc");
        assert_eq!(messages[3].content, "2");
        assert_eq!(messages[4].content, "Now this.");
        let error = anthropic_messages(
            None,
            &json!([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}]}]),
        )
        .unwrap_err();
        assert!(error.contains("messages[0].content[0]"), "{error}");
        let error = anthropic_messages(Some(&json!(3)), &json!([])).unwrap_err();
        assert!(error.contains("`system`"), "{error}");
    }
}
