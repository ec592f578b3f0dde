//! `lllm report` and `lllm compare` on the real binary, on batches made
//! offline (`mock/script`), the HTML checked in a real headless Chromium:
//! it loads with no console message but its own, one row per task, a hostile
//! delivery shows as text and never runs, and a screenshot is written.
//!
//! Without Chromium the browser checks skip with a message, unless
//! `LLLM_REQUIRE_BROWSER` is set (CI sets it): then a missing browser fails.
//! No timing: Chromium gets a virtual-time budget (not wall time) to settle.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Output, Test};
use serde_json::Value;

const TACTIC: &str = "tactic_type: echo\nglobal: {model_name: mock/script, max_llm_recall: 0}\n\
agent_configs:\n  - {name: a, system_prompt: \"Echo.\"}\nproviders:\n  mock: {script: script.yaml}\n";

/// Echoes every task; a task containing `FAIL` gets an HTTP 400 (no retry).
const SCRIPT: &str = "rules:\n  - when: {contains: FAIL}\n    reply: {fault: {status: 400}}\ndefault: {echo: true}\n";

/// Would retitle the page if it ran.
const HOSTILE: &str =
    "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">";

fn tasks() -> String {
    [
        serde_json::json!({"id": "plain", "task": "hello world", "tags": {"group": "a"}}),
        serde_json::json!({"id": "hostile", "task": HOSTILE}),
        serde_json::json!({"id": "broken", "task": "please FAIL"}),
        serde_json::json!({"id": "=formula", "task": "=HYPERLINK(\"x\")\nline two, \"quoted\""}),
    ]
    .iter()
    .map(|line| line.to_string() + "\n")
    .collect()
}

/// A test dir holding the batch output directory `out` of [`tasks`].
fn batch() -> Test {
    let test = Test::new()
        .file("tactic.yaml", TACTIC)
        .file("script.yaml", SCRIPT)
        .file("tasks.jsonl", &tasks());
    // One task fails: exit 1.
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "tactic.yaml",
        "-o",
        "out",
        "-q",
    ])
    .expect_code(1);
    test
}

/// Chromium from the system, or `None` (and the test skips) when it is
/// missing and `LLLM_REQUIRE_BROWSER` is unset.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("LLLM_REQUIRE_BROWSER").is_none(),
            "LLLM_REQUIRE_BROWSER is set but no chromium is on PATH (apt-get install chromium)"
        );
        eprintln!(
            "skipped: no chromium on PATH (set LLLM_REQUIRE_BROWSER=1 to make this an error)"
        );
    }
    found
}

/// What headless Chromium made of a page: the DOM after its script ran, the
/// console messages it logged, and (when asked) a screenshot.
struct Loaded {
    dom: String,
    console: Vec<String>,
}

fn load(browser: &Path, dir: &Path, url: &str, screenshot: Option<&Path>) -> Loaded {
    let profile = tempfile::tempdir_in(dir).expect("profile dir");
    let mut command = Command::new(browser);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,800",
        // Virtual time: the page settles however busy the machine is.
        "--virtual-time-budget=10000",
    ]);
    command.arg(format!("--user-data-dir={}", profile.path().display()));
    match screenshot {
        Some(path) => command.arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let output = Output::of(command.arg(url).output().expect("start chromium"));
    assert_eq!(output.code, 0, "chromium failed:\n{}", output.stderr);
    let console = output
        .stderr
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    Loaded {
        dom: output.stdout,
        console,
    }
}

/// The page logged only its own ready line, naming `rows` rows: any error,
/// uncaught exception, warning or blocked load would be a console line too.
#[track_caller]
fn assert_clean_console(loaded: &Loaded, rows: usize) {
    let ready = format!("\"lllm report ready: {rows} rows\"");
    assert!(
        loaded.console.len() == 1 && loaded.console[0].contains(&ready),
        "expected only the ready line ({ready}) on the console, got: {:#?}",
        loaded.console
    );
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The fields of an RFC 4180 CSV (CRLF rows, quoted fields with `""`).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(character) = chars.next() {
        match (quoted, character) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, other) => field.push(other),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {
                assert_eq!(chars.next(), Some('\n'), "a bare CR outside quotes");
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, other) => field.push(other),
        }
    }
    assert!(
        field.is_empty() && row.is_empty(),
        "the last row has no CRLF"
    );
    rows
}

