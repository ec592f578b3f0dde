//! The session store at scale: fills a store with synthetic sessions and
//! times what `lllm logs` asks of it.
//!
//! ```text
//! cargo run --release --example logs_bench -- [SESSIONS] [DIR]
//! ```
//!
//! SESSIONS defaults to 1,000,000 (0: time the queries of the store already
//! in DIR); DIR to a fresh temporary directory. It
//! prints the registering rate (a transaction per 1,000 sessions, as a batch
//! registers), then the time of each query, best of five.

use std::path::PathBuf;
use std::time::Instant;

use lllm::store::{Entry, Filter, GroupBy, ModelUse, RecordPlace, Store};
use serde_json::{Map, Value};

const WORDS: [&str; 16] = [
    "owl", "wolf", "river", "summary", "invoice", "paris", "quantum", "recipe", "bug", "report",
    "garden", "engine", "poem", "table", "market", "storm",
];

fn entry(i: u64, rng: &mut fastrand::Rng) -> Entry {
    let words = |rng: &mut fastrand::Rng, n: usize| -> String {
        (0..n)
            .map(|_| WORDS[rng.usize(..WORDS.len())].to_string() + &rng.u32(..5000).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Sixty days of sessions, in order.
    let started = chrono::DateTime::from_timestamp(1_760_000_000 + (i as i64) * 5, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut tags = Map::new();
    tags.insert(
        "team".into(),
        Value::String(format!("team{}", rng.u32(..10))),
    );
    tags.insert("run".into(), Value::String(format!("run{}", i / 1000)));
    let model = [
        "openai/gpt-4o-mini",
        "anthropic/claude-sonnet-4",
        "openai/gpt-4.1",
    ][rng.usize(..3)];
    let failed = rng.u32(..20) == 0;
    Entry {
        session_id: format!("{i:016x}-bench"),
        tactic: format!("tactic{}", rng.u32(..5)),
        tactic_path: "tactics/t.yaml".into(),
        task_id: Some(format!("t{i}")),
        tags,
        metadata: Map::new(),
        state: if failed { "failure" } else { "success" }.into(),
        models: vec![ModelUse {
            model: model.into(),
            total_tokens: 1200,
            cost: Some(0.0012),
        }],
        prompt_tokens: 1000,
        completion_tokens: 200,
        total_tokens: 1200,
        cost: Some(0.0012),
        cost_known: true,
        ended_at: started.clone(),
        started_at: started,
        latency_ms: 900,
        task: words(rng, 12),
        delivery: (!failed).then(|| words(rng, 30)),
        error: failed.then(|| "HTTP 500".to_string()),
        place: RecordPlace::Line {
            path: PathBuf::from("/data/run/sessions.jsonl"),
            offset: i * 4096,
        },
        trace_id: None,
    }
}

fn time<T>(label: &str, mut query: impl FnMut() -> T, size: impl Fn(&T) -> usize) {
    let mut best = f64::MAX;
    let mut found = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let result = query();
        best = best.min(started.elapsed().as_secs_f64() * 1000.0);
        found = size(&result);
    }
    println!("{label:<40} {best:>9.2} ms  ({found} rows)");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u64 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let temporary = tempfile::tempdir()?;
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_path_buf());
    let mut store = Store::open(&dir)?;
    let mut rng = fastrand::Rng::with_seed(7);
    let started = Instant::now();
    let mut chunk = Vec::with_capacity(1000);
    for i in 0..count {
        chunk.push(entry(i, &mut rng));
        if chunk.len() == 1000 {
            store.register(&chunk)?;
            chunk.clear();
        }
        if (i + 1) % 100_000 == 0 {
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "registered {:>9} sessions in {seconds:>7.1} s ({:.0}/s)",
                i + 1,
                (i + 1) as f64 / seconds
            );
        }
    }
    if !chunk.is_empty() {
        store.register(&chunk)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "registered {count} sessions in {seconds:.1} s ({:.0}/s)",
        count as f64 / seconds
    );
    // Text is indexed when a search first needs it; here from the rows'
    // previews (these sessions have no records), as a search would.
    let started = Instant::now();
    let indexed = store.index_text()?;
    println!(
        "text of {} sessions indexed in {:.1} s (first search's catch-up)",
        indexed.sessions,
        started.elapsed().as_secs_f64()
    );
    if count > 0 {
        let size = std::fs::metadata(store.path())?.len()
            + std::fs::metadata(store.path().with_extension("sqlite-wal")).map_or(0, |m| m.len());
        println!(
            "index size {:.0} MiB ({} bytes per session)",
            size as f64 / 1048576.0,
            size / count.max(1)
        );
    }
    let all = Filter::default();
    time(
        "logs -n 20",
        || store.list(&all, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let tag = Filter {
        tags: vec![("team".into(), "team3".into())],
        ..Filter::default()
    };
    time(
        "logs --tag team=team3",
        || store.list(&tag, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let run = Filter {
        tags: vec![("run".into(), "run17".into())],
        ..Filter::default()
    };
    time(
        "logs --tag run=run17 (1,000 sessions)",
        || store.list(&run, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let state = Filter {
        state: Some("failure".into()),
        ..Filter::default()
    };
    time(
        "logs --state failure",
        || store.list(&state, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let model = Filter {
        model: Some("openai/gpt-4.1".into()),
        ..Filter::default()
    };
    time(
        "logs --model openai/gpt-4.1",
        || store.list(&model, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let text = Filter {
        text: Some("quantum42".into()),
        ..Filter::default()
    };
    time(
        "logs -q quantum42 (FTS5)",
        || store.list(&text, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let common = Filter {
        text: Some("owl".into()),
        ..Filter::default()
    };
    time(
        "logs -q owl (no match, whole words)",
        || store.list(&common, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    let since = Filter {
        since: lllm::store::parse_since("2025-10-20", chrono::Utc::now()).ok(),
        ..Filter::default()
    };
    time(
        "logs --since 2025-10-20",
        || store.list(&since, 20),
        |r| r.as_ref().map_or(0, Vec::len),
    );
    time(
        "logs cost --by day",
        || store.cost(&all, &GroupBy::Day),
        |r| r.as_ref().map_or(0, |g| g.rows.len()),
    );
    time(
        "logs cost --by tactic",
        || store.cost(&all, &GroupBy::Tactic),
        |r| r.as_ref().map_or(0, |g| g.rows.len()),
    );
    time(
        "logs cost --by day --tag run=run17",
        || store.cost(&run, &GroupBy::Day),
        |r| r.as_ref().map_or(0, |g| g.rows.len()),
    );
    Ok(())
}
