//! Assertion items as written (promptfoo's shape: `type`, `value`, `weight`,
//! `threshold`, `metric`), read and checked into [`Assertion`]s. A regex is
//! compiled and a schema built here, once, so scoring a hundred thousand
//! deliveries compiles nothing, and a bad item is one problem naming its
//! place (`asserts[2].value`) before anything is sent.
//!
//! Type names are promptfoo's where the two overlap, so a user's assertions
//! carry over: `equals`, `contains`, `icontains`, `contains-any`,
//! `contains-all`, `icontains-any`, `icontains-all`, `starts-with`, `regex`,
//! `is-json`, `contains-json`, `cost`, `latency`, `llm-rubric`, each with a
//! `not-` form where promptfoo has one. lllm adds `json-schema` (`is-json`
//! with a schema required), `json-path` (the value at `path` of the parsed
//! delivery equals `value`), `calls` (a bound on the requests a task sent),
//! `latency_ms` (the same as `latency`) and `command` (a program that
//! answers a score, run as command tools are).

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

use super::check::Fixed;
use super::json_path::JsonPath;
use crate::suggest::printable;
use crate::yaml::{child_index, child_key};

/// One assertion, checked and ready to score.
#[derive(Debug, Clone)]
pub struct Assertion {
    /// `metric` as written, else the type and its value (`contains "Paris"`):
    /// what a score is called in outputs (shared by every score it gives).
    pub name: Arc<str>,
    /// The type as written (`not-contains`).
    pub type_name: Arc<str>,
    /// What is checked.
    pub kind: Kind,
    /// A `not-` type: passes when the check fails.
    pub negate: bool,
    /// Its share of the task's score (default 1; 0: shown, counted nowhere).
    pub weight: f64,
    /// For graders answering a score (`llm-rubric`, `command`): the score
    /// at or above which it passes. For `cost`, `latency` and `calls`: the
    /// bound.
    pub threshold: Option<f64>,
    /// Its two reasons, worded once, when they do not depend on the delivery.
    pub(super) fixed: Option<Fixed>,
}

/// What an assertion checks.
#[derive(Debug, Clone)]
pub enum Kind {
    /// The delivery is `value` (a string), or parses to `value` (any other JSON).
    Equals(Value),
    /// The delivery contains the text (`ignore_case`: compared lowercased).
    Contains {
        /// The texts (one for `contains`).
        texts: Vec<String>,
        /// For `icontains…`, the texts lowercased (once, not per delivery);
        /// else empty.
        lowered: Vec<String>,
        /// `icontains…`.
        ignore_case: bool,
        /// `contains-any`: one of them is enough.
        any: bool,
    },
    /// The delivery starts with the text.
    StartsWith(String),
    /// The regular expression matches somewhere in the delivery.
    Regex(regex::Regex),
    /// The delivery is JSON (and fits the schema, when there is one).
    IsJson(Option<Schema>),
    /// The delivery holds a JSON object or array somewhere (that fits the schema).
    ContainsJson(Option<Schema>),
    /// The value at `path` of the delivery parsed as JSON equals `value`.
    JsonPath {
        /// Where, as written (`$.label`).
        path: JsonPath,
        /// What it must be.
        value: Value,
    },
    /// The task cost at most this many USD.
    Cost(f64),
    /// The task took at most this many milliseconds.
    Latency(f64),
    /// The task sent at most this many requests.
    Calls(f64),
    /// A program given `{task, delivery, value, …}` on stdin answers a score.
    Command {
        /// The program and its arguments (no shell).
        command: Vec<String>,
        /// Where it runs: the directory of the file that declares it.
        cwd: PathBuf,
        /// How long it may take.
        timeout_s: f64,
    },
    /// A judge tactic grades the delivery against the rubric.
    Judge {
        /// The rubric (`value`).
        rubric: String,
        /// The judge tactic's file.
        judge: PathBuf,
    },
}

impl Kind {
    /// Whether scoring runs something (a program or a tactic).
    pub fn is_graded(&self) -> bool {
        matches!(self, Kind::Command { .. } | Kind::Judge { .. })
    }
}

/// A compiled JSON Schema.
#[derive(Clone)]
pub struct Schema {
    #[cfg(feature = "jsonschema")]
    validator: Arc<jsonschema::Validator>,
    #[cfg(not(feature = "jsonschema"))]
    _never: Arc<()>,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Schema(..)")
    }
}

