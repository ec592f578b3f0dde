//! `lllm models`: the model table (bundled, with `--prices` over it) as an
//! aligned table or JSON lines, and `--check TACTIC`, which names the models
//! a tactic uses that have no price before a batch spends anything. Prices
//! and how a model is priced belong to `lllm::provider::models`; which
//! models a tactic uses, to `Tactic::models`.

use std::fmt::Write;
use std::path::PathBuf;

use serde_json::{Value, json};

use lllm::agent::tokens::Tokenizer;
use lllm::error::{Error, Outcome, Result};
use lllm::provider::models::{ModelInfo, ModelTable, read_price_file};
use lllm::tactic::ModelUse;

use crate::table::{Align, Table};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  lllm models                       every known model
  lllm models claude --json         the Claude models, one JSON object a line
  lllm models --provider gemini     Google's models
  lllm models --prices prices.json  with your prices over the bundled ones
  lllm models --check tactic.yaml   the models the tactic uses; exit 1 if any has no price

Exit codes: 0 listed (every model priced, with --check); 1 no model matched, or
--check found a model without a price; 2 bad input (nothing was checked).")]
pub struct ModelsArgs {
    /// Only models whose name contains this text (case-insensitive).
    #[arg(value_name = "SEARCH", conflicts_with = "check")]
    pub search: Option<String>,
    /// Only models of this provider service (`openai`, `anthropic`, `gemini`, …).
    #[arg(long, conflicts_with = "check")]
    pub provider: Option<String>,
    /// One JSON object per line (model, provider, context_window,
    /// max_output_tokens, the four prices, tokenizer) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Prices over the bundled table, as `lllm run --prices` takes them: our
    /// format or LiteLLM's `model_prices_and_context_window.json` [default:
    /// the config file's `prices`].
    #[arg(long, value_name = "FILE", env = "LLLM_PRICES")]
    pub prices: Option<PathBuf>,
    /// List the models this tactic's agents use (sub-tactics' too) with
    /// their prices, and name each one without a price.
    #[arg(long, value_name = "TACTIC")]
    pub check: Option<PathBuf>,
    /// With `--check`: use this model (`provider/model`) for every agent.
    #[arg(long, short, requires = "check")]
    pub model: Option<String>,
}

/// A row of the table: a model and what is known of it.
struct Row {
    model: String,
    provider: Option<String>,
    info: Option<ModelInfo>,
    tokenizer: Tokenizer,
}

pub fn run(args: ModelsArgs, registry: &lllm::Registry) -> Result<Outcome> {
    let prices = match &crate::settings::current().prices(args.prices.as_deref()) {
        Some(path) => Some(read_price_file(path).map_err(Error::Usage)?),
        None => None,
    };
    if let Some(tactic) = &args.check {
        return check(&args, tactic, prices.as_ref(), registry);
    }
    let table = match &prices {
        Some(prices) => ModelTable::bundled()
            .with_overrides(prices)
            .map_err(|error| Error::Usage(format!("--prices: {error}")))?,
        None => ModelTable::bundled().clone(),
    };
    let search = args.search.as_deref().map(str::to_lowercase);
    let rows: Vec<Row> = table
        .entries()
        .filter(|(name, _)| {
            search
                .as_ref()
                .is_none_or(|search| name.to_lowercase().contains(search))
        })
        .filter(|(_, info)| {
            args.provider
                .as_ref()
                .is_none_or(|wanted| info.provider.as_ref() == Some(wanted))
        })
        .map(|(name, info)| Row {
            model: name.to_string(),
            provider: info.provider.clone(),
            info: Some(info.clone()),
            tokenizer: Tokenizer::of(info.provider.as_deref().unwrap_or_default(), name),
        })
        .collect();
    if rows.is_empty() {
        let known = table
            .entries()
            .filter_map(|(_, info)| info.provider.as_deref());
        let hint = match &args.provider {
            Some(provider) => lllm::suggest::hint(provider, known),
            None => String::new(),
        };
        lllm::output::stderr_line(&format!("no known model matches{hint}"));
        return Ok(Outcome::Failed);
    }
    lllm::output::stdout(&render(&rows, args.json))?;
    Ok(Outcome::Success)
}

