//! `Message` and the small types it carries: `Role`, `Modality`, `ApiType`,
//! `FunctionCall`, `TokenLogprob`.
//!
//! A message records what was said in one turn and nothing more; per-invoke
//! diagnostics (attempts, latency, errors) live on `AgentCallSession`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::cost::InvokeCost;

/// Who speaks. `ToolCall` is kept from the seeds for records that use it; the
/// loop itself writes tool requests as `Assistant` messages with `function_calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
    ToolCall,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::ToolCall => "tool_call",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modality {
    #[default]
    Text,
    Image,
}

impl Modality {
    fn is_text(&self) -> bool {
        *self == Modality::Text
    }
}

/// Which OpenAI API family produced or should receive a message (seed `APITypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiType {
    #[default]
    Completion,
    Response,
}

impl ApiType {
    fn is_completion(&self) -> bool {
        *self == ApiType::Completion
    }
}

/// One alternative token and its log probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f64,
}

/// Log probability of one generated token, with the alternatives when asked for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenLogprob {
    pub token: Option<String>,
    pub logprob: Option<f64>,
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// One invocation of a tool requested by the model, with its result once executed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FunctionCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
    /// The model's argument text when it was not a JSON object (D8); `arguments`
    /// is then empty and the call is answered with a tool-result error.
    pub raw_arguments: Option<String>,
    pub result: Option<Value>,
    pub result_str: Option<String>,
    pub error_message: Option<String>,
}

impl FunctionCall {
    /// Parses the model's argument text; anything but a JSON object is kept raw.
    pub fn from_model(id: impl Into<String>, name: impl Into<String>, arguments: &str) -> Self {
        let trimmed = arguments.trim();
        let parsed = if trimmed.is_empty() {
            Ok(Map::new())
        } else {
            match serde_json::from_str::<Value>(trimmed) {
                Ok(Value::Object(map)) => Ok(map),
                _ => Err(arguments.to_string()),
            }
        };
        let (arguments, raw_arguments) = match parsed {
            Ok(map) => (map, None),
            Err(raw) => (Map::new(), Some(raw)),
        };
        FunctionCall {
            id: id.into(),
            name: name.into(),
            arguments,
            raw_arguments,
            ..FunctionCall::default()
        }
    }

    /// The argument text to send back to a provider: the model's own text when it
    /// was malformed, compact JSON otherwise.
    pub fn arguments_text(&self) -> String {
        match &self.raw_arguments {
            Some(raw) => raw.clone(),
            None => Value::Object(self.arguments.clone()).to_string(),
        }
    }

    pub fn success(&self) -> bool {
        self.error_message.is_none() && self.result_str.is_some()
    }

    /// Same tool, same arguments (the seeds' `equals`).
    pub fn equals(&self, other: &FunctionCall) -> bool {
        self.name == other.name
            && self.raw_arguments == other.raw_arguments
            && self.arguments == other.arguments
    }

    pub fn is_repeated(&self, calls: &[FunctionCall]) -> bool {
        calls.iter().any(|call| self.equals(call))
    }
}

/// What was said in one turn (seed `Message`). Every field round-trips through JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Text, or base64 image bytes when `modality` is `Image`.
    pub content: String,
    pub name: String,
    // Empty and default fields are left out of records (they are most of a
    // message) and read back as their defaults.
    #[serde(default, skip_serializing_if = "Modality::is_text")]
    pub modality: Modality,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub function_calls: Vec<FunctionCall>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub parsed: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub usage: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<TokenLogprob>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    #[serde(default, skip_serializing_if = "ApiType::is_completion")]
    pub api_type: ApiType,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vectors: Vec<f64>,
}

