//! Task lines (docs/formats.md §3): one JSON value per line of a TASKS file, read as a
//! stream so a file of any size is never held in memory.
//!
//! A line is `{"id", "task", "args", "tags", "metadata", "tactic", "model",
//! "model_args", "messages", "attachments"}` (`custom_id` is accepted for
//! `id`) or a bare JSON string, which is a task with id `line-N`. Blank lines
//! are skipped. `messages` is an OpenAI chat conversation: without `task`,
//! its last message (a user turn) is the task; without either, `args` is
//! (the task's input, as a tactic's `input_schema` describes it). Attachments are read here,
//! within the batch's `AttachmentScope` (relative paths from the TASKS file's
//! directory, which they may not leave but for `--attachments-dir`), so a
//! line whose file is missing, elsewhere or of an unknown type is a bad line
//! before anything is sent.
//! This module only parses; checking a task against its tactic is
//! `preflight`'s job.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::args::kind;
use crate::dialog::{Attachment, AttachmentScope, ContentPart, Role};

/// One parsed task line.
#[derive(Debug, Clone)]
pub struct Task {
    /// 1-based line number in the TASKS file.
    pub line: usize,
    pub id: String,
    /// What the tactic runs (its `id` is `Some(id)`).
    pub input: crate::tactic::Task,
    /// The line's own tactic, as written (relative to the TASKS file's directory).
    pub tactic: Option<String>,
    /// The line's `asserts`, its `expected` (an `equals`) and its
    /// `threshold` (issue 32; `None` when it has none of them). The
    /// tactic's own `asserts` come first when it is scored (`grade`).
    pub assertions: Option<std::sync::Arc<crate::eval::Assertions>>,
    /// With `--repeat`: the line's own id, which this run (`ID#k`) repeats.
    pub repeat_of: Option<String>,
}

const KEYS: [&str; 14] = [
    "id",
    "custom_id",
    "task",
    "args",
    "tags",
    "metadata",
    "tactic",
    "model",
    "model_args",
    "messages",
    "attachments",
    "expected",
    "asserts",
    "threshold",
];

/// Parses line `line` (1-based) of a file of lllm task lines whose
/// attachments are read within `attachments` (relative paths from its base,
/// the TASKS file's directory); `Ok(None)` for a blank line. The error says
/// what is wrong, without the file and line (the caller adds them).
pub fn parse_line(
    text: &str,
    line: usize,
    attachments: &AttachmentScope,
) -> Result<Option<Task>, String> {
    parse_line_for(text, line, attachments, Expected::Built)
}

/// [`parse_line`] for pre-flight, which checks a line and drops it: the
/// line's `expected` (any JSON value, so never a bad one) is kept as
/// written, not made into the `equals` assertion it stands for. The run,
/// which parses the line again, builds it once, when it scores the task.
pub fn check_line(
    text: &str,
    line: usize,
    attachments: &AttachmentScope,
) -> Result<Option<Task>, String> {
    parse_line_for(text, line, attachments, Expected::Kept)
}

/// Whether a line's `expected` is made into its `equals` assertion.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    Built,
    Kept,
}

