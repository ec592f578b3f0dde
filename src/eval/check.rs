//! The checks that need only the delivery and the task's numbers: text,
//! JSON, cost, latency, calls. Each gives a [`Score`] of 1 or 0 with a
//! reason; graders that run something (`command`, `llm-rubric`) are left to
//! the caller (`batch::grade`).
//!
//! A check whose reason depends only on its assertion and whether it held
//! (`contains "Paris"`, a regex, `equals` a text, `is-json`) has its two
//! reasons worded once, when the assertion is read ([`Fixed`]): scoring a
//! hundred thousand deliveries then formats nothing for them.

use std::cell::OnceCell;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use super::assertion::{Assertion, Kind};
use super::score::Score;

/// What a task gave, for its assertions.
#[derive(Debug)]
pub struct Subject<'a> {
    /// The delivery; `None` when the task failed.
    pub delivery: Option<&'a str>,
    /// Why the task failed, when it did.
    pub error: Option<&'a str>,
    /// USD (`None`: unknown).
    pub cost: Option<f64>,
    pub latency_ms: u64,
    /// Requests sent.
    pub calls: u64,
    /// The delivery parsed as JSON, once, for every JSON check.
    parsed: OnceCell<Option<Value>>,
    /// The delivery lowercased, once, for every `icontains` check.
    lowered: OnceCell<String>,
}

impl<'a> Subject<'a> {
    /// A task's outcome.
    pub fn new(
        delivery: Option<&'a str>,
        error: Option<&'a str>,
        cost: Option<f64>,
        latency_ms: u64,
        calls: u64,
    ) -> Subject<'a> {
        Subject {
            delivery,
            error,
            cost,
            latency_ms,
            calls,
            parsed: OnceCell::new(),
            lowered: OnceCell::new(),
        }
    }

    /// The delivery as JSON, if it is JSON.
    fn json(&self) -> Option<&Value> {
        self.parsed
            .get_or_init(|| serde_json::from_str(self.delivery?.trim()).ok())
            .as_ref()
    }

    /// The delivery lowercased.
    fn lowered(&self) -> &str {
        self.lowered
            .get_or_init(|| self.delivery.unwrap_or_default().to_lowercase())
    }
}

/// The two reasons of an assertion whose words do not depend on the
/// delivery, `not-` form applied: what its score says when it passes, and
/// when it fails.
#[derive(Debug, Clone)]
pub(super) struct Fixed {
    pass: Arc<str>,
    fail: Arc<str>,
}

impl Fixed {
    /// The reasons of `kind` (`negate`: its `not-` form), if its words do
    /// not depend on the delivery.
    pub(super) fn of(kind: &Kind, negate: bool) -> Option<Fixed> {
        let (held, not_held) = fixed_words(kind)?;
        Some(if negate {
            Fixed {
                pass: not_held.into(),
                fail: format!("not expected, and {held}").into(),
            }
        } else {
            Fixed {
                pass: held.into(),
                fail: not_held.into(),
            }
        })
    }

    /// Those of `equals` a text, shared by every task line's `expected`.
    pub(super) fn equals_text() -> Fixed {
        static EQUALS: LazyLock<Fixed> = LazyLock::new(|| {
            Fixed::of(&Kind::Equals(Value::String(String::new())), false)
                .expect("`equals` a text has fixed words")
        });
        EQUALS.clone()
    }
}

/// The words of a check that held and of one that did not, for the kinds
/// whose words depend on nothing but the assertion (`None` for the others).
fn fixed_words(kind: &Kind) -> Option<(String, String)> {
    Some(match kind {
        Kind::Equals(Value::String(_)) => (
            "the delivery equals the value".into(),
            "the delivery does not equal the value".into(),
        ),
        Kind::Contains {
            texts, any: false, ..
        } if texts.len() == 1 => (
            format!("the delivery contains {:?}", texts[0]),
            format!("the delivery does not contain {:?}", texts[0]),
        ),
        Kind::StartsWith(text) => (
            format!("the delivery starts with {text:?}"),
            format!("the delivery does not start with {text:?}"),
        ),
        Kind::Regex(regex) => (
            format!("the delivery matches /{}/", regex.as_str()),
            format!("the delivery does not match /{}/", regex.as_str()),
        ),
        Kind::IsJson(None) => (
            "the delivery is JSON".into(),
            "the delivery is not JSON".into(),
        ),
        _ => return None,
    })
}

