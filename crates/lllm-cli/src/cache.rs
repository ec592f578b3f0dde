//! `lllm cache`: the session store's response cache (`lllm::store::Cache`)
//! looked at and emptied. `stats` counts what it holds and what it saved;
//! `clear` removes every reply, or those past their time to live.

use std::fmt::Write;

use lllm::error::{Error, Outcome, Result};
use lllm::redact::echo;
use lllm::store::{Cache, CacheStats};

use crate::logs::Place;
use crate::table::{Align, Table};

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub command: CacheCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// What the cache holds: replies, bytes, hits, dollars saved, per model.
    Stats(StatsArgs),
    /// Remove every reply (or, with `--expired`, those past their time to live).
    Clear(ClearArgs),
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub place: Place,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ClearArgs {
    #[command(flatten)]
    pub place: Place,
    /// Only the replies past their time to live (`cache_ttl_s`).
    #[arg(long)]
    pub expired: bool,
    /// One JSON object (`{"removed": N}`) instead of the sentence.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CacheArgs) -> Result<Outcome> {
    match args.command {
        CacheCommand::Stats(args) => stats(args),
        CacheCommand::Clear(args) => clear(args),
    }
}

/// The cache of the store `place` names; `None` when there is none yet
/// (nothing was ever cached there), which both commands report as empty.
fn open(place: &Place) -> Result<(std::path::PathBuf, Option<Cache>)> {
    let Some(dir) = place.store.clone().or_else(crate::store::default_dir) else {
        return Err(Error::Usage(format!(
            "no session store: {}",
            crate::store::NO_STORE_DIR
        )));
    };
    let cache = Cache::open_existing(&dir).map_err(|error| Error::Usage(error.to_string()))?;
    Ok((dir, cache))
}

fn stats(args: StatsArgs) -> Result<Outcome> {
    let (dir, cache) = open(&args.place)?;
    let stats = match &cache {
        Some(cache) => cache
            .stats()
            .map_err(|error| Error::Usage(error.to_string()))?,
        None => CacheStats {
            path: dir.join(lllm::store::CACHE_FILE).display().to_string(),
            entries: 0,
            expired: 0,
            bytes: 0,
            hits: 0,
            saved_usd: 0.0,
            oldest: None,
            newest: None,
            models: Vec::new(),
        },
    };
    if args.json {
        let json =
            serde_json::to_string(&stats).map_err(|error| Error::Usage(error.to_string()))?;
        lllm::output::stdout(&format!("{json}\n"))?;
    } else {
        lllm::output::stdout(&table(&stats))?;
    }
    Ok(Outcome::Success)
}

fn table(stats: &CacheStats) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "cache    {}",
        lllm::redact::terminal_line(&stats.path)
    );
    let _ = writeln!(
        text,
        "replies  {} ({} expired) · {}",
        stats.entries,
        stats.expired,
        bytes(stats.bytes)
    );
    let _ = writeln!(
        text,
        "hits     {} · saved ${:.6}",
        stats.hits, stats.saved_usd
    );
    if let (Some(oldest), Some(newest)) = (&stats.oldest, &stats.newest) {
        let _ = writeln!(text, "stored   {} … {}", echo(oldest), echo(newest));
    }
    if !stats.models.is_empty() {
        let mut table = Table::new(&[Align::Left, Align::Right, Align::Right, Align::Right]);
        table.row(["model", "replies", "hits", "saved"]);
        for model in &stats.models {
            table.row([
                format!("{}/{}", model.provider, model.model),
                model.entries.to_string(),
                model.hits.to_string(),
                format!("${:.6}", model.saved_usd),
            ]);
        }
        text.push('\n');
        text.push_str(&table.render());
    }
    text
}

fn bytes(count: u64) -> String {
    match count {
        0..1_000 => format!("{count} B"),
        1_000..1_000_000 => format!("{:.1} kB", count as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", count as f64 / 1e6),
        _ => format!("{:.1} GB", count as f64 / 1e9),
    }
}

fn clear(args: ClearArgs) -> Result<Outcome> {
    let (_, cache) = open(&args.place)?;
    let removed = match &cache {
        Some(cache) => cache
            .clear(args.expired)
            .map_err(|error| Error::Usage(error.to_string()))?,
        None => 0,
    };
    if args.json {
        lllm::output::stdout(&format!("{{\"removed\":{removed}}}\n"))?;
    } else {
        let what = if args.expired { "expired " } else { "" };
        let noun = if removed == 1 { "reply" } else { "replies" };
        lllm::output::stderr_line(&format!("lllm: removed {removed} {what}cached {noun}"));
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_500), "1.5 kB");
        assert_eq!(bytes(2_000_000), "2.0 MB");
        assert_eq!(bytes(3_000_000_000), "3.0 GB");
    }
}