impl Schema {
    /// The first way `value` does not fit, if it does not.
    pub fn violation(&self, value: &Value) -> Option<String> {
        #[cfg(feature = "jsonschema")]
        return self
            .validator
            .iter_errors(value)
            .next()
            .map(|error| error.to_string());
        #[cfg(not(feature = "jsonschema"))]
        {
            let _ = value;
            None
        }
    }
}

/// The assertions a task is scored with, and its own pass threshold.
#[derive(Debug, Clone, Default)]
pub struct Assertions {
    /// The tactic's, then the task line's (`expected` last).
    pub items: Vec<Assertion>,
    /// The task's `threshold`: it passes when its score reaches this, even
    /// if some assertion failed (promptfoo's test `threshold`). `None`:
    /// it passes when every assertion with a weight passes.
    pub threshold: Option<f64>,
    /// The line's `expected`, as written (a judge and a command grader are
    /// given it).
    pub expected: Option<Value>,
}

impl Assertions {
    /// No assertion: the task is not scored.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Keys an assertion item may have.
const ITEM_KEYS: &[&str] = &[
    "type",
    "value",
    "weight",
    "threshold",
    "metric",
    "judge",
    "path",
    "timeout_s",
];

/// Every type, without `not-` forms.
const TYPES: &[&str] = &[
    "equals",
    "contains",
    "icontains",
    "contains-any",
    "contains-all",
    "icontains-any",
    "icontains-all",
    "starts-with",
    "regex",
    "is-json",
    "contains-json",
    "json-schema",
    "json-path",
    "cost",
    "latency",
    "latency_ms",
    "calls",
    "command",
    "llm-rubric",
];

/// Types that have no `not-` form (bounds and graders: say the opposite
/// with the bound or the rubric).
const NO_NOT: &[&str] = &[
    "cost",
    "latency",
    "latency_ms",
    "calls",
    "command",
    "llm-rubric",
];

/// Whether `name` is an assertion type as written (`contains`,
/// `not-regex`): a written score whose name starts with it needs no `type`.
pub(super) fn is_type_name(name: &str) -> bool {
    match name.strip_prefix("not-") {
        Some(bare) => TYPES.contains(&bare) && !NO_NOT.contains(&bare),
        None => TYPES.contains(&name),
    }
}

/// A command grader's time limit unless `timeout_s` says otherwise.
const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// A regex's compiled size limit: a pattern past it is refused when read
/// (a pathological one could otherwise take memory without bound).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Reads a list of assertion items (`asserts:`), `base` the directory of
/// the file that holds them (a `command`'s working directory and a
/// `judge`'s path are relative to it). Every problem is returned, each with
/// the path of the node it is about (`[2].value`, relative to the list).
pub fn parse_list(value: &Value, base: &Path) -> Result<Vec<Assertion>, Vec<(String, String)>> {
    let Value::Array(items) = value else {
        return Err(vec![(
            String::new(),
            format!(
                "is {}, not a list of assertions; write `- {{type: contains, value: …}}` items",
                kind_of(value)
            ),
        )]);
    };
    let mut assertions = Vec::with_capacity(items.len());
    let mut problems = Vec::new();
    for (index, item) in items.iter().enumerate() {
        match parse_item(item, base) {
            Ok(assertion) => assertions.push(assertion),
            Err((at, problem)) => problems.push((
                crate::yaml::join_path(&child_index("", index), &at),
                problem,
            )),
        }
    }
    if problems.is_empty() {
        Ok(assertions)
    } else {
        Err(problems)
    }
}

/// `expected` of a task line, as the `equals` assertion it stands for.
pub fn expected(value: Value) -> Assertion {
    static EQUALS: LazyLock<Arc<str>> = LazyLock::new(|| "equals".into());
    let fixed = match &value {
        Value::String(_) => Some(Fixed::equals_text()),
        _ => None,
    };
    Assertion {
        name: name_of("equals", &value).into(),
        type_name: EQUALS.clone(),
        kind: Kind::Equals(value),
        negate: false,
        weight: 1.0,
        threshold: None,
        fixed,
    }
}

/// One item; its first problem with the path of its node inside the item.
fn parse_item(item: &Value, base: &Path) -> Result<Assertion, (String, String)> {
    let Value::Object(map) = item else {
        return Err((
            String::new(),
            format!(
                "is {}, not an assertion; write `{{type: contains, value: …}}`",
                kind_of(item)
            ),
        ));
    };
    for key in map.keys() {
        if !ITEM_KEYS.contains(&key.as_str()) {
            return Err((
                child_key("", key),
                format!(
                    "unknown assertion key `{}`{}",
                    printable(key),
                    crate::suggest::hint(key, ITEM_KEYS.iter().copied())
                ),
            ));
        }
    }
    let type_name = match map.get("type") {
        Some(Value::String(name)) => name.clone(),
        Some(other) => {
            return Err((
                "type".into(),
                format!("`type` is {}, not an assertion type", kind_of(other)),
            ));
        }
        None => {
            return Err((
                String::new(),
                "an assertion needs a `type` (`equals`, `contains`, `regex`, `is-json`, …)".into(),
            ));
        }
    };
    let (negate, bare) = match type_name.strip_prefix("not-") {
        Some(bare) => (true, bare),
        None => (false, type_name.as_str()),
    };
    if !TYPES.contains(&bare) {
        let everything =
            TYPES
                .iter()
                .copied()
                .chain(TYPES.iter().filter(|name| !NO_NOT.contains(name)).map(
                    |name| match *name {
                        "equals" => "not-equals",
                        "contains" => "not-contains",
                        "icontains" => "not-icontains",
                        "regex" => "not-regex",
                        "is-json" => "not-is-json",
                        "starts-with" => "not-starts-with",
                        _ => "",
                    },
                ));
        return Err((
            "type".into(),
            format!(
                "unknown assertion type `{}`{}",
                printable(&type_name),
                crate::suggest::hint(&type_name, everything.filter(|name| !name.is_empty()))
            ),
        ));
    }
    if negate && NO_NOT.contains(&bare) {
        return Err((
            "type".into(),
            format!("`{bare}` has no `not-` form; hint: change its bound or its rubric instead"),
        ));
    }
    let weight = match map.get("weight") {
        None => 1.0,
        Some(value) => match value.as_f64() {
            Some(weight) if weight >= 0.0 && weight.is_finite() => weight,
            _ => {
                return Err((
                    "weight".into(),
                    format!("`weight` is {}; write a number ≥ 0", kind_of(value)),
                ));
            }
        },
    };
    let threshold = match map.get("threshold") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(threshold) if threshold >= 0.0 && threshold.is_finite() => Some(threshold),
            _ => {
                return Err((
                    "threshold".into(),
                    format!("`threshold` is {}; write a number ≥ 0", kind_of(value)),
                ));
            }
        },
    };
    let value = map.get("value");
    let kind = parse_kind(bare, value, map, threshold, base)?;
    if matches!(bare, "llm-rubric" | "command")
        && let Some(threshold) = threshold
        && threshold > 1.0
    {
        return Err((
            "threshold".into(),
            format!("`threshold` of `{bare}` is a score, from 0 to 1; {threshold} is past 1"),
        ));
    }
    let has_metric = !matches!(map.get("metric"), None | Some(Value::Null));
    let name = match map.get("metric") {
        None | Some(Value::Null) => name_of(&type_name, value.unwrap_or(&Value::Null)),
        Some(Value::String(metric)) if !metric.is_empty() => metric.clone(),
        Some(_) => {
            return Err((
                "metric".into(),
                "`metric` names the score; write a non-empty text".into(),
            ));
        }
    };
    Ok(Assertion {
        name: name.into(),
        type_name: type_name.into(),
        fixed: Fixed::of(&kind, negate, has_metric),
        kind,
        negate,
        weight,
        threshold,
    })
}

