//! Reading a parsed script document into rules, replies and latencies, with an
//! error that names the place (`replies[2].tool_calls[0]`) and suggests the
//! key a typo meant. Hand-written rather than serde-derived so that every
//! unknown key, in every nested mapping, gets a "did you mean".

use serde_json::{Map, Value};

use super::{
    Fault, Latency, Planned, PlannedCall, RateLimitWindow, ReplyHeaders, Rule, ScriptUsage, Step,
    WindowKind,
};

const SCRIPT_KEYS: &[&str] = &["latency_ms", "replies", "rules", "default"];
const REPLY_KEYS: &[&str] = &[
    "text",
    "tool_calls",
    "echo",
    "fault",
    "usage",
    "delay_ms",
    "finish_reason",
    "headers",
    "rate_limit",
];
const TOOL_CALL_KEYS: &[&str] = &["name", "arguments", "id"];
const USAGE_KEYS: &[&str] = &["prompt_tokens", "completion_tokens"];
const FAULT_KEYS: &[&str] = &[
    "status",
    "retry_after_s",
    "retry_after_ms",
    "code",
    "message",
];
const FAULT_NAMES: &[&str] = &["timeout", "malformed", "reset", "cut_stream"];
const RULE_KEYS: &[&str] = &["when", "reply", "times"];
const WHEN_KEYS: &[&str] = &["contains", "regex", "model", "last_role"];
const WINDOW_NAMES: &[&str] = &["requests", "tokens", "input_tokens", "output_tokens"];
const WINDOW_KEYS: &[&str] = &["limit", "remaining", "reset_s"];
const LATENCY_KEYS: &[&str] = &["min", "max", "mean", "stddev"];
const ROLES: &[&str] = &["user", "assistant", "tool", "system", "developer"];

/// What is wrong and where.
#[derive(Debug)]
pub(super) struct Problem {
    pub place: String,
    pub message: String,
    /// The node to point at when it is not `place` itself (an unknown key
    /// of the mapping at `place`).
    pub node: Option<String>,
}

type Checked<T> = std::result::Result<T, Problem>;

fn problem(place: &str, message: impl Into<String>) -> Problem {
    Problem {
        place: place.to_string(),
        message: message.into(),
        node: None,
    }
}

/// The pieces of a script, validated.
pub(super) struct Parts {
    pub latency: Option<Latency>,
    pub rules: Vec<Rule>,
    pub replies: Vec<Step>,
    pub default: Option<Step>,
}

pub(super) fn script(value: &Value) -> Checked<Parts> {
    let map = mapping(value, "", "a script", SCRIPT_KEYS)?;
    let latency = field(map, "latency_ms")
        .map(|value| latency(value, "latency_ms"))
        .transpose()?;
    let replies = list(map, "replies", "")?
        .iter()
        .enumerate()
        .map(|(index, value)| reply(value, &format!("replies[{index}]")))
        .collect::<Checked<Vec<_>>>()?;
    let rules = list(map, "rules", "")?
        .iter()
        .enumerate()
        .map(|(index, value)| rule(value, &format!("rules[{index}]")))
        .collect::<Checked<Vec<_>>>()?;
    let default = field(map, "default")
        .map(|value| reply(value, "default"))
        .transpose()?;
    Ok(Parts {
        latency,
        rules,
        replies,
        default,
    })
}

fn rule(value: &Value, place: &str) -> Checked<Rule> {
    let map = mapping(value, place, "a rule", RULE_KEYS)?;
    let when_place = child(place, "when");
    let when = match field(map, "when") {
        Some(value) => mapping(value, &when_place, "`when`", WHEN_KEYS)?,
        None => &Map::new(),
    };
    let text = |key: &str| {
        field(when, key)
            .map(|value| scalar(value, &child(&when_place, key)))
            .transpose()
    };
    let regex = match text("regex")? {
        Some(pattern) => Some(regex::Regex::new(&pattern).map_err(|error| {
            problem(
                &child(&when_place, "regex"),
                format!("invalid regex `{pattern}`: {error}"),
            )
        })?),
        None => None,
    };
    let last_role = text("last_role")?;
    if let Some(role) = &last_role
        && !ROLES.contains(&role.as_str())
    {
        return Err(problem(
            &child(&when_place, "last_role"),
            unknown("role", role, ROLES),
        ));
    }
    let Some(reply_value) = field(map, "reply") else {
        return Err(problem(place, "a rule needs a `reply`"));
    };
    let times = field(map, "times")
        .map(|value| count(value, &child(place, "times")))
        .transpose()?;
    Ok(Rule {
        contains: text("contains")?,
        regex,
        model: text("model")?,
        last_role,
        step: reply(reply_value, &child(place, "reply"))?,
        times: times.map(|times| usize::try_from(times).unwrap_or(usize::MAX)),
    })
}

