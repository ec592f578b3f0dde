//! Who watches a run's model calls: a [`Watch`] set around a run's future
//! ([`scope`]), which the one retry loop (`provider::retry`) tells what it
//! waits on ([`Notice`]: a retry's back-off, a reply slow to come) and asks
//! before each attempt (`lllm batch`'s circuit breaker,
//! `provider::breaker`). A run without one (a library caller's) is told
//! nothing and waits on nothing; the `tracing` events stay either way.
//!
//! `lllm run` prints the notices (`report::notice`: brief, rate-limited,
//! silenced by `-q`, never on stdout); `lllm batch` keeps the latest retry's
//! reason for its progress line instead, since sixteen tasks retrying at
//! once would flood the terminal (issue 27).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ProviderError;
use super::breaker::{Breaker, Breakers, Claim};

/// The model a call goes to, as notices name it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The provider's name in the tactic (`local`, `openai`).
    pub provider: &'a str,
    /// The provider's own model id.
    pub model: &'a str,
    /// How long one attempt may take (the provider's `timeout_s`), when known.
    pub timeout: Option<Duration>,
}

/// What the retry loop is waiting on.
#[derive(Debug, Clone, Copy)]
pub enum Notice<'a> {
    /// An attempt failed and the call tries again after `wait`.
    Retry {
        /// The call.
        target: Target<'a>,
        /// Why the attempt failed.
        error: &'a ProviderError,
        /// The number of the attempt to come (1-based).
        next_attempt: u32,
        /// The most attempts the call makes (`max_llm_recall` + 1).
        attempts: u32,
        /// The wait before it.
        wait: Duration,
        /// Whether a `tracing` event said so already (`-v`).
        traced: bool,
    },
    /// An attempt has been waiting for its reply this long.
    Slow {
        /// The call.
        target: Target<'a>,
        /// Since the attempt was sent.
        elapsed: Duration,
    },
}

/// The most characters of an error a notice quotes.
const REASON_CHARS: usize = 160;

impl Notice<'_> {
    /// One line for a person: `waiting 2.0 s to retry local/m: cannot connect
    /// to `…` (attempt 2 of 4)`, `still waiting for local/m after 40 s
    /// (timeout 600 s)`.
    pub fn text(&self) -> String {
        match self {
            Notice::Retry {
                target,
                error,
                next_attempt,
                attempts,
                wait,
                ..
            } => format!(
                "waiting {:.1} s to retry {}/{}: {} (attempt {next_attempt} of {attempts})",
                wait.as_secs_f64(),
                target.provider,
                target.model,
                reason(error)
            ),
            Notice::Slow { target, elapsed } => {
                let mut text = format!(
                    "still waiting for {}/{} after {} s",
                    target.provider,
                    target.model,
                    elapsed.as_secs()
                );
                if let Some(timeout) = target.timeout {
                    text.push_str(&format!(" (timeout {} s)", timeout.as_secs()));
                }
                text
            }
        }
    }
}

/// Why an attempt failed, in one bounded line.
pub fn reason(error: &ProviderError) -> String {
    crate::redact::cut(&error.to_string(), REASON_CHARS).into_owned()
}

/// When a slow reply is first mentioned, and how often after that.
pub const SLOW_FIRST: Duration = Duration::from_secs(10);
/// See [`SLOW_FIRST`].
pub const SLOW_EVERY: Duration = Duration::from_secs(30);