/// The kind of type `bare` (no `not-`) with `value`.
fn parse_kind(
    bare: &str,
    value: Option<&Value>,
    map: &Map<String, Value>,
    threshold: Option<f64>,
    base: &Path,
) -> Result<Kind, (String, String)> {
    let text = |what: &str| -> Result<String, (String, String)> {
        match value {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(other) => Err((
                "value".into(),
                format!("`value` of `{bare}` is {}; write {what}", kind_of(other)),
            )),
            None => Err((String::new(), format!("`{bare}` needs a `value`: {what}"))),
        }
    };
    let bound = |unit: &str| -> Result<f64, (String, String)> {
        let given = threshold.or_else(|| value.and_then(Value::as_f64));
        match given {
            Some(bound) => Ok(bound),
            None => Err((
                String::new(),
                format!("`{bare}` needs a bound: `threshold` (as promptfoo has it), in {unit}"),
            )),
        }
    };
    Ok(match bare {
        "equals" => match value {
            Some(value) => Kind::Equals(value.clone()),
            None => return Err((String::new(), "`equals` needs a `value`".into())),
        },
        "contains" | "icontains" | "starts-with" => {
            let text = text("a text")?;
            match bare {
                "starts-with" => Kind::StartsWith(text),
                _ => contains_kind(vec![text], bare == "icontains", false),
            }
        }
        "contains-any" | "contains-all" | "icontains-any" | "icontains-all" => {
            contains_list(bare, value)?
        }
        "regex" => {
            let pattern = text("a regular expression")?;
            let regex = regex::RegexBuilder::new(&pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|error| {
                    (
                        "value".into(),
                        format!(
                            "`value` is not a regular expression that compiles: {}",
                            regex_problem(&error)
                        ),
                    )
                })?;
            Kind::Regex(regex)
        }
        "is-json" | "contains-json" | "json-schema" => {
            let schema = match value {
                None | Some(Value::Null) if bare != "json-schema" => None,
                None | Some(Value::Null) => {
                    return Err((
                        String::new(),
                        "`json-schema` needs a `value`: the JSON Schema the delivery must fit"
                            .into(),
                    ));
                }
                Some(schema) => Some(compile_schema(schema)?),
            };
            match bare {
                "contains-json" => Kind::ContainsJson(schema),
                _ => Kind::IsJson(schema),
            }
        }
        "json-path" => json_path_kind(map, value)?,
        "cost" => Kind::Cost(bound("USD")?),
        "latency" | "latency_ms" => Kind::Latency(bound("milliseconds")?),
        "calls" => Kind::Calls(bound("requests")?),
        "command" => command_kind(map, base)?,
        "llm-rubric" => {
            let rubric = text("the rubric the judge grades by")?;
            let judge = match map.get("judge") {
                Some(Value::String(path)) if !path.is_empty() => base.join(path),
                _ => {
                    return Err((
                        String::new(),
                        "`llm-rubric` needs a `judge`: the judge tactic's file (such as \
                         `judge: tactics/grader.yaml`)"
                            .into(),
                    ));
                }
            };
            Kind::Judge { rubric, judge }
        }
        _ => unreachable!("`{bare}` is one of TYPES"),
    })
}

