//! The formats a TASKS file may be in (issue 15): lllm's own task lines
//! (`tasks`), OpenAI Batch API request lines (`{custom_id, method, url,
//! body}`), and Anthropic Message Batches requests (`{custom_id, params}`).
//! The format is told by the file's first non-blank line, or forced with
//! `--input-format`; every line must then be in it (a line of another format
//! is an error naming it).
//!
//! A provider line becomes a task: `custom_id` its id, the body's `model`
//! the model of every agent, its conversation the dialog (system → system
//! prompt, earlier turns → history, the last user turn → the task, its
//! images → attachments), and its other fields model arguments. With no
//! tactic, it runs on the default tactic (`DEFAULT_TACTIC`).

use std::path::Path;

use serde_json::{Map, Value};

use super::tasks::{self, Task};

/// Which format a TASKS file's lines are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// lllm's task lines (`{"id", "task", …}` or a JSON string).
    Lllm,
    /// OpenAI Batch API input lines (`custom_id`, `method`, `url`, `body`).
    OpenAi,
    /// Anthropic Message Batches requests (`custom_id`, `params`).
    Anthropic,
}

impl InputFormat {
    /// `lllm`, `openai` or `anthropic` (`--input-format`).
    pub fn from_name(name: &str) -> Result<InputFormat, String> {
        match name {
            "lllm" => Ok(InputFormat::Lllm),
            "openai" => Ok(InputFormat::OpenAi),
            "anthropic" => Ok(InputFormat::Anthropic),
            other => Err(format!(
                "unknown input format `{other}`; the formats are `lllm`, `openai`, `anthropic`{}",
                crate::suggest::hint(other, ["lllm", "openai", "anthropic"])
            )),
        }
    }

    /// The format a line is in, by its keys (lllm's when it is not a
    /// provider's, or not an object).
    pub fn of_line(text: &str) -> InputFormat {
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text.trim()) else {
            return InputFormat::Lllm;
        };
        if object.contains_key("params") && !object.contains_key("task") {
            InputFormat::Anthropic
        } else if object.contains_key("body") || object.contains_key("method") {
            InputFormat::OpenAi
        } else {
            InputFormat::Lllm
        }
    }

    fn plural(self) -> &'static str {
        match self {
            InputFormat::Lllm => "lllm task lines",
            InputFormat::OpenAi => "OpenAI Batch API lines",
            InputFormat::Anthropic => "Anthropic Message Batches lines",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            InputFormat::Lllm => "an lllm task line",
            InputFormat::OpenAi => {
                "an OpenAI Batch API line (`custom_id`, `method`, `url`, `body`)"
            }
            InputFormat::Anthropic => "an Anthropic Message Batches line (`custom_id`, `params`)",
        }
    }
}

/// Keys that mark a provider's batch line, with the format they belong to
/// (to name it when such a line is in a file of lllm task lines).
pub fn foreign_key(key: &str) -> Option<&'static str> {
    match key {
        "method" | "url" | "body" => Some("the OpenAI Batch API's lines"),
        "params" => Some("Anthropic Message Batches lines"),
        _ => None,
    }
}

/// Parses the lines of one TASKS file, in its format.
#[derive(Debug, Clone)]
pub struct LineReader {
    /// The file's format.
    pub format: InputFormat,
    /// Which files the lines' attachments may be read from: the TASKS
    /// file's directory (where relative paths start) and the directories
    /// the user allowed, never lllm's secrets.
    pub attachments: crate::dialog::AttachmentScope,
}

impl LineReader {
    /// The reader of `path`: `forced` when given, else the format of its
    /// first non-blank line. Attachments are read within `attachments`
    /// confined to the file's directory.
    pub fn for_file(
        path: &Path,
        forced: Option<InputFormat>,
        attachments: &crate::dialog::AttachmentScope,
    ) -> std::io::Result<LineReader> {
        LineReader::for_lines(path, tasks::Lines::open(path)?, forced, attachments)
    }

    /// The reader of the TASKS file at `path`, whose lines `lines` gives (its
    /// copy, `batch::snapshot`): `forced` when given, else the format of its
    /// first non-blank line. Attachments are read within `attachments`
    /// confined to the file's directory.
    pub fn for_lines(
        path: &Path,
        mut lines: tasks::Lines,
        forced: Option<InputFormat>,
        attachments: &crate::dialog::AttachmentScope,
    ) -> std::io::Result<LineReader> {
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let attachments = attachments.clone().confine_to(base_dir)?;
        let format = match forced {
            Some(format) => format,
            None => {
                let mut format = InputFormat::Lllm;
                while let Some(line) = lines.next_line() {
                    let (_, text) = line.map_err(std::io::Error::other)?;
                    if !text.trim().is_empty() {
                        format = InputFormat::of_line(text);
                        break;
                    }
                }
                format
            }
        };
        Ok(LineReader {
            format,
            attachments,
        })
    }

