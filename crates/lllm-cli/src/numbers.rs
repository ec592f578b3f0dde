//! The range of every numeric command-line flag, checked by clap while the
//! arguments are parsed, so a bad value is one `error:` line naming the flag
//! and its range (exit 2), before anything is read or sent
//! (issue 12: `--grace 1e20` and `--progress-interval 1e20` panicked,
//! `-j 18446744073709551615` panicked in the scheduler, `--threads 100000`
//! hung starting threads). The "Numbers and their ranges" table of docs/limits.md
//! lists the same ranges.

use lllm::config::numbers::Range;

const fn flag(min: f64, max: f64, whole: bool, unit: &'static str) -> Range {
    Range {
        key: "",
        min,
        max,
        whole,
        unit,
    }
}

pub const CONCURRENCY: Range = flag(1.0, 100_000.0, true, "tasks at once");
pub const THREADS: Range = flag(1.0, 1024.0, true, "threads");
pub const LIMIT: Range = flag(1.0, f64::INFINITY, true, "tasks");
pub const SHARDS: Range = flag(1.0, f64::INFINITY, true, "shards");
pub const MAX_COST: Range = flag(0.0, 1e9, false, "USD");
pub const GRACE: Range = flag(0.0, 86_400.0, false, "seconds");
/// Below 50 ms the progress lines would cost more than the tasks.
pub const PROGRESS_INTERVAL: Range = flag(0.05, 86_400.0, false, "seconds");
/// Waits between two retrievals of a provider batch (`--poll-interval`,
/// `--poll-max`): a millisecond at least (tests against a local mock), a
/// day at most (a batch's completion window).
pub const POLL: Range = flag(0.001, 86_400.0, false, "seconds");
/// `--gather-window`.
pub const GATHER_WINDOW: Range = flag(0.0, 86_400.0, false, "seconds");
/// `--max-outage`: a second at least (the first probe's wait), a week at most.
pub const MAX_OUTAGE: Range = flag(1.0, 604_800.0, false, "seconds");

/// `--fail-under`: a pass rate.
pub const FAIL_UNDER: Range = flag(0.0, 1.0, false, "pass rate");
/// `--repeat`: runs of each task line.
pub const REPEAT: Range = flag(1.0, 1000.0, true, "runs");

/// `lllm serve --max-body`: a KiB at least, 64 MiB at most.
pub const MAX_BODY: Range = flag(1024.0, 67_108_864.0, true, "bytes");
/// `lllm serve --timeout`: a second at least, a day at most.
pub const TIMEOUT: Range = flag(1.0, 86_400.0, true, "seconds");

/// `must be a whole number from 1 to 1024 (threads)`, or `…, at least 1 (tasks)`.
fn problem(range: &Range) -> String {
    if range.max.is_finite() {
        format!("must be {}", range.describe())
    } else {
        format!(
            "must be {}, at least {} ({})",
            if range.whole {
                "a whole number"
            } else {
                "a number"
            },
            range.min,
            range.unit
        )
    }
}

fn whole(text: &str, range: &Range) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|number| (range.min..=range.max).contains(&(*number as f64)))
        .ok_or_else(|| problem(range))
}

fn real(text: &str, range: &Range) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|number| number.is_finite() && (range.min..=range.max).contains(number))
        .ok_or_else(|| problem(range))
}

pub fn concurrency(text: &str) -> Result<usize, String> {
    whole(text, &CONCURRENCY).map(|number| number as usize)
}

pub fn max_body(text: &str) -> Result<usize, String> {
    whole(text, &MAX_BODY).map(|number| number as usize)
}

pub fn timeout(text: &str) -> Result<u64, String> {
    whole(text, &TIMEOUT)
}

pub fn threads(text: &str) -> Result<usize, String> {
    whole(text, &THREADS).map(|number| number as usize)
}

pub fn limit(text: &str) -> Result<u64, String> {
    whole(text, &LIMIT)
}

pub fn shards(text: &str) -> Result<u64, String> {
    whole(text, &SHARDS)
}

pub fn max_cost(text: &str) -> Result<f64, String> {
    real(text, &MAX_COST)
}

pub fn fail_under(text: &str) -> Result<f64, String> {
    real(text, &FAIL_UNDER)
}

pub fn repeat(text: &str) -> Result<u32, String> {
    whole(text, &REPEAT).map(|runs| runs as u32)
}

pub fn grace(text: &str) -> Result<f64, String> {
    real(text, &GRACE)
}

pub fn progress_interval(text: &str) -> Result<f64, String> {
    real(text, &PROGRESS_INTERVAL)
}

pub fn poll(text: &str) -> Result<f64, String> {
    real(text, &POLL)
}

pub fn max_outage(text: &str) -> Result<f64, String> {
    real(text, &MAX_OUTAGE)
}

pub fn gather_window(text: &str) -> Result<f64, String> {
    real(text, &GATHER_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_numbers_in_range_only() {
        assert_eq!(concurrency("16"), Ok(16));
        assert_eq!(
            concurrency("0"),
            Err("must be a whole number from 1 to 100000 (tasks at once)".into())
        );
        assert!(concurrency("18446744073709551615").is_err());
        assert!(concurrency("2.5").is_err());
        assert_eq!(threads("1024"), Ok(1024));
        assert!(threads("1025").is_err());
        assert_eq!(limit("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            limit("0"),
            Err("must be a whole number, at least 1 (tasks)".into())
        );
        assert_eq!(max_cost("0"), Ok(0.0));
        assert_eq!(max_cost("0.5"), Ok(0.5));
        for bad in ["nan", "NaN", "-1", "inf", "1e10", "five"] {
            assert_eq!(
                max_cost(bad),
                Err("must be a number from 0 to 1000000000 (USD)".into()),
                "{bad}"
            );
        }
        assert_eq!(grace("0"), Ok(0.0));
        assert!(grace("1e20").is_err());
        assert!(grace("-0.5").is_err());
        assert_eq!(progress_interval("0.05"), Ok(0.05));
        assert!(progress_interval("0").is_err());
        assert!(progress_interval("1e20").is_err());
        assert_eq!(shards("4"), Ok(4));
        assert!(shards("0").is_err());
        assert_eq!(max_body("1024"), Ok(1024));
        assert!(max_body("1023").is_err());
        assert!(max_body("67108865").is_err());
        assert_eq!(timeout("300"), Ok(300));
        assert!(timeout("0").is_err());
        assert!(timeout("86401").is_err());
    }
}