fn parse_line_for(
    text: &str,
    line: usize,
    attachments: &AttachmentScope,
    expected: Expected,
) -> Result<Option<Task>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(text).map_err(|error| {
        format!(
            "column {}: not valid JSON: {}",
            error.column(),
            strip_position(&error.to_string())
        )
    })?;
    let default_id = || format!("line-{line}");
    let mut object = match value {
        Value::String(task) => {
            return Ok(Some(Task::new(
                line,
                crate::tactic::Task::new(task).id(default_id()),
                None,
            )));
        }
        Value::Object(object) => object,
        other => {
            return Err(format!(
                "a task line is a JSON object or a string, not {}",
                kind(&other)
            ));
        }
    };
    for key in object.keys() {
        if let Some(format) = super::formats::foreign_key(key) {
            return Err(format!(
                "`{key}` is a key of {format}, and this file holds lllm task lines (told by its \
                 first line); a file holds one format; hint: `--input-format` names it"
            ));
        }
        if !KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown key `{}` (a task line has {}){}",
                crate::suggest::printable(key),
                KEYS.map(|key| format!("`{key}`")).join(", "),
                crate::suggest::hint(key, KEYS)
            ));
        }
    }
    let id = match (object.remove("id"), object.remove("custom_id")) {
        (Some(_), Some(_)) => return Err("both `id` and `custom_id`; keep one".into()),
        (Some(id), None) | (None, Some(id)) => id_text(id)?,
        (None, None) => default_id(),
    };
    let mut messages = match object.remove("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(value) => crate::dialog::import::openai_messages(&value)?,
    };
    let scope = attachments;
    let mut attachments = Vec::new();
    let task = match object.remove("task") {
        // Not a task: a line that lost its value, which no tactic answers.
        Some(Value::Null) => {
            return Err(
                "`task` is null; a task is a text or a JSON value (hint: leave `task` \
                        out to take it from the last of `messages`)"
                    .into(),
            );
        }
        Some(task) => task,
        // Only arguments: they are the task, as a tactic's contract sees
        // its input (`Task::from_input`).
        None if messages.is_empty()
            && object
                .get("args")
                .and_then(Value::as_object)
                .is_some_and(|args| !args.is_empty()) =>
        {
            object.get("args").cloned().unwrap_or_default()
        }
        None => {
            let (task, parts) = last_user_turn(&mut messages)?;
            attachments = parts;
            task
        }
    };
    attachments.extend(read_attachments(object.remove("attachments"), scope)?);
    let model = match object.remove("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(model)) if !model.trim().is_empty() => Some(model),
        Some(other) => {
            return Err(format!(
                "`model` is a model name (`provider/model`), not {}",
                kind(&other)
            ));
        }
    };
    let model_args = object_field(&mut object, "model_args")?;
    for reserved in ["model", "messages"] {
        if model_args.contains_key(reserved) {
            return Err(format!(
                "`model_args` may not hold `{reserved}`; give it as the line's own `{reserved}`"
            ));
        }
    }
    // Checked as a tactic's are (ranges, keys lllm sets itself).
    if let Some(problem) = crate::config::model_args::check(&model_args, "", "model_args.")
        .into_iter()
        .next()
    {
        return Err(problem);
    }
    let args = object_field(&mut object, "args")?;
    let tags = object_field(&mut object, "tags")?;
    let metadata = object_field(&mut object, "metadata")?;
    if args.contains_key("task") || args.contains_key("args") {
        return Err("`args` may not hold the reserved keys `task` and `args`".into());
    }
    let tactic = match object.remove("tactic") {
        None | Some(Value::Null) => None,
        Some(Value::String(path)) if !path.trim().is_empty() => Some(path),
        Some(other) => {
            return Err(format!(
                "`tactic` is a path to a tactic file, not {}",
                kind(&other)
            ));
        }
    };
    let assertions = line_assertions(&mut object, scope.base(), expected)?;
    let input = crate::tactic::Task {
        id: Some(id),
        task,
        args,
        tags,
        metadata,
        model,
        model_args,
        messages,
        attachments,
    };
    let mut task = Task::new(line, input, tactic);
    task.assertions = assertions;
    Ok(Some(task))
}

/// A line's `asserts`, `expected` and `threshold` (issue 32), read and
/// checked as a tactic's `asserts` are; paths in them (a `command`'s
/// working directory, a `judge`) start at `base`, the TASKS file's
/// directory. `expected` [`Expected::Kept`]: the line's `expected` is not
/// made into its `equals` item (pre-flight's reading).
fn line_assertions(
    object: &mut serde_json::Map<String, Value>,
    base: &Path,
    build: Expected,
) -> Result<Option<std::sync::Arc<crate::eval::Assertions>>, String> {
    let mut items = match object.remove("asserts") {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => crate::eval::parse_list(&list, base).map_err(|problems| {
            let (at, problem) = problems.into_iter().next().unwrap_or_default();
            format!("`asserts{at}`: {problem}")
        })?,
    };
    let expected = object.remove("expected");
    if let Some(expected) = &expected
        && build == Expected::Built
    {
        items.push(crate::eval::expected(expected.clone()));
    }
    let threshold = match object.remove("threshold") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(threshold) if (0.0..=1.0).contains(&threshold) => Some(threshold),
            _ => {
                return Err(format!(
                    "`threshold` is the score, from 0 to 1, at which the task passes, not {}",
                    crate::words::json_kind(&value)
                ));
            }
        },
    };
    if items.is_empty() && expected.is_none() && threshold.is_none() {
        return Ok(None);
    }
    Ok(Some(std::sync::Arc::new(crate::eval::Assertions {
        items,
        threshold,
        expected,
    })))
}