/// One reply; a bare string is short for `{text: …}`.
fn reply(value: &Value, place: &str) -> Checked<Step> {
    if let Value::String(text) = value {
        return Ok(Step {
            planned: Planned::Message {
                text: Some(text.clone()),
                echo: false,
                tool_calls: Vec::new(),
                usage: None,
                finish_reason: None,
            },
            delay: None,
            headers: ReplyHeaders::default(),
        });
    }
    let map = mapping(value, place, "a reply", REPLY_KEYS)?;
    let headers = ReplyHeaders {
        raw: field(map, "headers")
            .map(|value| raw_headers(value, &child(place, "headers")))
            .transpose()?
            .unwrap_or_default(),
        rate_limits: field(map, "rate_limit")
            .map(|value| rate_limits(value, &child(place, "rate_limit")))
            .transpose()?
            .unwrap_or_default(),
    };
    let echo = match field(map, "echo") {
        None => false,
        Some(Value::Bool(echo)) => *echo,
        Some(other) => {
            return Err(problem(
                &child(place, "echo"),
                format!("`echo` is `true` or `false`, found {}", describe(other)),
            ));
        }
    };
    let text = field(map, "text").is_some();
    let tool_calls = field(map, "tool_calls").is_some();
    let fault = field(map, "fault");
    let kinds = usize::from(text || tool_calls) + usize::from(echo) + usize::from(fault.is_some());
    if kinds != 1 {
        return Err(problem(
            place,
            "a reply needs exactly one of `text` (with or without `tool_calls`), `tool_calls`, `echo: true` or `fault`",
        ));
    }
    let delay = field(map, "delay_ms")
        .map(|value| latency(value, &child(place, "delay_ms")))
        .transpose()?;
    if let Some(fault_value) = fault {
        for key in ["usage", "finish_reason"] {
            if field(map, key).is_some() {
                return Err(problem(
                    place,
                    format!("`{key}` has no meaning next to `fault`"),
                ));
            }
        }
        return Ok(Step {
            planned: Planned::Fault(self::fault(fault_value, &child(place, "fault"))?),
            delay,
            headers,
        });
    }
    let calls_place = child(place, "tool_calls");
    let tool_calls = list(map, "tool_calls", place)?
        .iter()
        .enumerate()
        .map(|(index, value)| tool_call(value, &format!("{calls_place}[{index}]")))
        .collect::<Checked<Vec<_>>>()?;
    let text = field(map, "text")
        .map(|value| scalar(value, &child(place, "text")))
        .transpose()?;
    let usage = field(map, "usage")
        .map(|value| usage(value, &child(place, "usage")))
        .transpose()?;
    let finish_reason = field(map, "finish_reason")
        .map(|value| scalar(value, &child(place, "finish_reason")))
        .transpose()?;
    Ok(Step {
        planned: Planned::Message {
            text,
            echo,
            tool_calls,
            usage,
            finish_reason,
        },
        delay,
        headers,
    })
}

/// `headers: {name: value}`: any value a header can carry, sent as written.
fn raw_headers(value: &Value, place: &str) -> Checked<Vec<(String, String)>> {
    let Some(map) = value.as_object() else {
        return Err(problem(
            place,
            format!(
                "`headers` must be a mapping of names to values, found {}",
                describe(value)
            ),
        ));
    };
    map.iter()
        .map(|(name, value)| {
            let at = child(place, name);
            let text = scalar(value, &at)?;
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(problem(&at, format!("`{name}` is not an HTTP header name")));
            }
            if reqwest::header::HeaderValue::from_str(&text).is_err() {
                return Err(problem(&at, "the value is not valid in an HTTP header"));
            }
            Ok((name.clone(), text))
        })
        .collect()
}

