//! The allowed range of every number a tactic sets, checked when the file is
//! read: a value out of range, of the wrong kind or not a number at all is one
//! problem naming where it is, the key and the range, listed with the file's
//! other problems (exit 2), never a panic or a silent clamp later (issue 12:
//! `timeout_s: 1e20` and `rpm: 0` crashed runs, negative timeouts became 1 ms).
//! The "Numbers and their ranges" table of docs/limits.md lists the same ranges.
//!
//! YAML's non-finite numbers (`.inf`, `.nan`) and integers past 64 bits have
//! no JSON form, so [`crate::yaml::parse`] keeps them as their YAML text: a
//! numeric key then rejects them by name instead of reading `null`, which
//! would mean "the default", or the whole file failing.

use std::time::Duration;

use serde_json::Value;

/// The inclusive range of one numeric setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub key: &'static str,
    pub min: f64,
    pub max: f64,
    /// Only whole numbers.
    pub whole: bool,
    /// What the number counts, for the message (`seconds`).
    pub unit: &'static str,
}

const fn whole(key: &'static str, min: f64, max: f64, unit: &'static str) -> Range {
    Range {
        key,
        min,
        max,
        whole: true,
        unit,
    }
}

const fn real(key: &'static str, min: f64, max: f64, unit: &'static str) -> Range {
    Range {
        key,
        min,
        max,
        whole: false,
        unit,
    }
}

/// A day: no request, tool call or MCP server start is allowed longer.
const DAY_S: f64 = 86_400.0;
/// An hour: the longest retry back-off, and so the longest pause a server can
/// impose on a provider (`Retry-After`, a rate-limit window's reset).
const HOUR_MS: f64 = 3_600_000.0;

// Providers.
pub const MAX_CONCURRENCY: Range = whole("max_concurrency", 1.0, 100_000.0, "requests at once");
pub const RPM: Range = whole("rpm", 1.0, 1e9, "requests per minute");
pub const TPM: Range = whole("tpm", 1.0, 1e12, "tokens per minute");
pub const TIMEOUT_S: Range = real("timeout_s", 0.001, DAY_S, "seconds");
pub const CONNECT_TIMEOUT_S: Range = real("connect_timeout_s", 0.001, 3600.0, "seconds");
pub const RETRY_BASE_MS: Range = whole("retry_base_ms", 0.0, HOUR_MS, "milliseconds");
pub const RETRY_CAP_MS: Range = whole("retry_cap_ms", 0.0, HOUR_MS, "milliseconds");
/// The default `retry_cap_ms` (`RetryPolicy::default().cap`), for the
/// base ≤ cap check.
pub const DEFAULT_RETRY_CAP_MS: u64 = 60_000;

// The tactic itself.
/// How long a cached reply may be used: a second to ten years.
pub const CACHE_TTL_S: Range = real("cache_ttl_s", 1.0, 3650.0 * DAY_S, "seconds");
pub const MAX_WORKERS: Range = whole("max_workers", 1.0, 100_000.0, "tasks at once");

// Agents and `global`.
pub const MAX_EXCEPTION_RETRY: Range = whole("max_exception_retry", 0.0, 100.0, "repairs");
pub const MAX_INTERRUPT_STEPS: Range = whole(
    "max_interrupt_steps",
    0.0,
    100.0,
    "tool rounds; 0 is the cap of 100",
);
pub const MAX_LLM_RECALL: Range = whole("max_llm_recall", 0.0, 100.0, "retries");
pub const CONTEXT_MAX_TOKENS: Range =
    whole("context_manager.max_tokens", 1.0, 100_000_000.0, "tokens");

// Tools, MCP servers and the flow.
pub const TOOL_TIMEOUT_S: Range = real("timeout_s", 0.001, DAY_S, "seconds");
pub const LOOP_MAX: Range = whole("max", 1.0, 10_000.0, "rounds");

impl Range {
    /// `value` if it is a number in range, else the problem
    /// (`` `rpm: 0` must be a whole number from 1 to 1000000000 (requests per minute) ``).
    pub fn check(&self, value: &Value) -> Result<f64, String> {
        let number = value
            .as_f64()
            .filter(|number| number.is_finite() && (!self.whole || number.fract() == 0.0));
        match number {
            Some(number) if (self.min..=self.max).contains(&number) => Ok(number),
            _ => Err(format!(
                "`{}: {}` must be {}",
                self.key,
                shown(value),
                self.describe()
            )),
        }
    }

