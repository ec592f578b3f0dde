//! The docs keep their promises: every relative link in `README.md` and
//! `docs/*.md` leads to a file that exists and, with a `#anchor`, to one of its
//! headings; every `lllm` command line they show parses with the real
//! command line's parser; and every shipped file such a line names is in the
//! repository. The checker's own tests show that it fails on a broken link,
//! anchor, flag or file.
//!
//! The rules, so a page knows what is checked:
//!
//! - **Links**: `[text](target)` outside code (fenced blocks and inline code
//!   spans are not Markdown links). A target with a scheme (`https:`,
//!   `mailto:`) is left alone; any other is a path relative to the page (empty:
//!   the page itself) and must exist; its `#anchor`, when the path is a `.md`
//!   page, must be one of that page's heading slugs, made as GitHub makes them:
//!   the heading's text lower-cased, every character but letters, digits, `-`,
//!   `_` and spaces dropped, spaces turned to `-`, and a second heading of the
//!   same slug suffixed `-1`, a third `-2`. A target holding `::` is rustdoc's
//!   link to an item (`docs/guide.md` is the crate's front page), which `cargo
//!   doc` checks.
//! - **Commands**: the lines of fenced blocks tagged `sh`, `bash`, `shell` or
//!   `console` (an untagged block is a synopsis or output, and is not run).
//!   A line ending in `\` continues on the next. A leading `$ ` and leading
//!   `NAME=value` assignments are dropped. Words are split as a shell splits
//!   them (quotes, `\` escapes, `$(…)` as one word); a word starting with `#`
//!   starts a comment, and
//!   `|`, `&`, `;`, `<` and `>` end the command (a redirection's file is still
//!   a word of the line). A command that starts `lllm`, `cargo run [--bin
//!   lllm] -- …` or `cargo run --locked -- …` is given, without executing
//!   anything, to `lllm_cli::Cli::try_parse_from` (asking for help or the
//!   version counts as parsing). A lone `…` stands for words the reader fills
//!   in: such a line is not parsed. Words inside quotes, `…` within a word
//!   (`sessions/….json`, `"Summarize: …"`) and placeholders in capitals
//!   (`TASKS.jsonl`, `ID`) are ordinary values.
//! - **Opening examples run**: the `lllm` lines of the first `sh` block of
//!   each topic page run, in order, with the real binary in one scratch
//!   directory that sees the repository's `tactics/` and `examples/` (and a
//!   home of its own), a `< FILE` redirection as stdin. Each must exit 0, or
//!   with the code a `# … (exit N)` comment line right after it gives, whose
//!   text is then the first line of stderr. Not run: a line naming a model
//!   that is not `mock/…` (it needs a key and the network), `keys set` (it
//!   asks), and a page whose example starts a server in the background (`&`:
//!   docs/cache.md, whose commands tests/cache.rs runs against lllm-mock).
//! - **Shipped files**: every word of such a line (any program's, redirections
//!   included) that starts `tactics/`, `examples/`, `bench/`, `scripts/` or
//!   `fuzz/` names a file or directory of the repository, unless it holds a
//!   glob (`*`) or `…`.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Parser;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `README.md` and every `docs/*.md`, as paths relative to `root`.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// One line of a page, with its 1-based number.
struct Line<'a> {
    number: usize,
    text: &'a str,
}

/// A page split into its prose (code spans blanked, line numbers kept) and the
/// lines of each fenced code block with the block's info string.
struct Page<'a> {
    prose: Vec<Line<'a>>,
    blocks: Vec<(String, Vec<Line<'a>>)>,
}

fn split_page(text: &str) -> Page<'_> {
    let mut page = Page {
        prose: Vec::new(),
        blocks: Vec::new(),
    };
    let mut fence: Option<(char, usize)> = None;
    for (index, text) in text.lines().enumerate() {
        let line = Line {
            number: index + 1,
            text,
        };
        let trimmed = text.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |c| trimmed.chars().take_while(|d| *d == c).count());
        match fence {
            None if run >= 3 => {
                let info = trimmed[run..].trim();
                fence = Some((marker.expect("a fence"), run));
                page.blocks.push((info.to_string(), Vec::new()));
            }
            None => page.prose.push(line),
            Some((c, length))
                if marker == Some(c) && run >= length && trimmed[run..].trim().is_empty() =>
            {
                fence = None;
            }
            Some(_) => page.blocks.last_mut().expect("an open block").1.push(line),
        }
    }
    page
}