/// `rate_limit: {requests: {limit, remaining, reset_s}, tokens: …}`.
fn rate_limits(value: &Value, place: &str) -> Checked<Vec<RateLimitWindow>> {
    let map = mapping(value, place, "`rate_limit`", WINDOW_NAMES)?;
    let mut windows = Vec::new();
    for (name, value) in map {
        let at = child(place, name);
        let window = mapping(value, &at, "a rate-limit window", WINDOW_KEYS)?;
        let number = |key: &str| match field(window, key) {
            Some(value) => Ok(value),
            None => Err(problem(
                &at,
                "a rate-limit window needs `limit`, `remaining` and `reset_s`",
            )),
        };
        let kind = match name.as_str() {
            "requests" => WindowKind::Requests,
            "tokens" => WindowKind::Tokens,
            "input_tokens" => WindowKind::InputTokens,
            _ => WindowKind::OutputTokens,
        };
        windows.push(RateLimitWindow {
            kind,
            limit: count(number("limit")?, &child(&at, "limit"))?,
            remaining: count(number("remaining")?, &child(&at, "remaining"))?,
            reset: std::time::Duration::from_secs_f64(
                millis(number("reset_s")?, &child(&at, "reset_s"))?.min(86_400.0),
            ),
        });
    }
    Ok(windows)
}

fn tool_call(value: &Value, place: &str) -> Checked<PlannedCall> {
    let map = mapping(value, place, "a tool call", TOOL_CALL_KEYS)?;
    let Some(name) = field(map, "name") else {
        return Err(problem(place, "a tool call needs a `name`"));
    };
    let arguments = match field(map, "arguments") {
        None => "{}".to_string(),
        // A string goes out verbatim, so a script can send malformed JSON.
        Some(Value::String(raw)) => raw.clone(),
        Some(other) => other.to_string(),
    };
    Ok(PlannedCall {
        id: field(map, "id")
            .map(|value| scalar(value, &child(place, "id")))
            .transpose()?,
        name: scalar(name, &child(place, "name"))?,
        arguments,
    })
}

fn usage(value: &Value, place: &str) -> Checked<ScriptUsage> {
    let map = mapping(value, place, "`usage`", USAGE_KEYS)?;
    let tokens = |key: &str| match field(map, key) {
        Some(value) => count(value, &child(place, key)),
        None => Err(problem(
            place,
            "`usage` needs both `prompt_tokens` and `completion_tokens`",
        )),
    };
    Ok(ScriptUsage {
        prompt_tokens: tokens("prompt_tokens")?,
        completion_tokens: tokens("completion_tokens")?,
    })
}

fn fault(value: &Value, place: &str) -> Checked<Fault> {
    if let Value::String(name) = value {
        return match name.as_str() {
            "timeout" => Ok(Fault::Timeout),
            "malformed" => Ok(Fault::Malformed),
            "reset" => Ok(Fault::Reset),
            "cut_stream" => Ok(Fault::CutStream),
            other => Err(problem(place, unknown("fault", other, FAULT_NAMES))),
        };
    }
    let map = mapping(value, place, "a fault", FAULT_KEYS).map_err(|mut problem| {
        if !value.is_object() {
            problem.message = format!(
                "a fault is `{{status: N}}` or one of {}",
                quoted(FAULT_NAMES)
            );
        }
        problem
    })?;
    let Some(status) = field(map, "status") else {
        return Err(problem(place, "an HTTP fault needs a `status`"));
    };
    let status = count(status, &child(place, "status"))?;
    let status = u16::try_from(status)
        .ok()
        .filter(|status| (400..=599).contains(status))
        .ok_or_else(|| {
            problem(
                &child(place, "status"),
                format!("`{status}` is not an HTTP error status (400 to 599)"),
            )
        })?;
    let text = |key: &str| {
        field(map, key)
            .map(|value| scalar(value, &child(place, key)))
            .transpose()
    };
    Ok(Fault::Http {
        status,
        retry_after_s: field(map, "retry_after_s")
            .map(|value| millis(value, &child(place, "retry_after_s")))
            .transpose()?,
        retry_after_ms: field(map, "retry_after_ms")
            .map(|value| count(value, &child(place, "retry_after_ms")))
            .transpose()?,
        code: text("code")?,
        message: text("message")?,
    })
}

