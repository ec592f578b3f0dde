//! Prompt files as the registry loads them: front matter, template (Jinja or
//! `str.format`), handler texts; then every template rendered, and a model
//! reply checked by the prompt's parser. Input: the file, then optionally a
//! NUL byte and the reply.
//!
//! The file is written into a directory of this process and loaded with
//! `Registry::load`, the binary's own path.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use lllm::prompt::{Prompt, Registry};
use lllm_fuzz::assert_one_line;
use serde_json::{Map, Value, json};

static DIRECTORY: LazyLock<tempfile::TempDir> = LazyLock::new(|| {
    tempfile::tempdir().unwrap_or_else(|error| panic!("no temporary directory: {error}"))
});

fuzz_target!(|data: &[u8]| {
    let (file, reply) = match data.iter().position(|byte| *byte == 0) {
        Some(cut) => (&data[..cut], &data[cut + 1..]),
        None => (data, &[][..]),
    };
    let path: PathBuf = DIRECTORY.path().join("fuzzed.md");
    if std::fs::write(&path, file).is_err() {
        return;
    }
    let registry = Registry::load(DIRECTORY.path());
    let _ = std::fs::remove_file(&path);
    let prompt = match registry {
        Ok(registry) => match registry.get("fuzzed") {
            Ok(prompt) => prompt.clone(),
            Err(error) => panic!("a loaded file has no prompt: {error}"),
        },
        Err(error) => return assert_one_line(&error.to_string()),
    };
    render(&prompt);
    for handler in [
        prompt.on_exception(),
        prompt.on_interrupt(),
        prompt.on_interrupt_final(),
    ] {
        render(&handler);
    }
    let reply = String::from_utf8_lossy(reply);
    match prompt.parse(&reply) {
        Ok(parsed) => assert!(parsed.get("raw").is_some(), "a parsed reply without `raw`"),
        Err(failure) => assert!(!failure.0.is_empty(), "a parse failure without a reason"),
    }
    let _ = (prompt.info(), prompt.sha256());
});

/// Renders with every variable the template names (values of several types,
/// picked by the name so the fuzzer can steer them), then with none.
fn render(prompt: &Prompt) {
    let args: Map<String, Value> = prompt
        .template_vars()
        .iter()
        .map(|name| (name.clone(), value_for(name)))
        .collect();
    if let Err(error) = prompt.render(args) {
        assert_one_line(&error.to_string());
    }
    if let Err(error) = prompt.render(()) {
        assert_one_line(&error.to_string());
    }
}

fn value_for(name: &str) -> Value {
    match name.len() % 5 {
        0 => json!("text with {braces} and <tags>"),
        1 => json!(3),
        2 => json!(["a", "b"]),
        3 => json!({"content": "c", "parsed": {"verdict": "ok"}, "cost": 0.5}),
        _ => Value::Null,
    }
}