    /// Parses line `line`; `Ok(None)` for a blank line.
    pub fn parse(&self, text: &str, line: usize) -> Result<Option<Task>, String> {
        self.parse_for(text, line, tasks::parse_line)
    }

    /// [`LineReader::parse`] for pre-flight, which checks the task and
    /// drops it ([`tasks::check_line`]: a line's `expected` is not made
    /// into its assertion until the run).
    pub fn check(&self, text: &str, line: usize) -> Result<Option<Task>, String> {
        self.parse_for(text, line, tasks::check_line)
    }

    /// Parses line `line`, an lllm task line by `lllm_line`.
    fn parse_for(
        &self,
        text: &str,
        line: usize,
        lllm_line: fn(&str, usize, &crate::dialog::AttachmentScope) -> Result<Option<Task>, String>,
    ) -> Result<Option<Task>, String> {
        if text.trim().is_empty() {
            return Ok(None);
        }
        match self.format {
            InputFormat::Lllm => lllm_line(text, line, &self.attachments),
            format => {
                let found = InputFormat::of_line(text);
                if found != format {
                    return Err(format!(
                        "{} in a file of {} (told by its first line, or `--input-format`); a \
                         file holds one format",
                        found.describe(),
                        format.plural()
                    ));
                }
                provider_line(text, format).map(|input| Some(Task::new(line, input, None)))
            }
        }
    }
}

/// The id of a line, whatever its format: `id` or `custom_id`, else `line-N`
/// (what `lllm batch merge` needs, without reading attachments).
pub fn line_id(text: &str, line: usize) -> Option<String> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let id = match &value {
        Value::Object(object) => object.get("id").or_else(|| object.get("custom_id")),
        Value::String(_) => None,
        _ => return None,
    };
    Some(match id {
        Some(Value::String(id)) => id.clone(),
        Some(Value::Number(id)) => id.to_string(),
        _ => format!("line-{line}"),
    })
}

/// Body fields that lllm does not take from a provider line: the tactic's
/// agents bring the tools, and a batch never streams.
const REFUSED: [(&str, &str); 5] = [
    ("tools", "tools come from the tactic's agents (`--tactic`)"),
    (
        "tool_choice",
        "tools come from the tactic's agents (`--tactic`)",
    ),
    (
        "functions",
        "tools come from the tactic's agents (`--tactic`)",
    ),
    ("stream", "a batch does not stream"),
    ("n", "one reply per task"),
];