/// `command`: the program and its arguments, and its time limit.
fn command_kind(map: &Map<String, Value>, base: &Path) -> Result<Kind, (String, String)> {
    let command = match map.get("value") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>(),
        _ => None,
    };
    let Some(command) = command else {
        return Err((
            "value".into(),
            "`value` of `command` is the program and its arguments, a list of texts \
                 such as `[python3, graders/score.py]` (no shell)"
                .into(),
        ));
    };
    let timeout_s = match map.get("timeout_s") {
        None => DEFAULT_TIMEOUT_S,
        Some(value) => match value.as_f64() {
            Some(seconds) if seconds > 0.0 && seconds <= 3600.0 => seconds,
            _ => {
                return Err((
                    "timeout_s".into(),
                    format!(
                        "`timeout_s` is {}; write seconds, above 0 and at most 3600",
                        kind_of(value)
                    ),
                ));
            }
        },
    };
    Ok(Kind::Command {
        command,
        // A relative base that is empty is the working directory.
        cwd: if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base.to_path_buf()
        },
        timeout_s,
    })
}

/// `json-path`: the path and the value it must hold.
fn json_path_kind(
    map: &Map<String, Value>,
    value: Option<&Value>,
) -> Result<Kind, (String, String)> {
    let path = match map.get("path") {
        Some(Value::String(path)) => JsonPath::parse(path)
            .map_err(|problem| ("path".to_string(), format!("`path` {problem}")))?,
        _ => {
            return Err((
                String::new(),
                "`json-path` needs a `path` (such as `$.label` or `$.items[0].name`) \
                     and the `value` it must hold"
                    .into(),
            ));
        }
    };
    let Some(value) = value else {
        return Err((
            String::new(),
            "`json-path` needs the `value` the path must hold".into(),
        ));
    };
    Ok(Kind::JsonPath {
        path,
        value: value.clone(),
    })
}