/// `--check`: the tactic loaded as `lllm batch` loads it, but with nothing
/// able to send (no key is needed), its models listed, and one line on
/// stderr per model without a price.
fn check(
    args: &ModelsArgs,
    path: &std::path::Path,
    prices: Option<&Value>,
    registry: &lllm::Registry,
) -> Result<Outcome> {
    let settings = crate::settings::current();
    let defaults = settings.defaults();
    let env = |name: &str| settings.environment.var(name);
    let options = lllm::tactic::LoadOptions {
        model: args.model.as_deref(),
        prices,
        model_args: None,
        env: &env,
        dry_run: None,
        warn: &|warning| lllm::report::warn(warning),
        budget: None,
        registry,
        cache: None,
        batch_api: None,
        defaults: Some(&defaults),
    };
    let tactic = lllm::tactic::load_unsent(path, &options)?;
    // One row per model, however many agents use it.
    let mut uses: Vec<ModelUse> = Vec::new();
    for found in tactic.models() {
        if !uses.iter().any(|known| known.name() == found.name()) {
            uses.push(found);
        }
    }
    let rows: Vec<Row> = uses
        .iter()
        .map(|used| Row {
            model: used.name(),
            provider: used.service.map(str::to_string),
            // The offline `mock` provider costs nothing, as replies are priced.
            info: used.price.clone().or_else(|| used.free.then(free)),
            tokenizer: Tokenizer::of(&used.provider, &used.model),
        })
        .collect();
    lllm::output::stdout(&render(&rows, args.json))?;
    let unpriced: Vec<&ModelUse> = uses.iter().filter(|used| !used.priced()).collect();
    for used in &unpriced {
        let name = lllm::redact::echo(&used.name()).into_owned();
        let server = match used.service {
            Some(service) => format!("{service} publishes none lllm knows"),
            None => "its endpoint is not a hosted service lllm knows".into(),
        };
        lllm::output::stderr_line(&format!(
            "no price for `{name}` (agent `{}` in `{}`: {server}); hint: add \
             `{name}: {{input_per_million: …, output_per_million: …}}` under `pricing:` \
             in the tactic, or pass `--prices FILE`",
            lllm::redact::echo(&used.agent),
            used.tactic.display()
        ));
    }
    Ok(if unpriced.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// The rows as an aligned table with a header, or as JSON lines.
fn render(rows: &[Row], as_json: bool) -> String {
    let mut out = String::new();
    if as_json {
        for row in rows {
            let info = row.info.as_ref();
            let line = json!({
                "model": row.model,
                "provider": row.provider,
                "context_window": info.and_then(|info| info.context_window),
                "max_output_tokens": info.and_then(|info| info.max_output_tokens),
                "input_per_million": info.map(|info| info.input_per_million),
                "output_per_million": info.map(|info| info.output_per_million),
                "cached_input_per_million": info.and_then(|info| info.cached_input_per_million),
                "cache_write_per_million": info.and_then(|info| info.cache_write_per_million),
                "tokenizer": row.tokenizer.name(),
            });
            let _ = writeln!(out, "{line}");
        }
        return out;
    }
    let mut table = Table::new(&[
        Align::Left,
        Align::Left,
        Align::Right,
        Align::Right,
        Align::Right,
        Align::Right,
        Align::Right,
        Align::Left,
    ]);
    table.row([
        "MODEL",
        "PROVIDER",
        "CONTEXT",
        "INPUT",
        "OUTPUT",
        "CACHE READ",
        "CACHE WRITE",
        "TOKENIZER",
    ]);
    for row in rows {
        let info = row.info.as_ref();
        table.row([
            row.model.clone(),
            row.provider.clone().unwrap_or_else(|| "-".into()),
            optional(info.and_then(|info| info.context_window)),
            price(info.map(|info| info.input_per_million)),
            price(info.map(|info| info.output_per_million)),
            price(info.and_then(|info| info.cached_input_per_million)),
            price(info.and_then(|info| info.cache_write_per_million)),
            row.tokenizer.name().to_string(),
        ]);
    }
    out.push_str(&table.render());
    out.push_str(
        "prices in USD per 1M tokens; `-` as INPUT: no known price; as a cache price: charged as input\n",
    );
    out
}

/// A price of zero for everything.
fn free() -> ModelInfo {
    ModelInfo {
        provider: None,
        input_per_million: 0.0,
        output_per_million: 0.0,
        cached_input_per_million: None,
        cache_write_per_million: None,
        context_window: None,
        max_output_tokens: None,
        tokenizer: None,
        structured_output: None,
    }
}

fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

/// A price in dollars: cents when exact (`2.50`), else up to six decimals
/// without trailing zeros (`0.075`).
fn price(value: Option<f64>) -> String {
    let Some(value) = value else {
        return "-".into();
    };
    if ((value * 100.0).round() - value * 100.0).abs() < 1e-9 {
        format!("{value:.2}")
    } else {
        let text = format!("{value:.6}");
        text.trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(value: Option<f64>, expected: &str) {
        assert_eq!(price(value), expected);
    }

    #[test]
    fn prices_read_as_dollars() {
        case(Some(2.5), "2.50");
        case(Some(10.0), "10.00");
        case(Some(0.075), "0.075");
        case(Some(0.005), "0.005");
        case(Some(0.0375), "0.0375");
        case(None, "-");
    }
}