/// The prose with every inline code span blanked out (spaces in place of its
/// characters, line breaks kept), as CommonMark reads spans: a run of N
/// backticks opens one that the next run of exactly N closes, across lines of
/// one paragraph; a run never closed is literal text.
fn blank_code_spans(prose: &[Line]) -> String {
    let text: String = prose
        .iter()
        .map(|line| format!("{}\n", line.text))
        .collect();
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let run_at = |at: usize| chars[at..].iter().take_while(|c| **c == '`').count();
    let mut at = 0;
    while at < chars.len() {
        if chars[at] != '`' {
            at += 1;
            continue;
        }
        let length = run_at(at);
        let mut close = None;
        let mut next = at + length;
        while next < chars.len() {
            // A blank line ends the paragraph, and with it any span.
            if chars[next] == '\n' && chars.get(next + 1) == Some(&'\n') {
                break;
            }
            if chars[next] == '`' {
                let other = run_at(next);
                if other == length {
                    close = Some(next);
                    break;
                }
                next += other;
            } else {
                next += 1;
            }
        }
        match close {
            Some(close) => {
                for c in &mut out[at..close + length] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                at = close + length;
            }
            None => at += length,
        }
    }
    out.into_iter().collect()
}

/// GitHub's anchor of a heading's text (see the module's rules).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a page's headings make, duplicates suffixed as GitHub does.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for line in split_page(text).prose {
        let hashes = line.text.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line.text[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line.text[hashes..].trim().trim_end_matches('#');
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// Every `[text](target)` of a page's prose, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let page = split_page(text);
    let prose = blank_code_spans(&page.prose);
    let mut found = Vec::new();
    for (line, text) in page.prose.iter().zip(prose.lines()) {
        let mut rest = text;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let mut depth = 0usize;
            let end = after.find(|c: char| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            });
            let Some(end) = end else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push((line.number, target.to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// The problems of every relative link of `pages` (paths relative to `root`),
/// one line each: `PAGE:LINE: what`. Also returns how many links were checked.
fn check_links(root: &Path, pages: &[PathBuf]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages {
        let text = std::fs::read_to_string(root.join(page))
            .unwrap_or_else(|error| panic!("{}: {error}", page.display()));
        for (number, target) in links(&text) {
            // `crate::Item`: rustdoc's link (docs/guide.md is the crate's front
            // page), checked by `cargo doc` with `-D warnings`.
            if target.contains("://") || target.starts_with("mailto:") || target.contains("::") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                root.join(page)
            } else {
                root.join(page).parent().expect("a directory").join(path)
            };
            let at = format!("{}:{number}", page.display());
            if !file.exists() {
                problems.push(format!("{at}: `{target}`: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|extension| extension != "md") {
                continue;
            }
            let heads = anchors(&std::fs::read_to_string(&file).unwrap_or_default());
            if !heads.iter().any(|head| head == anchor) {
                problems.push(format!("{at}: `{target}`: no heading makes `#{anchor}`"));
            }
        }
    }
    (problems, checked)
}

/// A shell line's words as a shell splits them, with where the command ends
/// (the first `|`, `&`, `;`, `<` or `>`); a `#` word starts a comment.
fn shell_words(line: &str) -> (Vec<String>, usize) {
    let mut words = Vec::new();
    let mut command_end = None;
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    word.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                            word.push(chars.next().expect("peeked"));
                        }
                        _ => word.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(d) = chars.next() {
                    word.push(d);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                // `$(…)` and `$((…))`: one word, whatever it holds.
                in_word = true;
                word.push(c);
                let mut depth = 0usize;
                for d in chars.by_ref() {
                    word.push(d);
                    match d {
                        '(' => depth += 1,
                        ')' if depth == 1 => break,
                        ')' => depth -= 1,
                        _ => {}
                    }
                }
            }
            '#' if !in_word => break,
            '|' | '&' | ';' | '<' | '>' => {
                // `2>` and `2>&1`: the descriptor's digits are no argument.
                let descriptor = in_word && word.chars().all(|d| d.is_ascii_digit());
                if in_word && !descriptor {
                    words.push(std::mem::take(&mut word));
                }
                word.clear();
                in_word = false;
                command_end.get_or_insert(words.len());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    let end = command_end.unwrap_or(words.len());
    (words, end)
}

/// The arguments `lllm` would get from a command's words (after `$ ` and
/// assignments), or `None` when the command runs another program.
fn lllm_arguments(command: &[String]) -> Option<Vec<String>> {
    let program = command.first()?;
    if program == "lllm" {
        return Some(command[1..].to_vec());
    }
    if program != "cargo" || command.get(1).is_none_or(|word| word != "run") {
        return None;
    }
    let dash = command.iter().position(|word| word == "--");
    let options = &command[2..dash.unwrap_or(command.len())];
    if options.iter().any(|option| option == "--example") {
        return None;
    }
    if let Some(at) = options.iter().position(|option| option == "--bin")
        && options.get(at + 1).is_none_or(|name| name != "lllm")
    {
        return None;
    }
    Some(dash.map_or_else(Vec::new, |dash| command[dash + 1..].to_vec()))
}

/// Prefixes of the words that name a shipped file.
const SHIPPED: [&str; 5] = ["tactics/", "examples/", "bench/", "scripts/", "fuzz/"];

/// The problems of every command shown in `pages` (see the module's rules),
/// one line each: `PAGE:LINE: what`. Also returns how many `lllm` command
/// lines were parsed.
fn check_commands(root: &Path, pages: &[PathBuf]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut parsed = 0;
    for page in pages {
        let text = std::fs::read_to_string(root.join(page))
            .unwrap_or_else(|error| panic!("{}: {error}", page.display()));
        for (info, lines) in split_page(&text).blocks {
            let language = info.split_whitespace().next().unwrap_or("");
            if !matches!(language, "sh" | "bash" | "shell" | "console") {
                continue;
            }
            let mut joined = String::new();
            let mut first = None;
            for line in lines {
                first.get_or_insert(line.number);
                let text = line.text.trim();
                if let Some(head) = text.strip_suffix('\\') {
                    joined.push_str(head);
                    joined.push(' ');
                    continue;
                }
                joined.push_str(text);
                let at = format!("{}:{}", page.display(), first.take().expect("a first line"));
                let line = std::mem::take(&mut joined);
                let line = line.strip_prefix("$ ").unwrap_or(&line);
                let (words, end) = shell_words(line);
                for word in &words {
                    let shipped = SHIPPED.iter().any(|prefix| word.starts_with(prefix));
                    if shipped
                        && !word.contains(['*', '…'])
                        && !root.join(word.trim_end_matches('/')).exists()
                    {
                        problems.push(format!("{at}: `{word}`: no such file in the repository"));
                    }
                }
                let mut command = &words[..end];
                while command.first().is_some_and(|word| is_assignment(word)) {
                    command = &command[1..];
                }
                let Some(arguments) = lllm_arguments(command) else {
                    continue;
                };
                if arguments.iter().any(|word| word == "…") {
                    continue;
                }
                parsed += 1;
                let argv = std::iter::once("lllm".to_string()).chain(arguments);
                if let Err(error) = lllm_cli::Cli::try_parse_from(argv) {
                    use clap::error::ErrorKind;
                    if !matches!(
                        error.kind(),
                        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                    ) {
                        let first = error.to_string();
                        let first = first.lines().next().unwrap_or("");
                        problems.push(format!("{at}: `{}`: {first}", line.trim()));
                    }
                }
            }
        }
    }
    (problems, parsed)
}

/// A page's logical lines (continuations joined) of its first `sh` block.
fn opening_example(text: &str) -> Vec<String> {
    let Some((_, lines)) = split_page(text)
        .blocks
        .into_iter()
        .find(|(info, _)| info.split_whitespace().next() == Some("sh"))
    else {
        return Vec::new();
    };
    let mut logical = Vec::new();
    let mut joined = String::new();
    for line in lines {
        let text = line.text.trim();
        match text.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
            }
            None => {
                joined.push_str(text);
                logical.push(std::mem::take(&mut joined));
            }
        }
    }
    logical
}

/// A shell line without its comment (from the first ` #`), trimmed.
fn code_of(line: &str) -> &str {
    line.split(" #").next().unwrap_or(line).trim()
}

/// What a comment line `# TEXT (exit N)` expects: `N` and `TEXT`.
fn expected_failure(line: &str) -> Option<(i32, String)> {
    let comment = line.strip_prefix('#')?.trim();
    let (text, code) = comment.strip_suffix(')')?.rsplit_once("(exit ")?;
    Some((code.trim().parse().ok()?, text.trim().to_string()))
}

#[test]
fn every_topic_page_opening_example_runs_offline() {
    let root = root();
    let mut ran = 0;
    for page in pages(&root).iter().skip(1) {
        let text = std::fs::read_to_string(root.join(page)).expect("a page");
        let lines = opening_example(&text);
        if lines.iter().any(|line| code_of(line).ends_with('&')) {
            continue; // it starts a server
        }
        let test = common::Test::new();
        for shipped in ["tactics", "examples"] {
            std::os::unix::fs::symlink(root.join(shipped), test.path(shipped)).expect("link");
        }
        for (index, line) in lines.iter().enumerate() {
            let (words, end) = shell_words(line);
            let Some(arguments) = lllm_arguments(&words[..end]).filter(|_| words[0] == "lllm")
            else {
                continue;
            };
            let model = arguments
                .windows(2)
                .find(|pair| pair[0] == "-m" || pair[0] == "--model")
                .map(|pair| pair[1].clone());
            let asks = arguments.starts_with(&["keys".to_string(), "set".to_string()]);
            if model.is_some_and(|model| !model.starts_with("mock/"))
                || asks
                || arguments.iter().any(|word| word == "…")
            {
                continue;
            }
            let stdin = code_of(line)
                .split_once('<')
                .map(|(_, file)| file.split_whitespace().next().unwrap_or("").to_string());
            let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
            let mut command = test.command(&arguments);
            if stdin.is_some() {
                command.stdin(std::process::Stdio::piped());
            }
            let mut child = command.spawn().expect("start lllm");
            if let Some(file) = &stdin {
                use std::io::Write;
                let input = std::fs::read(root.join(file)).expect("the stdin file");
                let mut pipe = child.stdin.take().expect("stdin");
                pipe.write_all(&input).expect("write stdin");
            }
            let output = common::Output::of(child.wait_with_output().expect("wait for lllm"));
            ran += 1;
            let at = format!("{}: `{line}`", page.display());
            match lines.get(index + 1).and_then(|next| expected_failure(next)) {
                Some((code, first)) => {
                    assert_eq!(output.code, code, "{at}: {}", output.stderr);
                    assert_eq!(output.stderr.lines().next(), Some(first.as_str()), "{at}");
                }
                None => assert_eq!(output.code, 0, "{at}: {}", output.stderr),
            }
        }
    }
    assert!(
        ran >= 20,
        "only {ran} example lines ran: is the scan blind?"
    );
}

/// `NAME=value`, a shell assignment before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn every_link_in_the_docs_leads_somewhere() {
    let root = root();
    let (problems, checked) = check_links(&root, &pages(&root));
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    // The README's table alone links every page.
    assert!(
        checked >= 30,
        "only {checked} links found: is the scan blind?"
    );
}

#[test]
fn every_command_in_the_docs_parses_and_names_shipped_files() {
    let root = root();
    let (problems, parsed) = check_commands(&root, &pages(&root));
    assert!(
        problems.is_empty(),
        "broken commands:\n{}",
        problems.join("\n")
    );
    assert!(
        parsed >= 60,
        "only {parsed} commands parsed: is the scan blind?"
    );
}

#[test]
fn the_readme_links_every_docs_page() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let linked: Vec<String> = links(&readme)
        .into_iter()
        .map(|(_, target)| target)
        .collect();
    for page in pages(&root).iter().skip(1) {
        let page = page.display().to_string();
        assert!(
            linked.contains(&page),
            "README.md's table does not link {page}"
        );
    }
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; topics go to docs/"
    );
    // It opens with the two set-up commands: the main job on a shipped
    // example, and the tests, which CI runs as the README's test command.
    assert_eq!(
        opening_example(&readme),
        [
            "cargo run -- run tactics/summarize.yaml --task-file examples/article.txt",
            "cargo test",
        ]
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.lines().any(|line| line.contains("cargo test --locked")),
        ".ci/run no longer runs the README's test command"
    );
}

