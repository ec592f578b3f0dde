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
        "out/judges.jsonl",
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

// Scores (issue 32): result lines in the shape `lllm batch` writes for a
// task with assertions (`scores`, `score`, `pass`; `repeat_of` with
// `--repeat`), added here to a real batch's lines.

/// Would run if an assertion's reason or name reached the page as markup.
const HOSTILE_REASON: &str = "</script><script>document.title='pwned'</script>";
const HOSTILE_NAME: &str = "<img src=x onerror=\"document.title='pwned'\">";
const CONTAINS_HELLO: &str = "contains \"hello\"";

fn assertion(name: &str, kind: &str, score: f64, pass: bool, reason: &str, weight: f64) -> Value {
    serde_json::json!({"name": name, "type": kind, "score": score, "pass": pass, "reason": reason, "weight": weight})
}

/// `out` of [`batch`] scored: `plain` passes, `hostile` fails an assertion
/// with a hostile name and reason (and passes `is-json`), `broken` fails
/// `contains "hello"`, `=formula` has no assertions; `summary.json` says
/// `--fail-under 0.5`.
fn scored_batch() -> Test {
    let test = batch();
    let scores = |id: &str| -> Option<(f64, bool, Vec<Value>)> {
        match id {
            "plain" => Some((
                1.0,
                true,
                vec![assertion(
                    CONTAINS_HELLO,
                    "contains",
                    1.0,
                    true,
                    "found",
                    1.0,
                )],
            )),
            "hostile" => Some((
                0.25,
                false,
                vec![
                    assertion(HOSTILE_NAME, "icontains", 0.0, false, HOSTILE_REASON, 3.0),
                    assertion("is-json", "is-json", 1.0, true, "", 1.0),
                ],
            )),
            "broken" => Some((
                0.0,
                false,
                vec![assertion(
                    CONTAINS_HELLO,
                    "contains",
                    0.0,
                    false,
                    "the task failed",
                    1.0,
                )],
            )),
            _ => None,
        }
    };
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let lines: String = results
        .lines()
        .map(|line| {
            let mut line: Value = serde_json::from_str(line).unwrap();
            if let Some((score, pass, list)) = scores(line["id"].as_str().unwrap()) {
                line["scores"] = Value::Array(list);
                line["score"] = score.into();
                line["pass"] = pass.into();
            }
            line.to_string() + "\n"
        })
        .collect();
    std::fs::write(test.path("out/results.jsonl"), lines).unwrap();
    let mut summary = test.read_json("out/summary.json");
    summary["scores"] = serde_json::json!({"scored": 3, "passed": 1, "failed": 2, "pass_rate": 0.333,
        "fail_under": 0.5, "failing_ids": ["hostile", "broken"]});
    std::fs::write(test.path("out/summary.json"), summary.to_string()).unwrap();
    test
}

/// Each row's id and whether the page hides it, from a DOM dump.
fn row_visibility(dom: &str) -> Vec<(String, bool)> {
    dom.split("<tr data-row=")
        .skip(1)
        .map(|row| {
            let tag = &row[..row.find('>').unwrap()];
            let id_at = row.find("<td class=\"id\">").unwrap() + "<td class=\"id\">".len();
            let id = &row[id_at..id_at + row[id_at..].find("</td>").unwrap()];
            (id.to_string(), !tag.contains(" hidden"))
        })
        .collect()
}

