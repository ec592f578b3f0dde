//! Writing to stdout and stderr when the reader may have gone away.
//!
//! Rust ignores SIGPIPE, so a write to a pipe whose reader closed early
//! (`lllm replay … | head`) fails with `BrokenPipe`, and `println!` turns
//! that into a panic (exit 101; issue 12). Here a closed stdout simply ends
//! the output: the reader took what it wanted, which is not an error, and the
//! command's exit code stays what it would have been (as ripgrep does, rather
//! than dying by the signal as the 141 of shells would say). Every other
//! write error (a full disk behind `>`) is reported. Writes to stderr never
//! fail a command: there is nowhere left to report that they failed.

use std::io::{ErrorKind, Write};

use crate::error::Error;

/// Writes `text` to stdout and flushes it. `Ok` also when the reader has
/// closed the pipe; other failures are an error naming stdout.
pub fn stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    quiet_on_closed_pipe(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// The result of a write to stdout, with a closed pipe taken as the end of
/// the output rather than a failure.
pub fn quiet_on_closed_pipe(result: std::io::Result<()>) -> Result<(), Error> {
    match result {
        Err(error) if error.kind() != ErrorKind::BrokenPipe => Err(Error::Write {
            path: "stdout".into(),
            source: error,
        }),
        _ => Ok(()),
    }
}

/// Wraps every write to stderr made through this module: a program that
/// draws on the terminal (the `lllm` command's progress bar) installs one
/// that clears its drawing, lets the write happen, and draws again. Writes
/// from any thread go through it, so a library warning during a batch is
/// printed above the bar instead of through it.
pub type StderrGuard = std::sync::Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

static STDERR_GUARD: std::sync::RwLock<Option<StderrGuard>> = std::sync::RwLock::new(None);

/// Installs `guard` around every later write to stderr of this module
/// ([`stderr_line`], [`stderr`]), or removes it with `None`. The guard must
/// not write to stderr through this module itself (it would wait on itself).
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
///
/// let writes = Arc::new(AtomicUsize::new(0));
/// let counted = writes.clone();
/// lllm::output::guard_stderr(Some(Arc::new(move |write: &mut dyn FnMut()| {
///     counted.fetch_add(1, Ordering::SeqCst);
///     write();
/// })));
/// lllm::output::stderr_line("warning: shown above whatever the program draws");
/// lllm::output::guard_stderr(None);
/// assert_eq!(writes.load(Ordering::SeqCst), 1);
/// ```
pub fn guard_stderr(guard: Option<StderrGuard>) {
    *STDERR_GUARD
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = guard;
}

/// Runs `write` inside the installed guard, if any.
fn guarded(write: &mut dyn FnMut()) {
    let guard = STDERR_GUARD
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    match guard {
        Some(guard) => guard(write),
        None => write(),
    }
}

/// One line on stderr (`eprintln!` that cannot panic), control characters
/// escaped (`redact::terminal_line`): what a provider or a model wrote can
/// neither drive the terminal nor break the line. Each value it quotes in
/// backticks is cut at [`ECHO_CHARS`](crate::redact::ECHO_CHARS)
/// (`redact::echo_quoted`), and the line past
/// [`LINE_CHARS`](crate::redact::LINE_CHARS) characters, each with its
/// length: a 100 KB id or path echoed whole buried the line (issue 26).
pub fn stderr_line(text: &str) {
    let text = crate::redact::echo_quoted(text);
    stderr_trace(&text);
}

/// One line of a trace on stderr (`-v`): [`stderr_line`] without the cut of
/// quoted values, so an event shows the text it carries as it is (each
/// body is cut at its own limit where the event is made).
pub fn stderr_trace(text: &str) {
    let text = crate::redact::cut(text, crate::redact::LINE_CHARS);
    let line = crate::redact::terminal_line(&text);
    guarded(&mut || {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    });
}

/// Text on stderr (`eprint!` that cannot panic), laid out over lines as it
/// is but with other control characters escaped (`redact::terminal_text`).
pub fn stderr(text: &str) {
    let text = crate::redact::terminal_text(text);
    guarded(&mut || {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_ends_the_output_and_other_failures_are_errors() {
        assert!(quiet_on_closed_pipe(Ok(())).is_ok());
        assert!(quiet_on_closed_pipe(Err(ErrorKind::BrokenPipe.into())).is_ok());
        let full = quiet_on_closed_pipe(Err(std::io::Error::from_raw_os_error(28)));
        let error = full
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.starts_with("cannot write `stdout`: "), "{error}");
    }
}