/// The score of `assertion` on `subject`; `None` for a grader that runs
/// something (its caller runs it). A task without a delivery fails every
/// assertion about its delivery, `not-` forms included.
pub fn check(assertion: &Assertion, subject: &Subject<'_>) -> Option<Score> {
    if assertion.kind.is_graded() && subject.delivery.is_some() {
        return None;
    }
    let about_numbers = matches!(
        assertion.kind,
        Kind::Cost(_) | Kind::Latency(_) | Kind::Calls(_)
    );
    let (pass, reason): (bool, Arc<str>) = match subject.delivery {
        None if !about_numbers => (
            false,
            format!(
                "no delivery: the task failed ({})",
                subject.error.unwrap_or("no error recorded")
            )
            .into(),
        ),
        delivery => match holds(&assertion.kind, delivery.unwrap_or_default(), subject) {
            Held::Fixed(held) => {
                let pass = held != assertion.negate;
                (pass, assertion.fixed_reason(pass))
            }
            Held::Worded(held, reason) => match (assertion.negate, held) {
                (true, true) => (false, format!("not expected, and {reason}").into()),
                (true, false) => (true, reason.into()),
                (false, held) => (held, reason.into()),
            },
        },
    };
    Some(Score {
        name: assertion.name.clone(),
        type_name: assertion.type_name.clone(),
        score: if pass { 1.0 } else { 0.0 },
        pass,
        reason,
        weight: assertion.weight,
    })
}

impl Assertion {
    /// The reason of a check of fixed words that passed (or failed).
    fn fixed_reason(&self, pass: bool) -> Arc<str> {
        let worded;
        let fixed = match &self.fixed {
            Some(fixed) => fixed,
            // Not worded when read (never so for an assertion read by
            // `parse_list` or `expected`): worded now.
            None => {
                worded = Fixed::of(&self.kind, self.negate).expect("a kind of fixed words");
                &worded
            }
        };
        if pass {
            fixed.pass.clone()
        } else {
            fixed.fail.clone()
        }
    }
}

/// Whether a check held: for a kind of [fixed words](fixed_words), that
/// alone; for the others, with the words saying why (in words that read
/// after "not expected, and" for the `not-` forms).
enum Held {
    Fixed(bool),
    Worded(bool, String),
}

/// Whether the check of `kind` holds on `delivery`, and why.
fn holds(kind: &Kind, delivery: &str, subject: &Subject<'_>) -> Held {
    match kind {
        Kind::Equals(Value::String(expected)) => Held::Fixed(delivery == expected),
        Kind::Equals(expected) => match subject.json() {
            Some(parsed) => {
                let held = parsed == expected;
                Held::Worded(
                    held,
                    said(
                        held,
                        "the delivery's JSON equals the value",
                        "the delivery's JSON does not equal the value",
                    ),
                )
            }
            None => Held::Worded(false, "the delivery is not JSON".into()),
        },
        Kind::Contains {
            texts,
            lowered,
            ignore_case,
            any,
        } => {
            let (haystack, needles) = if *ignore_case {
                (subject.lowered(), lowered)
            } else {
                (delivery, texts)
            };
            if !any && texts.len() == 1 {
                Held::Fixed(haystack.contains(needles[0].as_str()))
            } else {
                let (held, reason) = contains(haystack, texts, needles, *any);
                Held::Worded(held, reason)
            }
        }
        Kind::StartsWith(text) => Held::Fixed(delivery.starts_with(text.as_str())),
        Kind::Regex(regex) => Held::Fixed(regex.is_match(delivery)),
        Kind::IsJson(None) => Held::Fixed(subject.json().is_some()),
        Kind::IsJson(Some(schema)) => match subject.json() {
            None => Held::Worded(false, "the delivery is not JSON".into()),
            Some(value) => match schema.violation(value) {
                None => Held::Worded(true, "the delivery is JSON that fits the schema".into()),
                Some(violation) => Held::Worded(
                    false,
                    format!("the delivery's JSON does not fit the schema: {violation}"),
                ),
            },
        },
        Kind::ContainsJson(schema) => {
            let mut seen_json = false;
            for value in embedded_json(delivery) {
                seen_json = true;
                match schema {
                    None => return Held::Worded(true, "the delivery contains JSON".into()),
                    Some(schema) if schema.violation(&value).is_none() => {
                        return Held::Worded(
                            true,
                            "the delivery contains JSON that fits the schema".into(),
                        );
                    }
                    Some(_) => {}
                }
            }
            if seen_json {
                Held::Worded(false, "no JSON in the delivery fits the schema".to_string())
            } else {
                Held::Worded(false, "the delivery contains no JSON".into())
            }
        }
        Kind::JsonPath { path, value } => match subject.json() {
            None => Held::Worded(false, "the delivery is not JSON".into()),
            Some(parsed) => match path.find(parsed) {
                None => Held::Worded(false, format!("the delivery's JSON has no `{}`", path.text)),
                Some(found) if found == value => {
                    Held::Worded(true, format!("`{}` is {}", path.text, short(found)))
                }
                Some(found) => Held::Worded(
                    false,
                    format!("`{}` is {}, not {}", path.text, short(found), short(value)),
                ),
            },
        },
        Kind::Cost(_) | Kind::Latency(_) | Kind::Calls(_) => {
            let (held, reason) = within(kind, subject);
            Held::Worded(held, reason)
        }
        Kind::Command { .. } | Kind::Judge { .. } => {
            Held::Worded(false, "a grader that did not run".into())
        }
    }
}

