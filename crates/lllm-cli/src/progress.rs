//! The progress bar `lllm batch` shows on a terminal (the library's
//! `batch::progress` has the plain lines and the quiet reporter).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lllm::batch::progress::{Reporter, Snapshot};

/// A bar with the run's details under it, redrawn every 200 ms.
#[derive(Debug)]
pub(crate) struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub(crate) fn new() -> Bar {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        // No colours: nothing to strip for NO_COLOR, and it reads the same everywhere.
        let style =
            ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len}\n{msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        bar.set_style(style);
        // Every line lllm writes to stderr while the bar is drawn (trace
        // lines of `-v`, the library's warnings, the run's notes) is printed
        // above it, never through it.
        let above = bar.clone();
        lllm::output::guard_stderr(Some(std::sync::Arc::new(
            move |write: &mut dyn FnMut()| above.suspend(write),
        )));
        Bar { bar }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        lllm::output::guard_stderr(None);
    }
}

impl Reporter for Bar {
    fn interval(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn update(&self, snapshot: &Snapshot) {
        self.bar.set_length(snapshot.total);
        self.bar.set_position(snapshot.done.tasks);
        let message = format!("{} in flight · {}", snapshot.in_flight, snapshot.details());
        self.bar
            .set_message(lllm::redact::terminal_line(&message).into_owned());
    }

    fn finish(&self, snapshot: &Snapshot) {
        self.update(snapshot);
        self.bar.finish();
        // The finished bar stays where it is; what follows (the summary
        // table) goes below it, not through a redraw.
        lllm::output::guard_stderr(None);
    }

    fn note(&self, text: &str) {
        lllm::report::warn(text);
    }

    fn event(&self, text: &str) {
        lllm::output::stderr_line(&format!("lllm batch: {text}"));
    }
}
