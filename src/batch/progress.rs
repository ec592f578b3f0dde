//! Showing a batch's progress. The scheduler hands a `Snapshot` to a
//! `Reporter` at its interval: a plain line every few seconds by default
//! (logs, CI, Slurm output files), nothing when quiet; the `lllm` binary puts
//! a bar on a terminal (package `lllm-cli`, which holds indicatif). Every line is escaped for the terminal
//! (`redact::terminal_line`), whatever text a waiting reason comes to hold.

use std::time::Duration;

use super::summary::{Totals, format_cost};

/// The state of a run at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Tasks this invocation has to finish (after `--resume`'s skips).
    pub total: u64,
    /// Results written so far by this invocation.
    pub done: Totals,
    pub in_flight: u64,
    pub elapsed: Duration,
    /// Why nothing more is starting right now: `budget`, `rate limit`, `back-off`.
    pub waiting: Option<&'static str>,
    /// A provider that is down, whose tasks wait (`provider::breaker`).
    pub paused: Option<String>,
    /// The latest retry's provider and reason, if it came in the last 10 s.
    pub retrying: Option<String>,
    /// Fewer tasks run than `-j` allows because a provider sends fewer
    /// requests at once: `4 of 16 running: `local` has 4 slots`.
    pub held: Option<String>,
}

/// The most characters of a retry's reason a progress line shows.
const RETRYING_CHARS: usize = 100;

impl Snapshot {
    fn rate(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            (self.done.tasks - self.done.skipped) as f64 / seconds
        } else {
            0.0
        }
    }

    fn eta(&self) -> Option<Duration> {
        let rate = self.rate();
        let left = self.total.saturating_sub(self.done.tasks);
        (rate > 0.0).then(|| Duration::from_secs_f64(left as f64 / rate))
    }

    /// `3 failed · 0 skipped · 1200 tokens · $0.0012 · 40.1 tasks/s · ETA 12 s · waiting: budget`,
    /// then why fewer tasks run than `-j` allows, what is paused and the
    /// latest retry's reason, if any.
    pub fn details(&self) -> String {
        let mut text = format!(
            "{} failed · {} skipped · {} tokens · {} · {:.1} tasks/s",
            self.done.failure,
            self.done.skipped,
            self.done.usage.total_tokens,
            format_cost(self.done.cost, self.done.cost_known),
            self.rate()
        );
        if let Some(eta) = self.eta() {
            text.push_str(&format!(" · ETA {}", seconds(eta)));
        }
        if let Some(reason) = self.waiting {
            text.push_str(&format!(" · waiting: {reason}"));
        }
        if let Some(held) = &self.held {
            text.push_str(&format!(" · {held}"));
        }
        if let Some(paused) = &self.paused {
            text.push_str(&format!(" · paused: {paused}"));
        }
        if let Some(reason) = &self.retrying {
            let reason = crate::redact::cut(reason, RETRYING_CHARS);
            text.push_str(&format!(" · retrying: {reason}"));
        }
        text
    }
}

fn seconds(duration: Duration) -> String {
    let total = duration.as_secs();
    match total {
        0..60 => format!("{total} s"),
        60..3600 => format!("{}m{:02}s", total / 60, total % 60),
        _ => format!("{}h{:02}m", total / 3600, total % 3600 / 60),
    }
}

pub trait Reporter: Send + Sync + std::fmt::Debug {
    /// How often the scheduler calls `update`.
    fn interval(&self) -> Duration;
    fn update(&self, snapshot: &Snapshot);
    /// The run is over (the summary table follows).
    fn finish(&self, snapshot: &Snapshot);
    /// A message for the person (a warning), shown without breaking the display.
    fn note(&self, text: &str);
    /// A line about how the run advances (a provider batch submitted, its
    /// state changed): shown like a progress line, not as a warning, and not
    /// at all when quiet.
    fn event(&self, text: &str) {
        crate::output::stderr_line(&format!("lllm batch: {text}"));
    }
}

/// Nothing when `quiet`, else a plain line every `interval`.
pub fn reporter(quiet: bool, interval: Duration) -> Box<dyn Reporter> {
    if quiet {
        Box::new(Quiet)
    } else {
        Box::new(Lines { interval })
    }
}

#[derive(Debug)]
struct Quiet;

impl Reporter for Quiet {
    fn interval(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn update(&self, _: &Snapshot) {}
    fn finish(&self, _: &Snapshot) {}
    fn note(&self, text: &str) {
        crate::report::warn(text);
    }
    fn event(&self, _: &str) {}
}

/// A plain line per interval, for logs.
#[derive(Debug)]
struct Lines {
    interval: Duration,
}

impl Reporter for Lines {
    fn interval(&self) -> Duration {
        self.interval
    }

    fn update(&self, snapshot: &Snapshot) {
        crate::output::stderr_line(&format!(
            "lllm batch: {}/{} done · {}",
            snapshot.done.tasks,
            snapshot.total,
            snapshot.details()
        ));
    }

    fn finish(&self, snapshot: &Snapshot) {
        self.update(snapshot);
    }

    fn note(&self, text: &str) {
        crate::report::warn(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_show_rate_eta_and_waiting() {
        let snapshot = Snapshot {
            total: 100,
            done: Totals {
                tasks: 50,
                failure: 2,
                ..Totals::default()
            },
            in_flight: 4,
            elapsed: Duration::from_secs(10),
            waiting: Some("budget"),
            paused: Some("`local` is down (5 connection failures), next probe in 4.0 s".into()),
            retrying: Some(format!("local: HTTP 503{}", "!".repeat(500))),
            held: Some("4 of 16 running: `local` has 4 slots".into()),
        };
        let text = snapshot.details();
        assert!(text.contains("2 failed"), "{text}");
        assert!(text.contains("5.0 tasks/s"), "{text}");
        assert!(text.contains("ETA 10 s"), "{text}");
        assert!(text.contains("waiting: budget"), "{text}");
        assert!(
            text.contains(
                " · paused: `local` is down (5 connection failures), next probe in 4.0 s"
            ),
            "{text}"
        );
        assert!(text.contains(" · retrying: local: HTTP 503!!!"), "{text}");
        assert!(text.ends_with("… (515 characters)"), "cut: {text}");
        assert!(
            text.contains("waiting: budget · 4 of 16 running: `local` has 4 slots"),
            "{text}"
        );
        assert_eq!(seconds(Duration::from_secs(3725)), "1h02m");
    }
}
