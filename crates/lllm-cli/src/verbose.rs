//! `-v` / `-vv` / `-vvv` and `RUST_LOG` (or `LLLM_LOG`): the library's
//! `tracing` events as lines on stderr, one event a line, printed above the
//! progress bar rather than through it.
//!
//! What each level shows (docs/run.md, "Tracing"): `-v` one line per request sent,
//! per reply or failure received, per retry wait and per wait for the quota
//! (`lllm=info`); `-vv` the
//! bodies and tool runs too (`lllm=debug`); `-vvv` everything lllm itself
//! says (`lllm=trace`). A filter in `RUST_LOG` (`EnvFilter` syntax) wins over
//! `-v`. Third-party crates (hyper, h2, reqwest, rustls, rmcp) log at debug
//! and trace what lllm does not control, headers among it: their events are
//! shown only when the filter names them (`RUST_LOG=trace,h2=trace`), never
//! through a bare level (`RUST_LOG=trace` is `lllm`'s events only).
//!
//! The library keeps secrets out of its events (`lllm::provider::trace`);
//! this module only lays them out: control characters escaped (a line is one
//! line), and written while the progress bar is hidden.

use std::io::Write;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// The variables a filter is read from, first set (and not empty) wins.
const VARIABLES: [&str; 2] = ["LLLM_LOG", "RUST_LOG"];

/// The crates whose events are shown without being named: the library and
/// the command line.
const OURS: [&str; 2] = ["lllm", "lllm_cli"];

/// The filter `-v` given `count` times stands for.
fn filter_for(count: u8) -> Option<&'static str> {
    match count {
        0 => None,
        1 => Some("lllm=info,lllm_cli=info"),
        2 => Some("lllm=debug,lllm_cli=debug"),
        _ => Some("lllm=trace,lllm_cli=trace"),
    }
}

/// The crates a filter names in its directives (`h2=trace` names `h2`,
/// `trace` names none, `[span]` is not a crate).
fn named_targets(filter: &str) -> Vec<String> {
    filter
        .split(',')
        .filter_map(|directive| {
            let directive = directive.trim();
            let target = match directive.split_once('=') {
                Some((target, _)) => target,
                None if directive.parse::<tracing::Level>().is_ok() => return None,
                None if directive.eq_ignore_ascii_case("off") => return None,
                None => directive,
            };
            let target = target.split('[').next().unwrap_or_default().trim();
            (!target.is_empty()).then(|| target.to_string())
        })
        .collect()
}

/// Whether an event of `target` may be shown under a filter naming `named`.
fn shown_target(target: &str, named: &[String]) -> bool {
    let within = |root: &str| {
        target == root
            || target
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with("::"))
    };
    OURS.iter().any(|ours| within(ours)) || named.iter().any(|name| within(name))
}

/// Starts the subscriber if `-v` was given or a filter variable is set;
/// otherwise nothing is installed and events cost next to nothing. A filter
/// that does not parse is an error naming the variable.
pub(crate) fn init(count: u8) -> Result<(), String> {
    let from_variable = VARIABLES.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
            .map(|value| (*name, value))
    });
    let (directives, source) = match (&from_variable, filter_for(count)) {
        (Some((name, value)), _) => (value.clone(), format!("`{name}`")),
        (None, Some(filter)) => (filter.to_string(), "`-v`".to_string()),
        (None, None) => return Ok(()),
    };
    let filter = EnvFilter::builder().parse(&directives).map_err(|error| {
        format!(
            "{source}: invalid filter `{}`: {error}; hint: write it as `lllm=debug` \
                 (a level, or crate=level, comma-separated)",
            lllm::redact::terminal_line(&directives)
        )
    })?;
    let named = named_targets(&directives);
    let ours = filter_fn(move |metadata| shown_target(metadata.target(), &named));
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(Lines)
        .with_filter(ours)
        .with_filter(filter);
    // A subscriber set already (a program embedding the CLI) stays.
    let _ = tracing_subscriber::registry().with(layer).try_init();
    Ok(())
}

/// Hands each event's text, once it is whole, to [`emit`].
#[derive(Clone, Copy)]
struct Lines;

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

/// One event's text, collected until the formatter drops it.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        if !text.is_empty() {
            emit(&lllm::redact::terminal_line(text));
        }
    }
}

/// One event's line on stderr: above the progress bar while one is drawn
/// (the bar guards every write of `lllm::output`).
fn emit(line: &str) {
    lllm::output::stderr_trace(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_names_the_crates_it_mentions_and_a_bare_level_names_none() {
        let cases = [
            ("trace", vec![]),
            ("lllm=debug", vec!["lllm"]),
            (
                "info,h2=trace, hyper_util[conn]=debug",
                vec!["h2", "hyper_util"],
            ),
            ("reqwest", vec!["reqwest"]),
            ("off,WARN", vec![]),
        ];
        for (filter, expected) in cases {
            assert_eq!(named_targets(filter), expected, "{filter}");
        }
    }

    #[test]
    fn third_party_events_need_their_crate_named() {
        let named = named_targets("trace,h2=trace");
        assert!(shown_target("lllm::provider::http", &named));
        assert!(shown_target("lllm_cli::run", &named));
        assert!(shown_target("h2::codec", &named));
        assert!(!shown_target("hyper::proto", &named));
        assert!(!shown_target("lllmx", &named));
        assert!(!shown_target("h2o", &named));
    }

    #[test]
    fn each_count_of_v_is_a_filter_on_lllm_only() {
        assert_eq!(filter_for(0), None);
        for count in 1..=5 {
            let filter = filter_for(count).unwrap_or_default();
            assert!(
                named_targets(filter)
                    .iter()
                    .all(|name| OURS.contains(&name.as_str()))
            );
        }
    }
}
