//! The library's rooms are one way (STYLE 19, issues 13 and 28).
//!
//! These checks read the sources of `src/`, not the compiler's view, so they
//! run in a plain `cargo test` and name the file and line to change:
//!
//! - lower layers never import upper ones: dialog, prompt, provider and tool
//!   reach into none of agent, tactic, batch or replay, and agent into none of
//!   tactic, batch or replay;
//! - no circle between top-level modules: the graph of `crate::…` paths (and
//!   `super::…` paths that climb to the crate root) has no strongly connected
//!   component of more than one module. Siblings inside one folder may lean on
//!   each other; two rooms may not;
//! - the error type (`error`) and the warning sink (`report`, through
//!   `output`) are leaves: every room may use them without pulling the rest.
//!
//! A helper several rooms need lives in the lowest one (`crate::time`,
//! `provider::digest`). Test code (`#[cfg(test)]`) counts like any other: a unit test
//! is read with the file it sits in, and a lower room whose tests build an
//! upper one cannot be changed on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A Rust file with comments (doc comments, and so doc-tests, included),
/// string, byte-string, raw-string and char literals blanked to spaces; line
/// breaks are kept, so lines still count as in the file.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let previous_is_word = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if !previous_is_word && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start.min(chars.len())..]
                .iter()
                .take_while(|c| **c == '#')
                .count();
            chars.get(start + hashes) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|c| **c == '#').count();
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let close: Vec<char> = close.chars().collect();
            let body = start + hashes + 1;
            let mut end = body;
            while end < chars.len() && !chars[end..].starts_with(&close) {
                end += 1;
            }
            let end = (end + close.len()).min(chars.len());
            for &c in &chars[i..end] {
                blank(&mut out, c);
            }
            i = end;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let width = if chars[i] == '\\' { 2 } else { 1 };
                for &c in &chars[i..(i + width).min(chars.len())] {
                    blank(&mut out, c);
                }
                i += width;
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|at| i + 2 + at + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &c in &chars[i..end] {
                        blank(&mut out, c);
                    }
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    /// `::`
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_alphanumeric() || c == '_' || c == '$' {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                found.push((index + 1, Token::Word(word.trim_start_matches('$').into())));
            } else if c == ':' && chars.get(i + 1) == Some(&':') {
                found.push((index + 1, Token::Path));
                i += 2;
            } else {
                if !c.is_whitespace() {
                    found.push((index + 1, Token::Punct(c)));
                }
                i += 1;
            }
        }
    }
    found
}

/// One path a file names: the line, and the top-level name it reaches from the
/// crate root (`crate::agent::Agent` → `agent`).
#[derive(Debug, PartialEq)]
struct Reach {
    line: usize,
    name: String,
}

