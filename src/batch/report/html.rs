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
    let mut out = String::with_capacity(rows_html.len() + 64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n{summary_html}\n\
         <p class=\"tools\"><input id=\"filter\" type=\"search\" placeholder=\"filter rows\" aria-label=\"filter rows\"> \
         <span id=\"shown\"></span> <span class=\"hint\">click a row for its details</span></p>\n\
         <table id=\"tasks\">\n<thead><tr>{head_html}</tr></thead>\n<tbody>\n{rows_html}</tbody>\n</table>\n\
         <script type=\"application/json\" id=\"lllm-data\">{data}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        data = json_block(details),
    );
    out
}

/// The HTML report of a batch: a summary, then one row per task (id,
/// args/tags, state, delivery, cost, latency) opening its task, delivery,
/// error and session view.
pub fn report(batch: &Batch) -> String {
    let mut rows = String::with_capacity(batch.tasks.len() * 320);
    let mut details = Vec::with_capacity(batch.tasks.len());
    for (index, task) in batch.tasks.iter().enumerate() {
        row(&mut rows, index, task);
        details.push(task_details(task));
    }
    let summary = summary_html(batch);
    page(
        &format!("lllm report: {}", batch.dir.display()),
        &summary,
        "<th>id</th><th>args / tags</th><th>state</th><th>delivery</th><th>cost (USD)</th><th>latency</th>",
        &rows,
        &Value::Array(details),
    )
}

fn row(out: &mut String, index: usize, task: &TaskReport) {
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
    let _ = writeln!(
        out,
        "<tr data-row=\"{index}\" class=\"{state}\" tabindex=\"0\"><td class=\"id\">{id}</td><td>{labels}</td>\
         <td class=\"state\">{state}</td><td class=\"text\">{shown}</td><td class=\"num\">{cost}</td><td class=\"num\">{latency}</td></tr>",
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
";

/// Opens a row's details from the JSON block on click or Enter (and the row
/// named by `#task=ID` at load), filters rows by text. Text is only ever
/// set through `textContent`.
const SCRIPT: &str = r#"
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('lllm-data').textContent);
  var body = document.querySelector('#tasks tbody');
  var columns = document.querySelectorAll('#tasks thead th').length;
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
      cell.appendChild(heading);
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
  shown.textContent = rows.length + ' rows';
  document.getElementById('filter').addEventListener('input', function (event) {
    var query = event.target.value.toLowerCase();
    var count = 0;
    body.querySelectorAll('tr.detail').forEach(function (detail) { detail.remove(); });
    rows.forEach(function (row) {
      var match = !query || row.textContent.toLowerCase().indexOf(query) !== -1;
      row.hidden = !match;
      if (match) count += 1;
    });
    shown.textContent = count + ' of ' + rows.length + ' rows';
  });
  var wanted = /^#task=(.*)$/.exec(location.hash);
  if (wanted) {
    var id = decodeURIComponent(wanted[1]);
    rows.forEach(function (row) {
      if (row.querySelector('td.id').textContent === id) toggle(row);
    });
  }
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
