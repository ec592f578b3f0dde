//! Warnings for the person at the terminal: one line on stderr, `warning: …`,
//! its control characters escaped (a warning may quote a model's or a
//! server's text).
//!
//! The library warns rarely (unknown prices, config keys passed through) and
//! each such warning is deduplicated by its caller.

pub fn warn(text: &str) {
    let text = text.strip_prefix("warning: ").unwrap_or(text);
    crate::output::stderr_line(&format!("warning: {text}"));
}
