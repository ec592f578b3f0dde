//! Functions a person can hold in their head (issue 28): no function of the
//! library (`src/`) or of the CLI (`crates/lllm-cli/src`) is longer than
//! `MAX_LINES`, counted from its `fn` line to its closing brace (doc
//! comments and attributes not counted). A ratchet: the bound is what the
//! tree held once the longest functions were split along their steps; lower
//! it as more are, never raise it. `cargo test --test function_length --
//! --nocapture` lists every function over `REPORTED_LINES`, longest first.
//!
//! The sources are read as rustfmt writes them: a function's closing brace
//! is the first line after its `fn` line that is a `}` at the `fn`'s
//! indentation.

use std::path::{Path, PathBuf};

/// The longest a function may be.
const MAX_LINES: usize = 150;

/// Functions longer than this are listed (they are the next to split).
const REPORTED_LINES: usize = 100;

/// One function of a source file.
#[derive(Debug)]
struct Function {
    name: String,
    /// The line of its `fn` (1-based).
    line: usize,
    /// Lines from the `fn` line to the closing brace, both counted.
    lines: usize,
}

/// The name of the function a line declares, with the line's indentation,
/// when it does (`pub(crate) async fn name<T>(…`).
fn declared(line: &str) -> Option<(&str, &str)> {
    let code = line.trim_start();
    let indent = &line[..line.len() - code.len()];
    let mut rest = code;
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scope) => scope.split_once(')')?.1,
            None => after,
        }
        .trim_start();
    }
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest).trim_start();
    }
    if let Some(after) = rest.strip_prefix("extern ") {
        // `extern "C" fn`
        rest = after
            .trim_start()
            .strip_prefix('"')
            .and_then(|abi| abi.split_once('"'))
            .map_or(after, |(_, rest)| rest)
            .trim_start();
    }
    let rest = rest.strip_prefix("fn ")?;
    let name_length = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (name_length > 0).then(|| (indent, &rest[..name_length]))
}

/// Every function with a body in `text`; declarations without one (trait
/// items ending in `;`) are not functions here.
fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let Some((indent, name)) = declared(line) else {
            continue;
        };
        // The signature ends at the first line ending in `{` (a body) or
        // `;` (none); `fn name() {}` is one line.
        let Some(opened) = (index..lines.len()).find(|&at| {
            let code = lines[at].trim_end();
            code.ends_with('{') || code.ends_with(';') || (at == index && code.ends_with('}'))
        }) else {
            continue;
        };
        let code = lines[opened].trim_end();
        if code.ends_with(';') {
            continue;
        }
        let closed = if code.ends_with('}') {
            opened
        } else {
            let closing = format!("{indent}}}");
            match (opened + 1..lines.len()).find(|&at| lines[at].starts_with(&closing)) {
                Some(closed) => closed,
                None => continue,
            }
        };
        found.push(Function {
            name: name.to_string(),
            line: index + 1,
            lines: closed - index + 1,
        });
    }
    found
}

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// Every function of the library and the CLI, as `(file, function)`, the
/// file relative to the workspace.
fn every_function() -> Vec<(String, Function)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for directory in ["src", "crates/lllm-cli/src"] {
        rust_files(&root.join(directory), &mut files);
    }
    files.sort();
    let mut all = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for function in functions(&text) {
            all.push((shown.clone(), function));
        }
    }
    all
}

#[test]
fn no_function_is_longer_than_the_bound() {
    let mut all = every_function();
    assert!(
        all.len() > 1000,
        "only {} functions found: is the scan reading the sources?",
        all.len()
    );
    all.sort_by_key(|(_, function)| std::cmp::Reverse(function.lines));
    let shown = |bound: usize| {
        all.iter()
            .filter(|(_, function)| function.lines > bound)
            .map(|(file, function)| {
                format!(
                    "{file}:{}: `{}` is {} lines",
                    function.line, function.name, function.lines
                )
            })
            .collect::<Vec<_>>()
    };
    let long = shown(REPORTED_LINES);
    println!(
        "{} functions over {REPORTED_LINES} lines:\n{}",
        long.len(),
        long.join("\n")
    );
    let over = shown(MAX_LINES);
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines; split each along its steps (issue 28):\n{}",
        over.join("\n")
    );
}

#[track_caller]
fn case(text: &str, expected: &[(&str, usize, usize)]) {
    let found: Vec<(String, usize, usize)> = functions(text)
        .into_iter()
        .map(|function| (function.name, function.line, function.lines))
        .collect();
    let expected: Vec<(String, usize, usize)> = expected
        .iter()
        .map(|&(name, line, lines)| (name.to_string(), line, lines))
        .collect();
    assert_eq!(found, expected, "in:\n{text}");
}

#[test]
fn functions_are_measured_from_fn_to_their_closing_brace() {
    case("fn one() {}\n", &[("one", 1, 1)]);
    case(
        "/// Doc.\n#[test]\nfn two() {\n    body();\n}\n",
        &[("two", 3, 3)],
    );
    case(
        "impl A {\n    pub(crate) async fn method(\n        &self,\n    ) -> u32 {\n        let x = || {\n        };\n    }\n}\n",
        &[("method", 2, 6)],
    );
    case(
        "pub fn generic<T>(value: T)\nwhere\n    T: Clone,\n{\n    value.clone();\n}\n",
        &[("generic", 1, 6)],
    );
    case(
        "trait T {\n    fn declared(&self) -> u32;\n    fn provided(&self) {\n        1;\n    }\n}\n",
        &[("provided", 3, 3)],
    );
    case(
        "pub unsafe extern \"C\" fn exported() {\n    x();\n}\nconst fn small() -> u8 {\n    1\n}\n",
        &[("exported", 1, 3), ("small", 4, 3)],
    );
    case(
        "fn outer() {\n    fn inner() {\n        x();\n    }\n    inner();\n}\n",
        &[("outer", 1, 6), ("inner", 2, 3)],
    );
    case("// fn comment() {\nlet f = 1;\n", &[]);
}