    /// `a whole number from 1 to 100 (retries)`.
    pub fn describe(&self) -> String {
        format!(
            "{} from {} to {} ({})",
            if self.whole {
                "a whole number"
            } else {
                "a number"
            },
            self.min,
            self.max,
            self.unit
        )
    }
}

/// A value as the user wrote it.
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Checks an optional number (`null` is absent: the default applies); a
/// problem is pushed with `place` in front (`provider `local``).
pub fn read(
    value: Option<&Value>,
    range: &Range,
    place: &str,
    problems: &mut Vec<String>,
) -> Option<f64> {
    let value = value.filter(|value| !value.is_null())?;
    range
        .check(value)
        .map_err(|problem| problems.push(format!("{place}: {problem}")))
        .ok()
}

/// A whole number setting (see [`read`]); the range makes the cast exact.
pub fn read_whole(
    value: Option<&Value>,
    range: &Range,
    place: &str,
    problems: &mut Vec<String>,
) -> Option<u64> {
    read(value, range, place, problems).map(|number| number as u64)
}

/// Seconds as a `Duration`. The config allows 0.001 s to a day; a value from
/// a library caller outside that is clamped into it (NaN is the smallest), so
/// building a timeout never panics.
pub fn seconds(value: f64) -> Duration {
    let value = if value.is_nan() { 0.0 } else { value };
    Duration::from_secs_f64(value.clamp(TIMEOUT_S.min, TIMEOUT_S.max))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn case(range: &Range, value: Value, expected: Result<f64, &str>) {
        assert_eq!(
            range.check(&value),
            expected.map_err(str::to_string),
            "{value}"
        );
    }

    #[test]
    fn numbers_are_checked_against_their_range_and_kind() {
        case(&RPM, json!(60), Ok(60.0));
        case(&RPM, json!(60.0), Ok(60.0));
        let rpm = "must be a whole number from 1 to 1000000000 (requests per minute)";
        case(&RPM, json!(0), Err(&format!("`rpm: 0` {rpm}")));
        case(&RPM, json!(-1), Err(&format!("`rpm: -1` {rpm}")));
        case(&RPM, json!(1.5), Err(&format!("`rpm: 1.5` {rpm}")));
        case(&RPM, json!(1e20), Err(&format!("`rpm: 1e+20` {rpm}")));
        case(&RPM, json!("fast"), Err(&format!("`rpm: fast` {rpm}")));
        case(&RPM, json!(".inf"), Err(&format!("`rpm: .inf` {rpm}")));
        case(&RPM, json!(true), Err(&format!("`rpm: true` {rpm}")));
        let seconds = "must be a number from 0.001 to 86400 (seconds)";
        case(&TIMEOUT_S, json!(0.5), Ok(0.5));
        case(
            &TIMEOUT_S,
            json!(-1),
            Err(&format!("`timeout_s: -1` {seconds}")),
        );
        case(
            &TIMEOUT_S,
            json!(0),
            Err(&format!("`timeout_s: 0` {seconds}")),
        );
        case(
            &TIMEOUT_S,
            json!(1e20),
            Err(&format!("`timeout_s: 1e+20` {seconds}")),
        );
        case(&MAX_LLM_RECALL, json!(0), Ok(0.0));
        case(&RETRY_CAP_MS, json!(3_600_000), Ok(3_600_000.0));
        assert!(RETRY_CAP_MS.check(&json!(3_600_001)).is_err());
    }

    #[test]
    fn absent_and_null_are_the_default_and_problems_carry_their_place() {
        let mut problems = Vec::new();
        assert_eq!(read(None, &RPM, "provider `p`", &mut problems), None);
        assert_eq!(
            read(Some(&Value::Null), &RPM, "provider `p`", &mut problems),
            None
        );
        assert!(problems.is_empty());
        assert_eq!(
            read_whole(Some(&json!(0)), &RPM, "provider `p`", &mut problems),
            None
        );
        assert_eq!(
            problems,
            [
                "provider `p`: `rpm: 0` must be a whole number from 1 to 1000000000 (requests per minute)"
            ]
        );
    }

    #[test]
    fn seconds_never_panic() {
        assert_eq!(seconds(2.5), Duration::from_millis(2500));
        assert_eq!(seconds(f64::NAN), Duration::from_millis(1));
        assert_eq!(seconds(-1.0), Duration::from_millis(1));
        assert_eq!(seconds(1e20), Duration::from_secs(86_400));
        assert_eq!(seconds(f64::INFINITY), Duration::from_secs(86_400));
    }
}
