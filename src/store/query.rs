//! Reading the index: the newest sessions that pass a [`Filter`], and cost
//! totals grouped by tactic, model, tag or day. Every filter is a condition
//! on an indexed column (or the full-text index for text), so a listing at a
//! million sessions reads a few pages, not the table.

use rusqlite::types::Value as SqlValue;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{Result, Store, StoreError};

/// Which sessions to list or total: every field set must hold (AND).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The tactic's name.
    pub tactic: Option<String>,
    /// `success` or `failure`.
    pub state: Option<String>,
    /// `(key, value)` pairs, each of which the session's tags must hold.
    pub tags: Vec<(String, String)>,
    /// A model (`provider/model`) one of its calls used.
    pub model: Option<String>,
    /// Started at or after this RFC 3339 time (see [`parse_since`]).
    pub since: Option<String>,
    /// Started before this time.
    pub until: Option<String>,
    /// Words in the task or the delivery (SQLite full-text search: every word
    /// must appear; `"a phrase"` in quotes matches the phrase).
    pub text: Option<String>,
    /// The trace the run belonged to (32 hex digits, its record's
    /// `trace.trace_id`).
    pub trace_id: Option<String>,
}

/// One listed session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listed {
    /// The session id (a UUID v7).
    pub session_id: String,
    /// The tactic's name.
    pub tactic: String,
    /// The tactic file, as the run was given it.
    pub tactic_path: String,
    /// The task's id (a batch line's `id`).
    pub task_id: Option<String>,
    /// `success` or `failure`.
    pub state: String,
    /// The models its calls used.
    pub models: Vec<String>,
    /// Prompt tokens of every call.
    pub prompt_tokens: u64,
    /// Completion tokens of every call.
    pub completion_tokens: u64,
    /// Tokens of every call.
    pub total_tokens: u64,
    /// Dollars (`None` when no price was known).
    pub cost: Option<f64>,
    /// Whether `cost` is the whole of it.
    pub cost_known: bool,
    /// When the run began (RFC 3339, UTC, milliseconds).
    pub started_at: String,
    /// When it ended.
    pub ended_at: String,
    /// Milliseconds from start to end.
    pub latency_ms: u64,
    /// The task's tags.
    pub tags: Map<String, Value>,
    /// The task's metadata.
    pub metadata: Map<String, Value>,
    /// The task's first 200 characters.
    pub task: String,
    /// The delivery's first 200 characters.
    pub delivery: Option<String>,
    /// The error's first 200 characters.
    pub error: Option<String>,
    /// The record file (a `.json` file or a `sessions.jsonl`); a path that
    /// is not UTF-8 has U+FFFD for the bytes that are not (`logs show`
    /// reads the file by its bytes).
    pub record_path: String,
    /// The line's byte offset in a `sessions.jsonl` (in a
    /// `sessions.jsonl.zst`, its frame's offset and its offset in the frame,
    /// `crate::jsonl::pack`ed); absent for a `.json` file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_offset: Option<u64>,
}

/// What [`Store::cost`] groups by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    /// The tactic's name.
    Tactic,
    /// Each model's own calls (a session of two models counts in both,
    /// with its calls' share).
    Model,
    /// A tag's value (`tag:KEY`); sessions without it are grouped under `""`.
    Tag(String),
    /// The UTC day the session started.
    Day,
}

impl GroupBy {
    /// `tactic`, `model`, `tag:KEY` or `day`.
    pub fn parse(text: &str) -> Result<GroupBy> {
        match text {
            "tactic" => Ok(GroupBy::Tactic),
            "model" => Ok(GroupBy::Model),
            "day" => Ok(GroupBy::Day),
            _ => match text.strip_prefix("tag:") {
                Some(key) if !key.is_empty() => Ok(GroupBy::Tag(key.to_string())),
                _ => Err(StoreError::Filter(format!(
                    "`--by {}`: group by `tactic`, `model`, `tag:KEY` or `day`",
                    crate::redact::echo(text)
                ))),
            },
        }
    }
}

