//! The script format of the mock provider and the `lllm-mock` server: rules
//! matched against a request, then replies served in order, then a default.
//! Independent of HTTP, so the in-process `mock/script` provider reads it too.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct ScriptError {
    pub origin: String,
    pub message: String,
}

/// What a request looks like to the script.
pub struct ScriptRequest<'a> {
    pub model: &'a str,
    pub last_text: &'a str,
    pub last_role: &'a str,
    pub message_count: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScriptToolCall {
    pub id: String,
    pub name: String,
    /// Raw JSON text (a script may send malformed arguments on purpose).
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScriptUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScriptMessage {
    pub text: Option<String>,
    pub tool_calls: Vec<ScriptToolCall>,
    pub usage: Option<ScriptUsage>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    Http {
        status: u16,
        retry_after_s: Option<f64>,
        retry_after_ms: Option<u64>,
        code: Option<String>,
        message: Option<String>,
    },
    Timeout,
    Malformed,
    Reset,
    CutStream,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Message(ScriptMessage),
    Fault(Fault),
    Exhausted { served: usize },
}

/// One answer of the script: which request it was, what to send, after how long.
#[derive(Debug, Clone)]
pub struct Served {
    pub index: usize,
    pub reply: Reply,
    pub delay: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Latency {
    Fixed(f64),
    Uniform { min: f64, max: f64 },
    Normal { mean: f64, stddev: f64 },
}

impl Latency {
    fn sample(&self) -> Duration {
        let millis = match *self {
            Latency::Fixed(millis) => millis,
            Latency::Uniform { min, max } => min + fastrand::f64() * (max - min).max(0.0),
            Latency::Normal { mean, stddev } => {
                // Box–Muller.
                let (u1, u2) = (fastrand::f64().max(f64::MIN_POSITIVE), fastrand::f64());
                mean + stddev * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            }
        };
        Duration::from_secs_f64(millis.max(0.0) / 1000.0)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolCall {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawFault {
    Named(String),
    Http {
        status: u16,
        #[serde(default)]
        retry_after_s: Option<f64>,
        #[serde(default)]
        retry_after_ms: Option<u64>,
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        message: Option<String>,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    text: Option<String>,
    tool_calls: Option<Vec<RawToolCall>>,
    echo: Option<bool>,
    fault: Option<RawFault>,
    usage: Option<RawUsage>,
    delay_ms: Option<f64>,
    finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhen {
    contains: Option<String>,
    regex: Option<String>,
    model: Option<String>,
    last_role: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    when: RawWhen,
    reply: RawReply,
    times: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    latency_ms: Option<Latency>,
    #[serde(default)]
    rules: Vec<RawRule>,
    #[serde(default)]
    replies: Vec<RawReply>,
    default: Option<RawReply>,
}

const SCRIPT_KEYS: &[&str] = &["latency_ms", "rules", "replies", "default"];
const REPLY_KEYS: &[&str] = &[
    "text",
    "tool_calls",
    "echo",
    "fault",
    "usage",
    "delay_ms",
    "finish_reason",
];

#[derive(Debug)]
enum Planned {
    Message { message: ScriptMessage, echo: bool },
    Fault(Fault),
}

#[derive(Debug)]
struct Step {
    planned: Planned,
    delay: Option<Duration>,
}

#[derive(Debug)]
struct Rule {
    contains: Option<String>,
    regex: Option<regex::Regex>,
    model: Option<String>,
    last_role: Option<String>,
    step: Step,
    times: Option<usize>,
    used: AtomicUsize,
}

/// A loaded script. `next` is safe to call from many tasks at once.
#[derive(Debug)]
pub struct Script {
    latency: Option<Latency>,
    rules: Vec<Rule>,
    replies: Vec<Step>,
    default: Option<Step>,
    counter: AtomicUsize,
    position: Mutex<usize>,
}

impl Script {
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ScriptError {
            origin: origin.clone(),
            message: format!("cannot read the script: {error}"),
        })?;
        Script::parse(&text, &origin)
    }

    pub fn parse(text: &str, origin: &str) -> Result<Script, ScriptError> {
        let fail = |message: String| ScriptError {
            origin: origin.to_string(),
            message,
        };
        let value: Value = if text.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_yaml_ng::from_str(text).map_err(|error| {
                let location = error
                    .location()
                    .map(|l| format!("{}:{}: ", l.line(), l.column()))
                    .unwrap_or_default();
                let message = error.to_string();
                fail(format!(
                    "{location}{}",
                    message.split(" at line ").next().unwrap_or(&message)
                ))
            })?
        };
        check_keys(&value, origin)?;
        let raw: RawScript =
            serde_json::from_value(value).map_err(|error| fail(error.to_string()))?;
        let mut counter = 0;
        let mut step = |reply: RawReply, place: String| -> Result<Step, ScriptError> {
            plan(reply, &mut counter).map_err(|message| fail(format!("{place}: {message}")))
        };
        let mut rules = Vec::new();
        for (index, rule) in raw.rules.into_iter().enumerate() {
            let regex = match &rule.when.regex {
                Some(pattern) => Some(
                    regex::Regex::new(pattern)
                        .map_err(|error| fail(format!("rules[{index}].when.regex: {error}")))?,
                ),
                None => None,
            };
            rules.push(Rule {
                contains: rule.when.contains,
                regex,
                model: rule.when.model,
                last_role: rule.when.last_role,
                step: step(rule.reply, format!("rules[{index}].reply"))?,
                times: rule.times,
                used: AtomicUsize::new(0),
            });
        }
        let replies = raw
            .replies
            .into_iter()
            .enumerate()
            .map(|(index, reply)| step(reply, format!("replies[{index}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let default = raw
            .default
            .map(|reply| step(reply, "default".into()))
            .transpose()?;
        Ok(Script {
            latency: raw.latency_ms,
            rules,
            replies,
            default,
            counter: AtomicUsize::new(0),
            position: Mutex::new(0),
        })
    }

    /// Overrides the script's latency (the server's `--latency-ms`).
    pub fn set_latency_ms(&mut self, millis: f64) {
        self.latency = Some(Latency::Fixed(millis));
    }

    /// The answer to the next request.
    pub fn next(&self, request: &ScriptRequest<'_>) -> Served {
        let index = self.counter.fetch_add(1, Ordering::Relaxed);
        let step = self
            .rules
            .iter()
            .find(|rule| rule.matches(request))
            .map(|rule| &rule.step)
            .or_else(|| {
                let mut position = self
                    .position
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if *position < self.replies.len() {
                    *position += 1;
                    Some(&self.replies[*position - 1])
                } else {
                    self.default.as_ref()
                }
            });
        let Some(step) = step else {
            return Served {
                index,
                reply: Reply::Exhausted {
                    served: self.replies.len(),
                },
                delay: Duration::ZERO,
            };
        };
        let delay = step
            .delay
            .or_else(|| self.latency.as_ref().map(Latency::sample))
            .unwrap_or_default();
        let reply = match &step.planned {
            Planned::Message {
                message,
                echo: true,
            } => Reply::Message(ScriptMessage {
                text: Some(request.last_text.to_string()),
                ..message.clone()
            }),
            Planned::Message {
                message,
                echo: false,
            } => Reply::Message(message.clone()),
            Planned::Fault(fault) => Reply::Fault(fault.clone()),
        };
        Served {
            index,
            reply,
            delay,
        }
    }
}

impl Rule {
    fn matches(&self, request: &ScriptRequest<'_>) -> bool {
        let fits = self
            .contains
            .as_ref()
            .is_none_or(|text| request.last_text.contains(text.as_str()))
            && self
                .regex
                .as_ref()
                .is_none_or(|regex| regex.is_match(request.last_text))
            && self
                .model
                .as_ref()
                .is_none_or(|model| model == request.model)
            && self
                .last_role
                .as_ref()
                .is_none_or(|role| role == request.last_role);
        if !fits {
            return false;
        }
        match self.times {
            None => true,
            Some(limit) => self
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    (used < limit).then_some(used + 1)
                })
                .is_ok(),
        }
    }
}

/// Unknown keys get a "did you mean" before serde's generic message.
fn check_keys(value: &Value, origin: &str) -> Result<(), ScriptError> {
    let unknown = |map: &serde_json::Map<String, Value>, allowed: &[&str], place: &str| {
        map.keys()
            .find(|key| !allowed.contains(&key.as_str()))
            .map(|key| ScriptError {
                origin: origin.to_string(),
                message: format!(
                    "{place}unknown key `{key}`{}",
                    crate::suggest::hint(key, allowed.iter().copied())
                ),
            })
    };
    let Some(map) = value.as_object() else {
        return Err(ScriptError {
            origin: origin.into(),
            message: "a script must be a mapping".into(),
        });
    };
    if let Some(error) = unknown(map, SCRIPT_KEYS, "") {
        return Err(error);
    }
    let replies = map
        .get("replies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let rules = map
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|rule| rule.get("reply"));
    for (index, reply) in replies.chain(rules).chain(map.get("default")).enumerate() {
        if let Some(error) = reply
            .as_object()
            .and_then(|reply| unknown(reply, REPLY_KEYS, &format!("reply {}: ", index + 1)))
        {
            return Err(error);
        }
    }
    Ok(())
}

fn plan(reply: RawReply, counter: &mut usize) -> Result<Step, String> {
    let kinds = [
        reply.text.is_some() || reply.tool_calls.is_some(),
        reply.echo == Some(true),
        reply.fault.is_some(),
    ];
    if kinds.iter().filter(|kind| **kind).count() != 1 {
        return Err(
            "a reply needs exactly one of `text` / `tool_calls`, `echo: true` or `fault`".into(),
        );
    }
    let delay = reply
        .delay_ms
        .map(|millis| Duration::from_secs_f64(millis.max(0.0) / 1000.0));
    if let Some(fault) = reply.fault {
        let fault = match fault {
            RawFault::Named(name) => match name.as_str() {
                "timeout" => Fault::Timeout,
                "malformed" => Fault::Malformed,
                "reset" => Fault::Reset,
                "cut_stream" => Fault::CutStream,
                other => {
                    return Err(format!(
                        "unknown fault `{other}`{}",
                        crate::suggest::hint(
                            other,
                            ["timeout", "malformed", "reset", "cut_stream"]
                        )
                    ));
                }
            },
            RawFault::Http {
                status,
                retry_after_s,
                retry_after_ms,
                code,
                message,
            } => Fault::Http {
                status,
                retry_after_s,
                retry_after_ms,
                code,
                message,
            },
        };
        return Ok(Step {
            planned: Planned::Fault(fault),
            delay,
        });
    }
    let tool_calls = reply
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| {
            *counter += 1;
            ScriptToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{counter}")),
                name: call.name,
                arguments: match call.arguments {
                    None => "{}".into(),
                    Some(Value::String(raw)) => raw,
                    Some(other) => other.to_string(),
                },
            }
        })
        .collect();
    let message = ScriptMessage {
        text: reply.text,
        tool_calls,
        usage: reply.usage.map(|usage| ScriptUsage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        }),
        finish_reason: reply.finish_reason,
    };
    Ok(Step {
        planned: Planned::Message {
            message,
            echo: reply.echo == Some(true),
        },
        delay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(text: &'a str, role: &'a str) -> ScriptRequest<'a> {
        ScriptRequest {
            model: "m",
            last_text: text,
            last_role: role,
            message_count: 2,
        }
    }

    fn text_of(served: Served) -> String {
        match served.reply {
            Reply::Message(message) => message.text.unwrap_or_default(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn rules_then_replies_then_default() {
        let script = Script::parse(
            "rules:\n  - when: {contains: weather}\n    reply: {text: sunny}\n    times: 1\nreplies:\n  - text: one\n  - echo: true\ndefault: {text: later}\n",
            "s",
        )
        .unwrap();
        assert_eq!(text_of(script.next(&request("weather?", "user"))), "sunny");
        assert_eq!(
            text_of(script.next(&request("weather?", "user"))),
            "one",
            "the rule was used up"
        );
        assert_eq!(
            text_of(script.next(&request("say this", "user"))),
            "say this"
        );
        assert_eq!(text_of(script.next(&request("x", "user"))), "later");
        let served = script.next(&request("x", "user"));
        assert_eq!(served.index, 4);
    }

    #[test]
    fn every_reply_form_parses() {
        let script = Script::parse(
            "latency_ms: {min: 1, max: 2}\nreplies:\n  - tool_calls: [{name: f, arguments: {a: 1}}, {name: g, arguments: '{\"a\": ', id: x}]\n  - fault: {status: 429, retry_after_ms: 5}\n  - fault: reset\n",
            "s",
        )
        .unwrap();
        let Reply::Message(message) = script.next(&request("", "user")).reply else {
            panic!()
        };
        assert_eq!(
            message.tool_calls[0],
            ScriptToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            }
        );
        assert_eq!(message.tool_calls[1].arguments, "{\"a\": ");
        let served = script.next(&request("", "user"));
        assert!(served.delay >= Duration::from_millis(1));
        assert!(matches!(
            served.reply,
            Reply::Fault(Fault::Http {
                status: 429,
                retry_after_ms: Some(5),
                ..
            })
        ));
        assert_eq!(
            script.next(&request("", "user")).reply,
            Reply::Fault(Fault::Reset)
        );
        assert_eq!(
            script.next(&request("", "user")).reply,
            Reply::Exhausted { served: 3 }
        );
    }

    #[track_caller]
    fn bad_case(text: &str, expected: &str) {
        let error = Script::parse(text, "s.yaml").unwrap_err().to_string();
        assert!(
            error.starts_with("s.yaml: ") && error.contains(expected),
            "{error}"
        );
    }

    #[test]
    fn bad_scripts_are_explained() {
        bad_case(
            "replys: []",
            "unknown key `replys`; did you mean `replies`?",
        );
        bad_case(
            "replies:\n  - txt: hi",
            "unknown key `txt`; did you mean `text`?",
        );
        bad_case("replies:\n  - {text: a, echo: true}", "exactly one of");
        bad_case("replies:\n  - fault: crash", "unknown fault `crash`");
        bad_case(
            "rules:\n  - when: {regex: '('}\n    reply: {text: a}",
            "rules[0].when.regex",
        );
        bad_case("replies: [", "");
    }
}
