//! What a user finds without the source: `--help` with examples, exit codes
//! and where the docs are, `lllm completions SHELL` and `lllm man`, with the
//! real binary.

mod common;

use common::Test;

/// The commands a user types; completions and man pages must name each.
const COMMANDS: [&str; 14] = [
    "run",
    "inspect",
    "batch",
    "replay",
    "merge",
    "report",
    "compare",
    "logs",
    "cache",
    "models",
    "keys",
    "config",
    "completions",
    "man",
];

#[test]
fn help_shows_examples_exit_codes_and_the_docs() {
    let test = Test::new();
    let long = test.run(&["--help"]);
    long.expect_code(0);
    for expected in [
        "Examples:",
        "lllm run t.yaml \"What is 2 + 2?\"",
        "Exit codes:",
        "  0    success",
        "  1    a run or a task failed",
        "  2    bad usage, config, prompt or input: nothing was sent",
        "  130  interrupted by Ctrl-C or SIGTERM",
        "docs/formats.md",
        "lllm man",
    ] {
        assert!(
            long.stdout.contains(expected),
            "{expected:?} in:\n{}",
            long.stdout
        );
    }
    // `-h` is the short form: the codes and the docs, no examples.
    let short = test.run(&["-h"]);
    short.expect_code(0);
    assert!(
        short.stdout.contains("  130  interrupted"),
        "{}",
        short.stdout
    );
    assert!(short.stdout.contains("docs/formats.md"), "{}", short.stdout);
    assert!(!short.stdout.contains("Examples:"), "{}", short.stdout);
}

#[test]
fn the_main_commands_help_has_examples_and_their_exit_codes() {
    let test = Test::new();
    for (command, example, code) in [
        (
            "run",
            "echo \"What is 2 + 2?\" | lllm run t.yaml",
            "  2    bad usage",
        ),
        ("batch", "--shard 1/8", "  130  interrupted"),
        (
            "inspect",
            "lllm inspect tactics/triage.yaml --json",
            "  2    bad usage",
        ),
        (
            "replay",
            "--rerun --tactic edited.yaml",
            "  1    --rerun diverged",
        ),
    ] {
        let output = test.run(&[command, "--help"]);
        output.expect_code(0);
        for expected in ["Examples:", example, "Exit codes:", code, "docs/formats.md"] {
            assert!(
                output.stdout.contains(expected),
                "`lllm {command} --help`: {expected:?} in:\n{}",
                output.stdout
            );
        }
    }
}

#[test]
fn bash_completions_name_every_command() {
    let test = Test::new();
    let output = test.run(&["completions", "bash"]);
    output.expect_code(0);
    assert!(
        output.stdout.contains("complete -F _lllm"),
        "{}",
        output.stdout
    );
    // The words offered after `lllm `, and a case for each command's own words.
    let top = output
        .stdout
        .lines()
        .find(|line| {
            line.trim_start().starts_with(
                "opts=\"-v -h -V --verbose --config --env-file --no-env-file --help --version",
            )
        })
        .unwrap_or_else(|| panic!("no top-level words in:\n{}", output.stdout));
    for command in COMMANDS {
        assert!(
            top.split(['"', ' ']).any(|word| word == command),
            "{command}: {top}"
        );
        assert!(
            output.stdout.contains(&format!("lllm,{command})")),
            "{command} missing from the bash completions"
        );
    }
    // A flag of a subcommand is completed too.
    assert!(output.stdout.contains("--retry-errors"));
    assert_eq!(output.stderr, "");
}

#[test]
fn every_shell_gets_a_script() {
    let test = Test::new();
    for (shell, marker) in [
        ("zsh", "#compdef lllm"),
        ("fish", "complete -c lllm"),
        ("elvish", "edit:completion:arg-completer[lllm]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let output = test.run(&["completions", shell]);
        output.expect_code(0);
        assert!(
            output.stdout.contains(marker),
            "{shell}:\n{}",
            output.stdout
        );
        assert!(output.stdout.contains("replay"), "{shell}");
    }
}

#[test]
fn an_unknown_shell_is_one_error_line_and_exit_2() {
    let test = Test::new();
    let output = test.run(&["completions", "tcsh"]);
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        "error: unknown shell `tcsh`: expected one of bash, zsh, fish, elvish, powershell\n"
    );
    assert_eq!(output.stdout, "");
    // No shell at all is clap's usage error, exit 2 as well.
    test.run(&["completions"]).expect_code(2);
}