impl Task {
    /// `input` must have its id.
    pub(crate) fn new(line: usize, input: crate::tactic::Task, tactic: Option<String>) -> Task {
        Task {
            line,
            id: input.id.clone().unwrap_or_else(|| format!("line-{line}")),
            input,
            tactic,
            assertions: None,
            repeat_of: None,
        }
    }
}

/// Takes the last message of a conversation as the task: it must be a user
/// turn; its text is the task, its images the first attachments.
pub(crate) fn last_user_turn(
    messages: &mut Vec<crate::dialog::Message>,
) -> Result<(Value, Vec<ContentPart>), String> {
    match messages.pop() {
        Some(last) if last.role == Role::User => {
            let images = last
                .parts
                .into_iter()
                .filter(|part| part.image_ref().is_some())
                .collect();
            Ok((Value::String(last.content), images))
        }
        Some(last) => Err(format!(
            "the last message is the task, so it is a `user` message, not `{}`",
            last.role
        )),
        None => Err(
            "no `task` (the text or value the tactic answers), no `messages` to take it from, and no `args` to stand for it"
                .into(),
        ),
    }
}

/// `attachments`: a list of paths, URLs and `data:` URLs, or objects
/// `{"path"}`, `{"url"}`, `{"base64", "name"}`; each read now, within `scope`.
fn read_attachments(
    value: Option<Value>,
    scope: &AttachmentScope,
) -> Result<Vec<ContentPart>, String> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(format!(
                "`attachments` is a list of paths, URLs or objects, not {}",
                kind(&other)
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(index, entry)| {
            let place = format!("`attachments[{index}]`");
            let attachment = match entry {
                Value::String(spec) => Attachment::parse(spec),
                Value::Object(object) => {
                    let text = |key: &str| object.get(key).and_then(Value::as_str);
                    match (text("path"), text("url"), text("base64")) {
                        (Some(path), None, None) => Ok(Attachment::Path(path.to_string())),
                        (None, Some(url), None) => Attachment::parse(url),
                        (None, None, Some(data)) => Attachment::base64(data, text("name")),
                        _ => {
                            return Err(format!(
                                "{place} is an object with one of `path`, `url`, `base64` (a string)"
                            ));
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "{place} is a path, a URL or an object, not {}",
                        kind(other)
                    ));
                }
            };
            attachment
                .and_then(|attachment| attachment.to_part(scope))
                .map_err(|error| format!("{place}: {error}"))
        })
        .collect()
}

fn id_text(id: Value) -> Result<String, String> {
    let text = match id {
        Value::String(text) => text,
        Value::Number(number) => number.to_string(),
        other => {
            return Err(format!(
                "`id` is a string or a number, not {}",
                kind(&other)
            ));
        }
    };
    if text.trim().is_empty() {
        return Err("`id` is empty".into());
    }
    Ok(text)
}

fn object_field(object: &mut Map<String, Value>, key: &str) -> Result<Map<String, Value>, String> {
    match object.remove(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(format!("`{key}` is an object, not {}", kind(&other))),
    }
}

/// serde_json appends ` at line 1 column 7`; we name the position ourselves.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |index| &message[..index])
}

