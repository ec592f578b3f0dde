//! The one merge rule of tactic configs, used by every layer: `base` files,
//! `global` under each agent entry, and command-line overrides.

use serde_json::Value;

/// Merges `over` onto `base` and returns the result; both inputs are consumed,
/// nothing shared is mutated.
///
/// The rule: two mappings merge key by key, recursively; anything else in
/// `over` — a list, a scalar, or an explicit `null` — replaces what `base` had.
/// A key absent from `over` keeps `base`'s value. So lists are never
/// concatenated, and `context_manager: null` switches off an inherited manager.
pub fn merge(base: Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(mut base), Value::Object(over)) => {
            for (key, value) in over {
                let merged = match base.remove(&key) {
                    Some(existing) => merge(existing, value),
                    None => value,
                };
                base.insert(key, merged);
            }
            Value::Object(base)
        }
        (_, over) => over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn case(base: Value, over: Value, expected: Value) {
        assert_eq!(merge(base, over), expected);
    }

    #[test]
    fn mappings_merge_and_everything_else_replaces() {
        case(
            json!({"a": 1, "b": 2}),
            json!({"b": 3}),
            json!({"a": 1, "b": 3}),
        );
        case(
            json!({"m": {"x": 1, "y": {"z": 1}}}),
            json!({"m": {"y": {"w": 2}}}),
            json!({"m": {"x": 1, "y": {"z": 1, "w": 2}}}),
        );
        case(json!({"l": [1, 2]}), json!({"l": [3]}), json!({"l": [3]}));
        case(
            json!({"c": {"type": "default"}}),
            json!({"c": null}),
            json!({"c": null}),
        );
        case(
            json!({"c": null}),
            json!({"c": {"type": "default"}}),
            json!({"c": {"type": "default"}}),
        );
        case(json!({"a": 1}), json!({}), json!({"a": 1}));
        case(json!([1]), json!({"a": 1}), json!({"a": 1}));
    }
}
