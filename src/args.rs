//! The one argument convention (issue 29): every map of arguments or
//! metadata the library takes is `impl Serialize` (a `json!`, a struct, a
//! map), turned into a JSON object here. What is not an object is an
//! [`ArgsError`], never a panic; the callers decide when to report it (at
//! once, or when a builder is awaited or built).
//!
//! The lowest room: it imports nothing of the crate, so dialog, prompt,
//! agent and tactic may all use it.

use serde::Serialize;
use serde_json::{Map, Value};

/// Arguments or metadata that are not a JSON object: a string, an array, a
/// number, or a value that does not serialize at all (a map with non-string
/// keys). `null` (and `()`) is not an error: it is no arguments.
///
/// ```
/// use lllm::dialog::{Dialog, Role};
/// use serde_json::json;
///
/// let mut dialog = Dialog::new("writer", "main");
/// let error = dialog.put(Role::User).metadata(json!(["not", "an", "object"])).text("hi").unwrap_err();
/// assert_eq!(error.to_string(), "metadata must be a JSON object (a `json!({..})`, a struct or a map), found an array");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} must be a JSON object (a `json!({{..}})`, a struct or a map), found {found}")]
pub struct ArgsError {
    /// What was given: `prompt arguments`, `model arguments`, `metadata`, …
    pub what: &'static str,
    /// What it was instead (`a string`, `an array`, or why it did not
    /// serialize).
    pub found: String,
}

/// `value` as a JSON object; `null` is an empty one.
pub(crate) fn object(
    value: impl Serialize,
    what: &'static str,
) -> Result<Map<String, Value>, ArgsError> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(ArgsError {
            what,
            found: kind(&other).to_string(),
        }),
        Err(error) => Err(ArgsError {
            what,
            found: format!("a value that does not serialize: {error}"),
        }),
    }
}

/// What a JSON value is, for errors.
pub(crate) use crate::words::json_kind as kind;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde_json::json;

    use super::*;

    #[derive(Serialize)]
    struct Topic {
        topic: &'static str,
        words: u32,
    }

    #[track_caller]
    fn case(value: impl Serialize, expected: Result<Value, &str>) {
        let got = object(value, "prompt arguments")
            .map(Value::Object)
            .map_err(|error| error.to_string());
        assert_eq!(got, expected.map_err(str::to_string));
    }

    #[test]
    fn objects_of_every_shape_and_clear_errors_for_the_rest() {
        let wanted = json!({"topic": "owls", "words": 50});
        case(json!({"topic": "owls", "words": 50}), Ok(wanted.clone()));
        case(
            Topic {
                topic: "owls",
                words: 50,
            },
            Ok(wanted.clone()),
        );
        case(
            &Topic {
                topic: "owls",
                words: 50,
            },
            Ok(wanted.clone()),
        );
        case(
            BTreeMap::from([("topic", json!("owls")), ("words", json!(50))]),
            Ok(wanted.clone()),
        );
        case(
            HashMap::from([("topic", "owls")]),
            Ok(json!({"topic": "owls"})),
        );
        case(wanted.as_object().cloned(), Ok(wanted));
        case((), Ok(json!({})));
        case(Value::Null, Ok(json!({})));
        let not =
            "prompt arguments must be a JSON object (a `json!({..})`, a struct or a map), found";
        case("owls", Err(&format!("{not} a string")));
        case(json!([1, 2]), Err(&format!("{not} an array")));
        case(7, Err(&format!("{not} a number")));
        case(true, Err(&format!("{not} a boolean")));
        case(
            HashMap::from([((1, 2), "pair keys")]),
            Err(&format!(
                "{not} a value that does not serialize: key must be a string"
            )),
        );
    }
}
