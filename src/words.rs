//! The words lllm counts a run's work with, the same in the `run` summary,
//! `lllm replay`, `results.jsonl`, `summary.json` and the batch's end table
//! (docs/formats.md, "4. Result lines and the batch directory"):
//!
//! - a **call** is one request sent to a provider (or answered from the
//!   cache), whatever came back;
//! - a **retry** is a call repeated after a provider error (429, 5xx, a
//!   timeout): every call but the first of one request;
//! - a **repair** is a turn asking the model to fix a reply that did not
//!   parse;
//! - a **tool round** is a turn answering the model's tool calls.
//!
//! [`count`] writes a number with its noun, singular for one ("1 retry",
//! "2 retries"), never "retry(ies)".

/// `number` and the noun for it: `one` when it is 1, `many` otherwise.
///
/// ```
/// assert_eq!(lllm::words::count(1u32, "retry", "retries"), "1 retry");
/// assert_eq!(lllm::words::count(0u64, "call", "calls"), "0 calls");
/// ```
pub fn count(number: impl Into<u64>, one: &str, many: &str) -> String {
    let number = number.into();
    let noun = if number == 1 { one } else { many };
    format!("{number} {noun}")
}

/// Calls with their retries, as the run summary and `lllm replay` say it:
/// `1 call`, `3 calls (2 retries)`.
pub fn calls(calls: impl Into<u64>, retries: impl Into<u64>) -> String {
    let retries = retries.into();
    let mut text = count(calls, "call", "calls");
    if retries > 0 {
        text.push_str(&format!(" ({})", count(retries, "retry", "retries")));
    }
    text
}

/// What a JSON value is, in the words an error names it with: `null`, `a
/// boolean`, `a number`, `a string`, `an array` or `an object` (task lines,
/// arguments, `lllm serve`'s bodies all say it so).
///
/// ```
/// use serde_json::json;
/// assert_eq!(lllm::words::json_kind(&json!([1])), "an array");
/// assert_eq!(format!("`args` is {}, not an object", lllm::words::json_kind(&json!("x"))), "`args` is a string, not an object");
/// ```
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `number`'s decimal digits, written into `digits` (the end of it) and
/// returned: no formatting machinery, for text made on a hot path.
pub(crate) fn decimal(number: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    let mut rest = number;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    &digits[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_number_plural() {
        for (number, expected) in [(0, "0 retries"), (1, "1 retry"), (2, "2 retries")] {
            assert_eq!(count(number as u64, "retry", "retries"), expected);
        }
        assert_eq!(calls(1u64, 0u64), "1 call");
        assert_eq!(calls(2u64, 1u64), "2 calls (1 retry)");
        assert_eq!(calls(3u64, 2u64), "3 calls (2 retries)");
    }
}