/// One OpenAI or Anthropic batch line as a task.
fn provider_line(text: &str, format: InputFormat) -> Result<crate::tactic::Task, String> {
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|error| format!("column {}: not valid JSON: {error}", error.column()))?;
    let Value::Object(mut object) = value else {
        return Err("a batch line is a JSON object".into());
    };
    let id = match object.remove("custom_id") {
        Some(Value::String(id)) if !id.trim().is_empty() => id,
        Some(_) => return Err("`custom_id` is a non-empty string".into()),
        None => return Err("no `custom_id` (the id of the request)".into()),
    };
    let (body, body_name, allowed) = match format {
        InputFormat::OpenAi => {
            match object.remove("method") {
                Some(Value::String(method)) if method == "POST" => {}
                other => {
                    return Err(format!(
                        "`method` is `POST`, not {}",
                        other.map_or("missing".to_string(), |value| value.to_string())
                    ));
                }
            }
            match object.remove("url") {
                Some(Value::String(url))
                    if url == "/v1/chat/completions" || url == "/chat/completions" => {}
                other => {
                    return Err(format!(
                        "`url` is `/v1/chat/completions` (the endpoint lllm's agents call), not {}",
                        other.map_or("missing".to_string(), |value| value.to_string())
                    ));
                }
            }
            (
                object.remove("body"),
                "body",
                ["custom_id", "method", "url", "body"].as_slice(),
            )
        }
        _ => (
            object.remove("params"),
            "params",
            ["custom_id", "params"].as_slice(),
        ),
    };
    if let Some(key) = object.keys().next() {
        return Err(format!(
            "unknown key `{}` (a line has {})",
            crate::suggest::printable(key),
            allowed
                .iter()
                .map(|key| format!("`{key}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let Some(Value::Object(mut body)) = body else {
        return Err(format!("`{body_name}` is an object (the request)"));
    };
    let model = match body.remove("model") {
        Some(Value::String(model)) if !model.trim().is_empty() => model,
        _ => return Err(format!("`{body_name}.model` is a model name")),
    };
    let messages = body
        .remove("messages")
        .ok_or_else(|| format!("`{body_name}.messages` is missing"))?;
    let mut messages = match format {
        InputFormat::OpenAi => crate::dialog::import::openai_messages(&messages),
        _ => crate::dialog::import::anthropic_messages(body.remove("system").as_ref(), &messages),
    }
    .map_err(|error| format!("`{body_name}`: {error}"))?;
    for (key, why) in REFUSED {
        if body.contains_key(key) {
            return Err(format!("`{body_name}.{key}` is not taken: {why}"));
        }
    }
    let prefix = format!("{body_name}.");
    if let Some(problem) = crate::config::model_args::check(&body, "", &prefix)
        .into_iter()
        .next()
    {
        return Err(problem);
    }
    let (task, attachments) = tasks::last_user_turn(&mut messages)?;
    Ok(crate::tactic::Task {
        id: Some(id),
        task,
        model: Some(qualified(&model, format)),
        model_args: model_args(body),
        messages,
        attachments,
        ..crate::tactic::Task::default()
    })
}

/// A body's model as lllm names it: an Anthropic line's bare model is an
/// `anthropic/` one (a bare name means `openai/`); a `provider/model` name
/// stays as it is, so `mock/echo` works in either file.
fn qualified(model: &str, format: InputFormat) -> String {
    match format {
        InputFormat::Anthropic if !model.contains('/') => format!("anthropic/{model}"),
        _ => model.to_string(),
    }
}

/// The body's other fields, under the names lllm's model arguments use
/// (OpenAI's; the Anthropic provider maps them back): `stop_sequences` is
/// `stop`; `max_tokens` and `max_completion_tokens` stay as given (each
/// provider sends its own name).
fn model_args(body: Map<String, Value>) -> Map<String, Value> {
    body.into_iter()
        .map(|(key, value)| match key.as_str() {
            "stop_sequences" => ("stop".to_string(), value),
            _ => (key, value),
        })
        .collect()
}

/// The tactic a provider line (or an lllm line with a `model`) runs on when
/// `--tactic` gives none: one agent, no system prompt beyond the line's own
/// messages, a plain-text reply. Its model is the line's.
pub const DEFAULT_TACTIC: &str = "\
# Written by `lllm batch` for lines that name no tactic: one agent answers
# each task with the line's model, with no system prompt beyond the line's
# own messages; its reply, as plain text, is the delivery.
tactic_type: batch_default
agent_configs:
  - name: assistant
    model_name: mock/echo
    system_prompt: \"\"
";

/// The file the default tactic is written to, in the output directory (so
/// `lllm replay --rerun` finds it).
pub const DEFAULT_TACTIC_FILE: &str = "default_tactic.yaml";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reader(format: InputFormat) -> LineReader {
        LineReader {
            format,
            attachments: crate::dialog::AttachmentScope::default(),
        }
    }

    #[track_caller]
    fn ok(format: InputFormat, line: Value) -> crate::tactic::Task {
        reader(format)
            .parse(&line.to_string(), 3)
            .unwrap()
            .unwrap()
            .input
    }

    #[track_caller]
    fn err(format: InputFormat, line: Value, expected: &str) {
        let error = reader(format).parse(&line.to_string(), 3).unwrap_err();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        assert!(!error.contains('\n'));
    }

    #[test]
    fn formats_are_told_by_their_keys() {
        let cases = [
            (
                r#"{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}"#,
                InputFormat::OpenAi,
            ),
            (
                r#"{"custom_id": "a", "params": {}}"#,
                InputFormat::Anthropic,
            ),
            (r#"{"custom_id": "a", "task": "x"}"#, InputFormat::Lllm),
            (r#""just text""#, InputFormat::Lllm),
            ("not json", InputFormat::Lllm),
        ];
        for (line, format) in cases {
            assert_eq!(InputFormat::of_line(line), format, "{line}");
        }
        assert!(
            InputFormat::from_name("opnai")
                .unwrap_err()
                .contains("did you mean `openai`")
        );
    }

    #[test]
    fn openai_lines_become_tasks() {
        let task = ok(
            InputFormat::OpenAi,
            json!({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "gpt-4o-mini", "max_completion_tokens": 50, "temperature": 0,
                            "messages": [{"role": "system", "content": "Be terse."},
                                         {"role": "user", "content": "Hi"},
                                         {"role": "assistant", "content": "Hello."},
                                         {"role": "user", "content": [
                                             {"type": "text", "text": "Which bird?"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}}),
        );
        assert_eq!(task.id.as_deref(), Some("r1"));
        assert_eq!(task.model.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(task.task, "Which bird?");
        assert_eq!(task.system_prompt().as_deref(), Some("Be terse."));
        assert_eq!(task.history().count(), 2);
        assert_eq!(task.attachments[0].to_string(), "<image image/png>");
        assert_eq!(task.model_args["max_completion_tokens"], 50);
        assert_eq!(task.model_args["temperature"], 0);
    }

    #[test]
    fn anthropic_lines_become_tasks() {
        let task = ok(
            InputFormat::Anthropic,
            json!({"custom_id": "r2", "params": {"model": "claude-haiku-4-5", "max_tokens": 100,
                   "system": "Be terse.", "stop_sequences": ["END"],
                   "messages": [{"role": "user", "content": "Hi"}]}}),
        );
        assert_eq!(task.model.as_deref(), Some("anthropic/claude-haiku-4-5"));
        assert_eq!(task.task, "Hi");
        assert_eq!(task.system_prompt().as_deref(), Some("Be terse."));
        assert_eq!(task.model_args["max_tokens"], 100);
        assert_eq!(task.model_args["stop"], json!(["END"]));
    }

    #[test]
    fn bad_provider_lines_say_what_is_wrong() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let line = |extra: Value| {
            let mut line = json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body});
            for (key, value) in extra.as_object().unwrap() {
                line[key] = value.clone();
            }
            line
        };
        err(
            InputFormat::OpenAi,
            line(json!({"url": "/v1/embeddings"})),
            "`url` is `/v1/chat/completions`",
        );
        err(
            InputFormat::OpenAi,
            line(json!({"method": "GET"})),
            "`method` is `POST`",
        );
        err(
            InputFormat::OpenAi,
            line(json!({"extra": 1})),
            "unknown key `extra`",
        );
        err(
            InputFormat::OpenAi,
            line(json!({"custom_id": ""})),
            "`custom_id`",
        );
        err(
            InputFormat::OpenAi,
            line(json!({"body": {"messages": []}})),
            "`body.model`",
        );
        err(
            InputFormat::OpenAi,
            line(
                json!({"body": {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": []}}),
            ),
            "`body.tools` is not taken",
        );
        err(
            InputFormat::OpenAi,
            line(
                json!({"body": {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}}),
            ),
            "`body.max_tokens: 0` must be a whole number from 1 to 100000000 (tokens)",
        );
        err(
            InputFormat::Anthropic,
            json!({"custom_id": "a", "params": {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3}}),
            "`params.temperature: 3` must be a number from 0 to 2",
        );
        err(
            InputFormat::OpenAi,
            line(json!({"body": {"model": "m", "messages": [{"role": "bot", "content": "x"}]}})),
            "`body`: messages[0].role `bot`",
        );
        err(
            InputFormat::OpenAi,
            line(
                json!({"body": {"model": "m", "messages": [{"role": "assistant", "content": "x"}]}}),
            ),
            "the last message is the task",
        );
        err(
            InputFormat::OpenAi,
            json!({"custom_id": "a", "params": body}),
            "Anthropic Message Batches line (`custom_id`, `params`) in a file of OpenAI Batch API lines",
        );
        err(
            InputFormat::Anthropic,
            json!({"custom_id": "a", "task": "x"}),
            "an lllm task line in a file of Anthropic",
        );
        err(
            InputFormat::Anthropic,
            json!({"custom_id": "a", "params": {"model": "m"}}),
            "`params.messages` is missing",
        );
        // An lllm line file meeting a provider line names the format.
        let error = reader(InputFormat::Lllm)
            .parse(&line(json!({})).to_string(), 3)
            .unwrap_err();
        assert!(error.contains("the OpenAI Batch API's lines"), "{error}");
        assert_eq!(
            line_id(r#"{"custom_id": "x", "params": {}}"#, 4).as_deref(),
            Some("x")
        );
        assert_eq!(line_id(r#""t""#, 4).as_deref(), Some("line-4"));
    }
}
