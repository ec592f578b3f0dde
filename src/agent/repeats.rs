//! Repeat detection for the agent loop (D5 and the same-turn check): a set of
//! tool calls, each known by what `FunctionCall::equals` compares (the
//! tool's name, its raw arguments, its arguments with their keys in order),
//! so a reply of many calls is checked in linear time. A reply of 80,000
//! calls took 45 s when each was compared with every earlier one.
//!
//! Which calls go into a set (only successful ones, D5) is the loop's call.

use std::collections::HashSet;
use std::fmt::Write;

use serde_json::Value;

use crate::dialog::FunctionCall;

/// Up to this many calls are compared one by one: a reply's usual one to
/// three calls cost ~3k instructions each to write as an identity, against a
/// few hundred to compare (measured: `PAYLOAD=realistic TURNS=3
/// bench/instructions.sh 500`).
const FEW: usize = 16;

/// Calls seen: the first [`FEW`] as they are, then all of them by identity.
#[derive(Debug, Default)]
pub(super) struct Repeats {
    few: Vec<FunctionCall>,
    seen: HashSet<String>,
}

impl Repeats {
    /// Adds `call`; false when an identical call was there already.
    pub fn insert(&mut self, call: &FunctionCall) -> bool {
        if self.contains(call) {
            return false;
        }
        if self.seen.is_empty() && self.few.len() < FEW {
            self.few.push(call.clone());
            return true;
        }
        for earlier in self.few.drain(..) {
            self.seen.insert(identity(&earlier));
        }
        self.seen.insert(identity(call))
    }

    /// Whether an identical call is there.
    pub fn contains(&self, call: &FunctionCall) -> bool {
        self.few.iter().any(|earlier| earlier.equals(call))
            || (!self.seen.is_empty() && self.seen.contains(&identity(call)))
    }
}

/// `call` as one string, equal for two calls exactly when
/// `FunctionCall::equals` says they are: the name and the raw arguments as
/// JSON strings (which hold no NUL, so NUL separates them), then the
/// arguments with every object's keys sorted (an object's key order does not
/// make two calls different).
fn identity(call: &FunctionCall) -> String {
    let mut text = String::new();
    write_json(&Value::String(call.name.clone()), &mut text);
    text.push('\0');
    match &call.raw_arguments {
        Some(raw) => write_json(&Value::String(raw.clone()), &mut text),
        None => text.push_str("null"),
    }
    text.push('\0');
    for (key, value) in sorted(&call.arguments) {
        write_json(&Value::String(key.clone()), &mut text);
        text.push(':');
        write_json(value, &mut text);
        text.push(',');
    }
    text
}

fn sorted(map: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_unstable_by(|left, right| left.0.cmp(right.0));
    entries
}

/// `value` as compact JSON with sorted keys. A float zero is written one way
/// (`-0.0` equals `0.0`); every other number as serde_json writes it, which
/// tells apart exactly the numbers that differ (`1` is not `1.0`).
fn write_json(value: &Value, text: &mut String) {
    match value {
        Value::Object(map) => {
            text.push('{');
            for (index, (key, value)) in sorted(map).into_iter().enumerate() {
                if index > 0 {
                    text.push(',');
                }
                write_json(&Value::String(key.clone()), text);
                text.push(':');
                write_json(value, text);
            }
            text.push('}');
        }
        Value::Array(items) => {
            text.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    text.push(',');
                }
                write_json(item, text);
            }
            text.push(']');
        }
        Value::Number(number) if number.is_f64() && number.as_f64() == Some(0.0) => {
            text.push_str("0.0");
        }
        other => {
            // Writing to a String cannot fail.
            let _ = write!(text, "{other}");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, arguments: &str) -> FunctionCall {
        FunctionCall::from_model("id", name, arguments)
    }

    #[track_caller]
    fn case(left: FunctionCall, right: FunctionCall, same: bool) {
        assert_eq!(left.equals(&right), same, "equals");
        let mut repeats = Repeats::default();
        assert!(repeats.insert(&left));
        assert_eq!(repeats.contains(&right), same, "contains");
        assert_eq!(!repeats.insert(&right), same, "insert");
    }

    #[test]
    fn many_calls_are_told_apart_past_the_few_compared_one_by_one() {
        let mut repeats = Repeats::default();
        for index in 0..3 * FEW {
            assert!(repeats.insert(&call("f", &format!(r#"{{"i":{index}}}"#))));
        }
        for index in 0..3 * FEW {
            let again = call("f", &format!(r#"{{"i":{index}}}"#));
            assert!(repeats.contains(&again), "{index}");
            assert!(!repeats.insert(&again), "{index}");
        }
        assert!(!repeats.contains(&call("f", r#"{"i":-1}"#)));
    }

    #[test]
    fn the_same_call_is_what_equals_says_it_is() {
        case(call("f", r#"{"a":1}"#), call("f", r#"{"a":1}"#), true);
        case(call("f", r#"{"a":1}"#), call("g", r#"{"a":1}"#), false);
        case(call("f", r#"{"a":1}"#), call("f", r#"{"a":2}"#), false);
        case(call("f", r#"{"a":1}"#), call("f", r#"{"a":1.0}"#), false);
        case(call("f", r#"{"a":-0.0}"#), call("f", r#"{"a":0.0}"#), true);
        case(
            call("f", r#"{"a":1,"b":[1,{"y":2,"x":3}]}"#),
            call("f", r#"{"b":[1,{"x":3,"y":2}],"a":1}"#),
            true,
        );
        case(
            call("f", r#"{"a":[1,2]}"#),
            call("f", r#"{"a":[2,1]}"#),
            false,
        );
        case(call("f", ""), call("f", "{}"), true);
        // Malformed arguments are kept raw: compared as written.
        case(call("f", "[1]"), call("f", "[1]"), true);
        case(call("f", "[1]"), call("f", "[2]"), false);
        case(call("f", "[1]"), call("f", "{}"), false);
        // No name, key or value can pass for a separator.
        case(call("f\0null", ""), call("f", ""), false);
        case(
            call("f", r#"{"a":"b\u0000c"}"#),
            call("f", r#"{"a":"b","c":null}"#),
            false,
        );
        let mut nested = call("f", "");
        nested.arguments.insert(
            "a".into(),
            json!({"k": {"z": [true, null, "s"], "a": 1e300}}),
        );
        let mut reordered = call("f", "");
        reordered.arguments.insert(
            "a".into(),
            json!({"k": {"a": 1e300, "z": [true, null, "s"]}}),
        );
        case(nested, reordered, true);
    }
}