#[test]
fn the_man_page_is_roff_naming_every_command_and_the_exit_codes() {
    let test = Test::new();
    let output = test.run(&["man"]);
    output.expect_code(0);
    let page = &output.stdout;
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
    assert!(page.contains(".TH lllm 1"), "{page}");
    assert!(page.contains(".SH NAME"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    for command in COMMANDS {
        assert!(
            page.contains(&format!("lllm\\-{command}(1)")),
            "{command} missing from the man page"
        );
    }
    assert!(page.contains("Exit codes:"), "{page}");
    assert!(page.contains("130"), "{page}");
}

#[test]
fn man_out_writes_one_page_per_command() {
    let test = Test::new();
    let output = test.run(&["man", "--out", "man/man1"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "");
    let read = |name: &str| {
        std::fs::read_to_string(test.path("man/man1").join(name))
            .unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    assert!(read("lllm.1").contains(".TH lllm 1"));
    for command in COMMANDS {
        let page = read(&format!("lllm-{command}.1"));
        assert!(
            page.contains(&format!(
                ".TH lllm-{command} 1  \"lllm {}\"",
                env!("CARGO_PKG_VERSION")
            )),
            "{page}"
        );
    }
    // Nested commands get pages of their own; `help` gets none.
    assert!(read("lllm-batch.1").contains("\\-\\-retry\\-errors"));
    assert!(!test.path("man/man1/lllm-help.1").exists());
}

#[test]
fn man_out_into_a_file_is_one_error_line_and_exit_1() {
    let test = Test::new().file("taken", "a file, not a directory\n");
    let output = test.run(&["man", "--out", "taken"]);
    output.expect_code(1);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.starts_with("error: cannot write `taken`: "),
        "{}",
        output.stderr
    );
}

/// The documents `--help`, the README and the code comments point at are in
/// the repository, with the sections they cite, and nothing points outside it
/// (a user has the repository, not the files beside it).
#[test]
fn the_docs_named_are_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |name: &str| {
        std::fs::read_to_string(root.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    let formats = read("docs/formats.md");
    for section in [
        "## 1. Tactic YAML",
        "## 2. Prompt files",
        "## 3. Task lines",
        "## 4. Result lines and the batch directory",
        "## 5. The session record",
        "## 6. Provider errors and retries",
        "## 7. Exit codes",
    ] {
        assert!(
            formats.contains(section),
            "docs/formats.md lacks {section:?}"
        );
    }
    let mut pages = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    assert!(pages.len() >= 12, "{pages:?}");
    for name in &pages {
        let text = read(name);
        assert!(
            !text.contains("../shared/"),
            "{name} points outside the repository"
        );
        assert!(
            !text.contains("DESIGN"),
            "{name} cites a design page users never have"
        );
    }
    assert!(read("LICENSE-MIT").contains("MIT License"));
    assert!(read("LICENSE-APACHE").contains("Apache License"));
    assert!(read("CHANGELOG.md").contains("## [Unreleased]"));
}

/// Every `docs/NAME.md` that the code, the tests, `--help`, the scripts and
/// the examples name is in the repository, and every section they cite by
/// name (`docs/batch.md, "Merging shards"`, `README, "Install"`) is a heading
/// (or a bold paragraph lead) of that page: a page that moves or renames a
/// section fails here until its readers follow.
#[test]
fn the_docs_pages_and_sections_the_code_cites_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in [
        "src",
        "crates",
        "scripts",
        "examples",
        "bench",
        "fuzz/fuzz_targets",
        "fuzz/src",
        ".ci",
    ] {
        collect_files(&root.join(dir), &mut files);
    }
    let mut cites = 0;
    let mut problems = Vec::new();
    for file in &files {
        // The docs tests name missing pages on purpose, in their checkers' tests.
        if file.ends_with("tests/docs.rs") || file.ends_with("tests/help_and_docs.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        let at = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (page, section) in cited_pages(&text) {
            cites += 1;
            let Ok(target) = std::fs::read_to_string(root.join(&page)) else {
                problems.push(format!("{at}: `{page}` is not in the repository"));
                continue;
            };
            let Some(section) = section else { continue };
            let plain = |text: &str| text.replace('`', "");
            let found = target.lines().any(|line| {
                let line = plain(line);
                let heading = line.trim_start_matches('#');
                (heading.len() < line.len() && heading.trim_start().starts_with(&plain(&section)))
                    || line
                        .trim_start_matches("- ")
                        .starts_with(&format!("**{}", plain(&section)))
            });
            if !found {
                problems.push(format!("{at}: `{page}` has no section {section:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        cites >= 30,
        "only {cites} citations found: is the scan blind?"
    );
}

fn collect_files(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name == "target" || name == "snapshots" {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// The pages a text names (`docs/NAME.md`, and `README` as `README.md`), each
/// with the section it cites right after it, when it does (`, "Section"` or
/// ` ("Section")`, across a comment's line break).
fn cited_pages(text: &str) -> Vec<(String, Option<String>)> {
    let mut cited = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let (page, length) = if let Some(after) = rest.strip_prefix("docs/") {
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || *c == '-')
                .collect();
            if name.is_empty() || !after[name.len()..].starts_with(".md") {
                at += 1;
                continue;
            }
            (format!("docs/{name}.md"), "docs/".len() + name.len() + 3)
        } else if rest.starts_with("README") {
            let length = if rest.starts_with("README.md") { 9 } else { 6 };
            ("README.md".to_string(), length)
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let after = &rest[length..];
        let (owner, after) = match after.strip_prefix("'s") {
            Some(after) => (true, after),
            None => (false, after),
        };
        let filler = after
            .find(|c: char| !(c.is_whitespace() || matches!(c, ',' | '(' | '/' | '!' | '#')))
            .unwrap_or(after.len());
        // A citation is `PAGE, "Section"`, `PAGE ("Section")` or `PAGE's
        // "Section"`; a page followed by a bare quote ends a string literal.
        let cites = owner || after[..filler].contains([',', '(']);
        let section = after[filler..]
            .strip_prefix('"')
            .filter(|_| cites)
            .and_then(|quoted| {
                let end = quoted.find('"')?;
                let words: Vec<&str> = quoted[..end]
                    .split_whitespace()
                    .filter(|word| !matches!(*word, "//!" | "///" | "//" | "#"))
                    .collect();
                let section = words.join(" ");
                (section.len() <= 80 && !section.contains([';', '{', '(', ')', '[']))
                    .then_some(section)
            });
        // `README.md` and `docs/x.md` cited as files, not sections, are
        // checked for existence only; a bare `README` with no section is prose.
        if page != "README.md" || section.is_some() || length == 9 {
            cited.push((page, section));
        }
        at += length;
    }
    cited
}

#[test]
fn the_citation_scan_reads_sections_across_comment_lines() {
    let text = "// (docs/limits.md,\n/// \"Numbers and their ranges\") and docs/run.md's \"Tracing\"\n\
                # see the README, \"Merging shards\"; README.md; a README; docs/x.mdx;\n\
                \"docs/formats.md\", \"7. Exit codes\"";
    assert_eq!(
        cited_pages(text),
        [
            (
                "docs/limits.md".to_string(),
                Some("Numbers and their ranges".to_string())
            ),
            ("docs/run.md".to_string(), Some("Tracing".to_string())),
            ("README.md".to_string(), Some("Merging shards".to_string())),
            ("README.md".to_string(), None),
            ("docs/x.md".to_string(), None),
            ("docs/formats.md".to_string(), None),
        ]
    );
}