/// `contains-any`, `contains-all` and their `i` forms: the texts.
fn contains_list(bare: &str, value: Option<&Value>) -> Result<Kind, (String, String)> {
    let texts = match value {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>(),
        Some(Value::String(text)) => {
            // promptfoo splits a text on commas.
            Some(
                text.split(',')
                    .map(|part| part.trim().to_string())
                    .collect(),
            )
        }
        _ => None,
    };
    let Some(texts) = texts else {
        return Err((
            "value".into(),
            format!("`value` of `{bare}` must be a non-empty list of texts"),
        ));
    };
    Ok(contains_kind(
        texts,
        bare.starts_with('i'),
        bare.ends_with("-any"),
    ))
}

/// `contains…` of `texts`, lowercased once for `ignore_case`.
fn contains_kind(texts: Vec<String>, ignore_case: bool, any: bool) -> Kind {
    let lowered = if ignore_case {
        texts.iter().map(|text| text.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    Kind::Contains {
        texts,
        lowered,
        ignore_case,
        any,
    }
}

/// What is wrong with a pattern, on one line: the regex crate's last line
/// (`error: unclosed group`) without its caret drawing.
fn regex_problem(error: &regex::Error) -> String {
    let text = error.to_string();
    let last = text.lines().last().unwrap_or_default();
    crate::redact::terminal_line(last.strip_prefix("error: ").unwrap_or(last)).into_owned()
}

/// A JSON Schema, compiled; the problem with the path inside `value`.
fn compile_schema(schema: &Value) -> Result<Schema, (String, String)> {
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        return Err((
            "value".into(),
            format!(
                "`value` is {}, not a JSON Schema; write a mapping such as `{{type: object}}`",
                kind_of(schema)
            ),
        ));
    }
    #[cfg(not(feature = "jsonschema"))]
    return Err((
        "value".into(),
        crate::features::missing("a JSON Schema assertion", "jsonschema"),
    ));
    #[cfg(feature = "jsonschema")]
    jsonschema::validator_for(schema)
        .map(|validator| Schema {
            validator: Arc::new(validator),
        })
        .map_err(|error| {
            (
                "value".into(),
                format!(
                    "`value` is not a valid JSON Schema: {}",
                    printable(&error.to_string())
                ),
            )
        })
}

/// What a score is called when its item names no `metric`: the type, and a
/// short form of its value.
fn name_of(type_name: &str, value: &Value) -> String {
    use std::fmt::Write;
    // Written into one text: every task line's `expected` is named so.
    let mut name = String::with_capacity(type_name.len() + 24);
    name.push_str(type_name);
    if value.is_null() {
        return name;
    }
    name.push(' ');
    let start = name.len();
    let _ = match value {
        Value::String(text) => write!(name, "{text:?}"),
        Value::Array(items)
            if type_name.ends_with("command") && items.iter().all(Value::is_string) =>
        {
            for (index, item) in items.iter().filter_map(Value::as_str).enumerate() {
                if index > 0 {
                    name.push(' ');
                }
                name.push_str(item);
            }
            Ok(())
        }
        other => write!(name, "{other}"),
    };
    // Past 60 characters, the first 59 and `…` (a byte count within 60
    // is within 60 characters: most names are not counted).
    let shown = &name[start..];
    if shown.len() > 60 && shown.char_indices().nth(60).is_some() {
        let cut = start + shown.char_indices().nth(59).map_or(0, |(at, _)| at);
        name.truncate(cut);
        name.push('…');
    }
    name
}

/// `a text`, `a number`, … (what a value is, for a problem).
fn kind_of(value: &Value) -> &'static str {
    crate::words::json_kind(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn problem(items: Value) -> (String, String) {
        match parse_list(&items, Path::new("/base")) {
            Ok(_) => panic!("{items} was accepted"),
            Err(problems) => problems.into_iter().next().unwrap(),
        }
    }

    #[test]
    fn each_bad_item_is_named_by_its_place() {
        let cases = [
            (
                json!([{"type": "contians", "value": "a"}]),
                "[0].type",
                "did you mean `contains`?",
            ),
            (
                json!([{"type": "regex", "value": "("}]),
                "[0].value",
                "compiles: unclosed group",
            ),
            (json!([{"type": "equals"}]), "[0]", "needs a `value`"),
            (
                json!([{"type": "contains", "value": "a", "wieght": 2}]),
                "[0].wieght",
                "did you mean `weight`?",
            ),
            (
                json!([{"type": "equals", "value": 1}, {"type": "is-json", "value": {"type": 7}}]),
                "[1].value",
                "not a valid JSON Schema",
            ),
            (
                json!([{"type": "not-cost", "threshold": 1}]),
                "[0].type",
                "no `not-` form",
            ),
            (json!([{"type": "cost"}]), "[0]", "needs a bound"),
            (
                json!([{"type": "llm-rubric", "value": "polite"}]),
                "[0]",
                "needs a `judge`",
            ),
            (
                json!([{"type": "command", "value": "x.sh"}]),
                "[0].value",
                "a list of texts",
            ),
            (
                json!([{"type": "json-path", "path": "label", "value": 1}]),
                "[0].path",
                "`$`",
            ),
            (
                json!([{"type": "contains", "value": "a", "weight": -1}]),
                "[0].weight",
                "≥ 0",
            ),
            (json!({"type": "contains"}), "", "not a list"),
        ];
        for (items, at, words) in cases {
            let (place, message) = problem(items.clone());
            assert_eq!(place, at, "{items}: {message}");
            assert!(message.contains(words), "{items}: {message}");
            assert!(!message.contains('\n'));
        }
    }

    #[test]
    fn names_show_the_type_and_its_value_cut_to_60_characters() {
        let long = "é".repeat(70);
        let cases = [
            // (type, value, name)
            ("cost", json!(null), "cost".to_string()),
            (
                "equals",
                json!("a \"b\""),
                r#"equals "a \"b\"""#.to_string(),
            ),
            (
                "equals",
                json!({"a": [1, 2]}),
                r#"equals {"a":[1,2]}"#.to_string(),
            ),
            (
                "command",
                json!(["./grade", "-v"]),
                "command ./grade -v".to_string(),
            ),
            (
                "command",
                json!(["./grade", 1]),
                r#"command ["./grade",1]"#.to_string(),
            ),
            (
                "equals",
                json!(long.clone()),
                format!("equals \"{}…", "é".repeat(58)),
            ),
            (
                "equals",
                json!("x".repeat(58)),
                format!("equals \"{}\"", "x".repeat(58)),
            ),
            (
                "equals",
                json!("x".repeat(59)),
                format!("equals \"{}…", "x".repeat(58)),
            ),
        ];
        for (type_name, value, name) in cases {
            assert_eq!(name_of(type_name, &value), name, "{value}");
        }
        assert_eq!(&*expected(json!("Paris")).name, "equals \"Paris\"");
    }

    #[test]
    fn good_items_are_read_with_their_names_weights_and_forms() {
        let items = json!([
            {"type": "not-contains", "value": "sorry", "weight": 2},
            {"type": "cost", "threshold": 0.01, "metric": "cheap"},
            {"type": "llm-rubric", "value": "is polite", "judge": "judge.yaml", "threshold": 0.7},
            {"type": "icontains-any", "value": "a, b"},
        ]);
        let read = parse_list(&items, Path::new("/base")).unwrap();
        assert_eq!(&*read[0].name, "not-contains \"sorry\"");
        assert!(read[0].negate);
        assert_eq!(read[0].weight, 2.0);
        assert_eq!(&*read[1].name, "cheap");
        assert!(matches!(read[1].kind, Kind::Cost(bound) if bound == 0.01));
        match &read[2].kind {
            Kind::Judge { judge, rubric } => {
                assert_eq!(judge, Path::new("/base/judge.yaml"));
                assert_eq!(rubric, "is polite");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read[2].threshold, Some(0.7));
        match &read[3].kind {
            Kind::Contains {
                texts,
                ignore_case,
                any,
                ..
            } => {
                assert_eq!(texts, &["a", "b"]);
                assert!(*ignore_case && *any);
            }
            other => panic!("{other:?}"),
        }
    }
}