/// The tactic file a task runs with: its own (relative to the TASKS file's
/// directory), else the `--tactic` default, else — for a task that names a
/// model — `fallback`, the batch's default tactic (`formats::DEFAULT_TACTIC`).
pub fn tactic_path(
    task: &Task,
    tasks_dir: &Path,
    default: Option<&Path>,
    fallback: Option<&Path>,
) -> Option<PathBuf> {
    match &task.tactic {
        Some(path) => Some(tasks_dir.join(path)),
        None => default
            .or(fallback.filter(|_| task.input.model.is_some()))
            .map(Path::to_path_buf),
    }
}

/// The lines of a TASKS file, numbered from 1, read lazily.
pub struct Lines {
    reader: Box<dyn BufRead + Send>,
    number: usize,
    buffer: String,
}

impl Lines {
    pub fn open(path: &Path) -> std::io::Result<Lines> {
        let (file, _) = crate::file::open_regular(path)?;
        Ok(Lines::of(file))
    }

    /// The lines `reader` gives (a TASKS file's copy, `batch::snapshot`).
    pub fn of(reader: impl std::io::Read + Send + 'static) -> Lines {
        Lines {
            reader: Box::new(std::io::BufReader::with_capacity(1 << 16, reader)),
            number: 0,
            buffer: String::new(),
        }
    }