/// One group's totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostRow {
    /// The group's value (a tactic, a model, a tag value, a day).
    pub group: String,
    /// Sessions in the group.
    pub sessions: u64,
    /// Of which failed.
    pub failures: u64,
    /// Of which a batch skipped after they started (cancelled, or stopped
    /// by its budget): neither a success nor a failure.
    pub skipped: u64,
    /// Tokens of every call.
    pub total_tokens: u64,
    /// Dollars of the sessions whose cost is known.
    pub cost: f64,
    /// Sessions in the group whose cost was not (wholly) known.
    pub cost_unknown: u64,
}

/// What [`Store::cost`] returns: a row per group, largest cost first, and the total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostGroup {
    /// One row per group.
    pub rows: Vec<CostRow>,
    /// The totals of every session that passed the filter, each counted once.
    pub total: CostRow,
}

/// [`parse_since`] with the current time.
pub fn parse_time(text: &str) -> Result<String> {
    parse_since(text, chrono::Utc::now())
}

/// A time bound: RFC 3339 (`2026-11-20T08:00:00Z`, or a date `2026-11-20`
/// for its midnight UTC), or an age before `now`: a number and a unit, `s`,
/// `m`, `h`, `d` or `w` (`30m`, `2h`, `7d`). Returns the time as records
/// write it (UTC, milliseconds), which compares as text.
///
/// ```
/// let now = chrono::DateTime::parse_from_rfc3339("2026-11-24T12:00:00Z").unwrap().to_utc();
/// assert_eq!(lllm::store::parse_since("2h", now).unwrap(), "2026-11-24T10:00:00.000Z");
/// assert_eq!(lllm::store::parse_since("2026-11-20", now).unwrap(), "2026-11-20T00:00:00.000Z");
/// assert!(lllm::store::parse_since("yesterday", now).is_err());
/// ```
pub fn parse_since(text: &str, now: chrono::DateTime<chrono::Utc>) -> Result<String> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(crate::time::format_timestamp(time.to_utc()));
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
        return Ok(crate::time::format_timestamp(midnight));
    }
    let bad = || {
        StoreError::Filter(format!(
            "`{}` is not a time: give RFC 3339 (`2026-11-20T08:00:00Z`), a date \
             (`2026-11-20`) or an age (`30m`, `2h`, `7d`, `2w`)",
            crate::redact::echo(text)
        ))
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    let age = number
        .checked_mul(seconds)
        .and_then(chrono::TimeDelta::try_seconds)
        .ok_or_else(bad)?;
    let time = now.checked_sub_signed(age).ok_or_else(bad)?;
    Ok(crate::time::format_timestamp(time))
}

/// Tag or model rows past which a listing tests each session (newest
/// first) rather than gathering the matching ones and sorting them.
const DENSE: i64 = 10_000;

/// The `WHERE` clause of `filter` (on `sessions s`) and its parameters.
/// `dense`: the tag and model conditions are tested per session (`EXISTS`),
/// which suits a value many sessions have when only the newest are wanted;
/// otherwise the matching sessions are looked up first (`IN`), which suits a
/// rare value and totals over every match.
fn condition(filter: &Filter, dense: bool) -> (String, Vec<SqlValue>) {
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<SqlValue> = Vec::new();
    let bind = |values: &mut Vec<SqlValue>, value: &str| {
        values.push(SqlValue::Text(value.to_string()));
        format!("?{}", values.len())
    };
    if let Some(tactic) = &filter.tactic {
        clauses.push(format!("s.tactic = {}", bind(&mut values, tactic)));
    }
    if let Some(state) = &filter.state {
        clauses.push(format!("s.state = {}", bind(&mut values, state)));
    }
    for (key, value) in &filter.tags {
        let key = bind(&mut values, key);
        let value = bind(&mut values, value);
        clauses.push(if dense {
            format!(
                "EXISTS (SELECT 1 FROM session_tags t WHERE t.session = s.id \
                 AND t.key = {key} AND t.value = {value})"
            )
        } else {
            format!(
                "s.id IN (SELECT session FROM session_tags WHERE key = {key} AND value = {value})"
            )
        });
    }
    if let Some(model) = &filter.model {
        let model = bind(&mut values, model);
        clauses.push(if dense {
            format!(
                "EXISTS (SELECT 1 FROM session_models m WHERE m.session = s.id AND m.model = {model})"
            )
        } else {
            format!("s.id IN (SELECT session FROM session_models WHERE model = {model})")
        });
    }
    if let Some(trace_id) = &filter.trace_id {
        let trace_id = bind(&mut values, trace_id);
        clauses.push(format!("s.trace_id = {trace_id}"));
    }
    if let Some(since) = &filter.since {
        clauses.push(format!("s.started_at >= {}", bind(&mut values, since)));
    }
    if let Some(until) = &filter.until {
        clauses.push(format!("s.started_at < {}", bind(&mut values, until)));
    }
    if let Some(text) = &filter.text {
        clauses.push(format!(
            "s.id IN (SELECT rowid FROM sessions_text WHERE sessions_text MATCH {})",
            bind(&mut values, &fts_query(text))
        ));
    }
    let clause = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    (clause, values)
}