/// Told each notice.
pub type Notices = Arc<dyn Fn(&Notice<'_>) + Send + Sync>;

/// What watches the calls of one run.
#[derive(Default)]
pub struct Watch {
    notices: Option<Notices>,
    /// Whether replies slow to come are mentioned (a timer per call).
    slow_replies: bool,
    breakers: Option<Arc<Breakers>>,
    /// Probes the batch started this task for, one per provider.
    claims: Mutex<Vec<Claim>>,
}

impl Watch {
    /// Notices printed on stderr (`report::notice`), those a `-v` trace
    /// line says already left out: what `lllm run` uses.
    pub fn printing() -> Watch {
        Watch::with_notices(Arc::new(|notice: &Notice<'_>| {
            if !matches!(notice, Notice::Retry { traced: true, .. }) {
                crate::report::notice(&notice.text());
            }
        }))
    }

    /// Each notice handed to `notices`.
    pub fn with_notices(notices: Notices) -> Watch {
        Watch {
            notices: Some(notices),
            slow_replies: true,
            ..Watch::default()
        }
    }

    /// Only retries are noticed, no slow reply: no timer runs beside each
    /// call (`lllm batch`, whose progress line shows only retries).
    #[doc(hidden)]
    pub fn retries_only(mut self) -> Watch {
        self.slow_replies = false;
        self
    }

    /// Calls wait on `breakers` (`lllm batch`); `claims` are the probes the
    /// run was started for.
    #[doc(hidden)]
    pub fn with_breakers(mut self, breakers: Arc<Breakers>, claims: Vec<Claim>) -> Watch {
        self.breakers = Some(breakers);
        self.claims = Mutex::new(claims);
        self
    }

    /// Whether slow replies are noticed (the timer runs only then).
    pub(crate) fn wants_slow_replies(&self) -> bool {
        self.notices.is_some() && self.slow_replies
    }

    pub(crate) fn notice(&self, notice: &Notice<'_>) {
        if let Some(notices) = &self.notices {
            notices(notice);
        }
    }

    /// Provider `name`'s breaker, if calls wait on breakers.
    pub(crate) fn breaker(&self, name: &str) -> Option<Arc<Breaker>> {
        self.breakers.as_ref().map(|breakers| breakers.get(name))
    }

    /// The probe claim this run holds for provider `name`, taken.
    pub(crate) fn take_claim(&self, name: &str) -> Option<Claim> {
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = claims.iter().position(|claim| claim.provider() == name)?;
        Some(claims.swap_remove(index))
    }
}

tokio::task_local! {
    static WATCH: Arc<Watch>;
}

/// Runs `future` (a tactic's run) with `watch` watching its model calls,
/// sub-tactics' included. Inside another such future, the inner watch is
/// the one that counts.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::{Arc, Mutex};
/// use lllm::provider::watch::{self, Notice, Watch};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let kept = seen.clone();
/// let watch = Watch::with_notices(Arc::new(move |notice: &Notice<'_>| {
///     kept.lock().unwrap().push(notice.text());
/// }));
/// let value = watch::scope(Arc::new(watch), async { 42 }).await;
/// assert_eq!(value, 42);
/// assert!(seen.lock().unwrap().is_empty(), "no call, no notice");
/// # }
/// ```
// Not an `async fn`: that future would hold `future` twice, as its
// argument and as the scope it awaits (4.7 KB of every served run).
pub fn scope<F: std::future::Future>(
    watch: Arc<Watch>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    WATCH.scope(watch, future)
}

/// The watch of the run this task is in, if any.
pub(crate) fn current() -> Option<Arc<Watch>> {
    WATCH.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_name_the_model_the_reason_the_attempt_and_the_wait() {
        let target = Target {
            provider: "local",
            model: "qwen",
            timeout: Some(Duration::from_secs(600)),
        };
        let error = ProviderError::transient(format!(
            "cannot connect to `http://127.0.0.1:8080/v1/chat/completions`{}",
            "x".repeat(500)
        ));
        let retry = Notice::Retry {
            target,
            error: &error,
            next_attempt: 2,
            attempts: 4,
            wait: Duration::from_millis(2000),
            traced: false,
        };
        let text = retry.text();
        assert!(
            text.starts_with(
                "waiting 2.0 s to retry local/qwen: cannot connect to `http://127.0.0.1:8080/v1/chat/completions`xxx"
            ),
            "{text}"
        );
        assert!(text.ends_with("(attempt 2 of 4)"), "{text}");
        assert!(text.chars().count() < 300, "the reason is cut: {text}");
        let slow = Notice::Slow {
            target,
            elapsed: Duration::from_secs(40),
        };
        assert_eq!(
            slow.text(),
            "still waiting for local/qwen after 40 s (timeout 600 s)"
        );
        let offline = Notice::Slow {
            target: Target {
                timeout: None,
                ..target
            },
            elapsed: Duration::from_secs(10),
        };
        assert_eq!(offline.text(), "still waiting for local/qwen after 10 s");
    }
}
