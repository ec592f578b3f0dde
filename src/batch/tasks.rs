//! Task lines (DESIGN §6): one JSON value per line of a TASKS file, read as a
//! stream so a file of any size is never held in memory.
//!
//! A line is `{"id", "task", "args", "tags", "metadata", "tactic"}` (`custom_id` is
//! accepted for `id`) or a bare JSON string, which is a task with id `line-N`.
//! Blank lines are skipped. This module only parses; checking a task against
//! its tactic is `preflight`'s job.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

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
}

const KEYS: [&str; 7] = [
    "id",
    "custom_id",
    "task",
    "args",
    "tags",
    "metadata",
    "tactic",
];

/// Parses line `line` (1-based); `Ok(None)` for a blank line. The error says
/// what is wrong, without the file and line (the caller adds them).
pub fn parse_line(text: &str, line: usize) -> Result<Option<Task>, String> {
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
                default_id(),
                Value::String(task),
                Map::new(),
                Map::new(),
                Map::new(),
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
    let task = object
        .remove("task")
        .ok_or_else(|| "no `task` (the text or value the tactic answers)".to_string())?;
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
    Ok(Some(Task::new(
        line, id, task, args, tags, metadata, tactic,
    )))
}

impl Task {
    fn new(
        line: usize,
        id: String,
        task: Value,
        args: Map<String, Value>,
        tags: Map<String, Value>,
        metadata: Map<String, Value>,
        tactic: Option<String>,
    ) -> Task {
        let input = crate::tactic::Task {
            id: Some(id.clone()),
            task,
            args,
            tags,
            metadata,
        };
        Task {
            line,
            id,
            input,
            tactic,
        }
    }
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

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde_json appends ` at line 1 column 7`; we name the position ourselves.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |index| &message[..index])
}

/// The tactic file a task runs with: its own (relative to the TASKS file's
/// directory), else the `--tactic` default.
pub fn tactic_path(task: &Task, tasks_dir: &Path, default: Option<&Path>) -> Option<PathBuf> {
    match &task.tactic {
        Some(path) => Some(tasks_dir.join(path)),
        None => default.map(Path::to_path_buf),
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
        Ok(Lines {
            reader: Box::new(std::io::BufReader::with_capacity(1 << 16, file)),
            number: 0,
            buffer: String::new(),
        })
    }

    /// The next line and its number; `None` at the end. A line that is not
    /// UTF-8 is an error naming it.
    pub fn next_line(&mut self) -> Option<Result<(usize, &str), String>> {
        self.buffer.clear();
        self.number += 1;
        match self.reader.read_line(&mut self.buffer) {
            Ok(0) => None,
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
        parse_line(text, 7).unwrap().unwrap()
    }

    #[track_caller]
    fn err(text: &str, expected: &str) {
        let error = parse_line(text, 7).unwrap_err();
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
        assert_eq!(
            ok(r#"{"id": "a", "task": "x", "tactic": "t.yaml"}"#)
                .tactic
                .as_deref(),
            Some("t.yaml")
        );
        assert!(parse_line("   \n", 1).unwrap().is_none());
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        err(r#"{"id": "a", "task": "x""#, "column");
        err("[1, 2]", "not an array");
        err(r#"{"id": "a"}"#, "no `task`");
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
        assert!(!parse_line(r#"{"a\nb": 1}"#, 1).unwrap_err().contains('\n'));
    }
}