/// A number, `{min, max}` or `{mean, stddev}`, in milliseconds.
fn latency(value: &Value, place: &str) -> Checked<Latency> {
    let shapes = "a latency is a number of milliseconds, `{min, max}` or `{mean, stddev}`";
    if value.is_number() {
        return Ok(Latency::Fixed(millis(value, place)?));
    }
    if !value.is_object() {
        return Err(problem(place, shapes));
    }
    let map = mapping(value, place, "a latency", LATENCY_KEYS)?;
    let number = |key: &str| {
        field(map, key)
            .map(|value| millis(value, &child(place, key)))
            .transpose()
    };
    match (
        number("min")?,
        number("max")?,
        number("mean")?,
        number("stddev")?,
    ) {
        (Some(min), Some(max), None, None) if min <= max => Ok(Latency::Uniform { min, max }),
        (Some(min), Some(max), None, None) => Err(problem(
            place,
            format!("`min` ({min}) is larger than `max` ({max})"),
        )),
        (None, None, Some(mean), Some(stddev)) => Ok(Latency::Normal { mean, stddev }),
        _ => Err(problem(place, shapes)),
    }
}

/// The mapping in `value`, whose keys must all be in `keys`.
fn mapping<'a>(
    value: &'a Value,
    place: &str,
    what: &str,
    keys: &[&str],
) -> Checked<&'a Map<String, Value>> {
    let Some(map) = value.as_object() else {
        return Err(problem(
            place,
            format!("{what} must be a mapping, found {}", describe(value)),
        ));
    };
    match map.keys().find(|key| !keys.contains(&key.as_str())) {
        Some(key) => Err(Problem {
            node: Some(child(place, key)),
            ..problem(place, unknown("key", key, keys))
        }),
        None => Ok(map),
    }
}

/// A present, non-null field (`text:` with nothing after it counts as absent).
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|value| !value.is_null())
}

fn list<'a>(map: &'a Map<String, Value>, key: &str, place: &str) -> Checked<&'a [Value]> {
    match field(map, key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(problem(
            &child(place, key),
            format!("`{key}` must be a list, found {}", describe(other)),
        )),
    }
}

/// Text; numbers and booleans are taken as written (`text: 42` is "42").
fn scalar(value: &Value, place: &str) -> Checked<String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        Value::Bool(flag) => Ok(flag.to_string()),
        other => Err(problem(
            place,
            format!("expected text, found {}", describe(other)),
        )),
    }
}

fn count(value: &Value, place: &str) -> Checked<u64> {
    value.as_u64().ok_or_else(|| {
        problem(
            place,
            format!("expected a whole number ≥ 0, found {}", describe(value)),
        )
    })
}

fn millis(value: &Value, place: &str) -> Checked<f64> {
    value
        .as_f64()
        .filter(|number| number.is_finite() && *number >= 0.0)
        .ok_or_else(|| {
            problem(
                place,
                format!("expected a number ≥ 0, found {}", describe(value)),
            )
        })
}

fn child(place: &str, key: &str) -> String {
    if place.is_empty() {
        key.to_string()
    } else {
        format!("{place}.{key}")
    }
}

/// "unknown key `x`; did you mean `y`?", or the list of known names.
fn unknown(what: &str, name: &str, known: &[&str]) -> String {
    let hint = crate::suggest::hint(name, known.iter().copied());
    if hint.is_empty() {
        format!("unknown {what} `{name}`; expected one of {}", quoted(known))
    } else {
        format!("unknown {what} `{name}`{hint}")
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(flag) => format!("`{flag}`"),
        Value::Number(number) => format!("`{number}`"),
        Value::String(text) => format!("`{text}`"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}
