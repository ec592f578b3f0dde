//! Image parts as the real APIs take them, refused otherwise with their kind
//! of error (issue 15), so a client that passes here sends images the APIs
//! accept:
//!
//! - chat completions: an `image_url` part only in a `user` message, its
//!   `image_url.url` an `http(s)` URL or a `data:image/{png,jpeg,gif,webp};base64,`
//!   URL, `detail` one of `auto`, `low`, `high`; a part's `type` one of the
//!   documented ones;
//! - Anthropic Messages: an `image` block only in a `user` turn, its `source`
//!   `{type: base64, media_type, data}` with a media type of `image/jpeg`,
//!   `image/png`, `image/gif` or `image/webp` that matches the bytes (the API
//!   checks the data against the declared type), or `{type: url, url}`.

use serde_json::Value;

const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Chat completions' `messages`.
pub fn check_chat(request: &Value) -> Result<(), String> {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, message) in messages.iter().enumerate() {
        let Some(parts) = message.get("content").and_then(Value::as_array) else {
            continue;
        };
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        for (number, part) in parts.iter().enumerate() {
            let place = format!("messages[{index}].content[{number}]");
            match part.get("type").and_then(Value::as_str) {
                Some("text" | "input_audio" | "file" | "refusal") => {}
                Some("image_url") if role != "user" => {
                    return Err(format!(
                        "Invalid 'messages[{index}]'. Image URLs are only allowed for messages with role 'user', but this message with role '{role}' contains an image URL."
                    ));
                }
                Some("image_url") => {
                    let image = part.get("image_url");
                    let url = image
                        .and_then(|image| image.get("url"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            format!("Missing required parameter: '{place}.image_url.url'.")
                        })?;
                    if let Some(detail) = image.and_then(|image| image.get("detail"))
                        && !matches!(detail.as_str(), Some("auto" | "low" | "high"))
                    {
                        return Err(format!(
                            "Invalid value: {detail}. Supported values are: 'auto', 'low', and 'high'."
                        ));
                    }
                    check_url(url, &place)?;
                }
                Some(other) => {
                    return Err(format!(
                        "Invalid value: '{other}'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', and 'file'."
                    ));
                }
                None => return Err(format!("Missing required parameter: '{place}.type'.")),
            }
        }
    }
    Ok(())
}

fn check_url(url: &str, place: &str) -> Result<(), String> {
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(());
    }
    let Some((media_type, data)) = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    else {
        return Err(format!(
            "Invalid '{place}.image_url.url'. Expected a base64-encoded data URL with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got a value without the 'data:' prefix."
        ));
    };
    if !MEDIA_TYPES.contains(&media_type) {
        return Err(format!(
            "Invalid MIME type '{media_type}' in '{place}.image_url.url'. Supported image formats are image/jpeg, image/png, image/gif and image/webp."
        ));
    }
    if lllm::dialog::image_mime_type(&leading_bytes(data)).is_none() {
        return Err(
            "You uploaded an unsupported image. Please make sure your image is valid.".into(),
        );
    }
    Ok(())
}

