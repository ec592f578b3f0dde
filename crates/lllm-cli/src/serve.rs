//! `lllm serve`: tactics behind HTTP (docs/serve.md). This file reads the
//! flags, loads each tactic once (every check of `lllm run`'s pre-flight
//! that needs no task), refuses what cannot be served (two tactics of one
//! name, a name that is not a path segment, a non-loopback address without
//! a token) with exit 2 before anything is bound, prints
//! `listening on http://HOST:PORT` as its first stdout line and hands over
//! to `lllm_serve`, which owns HTTP. Ctrl-C or SIGTERM stops accepting and
//! drains the runs in flight, records written, before exit 0.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lllm::error::{Error, Outcome, Result};

use crate::numbers;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The tactic YAML files to serve (each under its name, `tactic_type`).
    #[arg(value_name = "TACTIC", required = true)]
    pub tactics: Vec<PathBuf>,
    /// The address to listen on: an IP address or `localhost`. Any other
    /// than a loopback address needs a token (`--token-file` or
    /// `LLLM_SERVE_TOKEN`).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0: a free one, shown in the first line of stdout).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// A file holding the bearer token every route but `/health` requires
    /// (its first line; over `LLLM_SERVE_TOKEN`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The most the server spends, in USD, over all calls; then every call
    /// is answered 429 (`BudgetExceeded`). Needs a price and an output
    /// bound for every model, as `lllm batch --max-cost` does.
    #[arg(long, value_name = "USD", value_parser = numbers::max_cost, allow_negative_numbers = true)]
    pub max_cost: Option<f64>,
    /// Runs at once, all routes together; one more is answered 429 with
    /// `Retry-After: 1` (1 to 100000).
    #[arg(long, value_name = "N", default_value_t = lllm_serve::Limits::CONCURRENCY, value_parser = numbers::concurrency)]
    pub concurrency: usize,
    /// The largest request body, in bytes (1024 to 67108864); 413 beyond it.
    #[arg(long, value_name = "BYTES", default_value_t = lllm_serve::Limits::MAX_BODY, value_parser = numbers::max_body)]
    pub max_body: usize,
    /// How long one request may take, in seconds (1 to 86400); then it is
    /// answered 504, or its stream ends with an `error` event.
    #[arg(long, value_name = "SECONDS", default_value_t = lllm_serve::Limits::TIMEOUT.as_secs(), value_parser = numbers::timeout)]
    pub timeout: u64,
    /// Use this model (`provider/model`) for every agent of every tactic.
    #[arg(long, short)]
    pub model: Option<String>,
    /// A model argument over the tactics' (repeatable), as `lllm run -O`.
    #[arg(long = "model-arg", short = 'O', value_name = "KEY=VALUE")]
    pub model_args: Vec<String>,
    /// Prices to use over the bundled table [default: the config file's `prices`].
    #[arg(long, value_name = "FILE", env = "LLLM_PRICES")]
    pub prices: Option<PathBuf>,
    /// Write no session records.
    #[arg(long)]
    pub no_record: bool,
    /// Answer `GET /metrics` (Prometheus text) without the token, for a
    /// scraper that cannot send one; it needs the token by default.
    #[arg(long)]
    pub metrics_public: bool,
    /// No line on stderr but errors.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub store: crate::store::StoreArgs,
}

/// The variable holding the token when no `--token-file` is given.
const TOKEN_VARIABLE: &str = "LLLM_SERVE_TOKEN";

/// The largest token file read.
const TOKEN_FILE_CAP: u64 = 64 << 10;