/// The ids a page shows (rows not hidden), in order.
fn visible(dom: &str) -> Vec<String> {
    row_visibility(dom)
        .into_iter()
        .filter(|(_, shown)| *shown)
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn report_shows_scores_and_filters_to_failures() {
    let test = scored_batch();
    let output = test.run(&["report", "out"]);
    output.expect_code(0);
    assert_eq!(
        output.stderr,
        "report: out/report.html (4 tasks); csv: out/report.csv; \
         scores: 1 of 3 scored passed (33.3%); fail under 50.0%: below\n"
    );

    let csv = std::fs::read_to_string(test.path("out/report.csv")).unwrap();
    let rows = parse_csv(&csv);
    assert_eq!(rows[0][12..], ["score", "pass"], "{csv}");
    let by_id = |id: &str| rows.iter().find(|row| row[0] == id).unwrap().clone();
    assert_eq!(by_id("plain")[12..], ["1", "true"]);
    assert_eq!(by_id("hostile")[12..], ["0.25", "false"]);
    assert_eq!(by_id("'=formula")[12..], ["", ""]);

    let html = std::fs::read_to_string(test.path("out/report.html")).unwrap();
    assert!(
        !html.contains(HOSTILE_REASON) && !html.contains(HOSTILE_NAME),
        "a hostile assertion is in the page unescaped"
    );
    assert!(
        html.contains(
            "scores: <span class=\"pass\">1 passed</span>, <span class=\"fail\">2 failed</span>; \
             1 of 3 scored passed (33.3%); fail under 50.0%: below</p>"
        ),
        "{html}"
    );
    assert!(html.contains(
        "<p class=\"failing\">failing: <button type=\"button\" class=\"goto\">hostile</button> \
         <button type=\"button\" class=\"goto\">broken</button></p>"
    ));

    let Some(browser) = chromium() else { return };
    let url = file_url(&test.path("out/report.html"));
    let at = |hash: &str| load(&browser, test.dir.path(), &format!("{url}{hash}"), None);

    // No filter: every row, the score column, the assertion names as options.
    let loaded = at("");
    assert_clean_console(&loaded, 4);
    assert_eq!(
        visible(&loaded.dom),
        ["plain", "hostile", "broken", "=formula"]
    );
    assert!(loaded.dom.contains("<th>score</th>"), "{}", loaded.dom);
    assert!(
        loaded
            .dom
            .contains("<tr data-row=\"1\" class=\"success fail\"")
            && loaded
                .dom
                .contains("<td class=\"num verdict\">fail 0.25</td>")
            && loaded
                .dom
                .contains("<td class=\"num verdict\">pass 1.00</td>"),
        "{}",
        loaded.dom
    );
    assert!(
        loaded.dom.contains(
            "<option value=\"1\">&lt;img src=x onerror=\"document.title='pwned'\"&gt;</option>"
        ),
        "the hostile name as an option's text:\n{}",
        loaded.dom
    );
    assert!(loaded.dom.contains("<span id=\"shown\">4 rows</span>"));

    // Failing tasks only; passing; not scored.
    let loaded = at("#show=failing");
    assert_clean_console(&loaded, 4);
    assert_eq!(visible(&loaded.dom), ["hostile", "broken"]);
    assert!(loaded.dom.contains("<span id=\"shown\">2 of 4 rows</span>"));
    assert_eq!(visible(&at("#show=passing").dom), ["plain"]);
    assert_eq!(visible(&at("#show=unscored").dom), ["=formula"]);

    // By assertion: the tasks that have it, or that failed it.
    let contains = "#assertion=contains%20%22hello%22";
    assert_eq!(visible(&at(contains).dom), ["plain", "broken"]);
    assert_eq!(
        visible(&at(&format!("#show=failing&{}", &contains[1..])).dom),
        ["broken"]
    );
    assert_eq!(
        visible(&at("#assertion=is-json&show=failing").dom),
        Vec::<String>::new()
    );
    assert_eq!(visible(&at("#assertion=is-json").dom), ["hostile"]);

    // The hostile task's details: its assertions as a table, every text inert.
    let loaded = at("#task=hostile");
    assert_clean_console(&loaded, 4);
    let dom = &loaded.dom;
    assert!(dom.contains("<title>lllm report: out</title>"), "{dom}");
    assert!(!dom.contains("<img"), "the hostile name is markup:\n{dom}");
    assert!(
        dom.contains("<h3>scores: fail, score 0.25</h3><table class=\"scores\">"),
        "{dom}"
    );
    assert!(
        dom.contains(
            "<tr class=\"fail\"><td>&lt;img src=x onerror=\"document.title='pwned'\"&gt;</td><td>icontains</td>\
             <td>0.00</td><td>3</td><td class=\"result\">fail</td>\
             <td>&lt;/script&gt;&lt;script&gt;document.title='pwned'&lt;/script&gt;</td></tr>"
        ),
        "the hostile assertion's row:\n{dom}"
    );
    assert!(dom.contains(
        "<tr class=\"pass\"><td>is-json</td><td>is-json</td><td>1.00</td><td>1</td><td class=\"result\">pass</td><td></td></tr>"
    ));
    // A task filtered out is shown again when it is asked for.
    let loaded = at("#show=passing&task=broken");
    assert_clean_console(&loaded, 4);
    assert!(visible(&loaded.dom).contains(&"broken".to_string()));
    assert!(loaded.dom.contains("<h3>scores: fail, score 0.00</h3>"));

    // A page of a batch without scores has none of this.
    let plain = batch();
    plain.run(&["report", "out"]).expect_code(0);
    let html = std::fs::read_to_string(plain.path("out/report.html")).unwrap();
    assert!(
        !html.contains("<th>score</th>")
            && !html.contains("id=\"show\"")
            && !html.contains("id=\"lllm-scores\"")
            && !html.contains("class=\"scores\""),
        "{html}"
    );
}

/// A results line in the shared shape, written by hand.
fn result(id: &str, pass: Option<bool>, score: f64, extra: Value) -> String {
    let mut line = serde_json::json!({"id": id, "state": "success", "delivery": format!("answer {id}"),
        "error": null, "cost": 0.001, "session_id": null});
    if let Some(pass) = pass {
        line["scores"] = serde_json::json!([assertion(
            "equals \"yes\"",
            "equals",
            score,
            pass,
            &format!("{id}: {}", if pass { "matched" } else { "expected yes" }),
            1.0
        )]);
        line["score"] = score.into();
        line["pass"] = pass.into();
    }
    if let Value::Object(extra) = extra {
        line.as_object_mut().unwrap().extend(extra);
    }
    line.to_string() + "\n"
}

fn repeat(id: &str, run: u32, pass: bool) -> String {
    result(
        &format!("{id}#{run}"),
        Some(pass),
        if pass { 1.0 } else { 0.0 },
        serde_json::json!({"repeat_of": id}),
    )
}

#[test]
fn compare_shows_score_regressions_improvements_and_the_pass_rate_change() {
    let none = serde_json::json!({});
    let a: String = [
        result("down", Some(true), 1.0, none.clone()),
        result("up", Some(false), 0.0, none.clone()),
        result("moved", Some(true), 0.6, none.clone()),
        result("same", Some(true), 1.0, none.clone()),
        result("plain", None, 0.0, none.clone()),
        repeat("flaky", 1, true),
        repeat("flaky", 2, true),
        repeat("flaky", 3, true),
    ]
    .concat();
    let b: String = [
        result("down", Some(false), 0.0, none.clone()),
        result("up", Some(true), 1.0, none.clone()),
        result("moved", Some(true), 0.9, none.clone()),
        result("same", Some(true), 1.0, none.clone()),
        result("plain", None, 0.0, none.clone()),
        repeat("flaky", 1, true),
        repeat("flaky", 2, false),
        repeat("flaky", 3, false),
    ]
    .concat();
    let test = Test::new()
        .file("a/results.jsonl", &a)
        .file("b/results.jsonl", &b);

    let output = test.run(&["compare", "a", "b"]);
    output.expect_code(0);
    let text = &output.stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("8 common ids:"), "{text}");
    assert_eq!(
        lines[1],
        "scores: pass rate 85.7% (6 of 7) -> 57.1% (4 of 7) (-28.6 points); \
         5 scored on both sides: 2 regressions, 1 improvement, 1 score change",
        "{text}"
    );
    assert!(
        text.contains(
            "\nregressions (pass -> fail):\n\
             \x20 down: pass -> fail; score 1.00 -> 0.00 (-1.00); equals \"yes\": pass -> fail (down: expected yes)\n\
             \x20 flaky: 3/3 passed -> 1/3 passed; score 1.00 -> 0.33 (-0.67)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "\nimprovements (fail -> pass):\n\
             \x20 up: fail -> pass; score 0.00 -> 1.00 (+1.00); equals \"yes\": fail -> pass (up: matched)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nscore changes:\n  moved: pass -> pass; score 0.60 -> 0.90 (+0.30)\n"),
        "{text}"
    );

    let output = test.run(&["compare", "a", "b", "--json"]);
    output.expect_code(0);
    let json: Value = serde_json::from_str(&output.stdout).unwrap();
    let scores = &json["scores"];
    assert_eq!(
        scores["a"],
        serde_json::json!({"scored": 7, "passed": 6, "pass_rate": 0.8571})
    );
    assert_eq!(scores["b"]["passed"], 4);
    assert_eq!(scores["pass_rate_change"], -0.2857);
    assert_eq!(scores["common"], 5);
    let regressions = scores["regressions"].as_array().unwrap();
    assert_eq!(regressions.len(), 2);
    assert_eq!(regressions[1]["id"], "flaky");
    assert_eq!(
        regressions[1]["a"],
        serde_json::json!({"runs": 3, "passes": 3, "score": 1.0, "min_score": 1.0, "max_score": 1.0})
    );
    assert_eq!(
        (
            regressions[1]["b"]["runs"].as_u64(),
            regressions[1]["b"]["passes"].as_u64()
        ),
        (Some(3), Some(1))
    );
    assert_eq!(
        regressions[0]["assertions"],
        serde_json::json!([{"name": "equals \"yes\"", "pass_a": true, "pass_b": false, "reason": "down: expected yes"}])
    );
    assert_eq!(scores["improvements"][0]["id"], "up");
    assert_eq!(scores["score_changes"][0]["id"], "moved");
    let entry = |id: &str| {
        json["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            entry("down")["a"]["pass"].as_bool(),
            entry("down")["b"]["pass"].as_bool()
        ),
        (Some(true), Some(false))
    );
    assert!(
        entry("plain")["a"].get("pass").is_none() && entry("plain")["a"].get("score").is_none()
    );

    let output = test.run(&["compare", "a", "b", "--html", "compare.html"]);
    output.expect_code(0);
    let html = std::fs::read_to_string(test.path("compare.html")).unwrap();
    assert!(
        html.contains(
            "<pre class=\"scores\">scores: pass rate 85.7% (6 of 7) -&gt; 57.1% (4 of 7)"
        ),
        "{html}"
    );
    assert!(html.contains("<td>pass → fail</td>"), "{html}");
    // Turned verdicts come first, with the changed rows.
    assert!(
        html.contains(
            "<tr data-row=\"0\" class=\"changed success\" tabindex=\"0\"><td class=\"id\">down</td>"
        ) && html.contains(
            "<tr data-row=\"1\" class=\"changed success\" tabindex=\"0\"><td class=\"id\">up</td>"
        ),
        "{html}"
    );
    let Some(browser) = chromium() else { return };
    let loaded = load(
        &browser,
        test.dir.path(),
        &file_url(&test.path("compare.html")),
        None,
    );
    assert_clean_console(&loaded, 8);

    // Unscored batches: no scores in any output.
    let plain = [result("x", None, 0.0, none.clone())].concat();
    let test = Test::new()
        .file("a/results.jsonl", &plain)
        .file("b/results.jsonl", &plain);
    let output = test.run(&["compare", "a", "b"]);
    assert!(!output.stdout.contains("scores:"), "{}", output.stdout);
    let output = test.run(&["compare", "a", "b", "--json"]);
    let json: Value = serde_json::from_str(&output.stdout).unwrap();
    assert!(json.get("scores").is_none() && json["entries"][0]["a"].get("pass").is_none());
}