/// The top-level names a file reaches: every `crate::…` path, each item of a
/// grouped `crate::{…}` (nested groups included), and `super::…` paths that
/// climb to the crate root from `module` (the file's module path,
/// `["agent", "call"]` for `src/agent/call.rs`) and the inline `mod x { … }`
/// blocks around them.
fn reaches(text: &str, module: &[String]) -> Vec<Reach> {
    let code = code_only(text);
    let tokens = tokens(&code);
    let mut found = Vec::new();
    let mut depth = 0usize;
    // The inline modules open around the current token, by the brace depth
    // inside each.
    let mut inline: Vec<usize> = Vec::new();
    let mut i = 0;
    let word = |at: usize| match tokens.get(at) {
        Some((_, Token::Word(word))) => Some(word.as_str()),
        _ => None,
    };
    let is = |at: usize, token: Token| tokens.get(at).map(|(_, t)| t) == Some(&token);
    while i < tokens.len() {
        let token = &tokens[i].1;
        let previous_is_path = i > 0 && tokens[i - 1].1 == Token::Path;
        match token {
            Token::Word(w)
                if w == "mod" && word(i + 1).is_some() && is(i + 2, Token::Punct('{')) =>
            {
                inline.push(depth + 1);
            }
            Token::Word(w) if w == "crate" && is(i + 1, Token::Path) && !previous_is_path => {
                i = group(&tokens, i + 2, &mut |line, name| {
                    found.push(Reach { line, name })
                });
                continue;
            }
            Token::Word(w) if w == "super" && is(i + 1, Token::Path) && !previous_is_path => {
                let mut climbs = 0;
                let mut at = i;
                while word(at) == Some("super") && is(at + 1, Token::Path) {
                    climbs += 1;
                    at += 2;
                }
                let here = module.len() + inline.len();
                if climbs >= here {
                    i = group(&tokens, at, &mut |line, name| {
                        found.push(Reach { line, name })
                    });
                    continue;
                }
                i = at;
                continue;
            }
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Reads the path or group starting at `at` (just after `crate::`), calls
/// `found` with the line and first segment of each path in it, and returns the
/// index after it.
fn group(tokens: &[(usize, Token)], at: usize, found: &mut dyn FnMut(usize, String)) -> usize {
    match tokens.get(at) {
        Some((line, Token::Word(word))) => {
            found(*line, word.clone());
            at + 1
        }
        Some((_, Token::Punct('{'))) => {
            // Each item's first word, at this group's own level.
            let mut i = at + 1;
            let mut level = 0;
            let mut item_start = true;
            while let Some((line, token)) = tokens.get(i) {
                match token {
                    Token::Punct('{') => level += 1,
                    Token::Punct('}') if level == 0 => return i + 1,
                    Token::Punct('}') => level -= 1,
                    Token::Punct(',') if level == 0 => {
                        item_start = true;
                        i += 1;
                        continue;
                    }
                    Token::Word(word) if level == 0 && item_start => found(*line, word.clone()),
                    _ => {}
                }
                item_start = false;
                i += 1;
            }
            i
        }
        _ => at,
    }
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

/// `src/agent/call.rs` → `["agent", "call"]`; `src/x/mod.rs` → `["x"]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The crate root: its modules (`mod x;`) and what it re-exports by name
/// (`pub use agent::{Agent, Handler}` → `Agent` → `agent`).
fn root_names(lib: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let tokens = tokens(&code_only(lib));
    let mut modules = BTreeSet::new();
    let mut exports = BTreeMap::new();
    for (i, (_, token)) in tokens.iter().enumerate() {
        if *token == Token::Word("mod".into())
            && let Some((_, Token::Word(name))) = tokens.get(i + 1)
        {
            modules.insert(name.clone());
        }
        if *token == Token::Word("use".into())
            && let Some((_, Token::Word(module))) = tokens.get(i + 1)
        {
            let mut at = i + 2;
            let mut level = 0;
            while let Some((_, token)) = tokens.get(at) {
                match token {
                    Token::Punct(';') if level == 0 => break,
                    Token::Punct('{') => level += 1,
                    Token::Punct('}') => level -= 1,
                    // The last segment of each path: the name exported.
                    Token::Word(name)
                        if tokens.get(at + 1).map(|(_, t)| t) != Some(&Token::Path) =>
                    {
                        exports.insert(name.clone(), module.clone());
                    }
                    _ => {}
                }
                at += 1;
            }
        }
    }
    (modules, exports)
}

/// One edge of the module graph: `from` names `to` at these places.
type Edges = BTreeMap<(String, String), Vec<String>>;

/// The graph of top-level modules of `src/`: an edge `a → b` for each place a
/// file under `a` names something of `b`.
fn module_graph(source: &Path) -> (BTreeSet<String>, Edges) {
    let lib = std::fs::read_to_string(source.join("lib.rs")).unwrap();
    let (modules, exports) = root_names(&lib);
    let mut files = Vec::new();
    rust_files(source, &mut files);
    files.sort();
    let mut edges: Edges = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(source).unwrap();
        let module = module_path(relative);
        let Some(from) = module.first() else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        for reach in reaches(&text, &module) {
            let to = if modules.contains(&reach.name) {
                reach.name
            } else if let Some(module) = exports.get(&reach.name) {
                module.clone()
            } else {
                continue;
            };
            if &to != from && modules.contains(&to) {
                edges.entry((from.clone(), to)).or_default().push(format!(
                    "src/{}:{}",
                    relative.display(),
                    reach.line
                ));
            }
        }
    }
    (modules, edges)
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(nodes: &BTreeSet<String>, edges: &Edges) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let index = state.index.len();
        state.index.insert(node, index);
        state.low.insert(node, index);
        state.stack.push(node);
        state.on_stack.insert(node);
        for next in state.next.get(node).cloned().unwrap_or_default() {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = BTreeSet::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.insert(member.to_string());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for (from, to) in edges.keys() {
        state.next.entry(from).or_default().push(to);
    }
    for node in nodes {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// The circles, each with a shortest loop through it and, for each edge inside
/// it, the places that make it (the first, and how many more).
fn describe(components: &[BTreeSet<String>], edges: &Edges) -> String {
    let mut text = String::new();
    for component in components {
        let inside: Vec<(&(String, String), &Vec<String>)> = edges
            .iter()
            .filter(|((from, to), _)| component.contains(from) && component.contains(to))
            .collect();
        text += &format!(
            "circle of {} modules: {}\n",
            component.len(),
            component.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        text += &format!("  e.g. {}\n", shortest_loop(component, edges).join(" → "));
        for ((from, to), places) in inside {
            let more = match places.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            text += &format!("  {from} → {to}: {}{more}\n", places[0]);
        }
    }
    text
}

/// A shortest loop inside a component, found breadth-first from its first
/// member.
fn shortest_loop(component: &BTreeSet<String>, edges: &Edges) -> Vec<String> {
    let start = component.iter().next().unwrap();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.as_str()]);
    while let Some(node) = queue.pop_front() {
        for (from, to) in edges.keys() {
            if from != node || !component.contains(to) {
                continue;
            }
            if to == start {
                let mut path = vec![start.clone()];
                let mut at = node;
                while at != start {
                    path.push(at.to_string());
                    at = came_from[at];
                }
                path.push(start.clone());
                path.reverse();
                return path;
            }
            if !came_from.contains_key(to.as_str()) {
                came_from.insert(to, node);
                queue.push_back(to);
            }
        }
    }
    Vec::new()
}

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_circle_between_top_level_modules() {
    let (modules, edges) = module_graph(&source());
    assert!(modules.len() > 20, "only {} modules read", modules.len());
    assert!(edges.len() > 40, "only {} edges read", edges.len());
    let found = circles(&modules, &edges);
    assert!(
        found.is_empty(),
        "import circles between top-level modules (a lower room must not name an upper one; \
         move the helper down, or turn the dependency around):\n{}",
        describe(&found, &edges)
    );
}

#[test]
fn lower_layers_import_no_upper_layer() {
    let (modules, edges) = module_graph(&source());
    let rules: &[(&str, &[&str])] = &[
        ("dialog", &["agent", "tactic", "batch", "replay"]),
        ("prompt", &["agent", "tactic", "batch", "replay"]),
        ("provider", &["agent", "tactic", "batch", "replay"]),
        ("tool", &["agent", "tactic", "batch", "replay"]),
        ("agent", &["tactic", "batch", "replay"]),
    ];
    let mut problems = Vec::new();
    for (layer, forbidden) in rules {
        assert!(modules.contains(*layer), "no module `{layer}`");
        for upper in *forbidden {
            if let Some(places) = edges.get(&(layer.to_string(), upper.to_string())) {
                for place in places {
                    problems.push(format!("{place}: `{layer}` imports `crate::{upper}`"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The error type and the warning sink are used by every room, so they
/// pull in nothing but the few leaves below them: a room that returns
/// `error::Error` or calls `report::warn` depends on no other room through
/// them.
#[test]
fn the_error_type_and_the_warning_sink_are_leaves() {
    let (modules, edges) = module_graph(&source());
    let leaves: &[(&str, &[&str])] = &[
        ("error", &[]),
        ("output", &["error", "redact"]),
        ("report", &["output", "redact", "file"]),
    ];
    let mut problems = Vec::new();
    for (leaf, allowed) in leaves {
        assert!(modules.contains(*leaf), "no module `{leaf}`");
        for ((from, to), places) in &edges {
            if from == leaf && !allowed.contains(&to.as_str()) {
                problems.push(format!("{}: `{leaf}` names `crate::{to}`", places[0]));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_import_reader_sees_plain_grouped_and_climbing_paths_but_not_comments_or_strings() {
    let text = "use crate::agent::Agent;\n\
                // crate::tactic in a comment\n\
                use crate::{dialog::Message,\n    batch::{Run, store::X}, time};\n\
                let x = crate::time::timestamp(); // crate::replay\n\
                /// ```\n/// crate::words::x();\n/// ```\n\
                let s = \"crate::yaml\"; let r = r#\"crate::json\"#; let c = '\"';\n\
                fn f<'a>(x: &'a str) { super::report::warn(x) }\n\
                /* crate::mock /* nested */ crate::fds */\n\
                #[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::output;\n}\n\
                pub(in crate::agent) fn g() {}\n";
    let found: Vec<(usize, String)> = reaches(text, &["agent".to_string()])
        .into_iter()
        .map(|reach| (reach.line, reach.name))
        .collect();
    assert_eq!(
        found,
        [
            (1, "agent".to_string()),
            (3, "dialog".to_string()),
            (4, "batch".to_string()),
            (4, "time".to_string()),
            (5, "time".to_string()),
            (10, "report".to_string()),
            (15, "output".to_string()),
            (17, "agent".to_string()),
        ]
    );
}

#[test]
fn the_crate_root_names_its_modules_and_what_it_re_exports() {
    let lib = "//! `pub use tactic::Ctx;` in a doc\n\
               pub mod agent;\n#[doc(hidden)]\npub mod batch;\npub(crate) mod time;\n\
               pub use agent::{Agent, Handler};\npub use quick::quick;\npub use schemars;\n\
               pub type BoxError = Box<dyn std::error::Error + Send + Sync>;\n";
    let (modules, exports) = root_names(lib);
    assert_eq!(
        modules.into_iter().collect::<Vec<_>>(),
        ["agent", "batch", "time"]
    );
    assert_eq!(
        exports.into_iter().collect::<Vec<_>>(),
        [
            ("Agent".to_string(), "agent".to_string()),
            ("Handler".to_string(), "agent".to_string()),
            ("quick".to_string(), "quick".to_string()),
        ]
    );
}

#[test]
fn the_circle_finder_names_each_circle_and_where_each_edge_is_made() {
    let nodes: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
    let mut edges = Edges::new();
    for (from, to, place) in [
        ("a", "b", "src/a.rs:1"),
        ("b", "c", "src/b/x.rs:2"),
        ("c", "a", "src/c.rs:3"),
        ("c", "d", "src/c.rs:4"),
        ("d", "e", "src/d.rs:5"),
        ("e", "d", "src/e.rs:6"),
        ("e", "d", "src/e.rs:7"),
    ] {
        edges
            .entry((from.into(), to.into()))
            .or_default()
            .push(place.into());
    }
    let found = circles(&nodes, &edges);
    assert_eq!(found.len(), 2);
    let text = describe(&found, &edges);
    assert!(
        text.contains("circle of 3 modules: a, b, c\n  e.g. a → b → c → a\n"),
        "{text}"
    );
    assert!(text.contains("  b → c: src/b/x.rs:2\n"), "{text}");
    assert!(
        text.contains("  e → d: src/e.rs:6 (and 1 more)\n"),
        "{text}"
    );
    assert!(!text.contains("c → d"), "{text}");
    edges.remove(&("e".to_string(), "d".to_string()));
    edges.remove(&("c".to_string(), "a".to_string()));
    assert!(circles(&nodes, &edges).is_empty());
}