impl Message {
    pub fn new(role: Role, name: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            name: name.into(),
            modality: Modality::Text,
            function_calls: Vec::new(),
            parsed: Map::new(),
            usage: Map::new(),
            model: None,
            logprobs: Vec::new(),
            metadata: Map::new(),
            api_type: ApiType::Completion,
            vectors: Vec::new(),
        }
    }

    pub fn system(content: impl Into<String>) -> Message {
        Message::new(Role::System, "system", content)
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::new(Role::User, "user", content)
    }

    pub fn assistant(name: impl Into<String>, content: impl Into<String>) -> Message {
        Message::new(Role::Assistant, name, content)
    }

    /// A tool result answering the call `tool_call_id`.
    pub fn tool(
        name: impl Into<String>,
        tool_call_id: &str,
        content: impl Into<String>,
    ) -> Message {
        let mut message = Message::new(Role::Tool, name, content);
        message
            .metadata
            .insert("tool_call_id".into(), Value::String(tool_call_id.into()));
        message
    }

    pub fn cost(&self) -> InvokeCost {
        InvokeCost::from_usage(&self.usage)
    }

    /// Whether `other` is a copy of this message: `==` with maps read in
    /// order. For a clone it answers like `==` at a fraction of the cost
    /// (`==` looks each key up); maps with the same entries in another order
    /// count as different, so `true` always implies `==`.
    pub fn is_copy_of(&self, other: &Message) -> bool {
        let Message {
            role,
            content,
            name,
            modality,
            function_calls,
            parsed,
            usage,
            model,
            logprobs,
            metadata,
            api_type,
            vectors,
        } = self;
        let in_order = |ours: &Map<String, Value>, theirs: &Map<String, Value>| {
            ours.len() == theirs.len() && ours.iter().eq(theirs.iter())
        };
        *role == other.role
            && *content == other.content
            && *name == other.name
            && *modality == other.modality
            && *api_type == other.api_type
            && *model == other.model
            && in_order(metadata, &other.metadata)
            && in_order(usage, &other.usage)
            && in_order(parsed, &other.parsed)
            && *function_calls == other.function_calls
            && *logprobs == other.logprobs
            && *vectors == other.vectors
    }

    /// Tokens this reply used, as `cost().total_tokens` counts them.
    pub fn total_tokens(&self) -> u64 {
        let count = |key: &str| self.usage.get(key).and_then(Value::as_u64);
        count("total_tokens").unwrap_or_else(|| {
            let (prompt, completion) = (count("prompt_tokens"), count("completion_tokens"));
            prompt.unwrap_or(0).saturating_add(completion.unwrap_or(0))
        })
    }

    pub fn is_function_call(&self) -> bool {
        !self.function_calls.is_empty()
    }

    /// The name with every character outside `[A-Za-z0-9_-]` replaced by `_`,
    /// cut to 64 characters: what providers accept in a `name` field.
    pub fn sanitized_name(&self) -> String {
        sanitize_name(&self.name)
    }

    pub fn tool_call_id(&self) -> Option<&str> {
        self.metadata.get("tool_call_id").and_then(Value::as_str)
    }

    /// The image's media type (set by `Dialog::put_image` from its magic bytes).
    pub fn mime_type(&self) -> Option<&str> {
        self.metadata.get("mime_type").and_then(Value::as_str)
    }
}

pub fn sanitize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_is_recognized_and_a_difference_is_not() {
        let mut message = Message::assistant("coder", "done");
        message.usage.insert("prompt_tokens".into(), json!(3));
        message.usage.insert("completion_tokens".into(), json!(1));
        message
            .metadata
            .insert("finish_reason".into(), json!("stop"));
        assert!(message.clone().is_copy_of(&message));
        let mut other = message.clone();
        other.usage.insert("completion_tokens".into(), json!(2));
        assert!(!other.is_copy_of(&message));
        let mut other = message.clone();
        other.content.push('!');
        assert!(!other.is_copy_of(&message));
        // The same entries in another order: equal, but not a copy.
        let mut reordered = message.clone();
        reordered.usage = Map::new();
        reordered.usage.insert("completion_tokens".into(), json!(1));
        reordered.usage.insert("prompt_tokens".into(), json!(3));
        assert_eq!(reordered, message);
        assert!(!reordered.is_copy_of(&message));
    }

    #[test]
    fn every_field_round_trips() {
        let mut message = Message::assistant("coder", "done");
        message.modality = Modality::Text;
        message.function_calls = vec![FunctionCall::from_model("c1", "grep", r#"{"q": "x"}"#)];
        message.parsed.insert("raw".into(), json!("done"));
        message.usage.insert("prompt_tokens".into(), json!(3));
        message.model = Some("gpt-4o".into());
        message.logprobs = vec![TokenLogprob {
            token: Some("done".into()),
            logprob: Some(-0.1),
            bytes: Some(vec![100]),
            top_logprobs: vec![TopLogprob {
                token: "ok".into(),
                logprob: -2.0,
            }],
        }];
        message.metadata.insert("dialog_id".into(), json!("abc"));
        message.api_type = ApiType::Response;
        message.vectors = vec![0.5, 1.5];
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, message);
    }

    #[track_caller]
    fn parsed_case(text: &str, arguments: Value, raw: Option<&str>) {
        let call = FunctionCall::from_model("id", "f", text);
        assert_eq!(Value::Object(call.arguments.clone()), arguments);
        assert_eq!(call.raw_arguments.as_deref(), raw);
    }

    #[test]
    fn malformed_arguments_are_kept_raw() {
        parsed_case(r#"{"a": 1}"#, json!({"a": 1}), None);
        parsed_case("", json!({}), None);
        parsed_case(r#"{"a": "#, json!({}), Some(r#"{"a": "#));
        parsed_case("[1, 2]", json!({}), Some("[1, 2]"));
    }

    #[test]
    fn repeat_detection_compares_name_and_arguments() {
        let a = FunctionCall::from_model("1", "f", r#"{"x": 1, "y": 2}"#);
        let b = FunctionCall::from_model("2", "f", r#"{"y": 2, "x": 1}"#);
        let c = FunctionCall::from_model("3", "f", r#"{"x": 2, "y": 2}"#);
        let d = FunctionCall::from_model("4", "g", r#"{"x": 1, "y": 2}"#);
        assert!(a.equals(&b));
        assert!(!a.equals(&c));
        assert!(!a.equals(&d));
        assert!(a.is_repeated(&[c.clone(), b]));
        assert!(!a.is_repeated(&[c, d]));
    }

    #[test]
    fn sanitized_names_are_provider_safe() {
        assert_eq!(sanitize_name("word count!"), "word_count_");
        assert_eq!(sanitize_name(&"x".repeat(80)).len(), 64);
    }
}