    /// The next line and its number; `None` at the end. A line that is not
    /// UTF-8 is an error naming it. The file's byte order mark, if any, is
    /// no part of its first line (`file::without_bom`).
    pub fn next_line(&mut self) -> Option<Result<(usize, &str), String>> {
        self.buffer.clear();
        self.number += 1;
        match self.reader.read_line(&mut self.buffer) {
            Ok(0) => None,
            Ok(_) if self.number == 1 => {
                Some(Ok((self.number, crate::file::without_bom(&self.buffer))))
            }
            Ok(_) => Some(Ok((self.number, self.buffer.as_str()))),
            Err(error) => Some(Err(format!("line {}: {error}", self.number))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn ok(text: &str) -> Task {
        parse_line(text, 7, &AttachmentScope::default())
            .unwrap()
            .unwrap()
    }

    #[track_caller]
    fn err(text: &str, expected: &str) {
        let error = parse_line(text, 7, &AttachmentScope::default()).unwrap_err();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
    }

    #[test]
    fn parses_objects_strings_and_aliases() {
        let task = ok(r#"{"id": "a", "task": "hi", "args": {"x": 1}, "tags": {"k": "v"}}"#);
        assert_eq!(task.id, "a");
        assert_eq!(task.input.task, "hi");
        assert_eq!(task.input.args["x"], 1);
        assert_eq!(task.input.tags["k"], "v");
        assert_eq!(task.input.id.as_deref(), Some("a"));
        assert_eq!(ok(r#"{"custom_id": 12, "task": {"q": 1}}"#).id, "12");
        let bare = ok(r#""just text""#);
        assert_eq!(bare.id, "line-7");
        assert_eq!(bare.input.task, "just text");
        assert_eq!(ok(r#"{"task": "x"}"#).id, "line-7");
        // Only arguments: they are the task too.
        let task = ok(r#"{"id": "a", "args": {"ticket": "Printer on fire"}}"#);
        assert_eq!(
            task.input.task,
            serde_json::json!({"ticket": "Printer on fire"})
        );
        assert_eq!(task.input.args["ticket"], "Printer on fire");
        assert_eq!(
            ok(r#"{"id": "a", "task": "x", "tactic": "t.yaml"}"#)
                .tactic
                .as_deref(),
            Some("t.yaml")
        );
        assert!(
            parse_line("   \n", 1, &AttachmentScope::default())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        err(r#"{"id": "a", "task": "x""#, "column");
        err("[1, 2]", "not an array");
        err(r#"{"id": "a"}"#, "no `task`");
        err(r#"{"id": "a", "task": null}"#, "`task` is null");
        err("null", "not null");
        err(
            r#"{"id": "a", "task": "x", "arg": {}}"#,
            "did you mean `args`",
        );
        err(r#"{"id": "a", "custom_id": "b", "task": "x"}"#, "keep one");
        err(r#"{"id": "", "task": "x"}"#, "empty");
        err(r#"{"id": [1], "task": "x"}"#, "string or a number");
        err(
            r#"{"id": "a", "task": "x", "args": [1]}"#,
            "`args` is an object",
        );
        err(
            r#"{"id": "a", "task": "x", "args": {"task": 1}}"#,
            "reserved",
        );
        err(r#"{"id": "a", "task": "x", "tactic": 3}"#, "path");
        // A key holding a line break stays on the error's one line.
        err(
            r#"{"id": "a", "task": "x", "ar\ngs": {}}"#,
            "unknown key `ar\\ngs`",
        );
        assert!(
            !parse_line(r#"{"a\nb": 1}"#, 1, &AttachmentScope::default())
                .unwrap_err()
                .contains('\n')
        );
    }

    #[test]
    fn models_conversations_and_attachments() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("owl.jpg"), b"GIF89a-really-a-gif").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "owls hunt at night").unwrap();
        std::fs::write(dir.path().join("blob.bin"), b"\x00\x01\x02").unwrap();
        let scope = AttachmentScope::default().confine_to(dir.path()).unwrap();
        let parse = |text: &str| parse_line(text, 2, &scope);
        let task = parse(
            r#"{"id": "a", "model": "mock/echo", "model_args": {"temperature": 0},
                "messages": [{"role": "system", "content": "Be terse."},
                             {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello."},
                             {"role": "user", "content": "Which bird?"}],
                "attachments": ["owl.jpg", {"path": "notes.txt"}, {"base64": "aGk=", "name": "hi.txt"},
                                "https://example.com/a.png"]}"#,
        )
        .unwrap()
        .unwrap()
        .input;
        assert_eq!(task.task, "Which bird?");
        assert_eq!(task.model.as_deref(), Some("mock/echo"));
        assert_eq!(task.model_args["temperature"], 0);
        assert_eq!(task.system_prompt().as_deref(), Some("Be terse."));
        assert_eq!(task.history().count(), 2);
        let shown: Vec<String> = task
            .attachments
            .iter()
            .map(|part| part.to_string())
            .collect();
        assert_eq!(
            shown,
            [
                "<image image/gif>",
                "<file name=\"notes.txt\">\nowls hunt at night\n</file>",
                "<file name=\"hi.txt\">\nhi\n</file>",
                "<image https://example.com/a.png>",
            ]
        );
        // With `task`, every message is history.
        let task = parse(r#"{"task": "q", "messages": [{"role": "user", "content": "earlier"}]}"#)
            .unwrap()
            .unwrap()
            .input;
        assert_eq!((task.task.as_str(), task.history().count()), (Some("q"), 1));

        let fails = |text: &str, expected: &str| {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{error:?} lacks {expected:?}");
            assert!(!error.contains('\n'), "{error:?}");
        };
        fails(
            r#"{"task": "x", "attachments": ["blob.bin"]}"#,
            "`attachments[0]`: attachment",
        );
        fails(
            r#"{"task": "x", "attachments": ["blob.bin"]}"#,
            "neither an image",
        );
        fails(r#"{"task": "x", "attachments": ["gone.png"]}"#, "gone.png");
        fails(
            r#"{"task": "x", "attachments": [{"file": "a"}]}"#,
            "one of `path`, `url`, `base64`",
        );
        fails(
            r#"{"task": "x", "attachments": "owl.jpg"}"#,
            "`attachments` is a list",
        );
        fails(r#"{"task": "x", "model": 4}"#, "`model` is a model name");
        fails(
            r#"{"task": "x", "model_args": {"model": "m"}}"#,
            "may not hold `model`",
        );
        fails(
            r#"{"task": "x", "model_args": [1]}"#,
            "`model_args` is an object",
        );
        fails(
            r#"{"task": "x", "model_args": {"temperature": -1}}"#,
            "`model_args.temperature: -1` must be a number from 0 to 2 (sampling temperature)",
        );
        fails(
            r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}"#,
            "the last message is the task",
        );
        fails(
            r#"{"messages": [{"role": "usr", "content": "a"}]}"#,
            "messages[0].role `usr`",
        );
        fails(r#"{"messages": []}"#, "no `task`");
    }
}