#[test]
fn report_writes_a_csv_and_a_page_that_loads_in_chromium() {
    let test = batch();
    let output = test.run(&["report", "out"]);
    output.expect_code(0);
    assert!(
        output.stderr.contains("report: out/report.html (4 tasks)"),
        "{}",
        output.stderr
    );

    // The CSV: RFC 4180, one row per task, formulas defused.
    let csv = std::fs::read_to_string(test.path("out/report.csv")).unwrap();
    let rows = parse_csv(&csv);
    assert_eq!(rows.len(), 5, "{csv}");
    assert_eq!(rows[0][..4], ["id", "state", "delivery", "error"]);
    assert!(rows.iter().all(|row| row.len() == rows[0].len()));
    let by_id = |id: &str| {
        rows.iter()
            .find(|row| row[0] == id)
            .unwrap_or_else(|| panic!("no row `{id}` in\n{csv}"))
    };
    assert_eq!(by_id("hostile")[2], HOSTILE);
    assert_eq!(by_id("broken")[1], "failure");
    assert!(by_id("broken")[3].contains("HTTP 400"));
    let formula = by_id("'=formula");
    assert_eq!(formula[2], "'=HYPERLINK(\"x\")\nline two, \"quoted\"");
    assert_eq!(rows[0][9..11], ["args", "tags"]);
    assert_eq!(by_id("plain")[10], r#"{"group":"a"}"#);
    // Args and tags are JSON objects, `{}` when the task had none (issue
    // 27: the cell was empty, which no JSON reader of the column takes).
    assert_eq!(by_id("plain")[9], "{}");
    assert_eq!(by_id("hostile")[9..11], ["{}", "{}"]);
    assert_eq!(by_id("broken")[9..11], ["{}", "{}"]);

    // The page, self-contained: nothing to fetch.
    let html = std::fs::read_to_string(test.path("out/report.html")).unwrap();
    for remote in ["http://", "https://", "src=\"", "href=\""] {
        assert!(!html.contains(remote), "the page refers to `{remote}`");
    }
    assert!(
        !html.contains(HOSTILE),
        "the hostile delivery is in the page unescaped"
    );

    let Some(browser) = chromium() else { return };
    let page = test.path("out/report.html");
    // `#task=hostile` opens that row's details (built by the script from the
    // page's JSON block): the hostile text goes through that path too.
    let loaded = load(
        &browser,
        test.dir.path(),
        &format!("{}#task=hostile", file_url(&page)),
        None,
    );
    assert_clean_console(&loaded, 4);
    let dom = &loaded.dom;
    assert!(
        dom.contains("<title>lllm report: out</title>"),
        "the title changed:\n{dom}"
    );
    assert!(!dom.contains("pwned</title>"));
    assert_eq!(
        dom.matches("<tr data-row=").count(),
        4,
        "one row per task:\n{dom}"
    );
    for id in ["plain", "hostile", "broken", "=formula"] {
        assert!(
            dom.contains(&format!("<td class=\"id\">{id}</td>")),
            "no row `{id}`"
        );
    }
    assert!(
        dom.contains("<tr data-row=\"2\" class=\"failure\""),
        "the failed task's row"
    );
    // As text, in the row and in the opened details (delivery, session view).
    let escaped = "&lt;script&gt;document.title='pwned'&lt;/script&gt;";
    assert!(
        dom.matches(escaped).count() >= 3,
        "the hostile text is not shown as text:\n{dom}"
    );
    assert!(
        !dom.contains("<script>document.title"),
        "the hostile script is markup:\n{dom}"
    );
    assert!(!dom.contains("<img"), "the hostile image is markup");
    assert!(dom.contains("<tr class=\"detail\">") && dom.contains("<h3>session</h3>"));
    assert!(
        dom.contains("\ndelivery:\n&lt;script&gt;document.title"),
        "the session view ends with the delivery:\n{dom}"
    );

    let screenshot = test.path("report.png");
    load(
        &browser,
        test.dir.path(),
        &file_url(&page),
        Some(&screenshot),
    );
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    // A blank 1280x800 page compresses to a few KiB; the table is more.
    assert!(png.len() > 10_000, "the screenshot is {} bytes", png.len());
}

#[test]
fn report_options_and_bad_input() {
    let test = batch();
    test.run(&["report", "out", "-o", "page.html", "--csv", "table.csv"])
        .expect_code(0);
    assert!(test.path("page.html").is_file() && test.path("table.csv").is_file());
    assert!(!test.path("out/report.html").exists());

    let output = test.run(&["report", "missing"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .starts_with("error: `missing` is not a batch output directory")
    );

    // A torn line is skipped with a note; the rest is reported.
    let mut results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    results.push_str("{\"id\": \"torn");
    std::fs::write(test.path("out/results.jsonl"), results).unwrap();
    let output = test.run(&["report", "out"]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("skipped 1 line not readable as result lines (line 5)"),
        "{}",
        output.stderr
    );

    let output = test.run(&["report", "out", "-o", "no/such/dir/page.html"]);
    output.expect_code(1);
    assert!(
        output
            .stderr
            .contains("\nerror: cannot write `no/such/dir/page.html`"),
        "{}",
        output.stderr
    );
}

/// A second run of the same tasks where `hello` fails, `broken` succeeds and
/// the deliveries of the others change; `plain` is only in A, `extra` only in B.
fn second_batch(test: &Test) {
    let script = "rules:\n  - when: {contains: hello}\n    reply: {fault: {status: 400}}\n  - when: {contains: pwned}\n    reply: {text: \"line one\\n<b>changed</b>\"}\ndefault: {echo: true}\n";
    std::fs::write(test.path("script.yaml"), script).unwrap();
    let lines: String = tasks()
        .lines()
        .filter(|line| !line.contains("\"plain\""))
        .map(|line| line.replace("please FAIL", "please work") + "\n")
        .chain([
            serde_json::json!({"id": "extra", "task": "new"}).to_string() + "\n",
            serde_json::json!({"id": "hello-too", "task": "hello"}).to_string() + "\n",
        ])
        .collect();
    std::fs::write(test.path("tasks_b.jsonl"), lines).unwrap();
    test.run(&[
        "batch",
        "tasks_b.jsonl",
        "--tactic",
        "tactic.yaml",
        "-o",
        "out_b",
        "-q",
    ])
    .expect_code(1);
}

#[test]
fn compare_shows_state_changes_diffs_and_one_sided_ids() {
    let test = batch();
    second_batch(&test);
    let output = test.run(&["compare", "out", "out_b"]);
    output.expect_code(0);
    let text = &output.stdout;
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("3 common ids: 2 changed (1 state change: 0 regressions, 1 fix), 1 same; only in A: 1, only in B: 2;"),
        "{text}"
    );
    assert!(text.contains("\nbroken: failure -> success;"), "{text}");
    assert!(
        text.contains("\nhostile: success; cost +0.000000;"),
        "{text}"
    );
    assert!(text.contains(&format!("  - {HOSTILE}\n")), "{text}");
    assert!(
        text.contains("  + line one\n  + <b>changed</b>\n"),
        "{text}"
    );
    assert!(
        text.contains("\nonly in A: plain\n") && text.contains("\nonly in B: extra, hello-too\n"),
        "{text}"
    );
    assert!(
        !text.contains("=formula:"),
        "an unchanged id is listed:\n{text}"
    );

    let output = test.run(&["compare", "out", "out_b", "--json"]);
    output.expect_code(0);
    let json: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(json["only_a"], serde_json::json!(["plain"]));
    assert_eq!(json["totals"]["fixes"], 1);
    let broken = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["id"] == "broken")
        .unwrap();
    assert_eq!(
        (broken["a"]["state"].as_str(), broken["b"]["state"].as_str()),
        (Some("failure"), Some("success"))
    );
    assert_eq!(
        broken["delivery_diff"],
        serde_json::json!([{"op": "+", "line": "please work"}])
    );

    let output = test.run(&["compare", "out", "out_b", "--html", "compare.html"]);
    output.expect_code(0);
    let html = std::fs::read_to_string(test.path("compare.html")).unwrap();
    assert!(!html.contains(HOSTILE) && !html.contains("<b>changed"));
    let Some(browser) = chromium() else { return };
    let loaded = load(
        &browser,
        test.dir.path(),
        &file_url(&test.path("compare.html")),
        None,
    );
    // 3 common ids, 1 only in A, 2 only in B.
    assert_clean_console(&loaded, 6);
    assert!(loaded.dom.contains("<title>lllm compare</title>"));
    assert_eq!(loaded.dom.matches("<tr data-row=").count(), 6);
}

