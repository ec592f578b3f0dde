//! Tactic YAML as `lllm run` and `lllm batch` read it: `config::load` (base
//! chain, merge, resolve), `Tactic::build` (prompts, providers, tools, flow
//! templates) and the pre-flight checks of a task. Every problem is one line.
//!
//! The input is written as `tactics/fuzzed.yaml` in a directory of this
//! process laid out like the repository (its `prompts/`, `tools/` and
//! `tactics/`), so the examples' relative paths resolve. An input that names
//! a path outside that directory is skipped: walking or reading the machine's
//! files (`prompts: /`, `base: /dev/zero`) tests the machine, not the parser.
#![no_main]

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use lllm::tactic::{Tactic, Task};
use lllm_fuzz::assert_one_line;
use serde_json::{Map, Value, json};

/// The keys whose values are paths, relative to the file that holds them.
const PATH_KEYS: &[&str] = &["base", "prompts", "script", "tactic", "cwd", "root"];

static SANDBOX: LazyLock<tempfile::TempDir> = LazyLock::new(|| {
    let sandbox =
        tempfile::tempdir().unwrap_or_else(|error| panic!("no temporary directory: {error}"));
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for folder in ["prompts", "tools", "tactics"] {
        copy_tree(&repository.join(folder), &sandbox.path().join(folder));
    }
    sandbox
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if names_outside_paths(text) {
        return;
    }
    let path = SANDBOX.path().join("tactics").join("fuzzed.yaml");
    if std::fs::write(&path, text).is_err() {
        return;
    }
    let config = match lllm::config::load(&path) {
        Ok(config) => config,
        Err(error) => return one_problem_per_line(&error.to_string()),
    };
    if !config.prompts_dir.starts_with(SANDBOX.path()) {
        return;
    }
    for warning in &config.warnings {
        assert_one_line(warning);
    }
    let _ = serde_json::to_string(&config.resolved);
    let tactic = match Tactic::build(config, &|_| None) {
        Ok(tactic) => tactic,
        Err(error) => return one_problem_per_line(&error.to_string()),
    };
    let names: BTreeSet<String> = ["topic".to_string()].into();
    if let Err(error) = tactic.check(&names) {
        one_problem_per_line(&error.to_string());
    }
    for task in [json!("tides, volcanoes"), json!({"text": "a b", "n": 2})] {
        let input = Task {
            id: Some("t1".into()),
            task,
            args: Map::from_iter([("topic".to_string(), json!("tides"))]),
            ..Task::default()
        };
        if let Err(error) = tactic.check_task(&input) {
            one_problem_per_line(&error.to_string());
        }
    }
});

/// A tactic error lists its problems one per line: none empty.
#[track_caller]
fn one_problem_per_line(text: &str) {
    for line in text.split('\n') {
        assert_one_line(line);
    }
}

/// Whether the YAML names a path that leaves the sandbox. The text is read
/// as `config::load` reads it (same parser); what does not parse is kept, it
/// never reaches a path.
fn names_outside_paths(text: &str) -> bool {
    let Ok(document) = lllm::yaml::parse(text) else {
        return false;
    };
    // The fuzzed file is one level down (`tactics/`), as are the examples.
    leaves(&document, 1)
}

fn leaves(value: &Value, depth: usize) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, value)| {
            let outside = PATH_KEYS.contains(&key.as_str())
                && value.as_str().is_some_and(|path| escapes(path, depth));
            outside || leaves(value, depth)
        }),
        Value::Array(items) => items.iter().any(|item| leaves(item, depth)),
        _ => false,
    }
}

/// Whether `path`, relative to a folder `depth` levels inside the sandbox,
/// names something outside it (lexically: the sandbox holds no links).
fn escapes(path: &str, depth: usize) -> bool {
    let mut level = depth as isize;
    for component in Path::new(path).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return true,
            Component::ParentDir => level -= 1,
            Component::Normal(_) => level += 1,
            Component::CurDir => {}
        }
        if level < 0 {
            return true;
        }
    }
    false
}

fn copy_tree(from: &Path, to: &PathBuf) {
    let _ = std::fs::create_dir_all(to);
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    for entry in entries.flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            copy_tree(&entry.path(), &target);
        } else {
            let _ = std::fs::copy(entry.path(), &target);
        }
    }
}
