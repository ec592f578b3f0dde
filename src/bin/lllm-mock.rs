//! `lllm-mock`: a scripted OpenAI-compatible server for tests and offline
//! tactic development. Parses arguments and runs `lllm::mock::server`.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "lllm-mock",
    version,
    about = "A scripted OpenAI-compatible server on loopback"
)]
struct Args {
    /// The script: replies, rules, faults, latency (YAML or JSON).
    #[arg(long)]
    script: PathBuf,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the first line on stdout says which.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Latency of every reply in milliseconds (overrides the script's).
    #[arg(long)]
    latency_ms: Option<f64>,
    /// Append one JSON line per request to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    allow_remote: bool,
}

fn main() {
    let args = Args::parse();
    let options = lllm::mock::server::ServerOptions {
        script: args.script,
        host: args.host,
        port: args.port,
        latency_ms: args.latency_ms,
        log: args.log,
        allow_remote: args.allow_remote,
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| error.to_string())
        .and_then(|runtime| runtime.block_on(lllm::mock::server::run(options)));
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(2);
    }
}