#[test]
fn compare_bad_input_is_exit_2() {
    let test = batch();
    let output = test.run(&["compare", "out", "nowhere"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains("`nowhere` is not a batch output directory")
    );
}

/// Every file of `dir`, with its bytes.
fn snapshot(test: &Test, dir: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(test.path(dir))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[track_caller]
fn refused(output: &Output, line: &str) {
    output.expect_code(2);
    assert_eq!(output.stderr, format!("error: {line}\n"));
    assert_eq!(output.stdout, "");
}

#[test]
fn report_and_compare_never_overwrite_a_batch_directory_s_own_files() {
    // `report out -o out/results.jsonl` replaced the results with the page
    // (exit 0), and `compare --html B/results.jsonl` did the same to B.
    let test = batch();
    second_batch(&test);
    let (before, before_b) = (snapshot(&test, "out"), snapshot(&test, "out_b"));
    let hint = "hint: write it to a file outside the batch's own files";
    refused(
        &test.run(&["report", "out", "-o", "out/results.jsonl"]),
        &format!(
            "`-o out/results.jsonl` would overwrite `results.jsonl` of the batch directory `out`; {hint}"
        ),
    );
    refused(
        &test.run(&["report", "out", "--csv", "out/sessions.jsonl"]),
        &format!(
            "`--csv out/sessions.jsonl` would overwrite `sessions.jsonl` of the batch directory `out`; {hint}"
        ),
    );
    // Another spelling of the same file, and files that do not exist yet.
    std::fs::create_dir(test.path("elsewhere")).unwrap();
    for path in [
        "elsewhere/../out/summary.json",
        "./out/batch.json",
        "out/.lock",
        "out/merge.json",
        "out/sessions.jsonl.zst",
        "out/openai_output.jsonl",
    ] {
        let output = test.run(&["report", "out", "-o", path]);
        output.expect_code(2);
        assert!(
            output
                .stderr
                .starts_with(&format!("error: `-o {path}` would overwrite `")),
            "{}",
            output.stderr
        );
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(test.path("out/results.jsonl"), test.path("link.html")).unwrap();
        let output = test.run(&["report", "out", "-o", "link.html"]);
        output.expect_code(2);
        assert!(
            output
                .stderr
                .contains("would overwrite `results.jsonl` of the batch directory `out`"),
            "{}",
            output.stderr
        );
    }
    refused(
        &test.run(&["report", "out", "-o", "page.html", "--csv", "page.html"]),
        "`-o page.html` and `--csv page.html` name the same file; hint: give each its own file",
    );
    refused(
        &test.run(&["compare", "out", "out_b", "--html", "out_b/results.jsonl"]),
        &format!(
            "`--html out_b/results.jsonl` would overwrite `results.jsonl` of the batch directory `out_b`; {hint}"
        ),
    );
    refused(
        &test.run(&["compare", "out", "out_b", "--html", "out/summary.json"]),
        &format!(
            "`--html out/summary.json` would overwrite `summary.json` of the batch directory `out`; {hint}"
        ),
    );
    assert_eq!(snapshot(&test, "out"), before, "nothing of `out` changed");
    assert_eq!(
        snapshot(&test, "out_b"),
        before_b,
        "nothing of `out_b` changed"
    );
    assert!(!test.path("page.html").exists());

    // A report inside the directory under a name of its own is fine.
    test.run(&[
        "report",
        "out",
        "-o",
        "out/page.html",
        "--csv",
        "out/table.csv",
    ])
    .expect_code(0);
    assert!(test.path("out/page.html").is_file() && test.path("out/table.csv").is_file());
}
