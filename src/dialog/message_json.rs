//! How a `Message` is written and read. Written, a message leaves out what
//! it can be read back without: empty and default fields, a `name` that is
//! the role's own (`user`, `system`), and a `parsed.raw` that is the content
//! (`parsed` is then written without it, `{}` when nothing else is left).
//! Read, those come back, and `content` may also be a list of parts (the
//! Python framework's form).

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::{
    ApiType, ContentPart, FunctionCall, Message, Modality, Role, TokenLogprob, parts_text,
};

/// The key of the parser's output that holds the reply as received.
const RAW: &str = "raw";

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Message", 13)?;
        out.serialize_field("role", &self.role)?;
        out.serialize_field("content", &self.content)?;
        if self.name != self.role.as_str() {
            out.serialize_field("name", &self.name)?;
        }
        if !self.modality.is_text() {
            out.serialize_field("modality", &self.modality)?;
        }
        if !self.function_calls.is_empty() {
            out.serialize_field("function_calls", &self.function_calls)?;
        }
        if !self.parsed.is_empty() {
            out.serialize_field(
                "parsed",
                &ParsedWithoutCopy {
                    parsed: &self.parsed,
                    content: &self.content,
                },
            )?;
        }
        if !self.usage.is_empty() {
            out.serialize_field("usage", &self.usage)?;
        }
        if self.model.is_some() {
            out.serialize_field("model", &self.model)?;
        }
        if !self.logprobs.is_empty() {
            out.serialize_field("logprobs", &self.logprobs)?;
        }
        if !self.metadata.is_empty() {
            out.serialize_field("metadata", &self.metadata)?;
        }
        if !self.api_type.is_completion() {
            out.serialize_field("api_type", &self.api_type)?;
        }
        if !self.vectors.is_empty() {
            out.serialize_field("vectors", &self.vectors)?;
        }
        if !self.parts.is_empty() {
            out.serialize_field("parts", &self.parts)?;
        }
        out.end()
    }
}

/// `parsed` without its `raw` when `raw` is the message's content: a reply
/// is held once, not twice.
struct ParsedWithoutCopy<'a> {
    parsed: &'a Map<String, Value>,
    content: &'a str,
}

impl Serialize for ParsedWithoutCopy<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let copy = |key: &str, value: &Value| key == RAW && value.as_str() == Some(self.content);
        let mut out = serializer.serialize_map(None)?;
        for (key, value) in self.parsed {
            if !copy(key, value) {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

/// `Message` as it is read: `content` may be a list of parts (the Python
/// framework's form), which becomes `parts` with their text as `content`.
#[derive(Deserialize)]
pub(super) struct MessageFields {
    role: Role,
    content: Content,
    /// Left out when it is the role's own name (`user`, `system`).
    name: Option<String>,
    #[serde(default)]
    modality: Modality,
    #[serde(default)]
    function_calls: Vec<FunctionCall>,
    /// Without `raw` when `raw` is the content.
    parsed: Option<Map<String, Value>>,
    #[serde(default)]
    usage: Map<String, Value>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    logprobs: Vec<TokenLogprob>,
    #[serde(default)]
    metadata: Map<String, Value>,
    #[serde(default)]
    api_type: ApiType,
    #[serde(default)]
    vectors: Vec<f64>,
    #[serde(default)]
    parts: Vec<ContentPart>,
}

/// A `content` as written: text, or a list of parts.
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        struct ContentVisitor;
        impl<'de> serde::de::Visitor<'de> for ContentVisitor {
            type Value = Content;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a string or a list of content parts")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Content, E> {
                // The Python framework writes `None` content on tool-call messages.
                Ok(Content::Text(String::new()))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Content, E> {
                Ok(Content::Text(String::new()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

impl From<MessageFields> for Message {
    fn from(fields: MessageFields) -> Message {
        let (content, parts) = match fields.content {
            Content::Text(text) => (text, fields.parts),
            Content::Parts(parts) => (parts_text(&parts), parts),
        };
        let name = fields
            .name
            .unwrap_or_else(|| fields.role.as_str().to_string());
        // A written `parsed` (even `{}`) without `raw` had the content as `raw`.
        let parsed = match fields.parsed {
            Some(mut parsed) => {
                if !parsed.contains_key(RAW) {
                    parsed.shift_insert(0, RAW.into(), Value::String(content.clone()));
                }
                parsed
            }
            None => Map::new(),
        };
        Message {
            role: fields.role,
            content,
            name,
            modality: fields.modality,
            function_calls: fields.function_calls,
            parsed,
            usage: fields.usage,
            model: fields.model,
            logprobs: fields.logprobs,
            metadata: fields.metadata,
            api_type: fields.api_type,
            vectors: fields.vectors,
            parts,
        }
    }
}