/// Whether `haystack` (the delivery, lowercased for `icontains…`) contains
/// the `needles` (the texts, lowercased likewise; `any`: one of them, else
/// every one), and why (naming the texts as written).
fn contains(haystack: &str, texts: &[String], needles: &[String], any: bool) -> (bool, String) {
    let found = |at: &usize| haystack.contains(needles[*at].as_str());
    let mut indices = 0..texts.len();
    if any {
        match indices.find(found) {
            Some(at) => (true, format!("the delivery contains {:?}", texts[at])),
            None => (false, "the delivery contains none of the texts".into()),
        }
    } else {
        match indices.find(|at| !found(at)) {
            Some(at) => (
                false,
                format!("the delivery does not contain {:?}", texts[at]),
            ),
            None if texts.len() == 1 => (true, format!("the delivery contains {:?}", texts[0])),
            None => (true, "the delivery contains every text".into()),
        }
    }
}

/// Whether the task kept within a `cost`, `latency` or `calls` bound, and why.
fn within(kind: &Kind, subject: &Subject<'_>) -> (bool, String) {
    match kind {
        Kind::Cost(bound) => match subject.cost {
            Some(cost) => (
                cost <= *bound,
                format!(
                    "the task cost ${cost:.6}, {} ${bound}",
                    if cost <= *bound { "within" } else { "over" }
                ),
            ),
            None => (false, "the task's cost is not known".into()),
        },
        Kind::Latency(bound) => {
            let took = subject.latency_ms as f64;
            (
                took <= *bound,
                format!(
                    "the task took {} ms, {} {bound} ms",
                    subject.latency_ms,
                    if took <= *bound { "within" } else { "over" }
                ),
            )
        }
        Kind::Calls(bound) => {
            let calls = subject.calls as f64;
            (
                calls <= *bound,
                format!(
                    "the task sent {}, {} {bound}",
                    crate::words::count(subject.calls, "request", "requests"),
                    if calls <= *bound { "within" } else { "over" }
                ),
            )
        }
        _ => (false, "not a bound".into()),
    }
}

/// `yes` when the check held, else `no`.
fn said(held: bool, yes: &str, no: &str) -> String {
    if held { yes } else { no }.to_string()
}

/// A value shown in a reason, cut to 80 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        text.chars().take(79).chain(['…']).collect()
    } else {
        text
    }
}