/// Anthropic's `messages`.
pub fn check_anthropic(request: &Value) -> Result<(), String> {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, message) in messages.iter().enumerate() {
        let Some(blocks) = message.get("content").and_then(Value::as_array) else {
            continue;
        };
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        for (number, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) != Some("image") {
                continue;
            }
            let place = format!("messages.{index}.content.{number}.image");
            if role != "user" {
                return Err(format!(
                    "messages.{index}.content.{number}: image blocks are only allowed in user turns"
                ));
            }
            let source = block.get("source").unwrap_or(&Value::Null);
            let text = |key: &str| source.get(key).and_then(Value::as_str);
            match text("type") {
                Some("base64") => {
                    let media_type = text("media_type").unwrap_or("");
                    if !MEDIA_TYPES.contains(&media_type) {
                        return Err(format!(
                            "{place}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
                        ));
                    }
                    let data = text("data")
                        .ok_or_else(|| format!("{place}.source.base64.data: Field required"))?;
                    match lllm::dialog::image_mime_type(&leading_bytes(data)) {
                        Some(actual) if actual == media_type => {}
                        Some(actual) => {
                            return Err(format!(
                                "{place}.source.base64.data: The image was specified using the {media_type} media type, but the image appears to be a {actual} image"
                            ));
                        }
                        None => {
                            return Err(format!(
                                "{place}.source.base64.data: Could not process image"
                            ));
                        }
                    }
                }
                Some("url") if text("url").is_some() => {}
                Some("url") => return Err(format!("{place}.source.url.url: Field required")),
                _ => {
                    return Err(format!(
                        "{place}.source: Input tag does not match any of the expected tags: 'base64', 'url', 'file'"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The first bytes of base64 `data` (enough for a magic number), decoded
/// without a dependency: 16 characters are 12 bytes.
fn leading_bytes(data: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut bytes = Vec::new();
    for chunk in data.as_bytes().chunks(4).take(4) {
        let Some(values) = chunk
            .iter()
            .map(|c| value(*c))
            .collect::<Option<Vec<u32>>>()
        else {
            // Padding or a stray character: what came before is all there is.
            let whole: Vec<u32> = chunk.iter().map_while(|c| value(*c)).collect();
            push(&mut bytes, &whole);
            break;
        };
        push(&mut bytes, &values);
    }
    bytes
}

fn push(bytes: &mut Vec<u8>, values: &[u32]) {
    let joined = values
        .iter()
        .enumerate()
        .fold(0u32, |sum, (index, value)| sum | value << (18 - 6 * index));
    let count = values.len().saturating_sub(1);
    for index in 0..count {
        bytes.push((joined >> (16 - 8 * index)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn leading_bytes_decode_base64() {
        assert_eq!(leading_bytes("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
        assert_eq!(leading_bytes("R0lGODlh"), b"GIF89a");
        assert_eq!(leading_bytes("aGk="), b"hi");
    }

    #[test]
    fn chat_images_as_openai_takes_them() {
        let with = |role: &str, url: &str| {
            json!({"messages": [{"role": role, "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": url}}]}]})
        };
        assert!(check_chat(&with("user", "data:image/png;base64,iVBORw0KGgo=")).is_ok());
        assert!(check_chat(&with("user", "https://example.com/a.png")).is_ok());
        let error = check_chat(&with("system", "https://example.com/a.png")).unwrap_err();
        assert!(
            error.contains("only allowed for messages with role 'user'"),
            "{error}"
        );
        let error = check_chat(&with("user", "data:image/bmp;base64,Qk0=")).unwrap_err();
        assert!(error.contains("Invalid MIME type 'image/bmp'"), "{error}");
        let error = check_chat(&with("user", "data:image/png;base64,aGVsbG8=")).unwrap_err();
        assert!(error.contains("unsupported image"), "{error}");
        let error = check_chat(&with("user", "owl.png")).unwrap_err();
        assert!(error.contains("data:"), "{error}");
        let bad_type =
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]});
        assert!(
            check_chat(&bad_type)
                .unwrap_err()
                .contains("Invalid value: 'image'")
        );
    }

    #[test]
    fn anthropic_images_as_anthropic_takes_them() {
        let with = |role: &str, source: Value| json!({"messages": [{"role": role, "content": [{"type": "image", "source": source}, {"type": "text", "text": "?"}]}]});
        let png = json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="});
        assert!(check_anthropic(&with("user", png.clone())).is_ok());
        assert!(
            check_anthropic(&with(
                "user",
                json!({"type": "url", "url": "https://e.com/a.png"})
            ))
            .is_ok()
        );
        assert!(
            check_anthropic(&with("assistant", png))
                .unwrap_err()
                .contains("only allowed in user turns")
        );
        let mislabelled =
            json!({"type": "base64", "media_type": "image/jpeg", "data": "iVBORw0KGgo="});
        let error = check_anthropic(&with("user", mislabelled)).unwrap_err();
        assert!(error.contains("appears to be a image/png image"), "{error}");
        let openai_shape = json!({"url": "data:image/png;base64,iVBORw0KGgo="});
        assert!(
            check_anthropic(&with("user", openai_shape))
                .unwrap_err()
                .contains("expected tags")
        );
    }
}