#[test]
fn report_shows_how_repeated_tasks_spread() {
    let lines = [
        repeat("steady", 1, true),
        repeat("steady", 2, true),
        repeat("wobbly", 1, true),
        repeat("wobbly", 2, false),
        repeat("never", 1, false),
        repeat("never", 2, false),
        repeat("<i>x</i>", 1, true),
        repeat("<i>x</i>", 2, false),
    ]
    .concat();
    let test = Test::new().file("out/results.jsonl", &lines);
    test.run(&["report", "out"]).expect_code(0);
    let html = std::fs::read_to_string(test.path("out/report.html")).unwrap();
    assert!(
        html.contains(
            "<p class=\"spread\">repeated: 4 ids; passed every run: 1, no run: 1, some runs: 2 \
             (wobbly (1/2 passed), &lt;i&gt;x&lt;/i&gt; (1/2 passed))</p>"
        ),
        "{html}"
    );
    assert!(html.contains("4 of 8 scored passed (50.0%)</p>"), "{html}");
    // Ids are text in the failing list too.
    assert!(
        html.contains("<button type=\"button\" class=\"goto\">&lt;i&gt;x&lt;/i&gt;#2</button></p>")
            && !html.contains("<i>x"),
        "{html}"
    );
}

/// The shipped evals example, scored by `lllm batch` itself, then run again
/// on weaker scripted labels with `--repeat 2`: the report and compare agree
/// with the batches' own `summary.json`.
#[test]
fn report_and_compare_read_a_real_scored_batch() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let tasks = format!("{root}/examples/evals/reviews.jsonl");
    let tactic = std::fs::read_to_string(format!("{root}/examples/evals/sentiment.yaml")).unwrap();
    // The same tactic on labels that miss more (only three keywords).
    let weaker = tactic
        .replace(
            "../../tactics/grader.yaml",
            &format!("{root}/tactics/grader.yaml"),
        )
        .replace("sentiment.mock.yaml", "weaker.mock.yaml");
    assert_ne!(weaker, tactic);
    let test = Test::new().file("weaker.yaml", &weaker).file(
        "weaker.mock.yaml",
        "rules:\n  - when: {regex: \"(?i)Review:.*\\\\b(love|great|broke)\\\\b\"}\n    reply: {text: positive}\ndefault: {text: neutral}\n",
    );
    test.run(&[
        "batch",
        &tasks,
        "-t",
        &format!("{root}/examples/evals/sentiment.yaml"),
        "-o",
        "a",
        "-q",
    ])
    .expect_code(0);
    test.run(&[
        "batch",
        &tasks,
        "-t",
        "weaker.yaml",
        "-o",
        "b",
        "--repeat",
        "2",
        "-q",
    ])
    .expect_code(0);
    let summary = |dir: &str| test.read_json(&format!("{dir}/summary.json"))["scores"].clone();
    let (scores_a, scores_b) = (summary("a"), summary("b"));
    let count = |scores: &Value, key: &str| scores[key].as_u64().unwrap();
    assert!(
        count(&scores_a, "failed") > 0 && count(&scores_a, "passed") > 0,
        "{scores_a}"
    );
    assert_eq!(count(&scores_b, "scored"), 2 * count(&scores_a, "scored"));

    // The report: the summary's counts, every failing id, the filter.
    test.run(&["report", "a"]).expect_code(0);
    let html = std::fs::read_to_string(test.path("a/report.html")).unwrap();
    let line = format!(
        "{} of {} scored passed ({:.1}%)",
        count(&scores_a, "passed"),
        count(&scores_a, "scored"),
        scores_a["pass_rate"].as_f64().unwrap() * 100.0
    );
    assert!(html.contains(&line), "no `{line}` in the page");
    for id in scores_a["failing_ids"].as_array().unwrap() {
        let button = format!(
            "<button type=\"button\" class=\"goto\">{}</button>",
            id.as_str().unwrap()
        );
        assert!(html.contains(&button), "no {button}");
    }
    let csv = parse_csv(&std::fs::read_to_string(test.path("a/report.csv")).unwrap());
    let failing_rows = csv.iter().filter(|row| row[13] == "false").count() as u64;
    assert_eq!(failing_rows, count(&scores_a, "failed"));
    if let Some(browser) = chromium() {
        let loaded = load(
            &browser,
            test.dir.path(),
            &format!("{}#show=failing", file_url(&test.path("a/report.html"))),
            None,
        );
        let rows = count(&scores_a, "scored") as usize;
        assert_clean_console(&loaded, rows);
        assert_eq!(
            visible(&loaded.dom).len() as u64,
            count(&scores_a, "failed")
        );
    }

    // Compare: each side's pass rate as its summary says; B's runs by
    // original id, so every id is scored on both sides.
    let output = test.run(&["compare", "a", "b", "--json"]);
    output.expect_code(0);
    let json: Value = serde_json::from_str(&output.stdout).unwrap();
    let scores = &json["scores"];
    assert_eq!(scores["a"]["pass_rate"], scores_a["pass_rate"]);
    assert_eq!(scores["b"]["pass_rate"], scores_b["pass_rate"]);
    assert_eq!(scores["common"].as_u64(), Some(count(&scores_a, "scored")));
    let regressions = scores["regressions"].as_array().unwrap();
    assert!(!regressions.is_empty(), "{scores}");
    assert!(
        regressions
            .iter()
            .all(|change| change["a"]["runs"] == 1 && change["b"]["runs"] == 2),
        "{scores}"
    );
    let output = test.run(&["compare", "a", "b"]);
    let text = &output.stdout;
    // The runs are counted, not listed: the scores compare them.
    let ids = count(&scores_a, "scored");
    assert!(
        text.contains(&format!(
            "\nonly in A: {ids} ids whose original id B has too (--repeat runs): compared by original id under scores\n\n\
             only in B: {} ids whose original id A has too (--repeat runs): compared by original id under scores\n",
            2 * ids
        )),
        "{text}"
    );
    assert!(!text.contains("r01#1"), "{text}");
    assert!(
        text.contains(&format!(
            "\nregressions (pass -> fail):\n  {}: pass -> 0/2 passed;",
            regressions[0]["id"].as_str().unwrap()
        )),
        "{text}"
    );
}

