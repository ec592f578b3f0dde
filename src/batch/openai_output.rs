//! `--output-format openai` (issue 15): the OpenAI Batch API's output and
//! error files, next to lllm's own, so tools that read a provider batch's
//! results read an lllm batch's. The shapes are openai-python's
//! `BatchRequestOutput` (`types/batch_request_output.py`): one line per
//! request, `{id, custom_id, response: {status_code, request_id, body},
//! error}`, `body` a `chat.completion` for a success.
//!
//! - `openai_output.jsonl`: each succeeded task, `response.status_code` 200,
//!   `body` a `chat.completion` whose one choice is the delivery (`usage`: the
//!   task's tokens over all its calls; `model` and `finish_reason`: those of
//!   its final reply; `created`: when its run started), `error: null`.
//! - `openai_errors.jsonl`: each failed or skipped task. A failure with a
//!   provider's HTTP status keeps it (`response.status_code`, `body.error`);
//!   any other failure (a reply the parser refused, a tool, a template) is
//!   `status_code` 500 with `body.error.code` `lllm_task_failed`; a task the
//!   run skipped (budget, fail-fast, Ctrl-C) has `response: null` and
//!   `error: {code: "batch_cancelled", message}`.
//!
//! `id` is `batch_req_` + the task's session id and `request_id` the
//! session id (`lllm replay DIR/sessions.jsonl --id …` shows it). Both files
//! are written whole from `results.jsonl` when the run ends (the latest line
//! of each id, as `--resume` reads them), to a temporary name then renamed:
//! after `--resume`, `--retry-errors` or `lllm batch merge` they hold each
//! task once, in its final state.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::output::{RESULTS, ResultLine, TaskState};
use crate::file::atomic::AtomicFile;

/// The output file: one line per succeeded task.
pub const OUTPUT: &str = "openai_output.jsonl";
/// The error file: one line per failed or skipped task.
pub const ERRORS: &str = "openai_errors.jsonl";

/// Which files a batch writes besides its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// lllm's files only.
    #[default]
    Lllm,
    /// lllm's, and the OpenAI Batch API's output and error files.
    OpenAi,
}

impl OutputFormat {
    /// `lllm` or `openai` (`--output-format`).
    pub fn from_name(name: &str) -> Result<OutputFormat, String> {
        match name {
            "lllm" => Ok(OutputFormat::Lllm),
            "openai" => Ok(OutputFormat::OpenAi),
            other => Err(format!(
                "unknown output format `{other}`; the formats are `lllm`, `openai`{}",
                crate::suggest::hint(other, ["lllm", "openai"])
            )),
        }
    }
}

/// How many lines went to each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Written {
    /// Lines of `openai_output.jsonl`.
    pub output: u64,
    /// Lines of `openai_errors.jsonl`.
    pub errors: u64,
}

/// Writes both files in `dir` from its `results.jsonl`. Memory holds the
/// ids only: the file is read twice, once to find each id's latest line.
pub fn write(dir: &Path) -> std::io::Result<Written> {
    let results = dir.join(RESULTS);
    let mut latest: HashMap<String, usize> = HashMap::new();
    for_each_result(&results, |index, result| {
        latest.insert(result.id, index);
    })?;
    // Each renamed into place when whole; dropped on an error, neither stays.
    let mut output = AtomicFile::create(&dir.join(OUTPUT))?;
    let mut errors = AtomicFile::create(&dir.join(ERRORS))?;
    let mut written = Written::default();
    let mut failed = None;
    for_each_result(&results, |index, result| {
        if failed.is_some() || latest.get(&result.id) != Some(&index) {
            return;
        }
        let (file, count) = match result.state {
            TaskState::Success => (&mut output, &mut written.output),
            _ => (&mut errors, &mut written.errors),
        };
        match writeln!(file, "{}", line(&result)) {
            Ok(()) => *count += 1,
            Err(error) => failed = Some(error),
        }
    })?;
    if let Some(error) = failed {
        return Err(error);
    }
    output.commit()?;
    errors.commit()?;
    Ok(written)
}

/// Calls `each` with every readable result line and its index.
fn for_each_result(path: &Path, mut each: impl FnMut(usize, ResultLine)) -> std::io::Result<()> {
    let lines = match crate::jsonl::Lines::open(path) {
        Ok(lines) => lines,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    // A line that is not UTF-8 is skipped as one that is not JSON.
    for line in crate::jsonl::numbered_lines(lines) {
        let (number, line) = line?;
        if let Some(result) = line.and_then(|line| serde_json::from_str::<ResultLine>(&line).ok()) {
            each(number - 1, result);
        }
    }
    Ok(())
}

/// One task's line in the OpenAI shape.
pub fn line(result: &ResultLine) -> Value {
    let session = result.session_id.as_deref().unwrap_or_default();
    let id = if session.is_empty() {
        format!("batch_req_{}", result.id)
    } else {
        format!("batch_req_{session}")
    };
    let message = result.error.as_deref().unwrap_or("the task failed");
    let (response, error) = match result.state {
        TaskState::Success => {
            let usage = &result.usage;
            let body = json!({
                "id": format!("chatcmpl-{session}"),
                "object": "chat.completion",
                "created": created(session),
                "model": result.model.as_deref().unwrap_or_default(),
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": result.delivery.as_deref().unwrap_or_default(),
                        "refusal": null,
                    },
                    "logprobs": null,
                    "finish_reason": finish_reason(result.finish_reason.as_deref()),
                }],
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
            });
            (
                json!({"status_code": 200, "request_id": session, "body": body}),
                Value::Null,
            )
        }
        TaskState::Failure => {
            let status = result.http_status.unwrap_or(500);
            let (kind, code) = match (result.http_status, status) {
                (None, _) => ("server_error", Value::from("lllm_task_failed")),
                (_, 401) => ("authentication_error", Value::Null),
                (_, 403) => ("permission_error", Value::Null),
                (_, 404) => ("not_found_error", Value::Null),
                (_, 429) => ("rate_limit_error", Value::Null),
                (_, 500..) => ("server_error", Value::Null),
                _ => ("invalid_request_error", Value::Null),
            };
            let body =
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
            (
                json!({"status_code": status, "request_id": session, "body": body}),
                Value::Null,
            )
        }
        TaskState::Skipped => (
            Value::Null,
            json!({"code": "batch_cancelled", "message": message}),
        ),
    };
    json!({"id": id, "custom_id": result.id, "response": response, "error": error})
}