/// Each page of the docs starts, after its title and at most a short
/// paragraph, with something a reader can run.
#[test]
fn every_topic_page_starts_with_a_runnable_example() {
    let root = root();
    for page in pages(&root).iter().skip(1) {
        let name = page.display().to_string();
        if ["docs/decisions.md", "docs/formats.md", "docs/guide.md"].contains(&name.as_str()) {
            continue; // a log, a reference and the library's guide (the crate's front page)
        }
        let text = std::fs::read_to_string(root.join(page)).expect("a page");
        let first = text
            .lines()
            .skip(1)
            .find(|line| !line.trim().is_empty())
            .unwrap_or("");
        assert!(
            first.starts_with("```sh"),
            "{name} does not start with a runnable example: {first:?}"
        );
    }
}

// The checker's own tests: it fails on what it is there to find.

fn scratch(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    dir
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let dir = scratch(&[
        (
            "README.md",
            "# T\n\nSee [batch](docs/batch.md#resume), [gone](docs/gone.md),\n\
             [here](#t) and [there](docs/batch.md#the-ids-of-lllm-batch-1).\n\
             `[code](nowhere.md)` is code, and so is\n\n```\n[this](nowhere.md)\n```\n",
        ),
        (
            "docs/batch.md",
            "# Batch\n\n## Resume\n\n## The ids of `lllm batch`\n\n## The ids of lllm batch\n",
        ),
    ]);
    let pages = [PathBuf::from("README.md"), PathBuf::from("docs/batch.md")];
    let (problems, checked) = check_links(dir.path(), &pages);
    assert_eq!(checked, 4, "{problems:?}");
    assert_eq!(
        problems,
        ["README.md:3: `docs/gone.md`: no such file"],
        "the other links hold"
    );

    let broken = scratch(&[
        ("README.md", "# T\n\n[x](docs/b.md#no-such-part)\n"),
        ("docs/b.md", "# B\n\n## A part\n"),
    ]);
    let (problems, _) = check_links(broken.path(), &[PathBuf::from("README.md")]);
    assert_eq!(
        problems,
        ["README.md:3: `docs/b.md#no-such-part`: no heading makes `#no-such-part`"]
    );
}