/// `lllm eval` rescoring a batch with other assertions: the deliveries are
/// the same, the verdicts turn, and compare names the assertion that failed.
#[test]
fn compare_names_what_failed_after_a_rescore() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let test = Test::new();
    test.run(&[
        "batch",
        &format!("{root}/examples/evals/reviews.jsonl"),
        "-t",
        &format!("{root}/examples/evals/sentiment.yaml"),
        "-o",
        "out",
        "-q",
    ])
    .expect_code(0);
    std::fs::create_dir(test.path("before")).unwrap();
    for file in ["results.jsonl", "summary.json"] {
        std::fs::copy(
            test.path(&format!("out/{file}")),
            test.path(&format!("before/{file}")),
        )
        .unwrap();
    }
    test.run(&[
        "eval",
        "out",
        "--asserts",
        &format!("{root}/examples/evals/strict.yaml"),
    ])
    .expect_code(0);
    let output = test.run(&["compare", "before", "out"]);
    output.expect_code(0);
    let text = &output.stdout;
    assert!(text.starts_with("36 common ids: 0 changed"), "{text}");
    let regressions: Vec<&str> = text
        .split("\nregressions (pass -> fail):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no regressions:\n{text}"))
        .lines()
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert!(!regressions.is_empty());
    // Each names only the new assertion that failed (strict.yaml's
    // `takes-a-side`), not every assertion the two lists do not share.
    for line in &regressions {
        assert!(
            line.ends_with(
                "; takes-a-side: absent -> fail (not expected, and the delivery equals the value)"
            ),
            "{line}"
        );
    }
}

