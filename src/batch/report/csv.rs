//! The CSV of `lllm report`: one row per task, RFC 4180 (fields holding a
//! comma, a quote or a line break are quoted, quotes doubled, rows end with
//! CRLF), safe to open in a spreadsheet.
//!
//! Formula injection: a spreadsheet runs a cell starting with `=`, `+`, `-` or
//! `@` (and, in some, a tab or carriage return) as a formula, so a delivery
//! reading `=HYPERLINK(…)` would become a live link. Such a text cell gets a
//! leading `'`, which spreadsheets show as text; the numbers this module
//! writes itself (cost, latency, calls, tokens) are never prefixed.

use serde_json::Value;

use super::Batch;

/// The header row's columns.
pub const COLUMNS: [&str; 14] = [
    "id",
    "state",
    "delivery",
    "error",
    "cost_usd",
    "cost_known",
    "latency_ms",
    "calls",
    "total_tokens",
    "args",
    "tags",
    "session_id",
    "score",
    "pass",
];

/// A text cell: guarded against formulas, then quoted when it must be.
///
/// ```
/// use lllm::batch::report::csv::cell;
/// assert_eq!(cell("plain"), "plain");
/// assert_eq!(cell("a, \"b\"\nc"), "\"a, \"\"b\"\"\nc\"");
/// assert_eq!(cell("=1+2"), "'=1+2");
/// assert_eq!(cell("-x, y"), "\"'-x, y\"");
/// ```
pub fn cell(text: &str) -> String {
    let guarded = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_string()
    };
    quoted(&guarded)
}

/// `text` quoted per RFC 4180 when it holds a comma, a quote or a line break.
fn quoted(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The CSV of a batch: a header row ([`COLUMNS`]), then one row per task; args
/// and tags as JSON objects, `{}` when there are none (issue 27: the cell was
/// empty then, which is no JSON a reader of the column can parse); `score`
/// and `pass` empty for a task that was not scored.
pub fn report(batch: &Batch) -> String {
    let mut out = String::with_capacity(batch.tasks.len() * 160);
    out.push_str(&COLUMNS.join(","));
    out.push_str("\r\n");
    let object = |map: &serde_json::Map<String, Value>| Value::Object(map.clone()).to_string();
    for task in &batch.tasks {
        let fields = [
            cell(&task.id),
            task.state_name().to_string(),
            cell(task.delivery.as_deref().unwrap_or("")),
            cell(task.error.as_deref().unwrap_or("")),
            task.cost.map(|cost| format!("{cost}")).unwrap_or_default(),
            task.cost_known.to_string(),
            task.latency_ms.to_string(),
            task.calls.to_string(),
            task.total_tokens.to_string(),
            cell(&object(&task.args)),
            cell(&object(&task.tags)),
            cell(task.session_id.as_deref().unwrap_or("")),
            task.score
                .map(|score| format!("{score}"))
                .unwrap_or_default(),
            task.pass.map(|pass| pass.to_string()).unwrap_or_default(),
        ];
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(input: &str, expected: &str) {
        assert_eq!(cell(input), expected, "cell({input:?})");
    }

    #[test]
    fn cells_are_quoted_and_guarded() {
        case("", "");
        case("ok", "ok");
        case("a,b", "\"a,b\"");
        case("say \"hi\"", "\"say \"\"hi\"\"\"");
        case("two\nlines", "\"two\nlines\"");
        case("cr\r", "\"cr\r\"");
        case("=SUM(A1:A9)", "'=SUM(A1:A9)");
        case("+1", "'+1");
        case("-1", "'-1");
        case("@cmd", "'@cmd");
        case("\tx", "'\tx");
        case("=a,b", "\"'=a,b\"");
        case("a=b", "a=b");
    }
}
