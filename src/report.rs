//! What lllm says to the person at the terminal besides its output and its
//! errors: warnings (`warning: …`) and notices (`lllm: …`, what a run is
//! waiting on), one line each on stderr, control characters escaped (they
//! may quote a model's or a server's text). This is the one sink: `-q`
//! (`set_quiet`) silences both, on every command, and nothing here ever
//! reaches stdout.
//!
//! The library warns rarely (unknown prices, config keys passed through) and
//! each such warning is deduplicated by its caller; a warning worth saying
//! once per session store rather than once per run asks [`first_in_store`]
//! first (issue 27: the missing-price warning on every run of a local model).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `-q`: no warning and no notice is printed.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Silences (or restores) every later [`warn`] and [`notice`] of this
/// process: the command line's `-q` ("only errors").
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether warnings and notices are silenced ([`set_quiet`]).
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// One `warning: …` line on stderr, unless quiet.
pub fn warn(text: &str) {
    if is_quiet() {
        return;
    }
    let text = text.strip_prefix("warning: ").unwrap_or(text);
    crate::output::stderr_line(&format!("warning: {text}"));
}

/// Notices printed in a burst; after it, one per [`NOTICE_INTERVAL`], and
/// what is said faster is dropped: a loop of quick retries never floods the
/// terminal, and the few retries of a call are all shown.
pub const NOTICE_BURST: f64 = 3.0;
/// See [`NOTICE_BURST`].
pub const NOTICE_INTERVAL: Duration = Duration::from_secs(1);

/// The notices that may be printed now (a token bucket), and when it was
/// last filled.
static NOTICES: Mutex<Option<(f64, Instant)>> = Mutex::new(None);

/// One `lllm: …` line on stderr saying what a run waits on (a retry's
/// back-off, a slow reply), unless quiet or too many came too fast
/// ([`NOTICE_BURST`]); returns whether it was printed.
pub fn notice(text: &str) -> bool {
    if is_quiet() || !notice_allowed(Instant::now()) {
        return false;
    }
    crate::output::stderr_line(&format!("lllm: {text}"));
    true
}

/// Takes a notice from the bucket at `now`, if one is left.
fn notice_allowed(now: Instant) -> bool {
    let mut bucket = NOTICES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (left, filled) = bucket.get_or_insert((NOTICE_BURST, now));
    let refill =
        now.saturating_duration_since(*filled).as_secs_f64() / NOTICE_INTERVAL.as_secs_f64();
    *left = (*left + refill).min(NOTICE_BURST);
    *filled = now;
    if *left < 1.0 {
        return false;
    }
    *left -= 1.0;
    true
}

/// The file in a session store's directory that lists what was said once
/// for the whole store ([`first_in_store`]), one key a line.
pub const SAID_FILE: &str = "said.list";

/// The most of [`SAID_FILE`] that is read: far more keys than a store
/// collects (a line is a model's name).
const SAID_CAP: u64 = 1 << 20;

/// What was said in the store [`remember_in`] names.
struct Said {
    file: PathBuf,
    /// Read from the file at the first question, then kept up to date.
    keys: Option<HashSet<String>>,
}

static SAID: Mutex<Option<Said>> = Mutex::new(None);

/// Remembers what [`first_in_store`] says in the session store at `dir`
/// (its [`SAID_FILE`]); `None` (`--no-store`) remembers nothing, and each
/// caller's own deduplication (once per run) is all there is.
pub fn remember_in(dir: Option<&Path>) {
    *SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = dir.map(|dir| Said {
        file: dir.join(SAID_FILE),
        keys: None,
    });
}

/// Whether a warning with this `key` (`no-price local/llama3`) is to be said
/// now: not when quiet (nothing is said, so nothing is remembered), nor when
/// the session store [`remember_in`] names has it said already; otherwise it
/// is remembered there, for this process and every later one, and `true`.
/// Without a store it is always `true`. A store whose file cannot be read or
/// written only forgets: the warning comes again next time.
pub fn first_in_store(key: &str) -> bool {
    if is_quiet() {
        return false;
    }
    let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(said) = said.as_mut() else {
        return true;
    };
    // One line a key, whatever it holds.
    let key = crate::redact::terminal_line(key).into_owned();
    let file = said.file.clone();
    let keys = said.keys.get_or_insert_with(|| read_said(&file));
    if !keys.insert(key.clone()) {
        return false;
    }
    let _ = append_said(&file, &key);
    true
}

fn read_said(file: &Path) -> HashSet<String> {
    let Ok((bytes, _)) = crate::file::read_regular(file, SAID_CAP) else {
        return HashSet::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// Appends `key` as one line with one `write` (lines of processes writing at
/// once never mix), never through a link at the file's name.
fn append_said(file: &Path, key: &str) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    let mut opened = crate::file::open_in_place(file, &mut options)?;
    std::io::Write::write_all(&mut opened, format!("{key}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process-wide state these tests change, one test at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn a_key_is_said_once_per_store_and_every_time_without_one() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        remember_in(Some(&store));
        assert!(first_in_store("no-price local/a\nb"));
        assert!(!first_in_store("no-price local/a\nb"));
        assert!(first_in_store("no-price local/c"));
        let text = std::fs::read_to_string(store.join(SAID_FILE)).unwrap();
        assert_eq!(text, "no-price local/a\\nb\nno-price local/c\n");
        // Another process on the same store: read from the file.
        remember_in(Some(&store));
        assert!(!first_in_store("no-price local/c"));
        // `--no-store`: each run says it.
        remember_in(None);
        assert!(first_in_store("no-price local/c"));
        assert!(first_in_store("no-price local/c"));
    }

    #[test]
    fn notices_come_in_a_burst_of_three_then_one_a_second() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let start = Instant::now() + Duration::from_secs(3600);
        let at = |seconds: f64| start + Duration::from_secs_f64(seconds);
        *NOTICES.lock().unwrap() = None;
        let allowed: Vec<bool> = [
            0.0, 0.1, 0.2, 0.3, 0.4, 1.3, 1.4, 2.3, 10.0, 10.0, 10.0, 10.0,
        ]
        .iter()
        .map(|&seconds| notice_allowed(at(seconds)))
        .collect();
        assert_eq!(
            allowed,
            [
                true, true, true, false, false, true, false, true, true, true, true, false
            ]
        );
        *NOTICES.lock().unwrap() = None;
    }

    #[test]
    fn a_store_that_cannot_be_written_only_forgets() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        remember_in(Some(&file));
        assert!(first_in_store("no-price local/e"));
        assert!(!first_in_store("no-price local/e"), "kept in the process");
        remember_in(None);
    }
}
