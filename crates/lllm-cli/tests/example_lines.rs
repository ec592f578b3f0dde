//! `scripts/example_lines`, the before/after count of the seed examples'
//! code lines (issue 29): on the repository's work tree, and on a scratch
//! repository where a revision and the work tree differ.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Lines that are not blank and not only a `//` comment: the script's rule,
/// written again here.
fn code_lines(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count()
}

/// Runs `script` with `args` in no particular directory: (code, stdout, stderr).
fn run(script: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(script)
        .args(args)
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run scripts/example_lines");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("UTF-8");
    (
        output.status.code().unwrap_or(-1),
        text(output.stdout),
        text(output.stderr),
    )
}

fn git(directory: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(directory)
        .output()
        .expect("run git");
    assert!(status.status.success(), "git {args:?}: {status:?}");
}

#[test]
fn it_counts_each_seed_example_of_the_work_tree() {
    let root = repository();
    let (code, stdout, stderr) = run(&root.join("scripts/example_lines"), &[]);
    assert_eq!(code, 0, "{stderr}");
    let mut expected = Vec::new();
    let mut total = 0;
    let mut names: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .into_string()
                .expect("a name")
        })
        .filter(|name| name.starts_with("seed_") && name.ends_with(".rs"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 6, "the six seed scenarios: {names:?}");
    for name in names {
        let text = std::fs::read_to_string(root.join("examples").join(&name)).expect("read");
        let count = code_lines(&text);
        total += count;
        expected.push(format!("{count:5}  examples/{name}"));
    }
    expected.push(format!("{total:5}  total"));
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn a_revision_is_counted_from_git_and_a_bad_one_is_one_error_line() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let directory = scratch.path();
    std::fs::create_dir_all(directory.join("scripts")).expect("mkdir");
    std::fs::create_dir_all(directory.join("examples")).expect("mkdir");
    let script = directory.join("scripts/example_lines");
    std::fs::copy(repository().join("scripts/example_lines"), &script).expect("copy");
    let seed = directory.join("examples/seed_a.rs");
    std::fs::write(
        &seed,
        "//! A seed.\n\nfn main() {\n    // one\n    let x = 1;\n}\n",
    )
    .expect("write");
    git(directory, &["init", "-q"]);
    git(directory, &["add", "."]);
    git(directory, &["commit", "-qm", "before"]);
    std::fs::write(&seed, "fn main() {}\n").expect("write");

    let (code, stdout, stderr) = run(&script, &["HEAD"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(stdout, "    3  examples/seed_a.rs\n    3  total\n");
    let (code, stdout, _) = run(&script, &[]);
    assert_eq!(code, 0);
    assert_eq!(stdout, "    1  examples/seed_a.rs\n    1  total\n");

    let (code, stdout, stderr) = run(&script, &["no-such-revision"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(stderr, "error: `no-such-revision` is not a git revision\n");
}
