//! Task lines of `lllm batch`: the input is a TASKS file, cut into lines as
//! the batch reader cuts it. A bad line is a one-line error; a good one
//! keeps its id, and written back as a line it reads as the same task.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lllm::batch::shard::shard_of;
use lllm::batch::tasks::{Task, parse_line};
use lllm::dialog::AttachmentScope;
use lllm_fuzz::assert_one_line;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    // `tasks::Lines` reads with `BufRead::read_line`: up to each `\n`, and a
    // line that is not UTF-8 is an error before it is parsed.
    for (index, line) in data.split_inclusive(|byte| *byte == b'\n').enumerate() {
        let Ok(text) = std::str::from_utf8(line) else {
            continue;
        };
        check(text, index + 1);
    }
});

fn check(text: &str, number: usize) {
    // No attachment is read from a file here (`attachment_spec` reads them).
    let no_files = AttachmentScope::default();
    let task = match parse_line(text, number, &no_files) {
        Err(message) => return assert_one_line(&message),
        Ok(None) => return assert!(text.trim().is_empty(), "a line with text was skipped"),
        Ok(Some(task)) => task,
    };
    assert_eq!(task.line, number);
    assert!(!task.id.trim().is_empty(), "an empty id");
    assert_eq!(task.input.id.as_deref(), Some(task.id.as_str()));
    if let Ok(Value::Object(written)) = serde_json::from_str::<Value>(text.trim()) {
        let id = written.get("id").or_else(|| written.get("custom_id"));
        match id {
            Some(Value::String(id)) => assert_eq!(&task.id, id, "the id changed"),
            Some(Value::Number(id)) => assert_eq!(task.id, id.to_string(), "the id changed"),
            _ => assert_eq!(task.id, format!("line-{number}")),
        }
    }
    let again = parse_line(&written(&task), number, &no_files)
        .expect("a task written back does not read")
        .expect("a task written back reads as a blank line");
    assert_eq!(again.id, task.id);
    assert_eq!(again.input.task, task.input.task);
    assert_eq!(again.input.args, task.input.args);
    assert_eq!(again.input.tags, task.input.tags);
    assert_eq!(again.tactic, task.tactic);
    let _ = shard_of(&task.id, u64::from(number as u32 % 64 + 1));
}

/// The task as a TASKS line, every field spelled out.
fn written(task: &Task) -> String {
    json!({
        "id": task.id,
        "task": task.input.task,
        "args": task.input.args,
        "tags": task.input.tags,
        "tactic": task.tactic,
    })
    .to_string()
}