/// The final reply's finish reason in the chat completions' words (issue
/// 27: it was always `stop`, even for a reply cut at `max_tokens`):
/// Anthropic's and the Responses API's reasons are translated as the
/// OpenAI-compatible endpoints of those providers do; a reply that said none
/// (the mock providers, an old record) `stop`.
fn finish_reason(reason: Option<&str>) -> &str {
    match reason {
        None | Some("end_turn" | "stop_sequence" | "pause_turn") => "stop",
        Some("max_tokens" | "max_output_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        Some(other) => other,
    }
}

/// Unix seconds of a session id's start (ids are UUIDv7, whose first 48 bits
/// are milliseconds); 0 for an id of another form.
fn created(session: &str) -> u64 {
    uuid::Uuid::parse_str(session)
        .ok()
        .and_then(|id| id.get_timestamp())
        .map_or(0, |timestamp| timestamp.to_unix().0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, state: TaskState) -> ResultLine {
        let mut result = ResultLine::skipped(id.to_string(), "cancelled by --fail-fast");
        result.state = state;
        result
    }

    #[test]
    fn each_state_has_its_documented_shape() {
        let mut done = result("a", TaskState::Success);
        done.delivery = Some("Owls.".into());
        done.session_id = Some("019a2b3c-4d5e-7f60-8a1b-2c3d4e5f6a7b".into());
        done.model = Some("gpt-4o-mini".into());
        done.usage.prompt_tokens = 7;
        done.usage.completion_tokens = 2;
        done.usage.total_tokens = 9;
        let line = line(&done);
        assert_eq!(line["id"], "batch_req_019a2b3c-4d5e-7f60-8a1b-2c3d4e5f6a7b");
        assert_eq!(line["custom_id"], "a");
        assert_eq!(line["error"], Value::Null);
        let response = &line["response"];
        assert_eq!(response["status_code"], 200);
        assert_eq!(
            response["request_id"],
            "019a2b3c-4d5e-7f60-8a1b-2c3d4e5f6a7b"
        );
        let body = &response["body"];
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(
            body["created"],
            0x019a_2b3c_4d5e_u64 / 1000,
            "the id's first 48 bits, in seconds"
        );
        assert_eq!(body["model"], "gpt-4o-mini");
        assert_eq!(body["choices"][0]["message"]["content"], "Owls.");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["total_tokens"], 9);
        for (recorded, shown) in [
            ("length", "length"),
            ("tool_calls", "tool_calls"),
            ("content_filter", "content_filter"),
            ("max_tokens", "length"),
            ("end_turn", "stop"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            done.finish_reason = Some(recorded.into());
            assert_eq!(
                super::line(&done)["response"]["body"]["choices"][0]["finish_reason"],
                shown,
                "{recorded}"
            );
        }

        let mut refused = result("b", TaskState::Failure);
        refused.error = Some("step `answer`: 400 bad request".into());
        refused.http_status = Some(400);
        let line = super::line(&refused);
        assert_eq!(line["response"]["status_code"], 400);
        assert_eq!(
            line["response"]["body"]["error"]["type"],
            "invalid_request_error"
        );
        let mut unparsed = result("c", TaskState::Failure);
        unparsed.error = Some("no <answer> tag".into());
        let line = super::line(&unparsed);
        assert_eq!(line["response"]["status_code"], 500);
        assert_eq!(
            line["response"]["body"]["error"]["code"],
            "lllm_task_failed"
        );
        let line = super::line(&result("d", TaskState::Skipped));
        assert_eq!(line["response"], Value::Null);
        assert_eq!(line["error"]["code"], "batch_cancelled");
        assert_eq!(line["id"], "batch_req_d");
    }

    #[test]
    fn files_hold_each_tasks_latest_result_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = result("a", TaskState::Failure);
        first.error = Some("boom".into());
        let mut again = result("a", TaskState::Success);
        again.delivery = Some("fine".into());
        let lines = [first, result("b", TaskState::Skipped), again]
            .iter()
            .map(|result| serde_json::to_string(result).unwrap() + "\n")
            .collect::<String>();
        std::fs::write(dir.path().join(RESULTS), lines + "torn {\n").unwrap();
        let written = write(dir.path()).unwrap();
        assert_eq!(
            written,
            Written {
                output: 1,
                errors: 1
            }
        );
        let output = std::fs::read_to_string(dir.path().join(OUTPUT)).unwrap();
        assert!(output.contains("\"custom_id\":\"a\""), "{output}");
        let errors = std::fs::read_to_string(dir.path().join(ERRORS)).unwrap();
        assert!(
            errors.contains("\"custom_id\":\"b\"") && !errors.contains("boom"),
            "{errors}"
        );
        let temporary = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".tmp"))
            .count();
        assert_eq!(temporary, 0, "no temporary file stays");
    }
}
