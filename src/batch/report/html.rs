//! The self-contained HTML of `lllm report` and `lllm compare`: one file with
//! its CSS and script inline, nothing fetched at view time.
//!
//! Safety with hostile text (a model's reply, a task written by anyone): every
//! text reaches the page either escaped into HTML ([`escape`]) or inside the
//! page's JSON data block with `<`, `>` and `&` written as `\u003c`… so no
//! `</script>` can close it ([`json_block`]); the script only ever sets
//! `textContent`, never HTML.
//!
//! At 10,000 tasks the table is written out (one short row per task) while the
//! detail views (task, delivery, session) stay in the JSON block and are
//! built when a row is opened: the page stays a few MiB and renders the
//! table without laying out 10,000 session views.

use std::fmt::Write as _;

use serde_json::Value;

use super::scores::ScoreSummary;
use super::{Batch, TaskReport};

/// `text` escaped for HTML text and attribute values (`&`, `<`, `>`, `"`, `'`).
///
/// ```
/// use lllm::batch::report::html::escape;
/// assert_eq!(escape("<script>alert('x')</script>"),
///            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// `value` as JSON to embed in a `<script type="application/json">` block:
/// `<`, `>` and `&` (and U+2028, U+2029) are written as `\uXXXX` escapes, so
/// the text can hold no `</script>` or `<!--`, and `JSON.parse` reads back the
/// same value.
///
/// ```
/// use lllm::batch::report::html::json_block;
/// let block = json_block(&serde_json::json!(["</script><script>alert(1)</script>"]));
/// assert!(!block.contains('<'));
/// assert_eq!(serde_json::from_str::<serde_json::Value>(&block).unwrap()[0],
///            "</script><script>alert(1)</script>");
/// ```
pub fn json_block(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for character in text.chars() {
        match character {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out
}

/// A section of a row's detail view: a title and a text shown as written
/// (`diff`: lines starting with `-`/`+` are coloured as removed/added).
pub(crate) fn section(title: &str, text: &str, diff: bool) -> Value {
    serde_json::json!({"title": title, "text": text, "diff": diff})
}

/// The first `max` characters of `text` on one line, with `…` when cut.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// The page around a table: `title` and `heading` are plain text (escaped
/// here), `summary_html`, `head_html` and `rows_html` are HTML already
/// escaped by the caller, `details` the rows' detail sections (row `i` of the
/// table, `data-row="i"`, opens `details[i]`).
pub(crate) fn page(
    title: &str,
    summary_html: &str,
    head_html: &str,
    rows_html: &str,
    details: &Value,
) -> String {
    scored_page(
        title,
        summary_html,
        head_html,
        rows_html,
        details,
        &Value::Null,
    )
}

/// [`page`] with the rows' scores for the page's score filters (see
/// [`score_filters`]); `Value::Null`: no filters.
fn scored_page(
    title: &str,
    summary_html: &str,
    head_html: &str,
    rows_html: &str,
    details: &Value,
    filters: &Value,
) -> String {
    let mut out = String::with_capacity(rows_html.len() + 64 * 1024);
    let (selects, filter_block) = if filters.is_null() {
        (String::new(), String::new())
    } else {
        (
            "<select id=\"show\" aria-label=\"show tasks\"><option value=\"all\">all tasks</option>\
             <option value=\"failing\">failing</option><option value=\"passing\">passing</option>\
             <option value=\"unscored\">not scored</option></select> \
             <select id=\"assertion\" aria-label=\"assertion\"><option value=\"\">any assertion</option></select> "
                .to_string(),
            format!(
                "<script type=\"application/json\" id=\"lllm-scores\">{}</script>\n",
                json_block(filters)
            ),
        )
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n{summary_html}\n\
         <p class=\"tools\"><input id=\"filter\" type=\"search\" placeholder=\"filter rows\" aria-label=\"filter rows\"> \
         {selects}<span id=\"shown\"></span> <span class=\"hint\">click a row for its details</span></p>\n\
         <table id=\"tasks\">\n<thead><tr>{head_html}</tr></thead>\n<tbody>\n{rows_html}</tbody>\n</table>\n\
         <script type=\"application/json\" id=\"lllm-data\">{data}</script>\n{filter_block}<script>{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        data = json_block(details),
    );
    out
}

/// What the score filters of a report need, for its second JSON block:
/// every assertion label once (`names`), and per row its verdict (`pass`:
/// `true`, `false` or `null` when not scored) and its assertions as
/// `[name index, passed]` pairs (`rows`).
fn score_filters(tasks: &[TaskReport]) -> Value {
    let mut names: Vec<&str> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut rows = Vec::with_capacity(tasks.len());
    for task in tasks {
        let pairs: Vec<Value> = task
            .scores
            .iter()
            .map(|score| {
                let label = score.label();
                let at = *index.entry(label).or_insert_with(|| {
                    names.push(label);
                    names.len() - 1
                });
                serde_json::json!([at, score.pass])
            })
            .collect();
        rows.push(Value::Array(pairs));
    }
    let pass: Vec<Value> = tasks
        .iter()
        .map(|task| task.pass.map_or(Value::Null, Value::Bool))
        .collect();
    serde_json::json!({"names": names, "pass": pass, "rows": rows})
}

/// A section of a row's detail view shown as a table: `head` the column
/// titles, `rows` the cells (text), `classes` each row's class.
fn table_section(title: &str, head: &[&str], rows: Vec<Vec<String>>, classes: Vec<&str>) -> Value {
    serde_json::json!({"title": title, "table": {"head": head, "rows": rows, "classes": classes}})
}

/// The HTML report of a batch: a summary, then one row per task (id,
/// args/tags, state, score when the batch was scored, delivery, cost,
/// latency) opening its task, scores, delivery, error and session view. A
/// scored batch's page also has the pass rate and failing ids in its summary
/// and filters to failing or passing tasks and by assertion.
pub fn report(batch: &Batch) -> String {
    let scored = batch.scores.is_some();
    let mut rows = String::with_capacity(batch.tasks.len() * 320);
    let mut details = Vec::with_capacity(batch.tasks.len());
    for (index, task) in batch.tasks.iter().enumerate() {
        row(&mut rows, index, task, scored);
        details.push(task_details(task));
    }
    let summary = summary_html(batch);
    let score_head = if scored { "<th>score</th>" } else { "" };
    scored_page(
        &format!("lllm report: {}", batch.dir.display()),
        &summary,
        &format!(
            "<th>id</th><th>args / tags</th><th>state</th>{score_head}<th>delivery</th><th>cost (USD)</th><th>latency</th>"
        ),
        &rows,
        &Value::Array(details),
        &if scored {
            score_filters(&batch.tasks)
        } else {
            Value::Null
        },
    )
}

fn row(out: &mut String, index: usize, task: &TaskReport, scored: bool) {
    let state = task.state_name();
    let mut labels = String::new();
    for (key, value) in task.args.iter().chain(task.tags.iter()) {
        if !labels.is_empty() {
            labels.push_str(", ");
        }
        let value = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        labels.push_str(&format!("{key}={value}"));
    }
    let shown = match (&task.delivery, &task.error) {
        (Some(delivery), _) => one_line(delivery, 160),
        (None, Some(error)) => one_line(error, 160),
        (None, None) => String::new(),
    };
    let (verdict, score_cell) = match (scored, task.pass) {
        (false, _) => ("", String::new()),
        (true, None) => ("", "<td class=\"num verdict\"></td>".to_string()),
        (true, Some(pass)) => {
            let word = if pass { "pass" } else { "fail" };
            let score = task
                .score
                .map(|score| format!(" {score:.2}"))
                .unwrap_or_default();
            (
                if pass { " pass" } else { " fail" },
                format!("<td class=\"num verdict\">{word}{score}</td>"),
            )
        }
    };
    let _ = writeln!(
        out,
        "<tr data-row=\"{index}\" class=\"{state}{verdict}\" tabindex=\"0\"><td class=\"id\">{id}</td><td>{labels}</td>\
         <td class=\"state\">{state}</td>{score_cell}<td class=\"text\">{shown}</td><td class=\"num\">{cost}</td><td class=\"num\">{latency}</td></tr>",
        id = escape(&task.id),
        labels = escape(&one_line(&labels, 120)),
        shown = escape(&shown),
        cost = cost_text(task.cost, task.cost_known),
        latency = latency_text(task.latency_ms),
    );
}

fn task_details(task: &TaskReport) -> Value {
    let mut sections = Vec::new();
    if let Some(given) = &task.task {
        let text = match given {
            Value::String(text) => text.clone(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        sections.push(section("task", &text, false));
    }
    if !task.args.is_empty() || !task.tags.is_empty() {
        let text = serde_json::to_string_pretty(
            &serde_json::json!({"args": &task.args, "tags": &task.tags}),
        )
        .unwrap_or_default();
        sections.push(section("args and tags", &text, false));
    }
    if let Some(pass) = task.pass {
        let rows = task
            .scores
            .iter()
            .map(|score| {
                vec![
                    score.label().to_string(),
                    score.type_name.to_string(),
                    format!("{:.2}", score.score),
                    format!("{}", score.weight),
                    (if score.pass { "pass" } else { "fail" }).to_string(),
                    score.reason.to_string(),
                ]
            })
            .collect();
        let classes = task
            .scores
            .iter()
            .map(|score| if score.pass { "pass" } else { "fail" })
            .collect();
        let score = task
            .score
            .map(|score| format!(", score {score:.2}"))
            .unwrap_or_default();
        let repeat = task
            .repeat_of
            .as_ref()
            .map(|id| format!(", a run of `{id}`"))
            .unwrap_or_default();
        sections.push(table_section(
            &format!(
                "scores: {}{score}{repeat}",
                if pass { "pass" } else { "fail" }
            ),
            &["assertion", "type", "score", "weight", "result", "reason"],
            rows,
            classes,
        ));
    }
    // The session view ends with the delivery in full: shown apart only
    // when there is no session view (a page of 10,000 tasks is smaller).
    if let (Some(delivery), None) = (&task.delivery, &task.session) {
        sections.push(section("delivery", delivery, false));
    }
    if let Some(error) = &task.error {
        sections.push(section("error", error, false));
    }
    let session = match &task.session {
        Some(session) => session.clone(),
        None => "(no session record)".to_string(),
    };
    sections.push(section("session", &session, false));
    Value::Array(sections)
}

fn summary_html(batch: &Batch) -> String {
    let mut counts = [0u64; 3];
    let (mut cost, mut known) = (0.0, true);
    for task in &batch.tasks {
        counts[task.state as usize] += 1;
        cost += task.cost.unwrap_or(0.0);
        known &= task.cost_known && task.cost.is_some();
    }
    let mut out = format!(
        "<p class=\"summary\">{} tasks: <span class=\"success\">{} success</span>, \
         <span class=\"failure\">{} failure</span>, <span class=\"skipped\">{} skipped</span>; cost {}</p>",
        batch.tasks.len(),
        counts[0],
        counts[1],
        counts[2],
        cost_text(Some(cost), known),
    );
    if let Some(scores) = &batch.scores {
        scores_html(&mut out, scores);
    }
    if let Some(summary) = &batch.summary {
        let text = serde_json::to_string_pretty(summary).unwrap_or_default();
        let _ = write!(
            out,
            "\n<details><summary>summary.json</summary><pre>{}</pre></details>",
            escape(&text)
        );
    }
    out
}

/// Failing ids named in a report's summary; the filter shows them all.
const FAILING_SHOWN: usize = 50;

/// The pass rate, the failing ids (each a button opening its row) and, for
/// repeated tasks, how many passed every run.
fn scores_html(out: &mut String, scores: &ScoreSummary) {
    let _ = write!(
        out,
        "\n<p class=\"scores\">scores: <span class=\"pass\">{} passed</span>, <span class=\"fail\">{} failed</span>; {}</p>",
        scores.passed,
        scores.failed,
        escape(&scores.text()),
    );
    if !scores.failing_ids.is_empty() {
        out.push_str("\n<p class=\"failing\">failing:");
        for id in scores.failing_ids.iter().take(FAILING_SHOWN) {
            let _ = write!(
                out,
                " <button type=\"button\" class=\"goto\">{}</button>",
                escape(id)
            );
        }
        if scores.failing_ids.len() > FAILING_SHOWN {
            let _ = write!(
                out,
                " and {} more (show: failing)",
                scores.failing_ids.len() - FAILING_SHOWN
            );
        }
        out.push_str("</p>");
    }
    if !scores.repeats.is_empty() {
        let every = scores
            .repeats
            .iter()
            .filter(|(_, tally)| tally.passes == tally.runs)
            .count();
        let none = scores
            .repeats
            .iter()
            .filter(|(_, tally)| tally.passes == 0)
            .count();
        let some: Vec<String> = scores
            .repeats
            .iter()
            .filter(|(_, tally)| tally.passes > 0 && tally.passes < tally.runs)
            .map(|(id, tally)| format!("{id} ({})", tally.text()))
            .collect();
        let mut line = format!(
            "repeated: {} ids; passed every run: {every}, no run: {none}, some runs: {}",
            scores.repeats.len(),
            some.len()
        );
        if !some.is_empty() {
            let shown: Vec<&str> = some
                .iter()
                .take(FAILING_SHOWN)
                .map(String::as_str)
                .collect();
            line.push_str(&format!(" ({})", shown.join(", ")));
        }
        let _ = write!(out, "\n<p class=\"spread\">{}</p>", escape(&line));
    }
}

/// `0.001234`, `0.001234 + unknown`, `unknown`.
pub(crate) fn cost_text(cost: Option<f64>, known: bool) -> String {
    match (cost, known) {
        (Some(cost), true) => format!("{cost:.6}"),
        (Some(cost), false) => format!("{cost:.6} + unknown"),
        (None, _) => "unknown".into(),
    }
}

/// `850 ms`, `12.3 s`.
pub(crate) fn latency_text(latency_ms: u64) -> String {
    if latency_ms < 1000 {
        format!("{latency_ms} ms")
    } else {
        format!("{:.1} s", latency_ms as f64 / 1000.0)
    }
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.3em;word-break:break-all}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3;position:sticky;top:0}
tr[data-row]{cursor:pointer}
tr[data-row]:hover{background:#f7f7ff}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.id{font-family:ui-monospace,monospace;white-space:nowrap}
td.text{max-width:40em;overflow-wrap:anywhere}
.success .state,span.success{color:#17692a}
.failure .state,span.failure{color:#b3261e;font-weight:600}
.skipped .state,span.skipped{color:#7a6a00}
.changed .state{font-weight:600}
tr.detail td{background:#fafafa}
tr.detail h3{font-size:1em;margin:.8em 0 .2em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;font:12px/1.35 ui-monospace,monospace}
pre .del{background:#fde8e8;display:block}
pre .add{background:#e6f6e6;display:block}
.hint{color:#777}
.pass .verdict,span.pass,tr.pass td.result{color:#17692a}
.fail .verdict,span.fail,tr.fail td.result{color:#b3261e;font-weight:600}
td.verdict{white-space:nowrap}
table.scores{width:auto;margin:.2em 0}
table.scores td{font-size:12px}
button.goto{font:12px ui-monospace,monospace;margin:1px;cursor:pointer}
";

/// Opens a row's details from the JSON block on click or Enter (and the row
/// named by `#task=ID` at load), filters rows by text and, on a scored
/// report, to failing or passing tasks and by assertion (`#show=failing`,
/// `#assertion=NAME` at load; parameters joined with `&`, values
/// URI-encoded). Text is only ever set through `textContent`.
const SCRIPT: &str = r#"
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('lllm-data').textContent);
  var scoreBlock = document.getElementById('lllm-scores');
  var scores = scoreBlock ? JSON.parse(scoreBlock.textContent) : null;
  var body = document.querySelector('#tasks tbody');
  var columns = document.querySelectorAll('#tasks thead th').length;
  function table(spec) {
    var element = document.createElement('table');
    element.className = 'scores';
    var head = document.createElement('tr');
    spec.head.forEach(function (title) {
      var cell = document.createElement('th');
      cell.textContent = title;
      head.appendChild(cell);
    });
    element.appendChild(head);
    spec.rows.forEach(function (cells, at) {
      var line = document.createElement('tr');
      line.className = spec.classes[at] || '';
      cells.forEach(function (text, column) {
        var cell = document.createElement('td');
        if (spec.head[column] === 'result') cell.className = 'result';
        cell.textContent = text;
        line.appendChild(cell);
      });
      element.appendChild(line);
    });
    return element;
  }
  function toggle(row) {
    var next = row.nextElementSibling;
    if (next && next.classList.contains('detail')) { next.remove(); return; }
    var detail = document.createElement('tr');
    detail.className = 'detail';
    var cell = document.createElement('td');
    cell.colSpan = columns;
    (data[Number(row.getAttribute('data-row'))] || []).forEach(function (section) {
      var heading = document.createElement('h3');
      heading.textContent = section.title;
      cell.appendChild(heading);
      if (section.table) { cell.appendChild(table(section.table)); return; }
      var pre = document.createElement('pre');
      if (section.diff) {
        section.text.split('\n').forEach(function (line) {
          var span = document.createElement('span');
          span.textContent = line + '\n';
          if (line.charAt(0) === '-') span.className = 'del';
          if (line.charAt(0) === '+') span.className = 'add';
          pre.appendChild(span);
        });
      } else {
        pre.textContent = section.text;
      }
      cell.appendChild(pre);
    });
    detail.appendChild(cell);
    row.parentNode.insertBefore(detail, row.nextSibling);
  }
  body.addEventListener('click', function (event) {
    var row = event.target.closest('tr[data-row]');
    if (row) toggle(row);
  });
  body.addEventListener('keydown', function (event) {
    var row = event.target.closest('tr[data-row]');
    if (row && event.key === 'Enter') toggle(row);
  });
  var rows = body.querySelectorAll('tr[data-row]');
  var shown = document.getElementById('shown');
  var filter = document.getElementById('filter');
  var show = document.getElementById('show');
  var assertion = document.getElementById('assertion');
  if (scores && assertion) {
    scores.names.forEach(function (name, at) {
      var option = document.createElement('option');
      option.value = String(at);
      option.textContent = name;
      assertion.appendChild(option);
    });
  }
  function scoreMatch(at) {
    if (!scores) return true;
    var wanted = show.value;
    var pass = scores.pass[at];
    if (assertion.value !== '') {
      var name = Number(assertion.value);
      var hit = (scores.rows[at] || []).filter(function (pair) { return pair[0] === name; })[0];
      if (!hit || wanted === 'unscored') return false;
      pass = hit[1];
    }
    if (wanted === 'failing') return pass === false;
    if (wanted === 'passing') return pass === true;
    if (wanted === 'unscored') return pass === null;
    return true;
  }
  function apply() {
    var query = filter.value.toLowerCase();
    var count = 0;
    body.querySelectorAll('tr.detail').forEach(function (detail) { detail.remove(); });
    rows.forEach(function (row) {
      var match = (!query || row.textContent.toLowerCase().indexOf(query) !== -1) &&
        scoreMatch(Number(row.getAttribute('data-row')));
      row.hidden = !match;
      if (match) count += 1;
    });
    shown.textContent = count === rows.length ? rows.length + ' rows' : count + ' of ' + rows.length + ' rows';
  }
  filter.addEventListener('input', apply);
  if (show) show.addEventListener('change', apply);
  if (assertion) assertion.addEventListener('change', apply);
  function open(id) {
    rows.forEach(function (row) {
      if (row.querySelector('td.id').textContent !== id) return;
      if (row.hidden) {
        filter.value = '';
        if (show) { show.value = 'all'; assertion.value = ''; }
        apply();
      }
      var next = row.nextElementSibling;
      if (!next || !next.classList.contains('detail')) toggle(row);
      row.scrollIntoView();
    });
  }
  document.querySelectorAll('button.goto').forEach(function (button) {
    button.addEventListener('click', function () { open(button.textContent); });
  });
  var params = {};
  location.hash.replace(/^#/, '').split('&').forEach(function (part) {
    var equals = part.indexOf('=');
    if (equals > 0) {
      try { params[part.slice(0, equals)] = decodeURIComponent(part.slice(equals + 1)); } catch (error) { }
    }
  });
  if (show && ['all', 'failing', 'passing', 'unscored'].indexOf(params.show) !== -1) {
    show.value = params.show;
  }
  if (assertion && params.assertion !== undefined) {
    var named = scores.names.indexOf(params.assertion);
    if (named !== -1) assertion.value = String(named);
  }
  apply();
  if (params.task !== undefined) open(params.task);
  console.log('lllm report ready: ' + rows.length + ' rows');
}());
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(input: &str, expected: &str) {
        assert_eq!(escape(input), expected);
    }

    #[test]
    fn escapes_every_markup_character() {
        case("plain", "plain");
        case(
            "<script>alert(1)</script>",
            "&lt;script&gt;alert(1)&lt;/script&gt;",
        );
        case("a & b", "a &amp; b");
        case("\"x\" 'y'", "&quot;x&quot; &#39;y&#39;");
    }

    #[test]
    fn the_json_block_cannot_close_its_script() {
        let hostile = "</script><!-- <script>document.title='x'</script> & \u{2028}";
        let block = json_block(&serde_json::json!({ "text": hostile }));
        assert!(!block.contains('<') && !block.contains('>') && !block.contains('&'));
        let back: Value = serde_json::from_str(&block).unwrap();
        assert_eq!(back["text"], hostile);
    }
}
