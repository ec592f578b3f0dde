//! The JSON paths `json-path` assertions name: `$`, then `.key`, `[index]`
//! or `["key"]` steps (`$.items[0].name`). No wildcards or filters: a path
//! names one value, which the assertion compares.

use serde_json::Value;

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    /// As written, for reasons.
    pub text: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

impl JsonPath {
    /// Reads `text`; the problem says what is wrong (it reads after "`path` ").
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let Some(mut rest) = text.strip_prefix('$') else {
            return Err("must start with `$` (such as `$.label`)".into());
        };
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                if end == 0 {
                    return Err(format!("has an empty key in `{text}`"));
                }
                steps.push(Step::Key(after[..end].to_string()));
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let Some(close) = after.find(']') else {
                    return Err(format!("has a `[` without its `]` in `{text}`"));
                };
                let inside = after[..close].trim();
                let quoted = inside
                    .strip_prefix('"')
                    .and_then(|inside| inside.strip_suffix('"'))
                    .or_else(|| {
                        inside
                            .strip_prefix('\'')
                            .and_then(|inside| inside.strip_suffix('\''))
                    });
                match (quoted, inside.parse::<usize>()) {
                    (Some(key), _) => steps.push(Step::Key(key.to_string())),
                    (None, Ok(index)) => steps.push(Step::Index(index)),
                    (None, Err(_)) => {
                        return Err(format!(
                            "has `[{inside}]`, neither an index nor a quoted key, in `{text}`"
                        ));
                    }
                }
                rest = &after[close + 1..];
            } else {
                return Err(format!(
                    "has `{rest}` where `.key` or `[index]` should be, in `{text}`"
                ));
            }
        }
        Ok(JsonPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The value the path names in `value`, if there is one.
    pub fn find<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.steps.iter().try_fold(value, |value, step| match step {
            Step::Key(key) => value.get(key.as_str()),
            Step::Index(index) => value.get(*index),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_find_what_they_name() {
        let value = json!({"a": {"b c": [1, {"d": true}]}, "label": "spam"});
        let cases = [
            ("$", Some(value.clone())),
            ("$.label", Some(json!("spam"))),
            ("$.a['b c'][1].d", Some(json!(true))),
            ("$.a[\"b c\"][0]", Some(json!(1))),
            ("$.missing", None),
            ("$.a['b c'][5]", None),
        ];
        for (text, expected) in cases {
            let path = JsonPath::parse(text).unwrap();
            assert_eq!(path.find(&value).cloned(), expected, "{text}");
        }
    }

    #[test]
    fn bad_paths_say_what_is_wrong() {
        for (text, words) in [
            ("label", "start with `$`"),
            ("$..a", "empty key"),
            ("$[x]", "neither an index"),
            ("$[0", "without its `]`"),
            ("$x", "where `.key`"),
        ] {
            let problem = JsonPath::parse(text).unwrap_err();
            assert!(problem.contains(words), "{text}: {problem}");
        }
    }
}