/// A hand-edited (or older) output: a score item with a field missing or
/// `null` is read with its default, the same by every reader
/// (`eval::Score`), and one with a field of the wrong kind makes its line
/// unreadable, said on stderr, instead of being guessed at.
#[test]
fn hand_edited_scores_are_read_with_their_defaults() {
    let line = |id: &str, items: Value, score: f64, pass: bool| {
        serde_json::json!({"id": id, "state": "success", "delivery": "d", "error": null,
            "cost": 0.001, "session_id": null, "scores": items, "score": score, "pass": pass})
        .to_string()
            + "\n"
    };
    let a: String = [
        // No name (read by its type), a `null` reason, no weight.
        line(
            "kept",
            serde_json::json!([{"type": "contains", "score": 1, "pass": true, "reason": null}]),
            1.0,
            true,
        ),
        // Only a score: it passes from 0.5 up, as a grader's does.
        line(
            "judged",
            serde_json::json!([{"name": "polite", "score": 0.7}]),
            0.7,
            true,
        ),
    ]
    .concat();
    let b: String = [
        // Only a verdict: its score is 0.
        line(
            "kept",
            serde_json::json!([{"type": "contains", "pass": false, "reason": "gone"}]),
            0.0,
            false,
        ),
        line(
            "judged",
            serde_json::json!([{"name": "polite", "score": 0.3, "weight": null}]),
            0.3,
            false,
        ),
        // A score that is text: not a result line.
        line(
            "garbled",
            serde_json::json!([{"type": "regex", "score": "high", "pass": true}]),
            1.0,
            true,
        ),
    ]
    .concat();
    let test = Test::new()
        .file("a/results.jsonl", &a)
        .file("b/results.jsonl", &b);
    let output = test.run(&["compare", "a", "b"]);
    output.expect_code(0);
    let text = &output.stdout;
    assert!(
        text.contains(
            "\n  kept: pass -> fail; score 1.00 -> 0.00 (-1.00); contains: pass -> fail (gone)\n"
        ) && text.contains(
            "\n  judged: pass -> fail; score 0.70 -> 0.30 (-0.40); polite: pass -> fail\n"
        ),
        "{text}"
    );
    assert!(!text.contains("garbled"), "{text}");
    assert!(
        output
            .stderr
            .contains("b/results.jsonl`: skipped 1 line not readable as result lines (line 3)"),
        "{}",
        output.stderr
    );

    let output = test.run(&["compare", "a", "b", "--json"]);
    output.expect_code(0);
    let json: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(
        json["scores"]["regressions"][1]["assertions"],
        serde_json::json!([{"name": "polite", "pass_a": true, "pass_b": false, "reason": ""}])
    );

    test.run(&["report", "b"]).expect_code(0);
    let html = std::fs::read_to_string(test.path("b/report.html")).unwrap();
    assert!(html.contains("0 of 2 scored passed (0.0%)</p>"), "{html}");
}