pub async fn run(args: ServeArgs, registry: &lllm::Registry) -> Result<Outcome> {
    let settings = crate::settings::current();
    let defaults = settings.defaults();
    let ip = host(&args.host)?;
    let token = token(&args, &settings)?;
    if !ip.is_loopback() && token.is_none() {
        return Err(Error::Usage(format!(
            "--host {}: serving beyond this machine needs a token; hint: `--token-file FILE` or \
             `{TOKEN_VARIABLE}`",
            lllm::redact::echo(&args.host)
        )));
    }
    let prices = match &settings.prices(args.prices.as_deref()) {
        Some(path) => Some(lllm::provider::models::read_price_file(path).map_err(Error::Usage)?),
        None => None,
    };
    let model_args = crate::run::model_args(&args.model_args)?;
    let budget = args
        .max_cost
        .map(|max| Arc::new(lllm::provider::budget::CostBudget::new(max, 0.0)));
    let cache = args.store.cache_source();
    let env = |name: &str| settings.environment.var(name);
    let options = lllm::tactic::LoadOptions {
        model: args.model.as_deref(),
        model_args: Some(&model_args),
        prices: prices.as_ref(),
        env: &env,
        dry_run: None,
        warn: &|warning| lllm::report::warn(warning),
        budget: budget.clone(),
        registry,
        cache: Some(cache.clone()),
        batch_api: None,
        defaults: Some(&defaults),
    };
    // Every file's problems at once, each under its file's name.
    let mut tactics = Vec::new();
    let mut problems = Vec::new();
    for path in &args.tactics {
        match lllm::tactic::load(path, &options, None) {
            Ok(tactic) => tactics.push(tactic),
            Err(error) => problems.push(error.to_string()),
        }
    }
    if !problems.is_empty() {
        return Err(Error::Usage(problems.join("\n")));
    }
    lllm_serve::check_names(&tactics).map_err(Error::Usage)?;
    for tactic in &tactics {
        if let Err(error) = tactic.start().await {
            shutdown(&tactics).await;
            return Err(error.into());
        }
    }
    let address = SocketAddr::new(ip, args.port);
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(error) => {
            shutdown(&tactics).await;
            return Err(Error::Usage(format!("cannot listen on {address}: {error}")));
        }
    };
    let bound = listener.local_addr().unwrap_or(address);
    // The handlers are installed before the address is printed: a SIGTERM
    // sent as soon as a supervisor reads it stops the server gracefully
    // instead of killing it.
    let signal = lllm::batch::scheduler::stop_signal();
    lllm::output::stdout(&format!("listening on http://{bound}\n"))?;
    let store = args.store.dir();
    lllm::report::remember_in(store.as_deref());
    let records = (!args.no_record).then(|| settings.records_dir(args.store.store.as_deref()));
    let served = lllm_serve::Options {
        tactics: tactics.clone(),
        token,
        limits: lllm_serve::Limits {
            max_body: args.max_body,
            timeout: Duration::from_secs(args.timeout),
            concurrency: args.concurrency,
        },
        records,
        store,
        budget,
        tags: crate::store::pairs("--tag", &args.store.tags)?,
        metadata: crate::store::pairs("--meta", &args.store.metadata)?,
        metrics_public: args.metrics_public,
    };
    let quiet = args.quiet;
    let stop = async move {
        if signal.await.is_err() {
            std::future::pending::<()>().await;
        }
        if !quiet {
            lllm::output::stderr_line(
                "lllm serve: stopping: no new connections; the runs in flight finish and their \
                 records are written",
            );
        }
    };
    let served = lllm_serve::serve(listener, served, stop).await;
    shutdown(&tactics).await;
    cache.flush();
    served.map_err(|error| Error::Usage(format!("the server stopped: {error}")))?;
    Ok(Outcome::Success)
}

async fn shutdown(tactics: &[lllm::Tactic]) {
    for tactic in tactics {
        tactic.shutdown().await;
    }
}

/// `--host`: an IP address, or `localhost` (127.0.0.1).
fn host(text: &str) -> Result<IpAddr> {
    if text.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    bare.parse().map_err(|_| {
        Error::Usage(format!(
            "--host {}: not an IP address (`127.0.0.1`, `0.0.0.0`, `::1`) or `localhost`",
            lllm::redact::echo(text)
        ))
    })
}

/// The token: `--token-file`'s first line, else `LLLM_SERVE_TOKEN`; empty is an error.
fn token(args: &ServeArgs, settings: &crate::settings::Settings) -> Result<Option<String>> {
    let (token, origin) = match &args.token_file {
        Some(path) => {
            let text = lllm::file::read_text(path, TOKEN_FILE_CAP).map_err(|error| {
                Error::Usage(format!(
                    "--token-file {}: cannot read it: {error}",
                    path.display()
                ))
            })?;
            let first = text.lines().next().unwrap_or_default().trim().to_string();
            (first, format!("--token-file {}", path.display()))
        }
        None => match settings.environment.var(TOKEN_VARIABLE) {
            Some(token) => (token.trim().to_string(), TOKEN_VARIABLE.to_string()),
            None => return Ok(None),
        },
    };
    if token.is_empty() {
        return Err(Error::Usage(format!("{origin}: the token is empty")));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::Usage(format!(
            "{origin}: a token is one word, without white space or control characters"
        )));
    }
    Ok(Some(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_addresses() {
        assert_eq!(host("localhost").unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(host("127.0.0.1").unwrap().is_loopback());
        assert!(host("[::1]").unwrap().is_loopback());
        assert!(!host("0.0.0.0").unwrap().is_loopback());
        assert!(host("example.com").is_err());
        assert!(host("").is_err());
    }
}