#[test]
fn the_command_check_finds_an_unknown_flag_and_a_missing_file() {
    let dir = scratch(&[
        (
            "README.md",
            "# T\n\n```sh\nlllm run tactics/t.yaml --task \"x # y\" --var n=$((1 + 2)) -m mock/echo   # fine\n\
             lllm run tactics/t.yaml --no-such-flag\n\
             OPENAI_BASE_URL=http://h/v1 lllm batch tasks.jsonl \\\n    -t tactics/t.yaml -o out --wat\n\
             cargo run -- run tactics/gone.yaml < examples/in.txt 2>/dev/null | head\n\
             cargo run --example quick -- --anything\n\
             lllm replay …\n\
             $ lllm --version\n```\n\n\
             ```\nlllm run TACTIC.yaml [--json]\n```\n",
        ),
        ("tactics/t.yaml", ""),
    ]);
    let (problems, parsed) = check_commands(dir.path(), &[PathBuf::from("README.md")]);
    assert_eq!(parsed, 5, "{problems:?}");
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with("README.md:5: `lllm run tactics/t.yaml --no-such-flag`: ")
            && problems[0].contains("--no-such-flag"),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("README.md:6: `OPENAI_BASE_URL=http://h/v1 lllm batch")
            && problems[1].contains("--wat"),
        "a continued line is one command, placed at its first line: {problems:#?}"
    );
    assert_eq!(
        problems[2..],
        [
            "README.md:8: `tactics/gone.yaml`: no such file in the repository",
            "README.md:8: `examples/in.txt`: no such file in the repository",
        ]
    );
}

#[test]
fn slugs_are_made_as_github_makes_them() {
    assert_eq!(slug("`lllm run`"), "lllm-run");
    assert_eq!(
        slug("Configuration: the config file, `.env` and keys"),
        "configuration-the-config-file-env-and-keys"
    );
    assert_eq!(slug("1. Tactic YAML"), "1-tactic-yaml");
    assert_eq!(
        slug("Through the providers' Batch APIs (`--via batch-api`)"),
        "through-the-providers-batch-apis---via-batch-api"
    );
    assert_eq!(
        anchors("# A\n\n## A\n\n```\n# not a heading\n```\n\n## A\n"),
        ["a", "a-1", "a-2"]
    );
}
