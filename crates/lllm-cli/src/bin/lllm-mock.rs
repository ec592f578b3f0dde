//! `lllm-mock`: a scripted OpenAI- and Anthropic-compatible server for tests,
//! benchmarks and offline tactic development. Parses the arguments and runs
//! `lllm::mock::server`; every error exits with 2.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "lllm-mock",
    version,
    about = "A scripted OpenAI- and Anthropic-compatible server on loopback"
)]
struct Args {
    /// The script: replies, rules, faults, latency (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    script: PathBuf,
    /// The address to listen on; only loopback without --allow-remote.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the first line on stdout says which.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Every reply waits this many milliseconds (replaces the script's latencies).
    #[arg(long, value_name = "N")]
    latency_ms: Option<f64>,
    /// Append one JSON line per request to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Allow listening on an address that is not loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Batch APIs: retrievals that still find a batch in progress.
    #[arg(long, value_name = "N", default_value_t = 0)]
    batch_polls: u32,
    /// Batch APIs: a batch stays in progress at least this long after its creation.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    batch_delay_ms: u64,
    /// Batch APIs: this fraction (0 to 1) of each batch's requests, the last ones, expire.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    batch_expire: f64,
    /// Batch APIs: the request with this custom_id expires (repeatable).
    #[arg(long, value_name = "ID")]
    batch_expire_id: Vec<String>,
    /// Batch APIs: each batch says it was created this many seconds before it was.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    batch_age_s: u64,
    /// Batch APIs: a batch in progress is reported in this state instead (one no client knows).
    #[arg(long, value_name = "STATE")]
    batch_state: Option<String>,
    /// Quota: requests per minute for each API key (a token bucket, as the providers keep).
    #[arg(long, value_name = "N")]
    rpm: Option<u64>,
    /// Quota: tokens per minute for each key; a request counts its prompt (4 characters a token) and its max_tokens.
    #[arg(long, value_name = "N")]
    tpm: Option<u64>,
    /// Quota: prompt tokens per minute for each key (Anthropic's ITPM; Anthropic wire only).
    #[arg(long, value_name = "N")]
    input_tpm: Option<u64>,
    /// Quota: max_tokens per minute for each key (Anthropic's OTPM; Anthropic wire only).
    #[arg(long, value_name = "N")]
    output_tpm: Option<u64>,
    /// Serve at most N model requests at once, queueing the rest first come first served (llama-server's --parallel N); GET /props says it as total_slots.
    #[arg(long, value_name = "N")]
    slots: Option<usize>,
    /// With --slots: GET /props is a 404, as on Ollama and vLLM.
    #[arg(long, requires = "slots")]
    no_props: bool,
    /// Messages API: answer a forced tool_choice with the scripted text, as llama-server's /v1/messages does for a model whose chat template takes no tools.
    #[arg(long)]
    ignore_tool_choice: bool,
}

fn main() {
    let args = Args::parse();
    let options = lllm_mock::server::ServerOptions {
        script: args.script,
        host: args.host,
        port: args.port,
        latency_ms: args.latency_ms,
        log: args.log,
        allow_remote: args.allow_remote,
        batch: lllm_mock::server::BatchOptions {
            polls: args.batch_polls,
            delay_ms: args.batch_delay_ms,
            expire_fraction: args.batch_expire,
            expire_ids: args.batch_expire_id,
            age_s: args.batch_age_s,
            in_progress_state: args.batch_state,
        },
        quota: lllm_mock::server::QuotaOptions {
            rpm: args.rpm,
            tpm: args.tpm,
            input_tpm: args.input_tpm,
            output_tpm: args.output_tpm,
        },
        slots: args.slots,
        hide_props: args.no_props,
        ignore_tool_choice: args.ignore_tool_choice,
    };
    let result = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime
            .block_on(lllm_mock::server::run(options))
            .map_err(|error| error.to_string()),
        Err(error) => Err(format!("cannot start the async runtime: {error}")),
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(2);
    }
}