/// Every JSON object or array that starts at a `{` or `[` of `text` and
/// parses, in order (the first 100 candidates: a delivery full of brackets
/// cannot make a check quadratic without bound).
fn embedded_json(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.match_indices(['{', '['])
        .take(100)
        .filter_map(move |(start, _)| {
            serde_json::Deserializer::from_str(&text[start..])
                .into_iter::<Value>()
                .next()
                .and_then(Result::ok)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::parse_list;
    use serde_json::json;

    #[track_caller]
    fn scored(item: Value, delivery: Option<&str>) -> Score {
        let assertion = &parse_list(&json!([item]), std::path::Path::new("/")).unwrap()[0];
        let subject = Subject::new(delivery, Some("boom"), Some(0.002), 1500, 3);
        check(assertion, &subject).unwrap()
    }

    #[test]
    fn every_kind_passes_and_fails() {
        let cases = [
            (
                json!({"type": "equals", "value": "Paris"}),
                "Paris",
                "paris",
            ),
            (
                json!({"type": "equals", "value": {"a": 1}}),
                "{\"a\": 1}",
                "{\"a\": 2}",
            ),
            (
                json!({"type": "contains", "value": "Par"}),
                "Paris",
                "paris",
            ),
            (
                json!({"type": "icontains", "value": "PAR"}),
                "paris",
                "Rome",
            ),
            (
                json!({"type": "contains-any", "value": ["x", "Rome"]}),
                "Rome",
                "Paris",
            ),
            (
                json!({"type": "contains-all", "value": ["a", "b"]}),
                "ab",
                "a",
            ),
            (
                json!({"type": "icontains-all", "value": ["A", "B"]}),
                "ab",
                "a",
            ),
            (
                json!({"type": "starts-with", "value": "Yes"}),
                "Yes, it is",
                "No",
            ),
            (json!({"type": "regex", "value": "^\\d{3}$"}), "123", "12a"),
            (
                json!({"type": "not-contains", "value": "sorry"}),
                "Sure",
                "sorry, no",
            ),
            (
                json!({"type": "not-regex", "value": "(?i)as an ai"}),
                "Hi",
                "As an AI, …",
            ),
            (json!({"type": "is-json"}), "[1]", "nope"),
            (
                json!({"type": "is-json", "value": {"type": "object", "required": ["a"]}}),
                "{\"a\": 1}",
                "{\"b\": 1}",
            ),
            (
                json!({"type": "json-schema", "value": {"type": "array"}}),
                "[]",
                "{}",
            ),
            (
                json!({"type": "contains-json"}),
                "Here: {\"a\": 1} done",
                "Here: {a: 1}",
            ),
            (
                json!({"type": "json-path", "path": "$.label", "value": "spam"}),
                "{\"label\": \"spam\"}",
                "{\"label\": \"ham\"}",
            ),
            (json!({"type": "cost", "threshold": 0.01}), "x", ""),
            (json!({"type": "latency", "threshold": 2000}), "x", ""),
            (json!({"type": "calls", "threshold": 3}), "x", ""),
        ];
        for (item, good, bad) in cases {
            let passed = scored(item.clone(), Some(good));
            assert!(passed.pass, "{item} on {good:?}: {}", passed.reason);
            assert_eq!(passed.score, 1.0);
            if matches!(item["type"].as_str(), Some("cost" | "latency" | "calls")) {
                continue;
            }
            let failed = scored(item.clone(), Some(bad));
            assert!(!failed.pass, "{item} on {bad:?}: {}", failed.reason);
            assert_eq!(failed.score, 0.0);
        }
        for item in [
            json!({"type": "cost", "threshold": 0.001}),
            json!({"type": "latency", "threshold": 1000}),
            json!({"type": "calls", "threshold": 2}),
        ] {
            let failed = scored(item.clone(), Some("x"));
            assert!(!failed.pass, "{item}: {}", failed.reason);
            assert!(failed.reason.contains("over"), "{}", failed.reason);
        }
    }

    #[test]
    fn a_task_without_a_delivery_fails_even_not_forms() {
        let failed = scored(json!({"type": "not-contains", "value": "x"}), None);
        assert!(!failed.pass);
        assert_eq!(&*failed.reason, "no delivery: the task failed (boom)");
        let bounded = scored(json!({"type": "calls", "threshold": 5}), None);
        assert!(bounded.pass, "bounds hold of failed tasks too");
    }

    #[test]
    fn reasons_say_what_was_seen() {
        let reason = scored(
            json!({"type": "json-path", "path": "$.n", "value": 2}),
            Some("{\"n\": 3}"),
        )
        .reason;
        assert_eq!(&*reason, "`$.n` is 3, not 2");
        let reason = scored(json!({"type": "not-contains", "value": "x"}), Some("x")).reason;
        assert_eq!(&*reason, "not expected, and the delivery contains \"x\"");
        let reason = scored(json!({"type": "equals", "value": "a"}), Some("b")).reason;
        assert_eq!(&*reason, "the delivery does not equal the value");
    }
}
