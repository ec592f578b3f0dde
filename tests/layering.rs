//! Lower layers never import upper ones (STYLE 19, issue 13): dialog, prompt,
//! provider and tool reach into none of agent, tactic, batch or replay, and
//! agent into none of tactic, batch or replay. A helper several layers need
//! lives in the lowest one (`crate::time`, `provider::digest`, …).

use std::path::Path;

/// Every `crate::…` path a Rust file names outside comments, as
/// `(line number, first path segment)`, grouped imports
/// (`use crate::{agent, dialog::Message}`) included.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut group = false;
    for (index, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(start) = rest.find("crate::") {
            rest = &rest[start + "crate::".len()..];
            if let Some(inner) = rest.strip_prefix('{') {
                group = true;
                rest = inner;
                break;
            }
            let segment: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push((index + 1, segment));
        }
        if group {
            // Inside `crate::{ … }`: each item's first segment, until `}`.
            let (items, closed) = match rest.split_once('}') {
                Some((items, _)) => (items, true),
                None => (rest, false),
            };
            for item in items.split(',') {
                let segment: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !segment.is_empty() {
                    found.push((index + 1, segment));
                }
            }
            group = !closed;
        }
    }
    found
}

fn rust_files(directory: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn lower_layers_import_no_upper_layer() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rules: &[(&str, &[&str])] = &[
        ("dialog", &["agent", "tactic", "batch", "replay"]),
        ("prompt", &["agent", "tactic", "batch", "replay"]),
        ("provider", &["agent", "tactic", "batch", "replay"]),
        ("tool", &["agent", "tactic", "batch", "replay"]),
        ("agent", &["tactic", "batch", "replay"]),
    ];
    let mut problems = Vec::new();
    let mut checked = 0;
    for (layer, forbidden) in rules {
        let mut files = Vec::new();
        let directory = source.join(layer);
        rust_files(&directory, &mut files);
        let single = source.join(format!("{layer}.rs"));
        if single.is_file() {
            files.push(single);
        }
        assert!(!files.is_empty(), "no sources for layer `{layer}`");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            checked += 1;
            for (line, segment) in crate_paths(&text) {
                if forbidden.contains(&segment.as_str()) {
                    problems.push(format!(
                        "{}:{line}: `{layer}` imports `crate::{segment}`",
                        file.strip_prefix(&source).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} files checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_import_reader_sees_plain_and_grouped_paths_but_not_comments() {
    let text = "use crate::agent::Agent;\n\
                // crate::tactic in a comment\n\
                use crate::{dialog::Message,\n    batch::Run};\n\
                let x = crate::time::timestamp(); // crate::replay\n";
    let segments: Vec<(usize, String)> = crate_paths(text);
    assert_eq!(
        segments,
        [
            (1, "agent".to_string()),
            (3, "dialog".to_string()),
            (4, "batch".to_string()),
            (5, "time".to_string()),
        ]
    );
}