/// The user's words as an FTS5 query: each word (or `"quoted phrase"`) a
/// string of its own, so punctuation is never FTS5 syntax.
fn fts_query(text: &str) -> String {
    let mut terms = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        rest = &rest[start..];
        let (term, after) = match rest.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        if !term.is_empty() {
            terms.push(format!("\"{}\"", term.replace('"', "\"\"")));
        }
        rest = after;
    }
    if terms.is_empty() {
        "\"\"".into()
    } else {
        terms.join(" ")
    }
}

const COLUMNS: &str = "s.session_id, s.tactic, s.tactic_path, s.task_id, s.state, s.models, \
     s.prompt_tokens, s.completion_tokens, s.total_tokens, s.cost, s.cost_known, s.started_at, \
     s.ended_at, s.latency_ms, s.tags, s.metadata, s.task, s.delivery, s.error, s.record_path, \
     s.record_offset";

fn object(text: String) -> Map<String, Value> {
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

impl Store {
    /// The newest `limit` sessions that pass `filter`, newest first.
    pub fn list(&self, filter: &Filter, limit: usize) -> Result<Vec<Listed>> {
        self.text_ready(filter)?;
        let (clause, mut values) = condition(filter, self.dense(filter, limit)?);
        values.push(SqlValue::Integer(limit.min(i64::MAX as usize) as i64));
        let sql = format!(
            "SELECT {COLUMNS} FROM sessions s {clause} ORDER BY s.started_at DESC, s.session_id DESC LIMIT ?{}",
            values.len()
        );
        let mut statement = self
            .connection
            .prepare(&sql)
            .map_err(|error| self.sql(error))?;
        let rows = statement
            .query_map(rusqlite::params_from_iter(values), |row| {
                let models: String = row.get(5)?;
                Ok(Listed {
                    session_id: row.get(0)?,
                    tactic: row.get(1)?,
                    tactic_path: row.get(2)?,
                    task_id: row.get(3)?,
                    state: row.get(4)?,
                    models: models.split_whitespace().map(str::to_string).collect(),
                    prompt_tokens: row.get::<_, i64>(6)? as u64,
                    completion_tokens: row.get::<_, i64>(7)? as u64,
                    total_tokens: row.get::<_, i64>(8)? as u64,
                    cost: row.get(9)?,
                    cost_known: row.get(10)?,
                    started_at: row.get(11)?,
                    ended_at: row.get(12)?,
                    latency_ms: row.get::<_, i64>(13)? as u64,
                    tags: object(row.get(14)?),
                    metadata: object(row.get(15)?),
                    task: row.get(16)?,
                    delivery: row.get(17)?,
                    error: row.get(18)?,
                    record_path: row.get::<_, super::paths::PathText>(19)?.0,
                    record_offset: row.get::<_, Option<i64>>(20)?.map(|offset| offset as u64),
                })
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<Listed>>>)
            .map_err(|error| self.sql(error))?;
        Ok(rows)
    }

    /// Before a text search: the text of every session registered since the
    /// last one is indexed (a program wanting the problems, or a note while
    /// it takes, calls [`Store::index_text`] first).
    fn text_ready(&self, filter: &Filter) -> Result<()> {
        if filter.text.is_some() {
            self.index_text()?;
        }
        Ok(())
    }

    /// Whether every tag and model of `filter` is common enough (more than
    /// [`DENSE`] rows, and many more than `limit`) that testing sessions
    /// newest first finds `limit` of them sooner than sorting every match.
    fn dense(&self, filter: &Filter, limit: usize) -> Result<bool> {
        if filter.tags.is_empty() && filter.model.is_none() {
            return Ok(false);
        }
        let rows = |sql: &str, values: &[&str]| -> Result<i64> {
            self.connection
                .query_row(sql, rusqlite::params_from_iter(values), |row| row.get(0))
                .map_err(|error| self.sql(error))
        };
        let enough = DENSE.max(limit.saturating_mul(100).min(i64::MAX as usize) as i64);
        for (key, value) in &filter.tags {
            let sql = format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM session_tags WHERE key = ?1 AND value = ?2 LIMIT {enough})"
            );
            if rows(&sql, &[key, value])? < enough {
                return Ok(false);
            }
        }
        if let Some(model) = &filter.model {
            let sql = format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM session_models WHERE model = ?1 LIMIT {enough})"
            );
            if rows(&sql, &[model])? < enough {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Cost totals of the sessions that pass `filter`, grouped `by`.
    pub fn cost(&self, filter: &Filter, by: &GroupBy) -> Result<CostGroup> {
        self.text_ready(filter)?;
        let (clause, mut values) = condition(filter, false);
        // Tokens summed with TOTAL (a float): SQLite's SUM of integers fails
        // with "integer overflow" past i64::MAX, which large counts of old
        // records reach; the float saturates when read back.
        let sums = "COUNT(*), SUM(s.state = 'failure'), \
                    TOTAL(s.total_tokens), TOTAL(s.cost), SUM(NOT s.cost_known OR s.cost IS NULL), \
                    SUM(s.state = 'skipped')";
        let sql = match by {
            GroupBy::Tactic => {
                format!("SELECT s.tactic, {sums} FROM sessions s {clause} GROUP BY 1")
            }
            GroupBy::Day => format!(
                "SELECT substr(s.started_at, 1, 10), {sums} FROM sessions s {clause} GROUP BY 1"
            ),
            GroupBy::Tag(key) => {
                values.push(SqlValue::Text(key.clone()));
                format!(
                    "SELECT COALESCE(t.value, ''), {sums} FROM sessions s \
                     LEFT JOIN session_tags t ON t.session = s.id AND t.key = ?{} {clause} GROUP BY 1",
                    values.len()
                )
            }
            GroupBy::Model => format!(
                "SELECT m.model, COUNT(*), SUM(s.state = 'failure'), TOTAL(m.total_tokens), \
                 TOTAL(m.cost), SUM(NOT s.cost_known OR m.cost IS NULL), \
                 SUM(s.state = 'skipped') FROM sessions s \
                 JOIN session_models m ON m.session = s.id {clause} GROUP BY 1"
            ),
        };
        let read = |row: &rusqlite::Row| -> rusqlite::Result<CostRow> {
            Ok(CostRow {
                group: row.get::<_, Option<String>>(0)?.unwrap_or_default(),
                sessions: row.get::<_, i64>(1)? as u64,
                failures: row.get::<_, Option<i64>>(2)?.unwrap_or(0) as u64,
                // `as` saturates: a float past u64::MAX reads as u64::MAX.
                total_tokens: row.get::<_, f64>(3)? as u64,
                cost: row.get::<_, f64>(4)?,
                cost_unknown: row.get::<_, Option<i64>>(5)?.unwrap_or(0) as u64,
                skipped: row.get::<_, Option<i64>>(6)?.unwrap_or(0) as u64,
            })
        };
        let mut statement = self
            .connection
            .prepare(&sql)
            .map_err(|error| self.sql(error))?;
        let mut rows = statement
            .query_map(rusqlite::params_from_iter(values.iter()), read)
            .and_then(Iterator::collect::<rusqlite::Result<Vec<CostRow>>>)
            .map_err(|error| self.sql(error))?;
        rows.sort_by(|a, b| {
            if *by == GroupBy::Day {
                a.group.cmp(&b.group)
            } else {
                b.cost
                    .total_cmp(&a.cost)
                    .then_with(|| a.group.cmp(&b.group))
            }
        });
        // The total counts each session once, whatever the grouping.
        let (clause, values) = condition(filter, false);
        let sql = format!("SELECT 'total', {sums} FROM sessions s {clause}");
        let total = self
            .connection
            .query_row(&sql, rusqlite::params_from_iter(values), read)
            .map_err(|error| self.sql(error))?;
        Ok(CostGroup { rows, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_become_quoted_terms() {
        assert_eq!(fts_query("owl"), "\"owl\"");
        assert_eq!(fts_query(" big  owl "), "\"big\" \"owl\"");
        assert_eq!(fts_query("\"snowy owl\" AND"), "\"snowy owl\" \"AND\"");
        assert_eq!(fts_query("a\"b"), "\"a\"\"b\"");
        assert_eq!(fts_query(""), "\"\"");
    }

    /// A tag most sessions have is tested newest first, a rare one looked
    /// up first: both give the same newest sessions.
    #[test]
    fn common_and_rare_tags_list_the_same_newest_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let entries: Vec<super::super::Entry> = (0..DENSE * 2)
            .map(|i| {
                let mut tags = Map::new();
                tags.insert(
                    "kind".into(),
                    Value::String(if i % 7 == 0 { "rare" } else { "common" }.into()),
                );
                super::super::Entry {
                    tags,
                    ..super::super::Entry::for_test(
                        &format!("{i:08}"),
                        &format!("task {i}"),
                        format!("2026-01-01T00:00:{:02}.{:03}Z", i / 1000 % 60, i % 1000),
                        super::super::RecordPlace::File("x.json".into()),
                    )
                }
            })
            .collect();
        store.register(&entries).unwrap();
        for kind in ["common", "rare"] {
            let filter = Filter {
                tags: vec![("kind".into(), kind.into())],
                ..Filter::default()
            };
            let listed: Vec<String> = store
                .list(&filter, 5)
                .unwrap()
                .into_iter()
                .map(|session| session.session_id)
                .collect();
            let expected: Vec<String> = entries
                .iter()
                .rev()
                .filter(|entry| entry.tags["kind"] == kind)
                .take(5)
                .map(|entry| entry.session_id.clone())
                .collect();
            assert_eq!(listed, expected, "{kind}");
        }
        let common = Filter {
            tags: vec![("kind".into(), "common".into())],
            ..Filter::default()
        };
        assert!(store.dense(&common, 5).unwrap());
    }

    #[test]
    fn huge_token_counts_of_old_records_saturate_in_sums() {
        // Counts of records written before they were clamped: `as i64` made
        // u64::MAX a -1, and SQLite's SUM failed with "integer overflow".
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let entries: Vec<super::super::Entry> = (0..3)
            .map(|i| super::super::Entry {
                total_tokens: u64::MAX,
                models: vec![super::super::ModelUse {
                    model: "op/m".into(),
                    total_tokens: u64::MAX,
                    cost: Some(1.0),
                }],
                ..super::super::Entry::for_test(
                    &format!("s{i}"),
                    "task",
                    format!("2026-01-01T00:00:0{i}.000Z"),
                    super::super::RecordPlace::File("x.json".into()),
                )
            })
            .collect();
        store.register(&entries).unwrap();
        for by in [GroupBy::Tactic, GroupBy::Model] {
            let group = store.cost(&Filter::default(), &by).unwrap();
            assert_eq!(group.total.sessions, 3);
            assert_eq!(group.total.total_tokens, u64::MAX, "{by:?}");
            assert_eq!(group.rows[0].total_tokens, u64::MAX, "{by:?}");
        }
        let listed = store.list(&Filter::default(), 1).unwrap();
        assert_eq!(listed[0].total_tokens, i64::MAX as u64, "never negative");
    }

    #[test]
    fn group_by_parses() {
        assert_eq!(
            GroupBy::parse("tag:team").unwrap(),
            GroupBy::Tag("team".into())
        );
        assert!(GroupBy::parse("tag:").is_err());
        assert!(GroupBy::parse("week").is_err());
    }
}
