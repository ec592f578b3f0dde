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

    /// The delivery as JSON, if it is JSON (a text that cannot start JSON,
    /// as most deliveries in words cannot, is not parsed).
    fn json(&self) -> Option<&Value> {
        self.parsed
            .get_or_init(|| {
                let text = self.delivery?.trim();
                let first = *text.as_bytes().first()?;
                if !matches!(
                    first,
                    b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
                ) {
                    return None;
                }
                serde_json::from_str(text).ok()
            })
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
/// when it fails. For a bound (`cost`, `latency`, `calls`), the words that
/// follow what the task measured (`within 600000 ms`, `over 600000 ms`).
///
/// A passing check of fixed words says nothing its name does not
/// (`contains "Paris"` passed): its reason is empty, and a result line
/// leaves it out, unless the assertion has a `metric`, a name that does not
/// say what it checks.
#[derive(Debug, Clone)]
pub(super) struct Fixed {
    pass: Arc<str>,
    fail: Arc<str>,
}

impl Fixed {
    /// The reasons of `kind` (`negate`: its `not-` form; `metric`: named by
    /// a `metric`), if its words do not depend on the delivery.
    pub(super) fn of(kind: &Kind, negate: bool, metric: bool) -> Option<Fixed> {
        if let Some(bound) = bound_words(kind) {
            return Some(bound);
        }
        let (held, not_held) = fixed_words(kind)?;
        let (pass, fail) = if negate {
            (not_held, format!("not expected, and {held}"))
        } else {
            (held, not_held)
        };
        Some(Fixed {
            pass: if metric { pass.into() } else { empty() },
            fail: fail.into(),
        })
    }

    /// Those of `equals` a text, shared by every task line's `expected`.
    pub(super) fn equals_text() -> Fixed {
        static EQUALS: LazyLock<Fixed> = LazyLock::new(|| {
            Fixed::of(&Kind::Equals(Value::String(String::new())), false, false)
                .expect("`equals` a text has fixed words")
        });
        EQUALS.clone()
    }
}

/// The empty reason, shared.
fn empty() -> Arc<str> {
    static EMPTY: LazyLock<Arc<str>> = LazyLock::new(|| "".into());
    EMPTY.clone()
}

/// The words of a bound after what the task measured: `within $0.01` and
/// `over $0.01` (`None` for the other kinds).
fn bound_words(kind: &Kind) -> Option<Fixed> {
    let bound = match kind {
        Kind::Cost(bound) => format!("${bound}"),
        Kind::Latency(bound) => format!("{bound} ms"),
        Kind::Calls(bound) => bound.to_string(),
        _ => return None,
    };
    Some(Fixed {
        pass: format!("within {bound}").into(),
        fail: format!("over {bound}").into(),
    })
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
            Held::Measured(held, mut measured) => {
                measured.push_str(", ");
                measured.push_str(&assertion.fixed_reason(held));
                (held, measured.into())
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
                worded = Fixed::of(&self.kind, self.negate, true).expect("a kind of fixed words");
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
/// alone; for a bound, with what the task measured (its [bound's
/// words](bound_words) follow); for the others, with the words saying why
/// (in words that read after "not expected, and" for the `not-` forms).
enum Held {
    Fixed(bool),
    Measured(bool, String),
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
        Kind::Cost(_) | Kind::Latency(_) | Kind::Calls(_) => measured(kind, subject),
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

/// Whether the task kept within a `cost`, `latency` or `calls` bound, and
/// what it measured (`the task took 3 ms`), written without `format!`: a
/// bound is checked on every task of a batch, and its words after the
/// measure are the assertion's ([`bound_words`]).
fn measured(kind: &Kind, subject: &Subject<'_>) -> Held {
    let mut text = String::with_capacity(64);
    match kind {
        Kind::Cost(bound) => match subject.cost {
            Some(cost) => {
                text.push_str("the task cost $");
                push_dollars(&mut text, cost);
                Held::Measured(cost <= *bound, text)
            }
            None => Held::Worded(false, "the task's cost is not known".into()),
        },
        Kind::Latency(bound) => {
            text.push_str("the task took ");
            push_count(&mut text, subject.latency_ms);
            text.push_str(" ms");
            Held::Measured(subject.latency_ms as f64 <= *bound, text)
        }
        Kind::Calls(bound) => {
            text.push_str("the task sent ");
            push_count(&mut text, subject.calls);
            text.push_str(if subject.calls == 1 {
                " request"
            } else {
                " requests"
            });
            Held::Measured(subject.calls as f64 <= *bound, text)
        }
        _ => Held::Worded(false, "not a bound".into()),
    }
}

/// Appends `number` in decimal digits.
fn push_count(text: &mut String, number: u64) {
    let mut digits = [0u8; 20];
    for &digit in crate::words::decimal(number, &mut digits) {
        text.push(char::from(digit));
    }
}

/// Appends a cost in USD with six decimals, as `{:.6}` writes it: from
/// its millionths when they are a whole number of them away from a half
/// (every cost but a few rounding ties), else by `format!`, which rounds
/// ties exactly.
fn push_dollars(text: &mut String, cost: f64) {
    let millionths = cost * 1e6;
    let rounded = millionths.round();
    if (0.0..1e15).contains(&rounded) && ((millionths - rounded).abs() - 0.5).abs() > 1e-6 {
        let rounded = rounded as u64;
        push_count(text, rounded / 1_000_000);
        text.push('.');
        let fraction = rounded % 1_000_000;
        let mut place = 100_000;
        while place > 0 {
            text.push(char::from(b'0' + (fraction / place % 10) as u8));
            place /= 10;
        }
    } else {
        use std::fmt::Write;
        let _ = write!(text, "{cost:.6}");
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

    #[test]
    fn a_passing_check_of_fixed_words_has_a_reason_only_under_a_metric() {
        let cases = [
            // (item, delivery, reason)
            (json!({"type": "contains", "value": "a"}), "a", ""),
            (json!({"type": "not-regex", "value": "b"}), "a", ""),
            (json!({"type": "is-json"}), "[]", ""),
            (
                json!({"type": "contains", "value": "a", "metric": "has a"}),
                "a",
                "the delivery contains \"a\"",
            ),
            (
                json!({"type": "not-contains", "value": "b", "metric": "no b"}),
                "a",
                "the delivery does not contain \"b\"",
            ),
            (
                json!({"type": "contains-all", "value": ["a", "b"]}),
                "ab",
                "the delivery contains every text",
            ),
        ];
        for (item, delivery, reason) in cases {
            let score = scored(item.clone(), Some(delivery));
            assert!(score.pass, "{item}");
            assert_eq!(&*score.reason, reason, "{item}");
        }
    }

    #[test]
    fn bounds_say_what_was_measured_and_the_bound() {
        let cases = [
            // (item, cost, latency, calls, pass, reason)
            (
                json!({"type": "cost", "threshold": 0.01}),
                Some(0.002),
                0,
                0,
                true,
                "the task cost $0.002000, within $0.01",
            ),
            (
                json!({"type": "cost", "threshold": 1}),
                Some(4.5e-6),
                0,
                0,
                true,
                "the task cost $0.000005, within $1",
            ),
            (
                json!({"type": "cost", "value": 0.001}),
                Some(12.3456789),
                0,
                0,
                false,
                "the task cost $12.345679, over $0.001",
            ),
            (
                json!({"type": "cost", "threshold": 1}),
                None,
                0,
                0,
                false,
                "the task's cost is not known",
            ),
            (
                json!({"type": "latency", "threshold": 600000}),
                None,
                3,
                0,
                true,
                "the task took 3 ms, within 600000 ms",
            ),
            (
                json!({"type": "latency_ms", "threshold": 2.5}),
                None,
                1500,
                0,
                false,
                "the task took 1500 ms, over 2.5 ms",
            ),
            (
                json!({"type": "calls", "threshold": 4}),
                None,
                0,
                1,
                true,
                "the task sent 1 request, within 4",
            ),
            (
                json!({"type": "calls", "threshold": 0}),
                None,
                0,
                10,
                false,
                "the task sent 10 requests, over 0",
            ),
        ];
        for (item, cost, latency_ms, calls, pass, reason) in cases {
            let assertion = &parse_list(&json!([item]), std::path::Path::new("/")).unwrap()[0];
            let subject = Subject::new(Some("x"), None, cost, latency_ms, calls);
            let score = check(assertion, &subject).unwrap();
            assert_eq!((score.pass, &*score.reason), (pass, reason), "{item}");
        }
    }

    #[test]
    fn costs_are_written_as_six_decimals_write_them() {
        let costs = [
            0.0,
            1e-7,
            4.5e-6,
            5e-7,
            1.5e-6,
            2.5e-6,
            0.0000015,
            0.002,
            0.1234565,
            1.0,
            12.3456789,
            99999.9999995,
            1e20,
            f64::NAN,
        ];
        let steps = (0..20_000).map(|step| step as f64 * 3.7e-7);
        for cost in costs.into_iter().chain(steps) {
            let mut text = String::new();
            push_dollars(&mut text, cost);
            assert_eq!(text, format!("{cost:.6}"), "{cost:e}");
        }
        for number in [0, 7, 10, 1_000_000, u64::MAX] {
            let mut text = String::new();
            push_count(&mut text, number);
            assert_eq!(text, number.to_string());
        }
    }
}
