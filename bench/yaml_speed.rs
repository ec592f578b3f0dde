//! How fast user YAML is read: `lllm::yaml::parse` and `parse_located`
//! (serde-saphyr, since issue 28) against the path they replaced, the
//! nesting pre-scan then serde_yaml_ng (libyaml) into a JSON value, both
//! measured in the same run (`docs/decisions.md`, "YAML by serde-saphyr").
//! The files users feed (tactics, prompt front matter, the user config,
//! lllm-mock scripts, the fuzz seeds) and hostile ones (deep nesting, a
//! "billion laughs", long scalars, many keys). Prints the best time of each
//! case, the ratio new / before (under 1: faster now) and whether each
//! path read or refused the text.
//!
//!     cargo run --release --example yaml_speed [ROUNDS]
//!
//! Run from the repository's root (it reads `tactics/`, `prompts/`,
//! `examples/` and `fuzz/seeds/`).

#[path = "yaml_before_nesting.rs"]
mod before;

use std::path::Path;
use std::time::{Duration, Instant};

/// One case: its name and the texts read in one round.
struct Case {
    name: String,
    texts: Vec<String>,
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(30, |text| text.parse().expect("ROUNDS"));
    println!(
        "{:<34} {:>10} {:>12} {:>12} {:>12} {:>7} {:>7}  read (before / now)",
        "case", "bytes", "before µs", "parse µs", "located µs", "ratio", "loc."
    );
    for case in realistic().into_iter().chain(hostile()) {
        let bytes: usize = case.texts.iter().map(String::len).sum();
        let before = best(rounds, || {
            for text in &case.texts {
                std::hint::black_box(read_before(text).is_ok());
            }
        });
        let parse = best(rounds, || {
            for text in &case.texts {
                std::hint::black_box(lllm::yaml::parse(text).is_ok());
            }
        });
        let located = best(rounds, || {
            for text in &case.texts {
                std::hint::black_box(lllm::yaml::parse_located(text).is_ok());
            }
        });
        let outcomes = |read: &dyn Fn(&str) -> bool| {
            let read = case.texts.iter().filter(|text| read(text)).count();
            format!("{read}/{}", case.texts.len())
        };
        println!(
            "{:<34} {:>10} {:>12.1} {:>12.1} {:>12.1} {:>7.2} {:>7.2}  {} / {}",
            case.name,
            bytes,
            micros(before),
            micros(parse),
            micros(located),
            parse.as_secs_f64() / before.as_secs_f64(),
            located.as_secs_f64() / before.as_secs_f64(),
            outcomes(&|text| read_before(text).is_ok()),
            outcomes(&|text| lllm::yaml::parse(text).is_ok()),
        );
    }
}

/// The path before issue 28: the pre-scan, then serde_yaml_ng.
fn read_before(text: &str) -> Result<serde_json::Value, String> {
    before::check_nesting(text).map_err(|error| error.message)?;
    serde_yaml_ng::from_str(text).map_err(|error| error.to_string())
}

/// The best of `rounds` runs of `work` (at least one; at most ~2 s).
fn best(rounds: usize, mut work: impl FnMut()) -> Duration {
    let started = Instant::now();
    let mut best = Duration::MAX;
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        work();
        best = best.min(start.elapsed());
        if started.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    best
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Every file directly in `directory` whose name ends with `suffix`.
fn files(directory: &str, suffix: &str) -> Vec<String> {
    let mut paths: Vec<_> = std::fs::read_dir(directory)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    paths.retain(|path: &std::path::PathBuf| {
        path.is_file() && path.to_string_lossy().ends_with(suffix)
    });
    paths.sort();
    paths
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect()
}

/// A prompt file's front matter (between its first two `---` lines).
fn front_matter(text: &str) -> Option<String> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---")?;
    Some(rest[..end + 1].to_string())
}

fn prompts() -> Vec<String> {
    let mut texts = Vec::new();
    for directory in ["prompts/critique", "prompts/research", "prompts/summarize"] {
        texts.extend(
            files(directory, ".md")
                .iter()
                .filter_map(|text| front_matter(text)),
        );
    }
    texts
}

fn realistic() -> Vec<Case> {
    let tactics = files("tactics", ".yaml");
    assert!(
        !tactics.is_empty(),
        "run from the repository's root: no tactics/*.yaml"
    );
    // A large tactic: 300 agents, each with model arguments and a prompt.
    let mut large = String::from(
        "global:\n  model_name: openai/gpt-4o-mini\n  max_llm_recall: 3\nagent_configs:\n",
    );
    for index in 0..300 {
        large.push_str(&format!(
            "  - name: agent_{index}\n    model_args: {{temperature: 0.{}, max_tokens: {}}}\n    \
             system_prompt: |\n      You are agent {index}. Answer briefly and cite sources.\n      \
             Never invent a reference.\n    tools: [search, fetch]\n",
            index % 10,
            256 + index
        ));
    }
    let config = "model: openai/gpt-4o-mini\nproviders:\n  local:\n    api: openai\n    \
                  base_url: http://127.0.0.1:8080/v1\n    rpm: 600\nkeys_file: ~/.config/lllm/keys.env\n"
        .to_string();
    let seeds = |target: &str| {
        let directory = Path::new("fuzz/seeds").join(target);
        files(&directory.to_string_lossy(), "")
    };
    vec![
        Case {
            name: "tactics/*.yaml".into(),
            texts: tactics,
        },
        Case {
            name: "prompt front matter".into(),
            texts: prompts(),
        },
        Case {
            name: "user config".into(),
            texts: vec![config],
        },
        Case {
            name: "lllm-mock scripts".into(),
            texts: [
                files("examples/scripts", ".yaml"),
                files("examples/custom_tactic", ".yaml"),
            ]
            .concat(),
        },
        Case {
            name: "fuzz seeds (tactic_yaml)".into(),
            texts: seeds("tactic_yaml"),
        },
        Case {
            name: "fuzz seeds (prompt_file, front)".into(),
            texts: seeds("prompt_file")
                .iter()
                .filter_map(|text| front_matter(text))
                .collect(),
        },
        Case {
            name: "large tactic (300 agents)".into(),
            texts: vec![large],
        },
    ]
}

fn hostile() -> Vec<Case> {
    let nested = |depth: usize| format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    // Nine levels of ten aliases: 10^9 nodes if expanded.
    let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..10 {
        let previous = format!("*a{}", level - 1);
        let items = [previous.as_str(); 10].join(", ");
        laughs.push_str(&format!("a{level}: &a{level} [{items}]\n"));
    }
    let long = "lorem ipsum dolor sit amet ".repeat(300_000);
    let mut keys = String::new();
    for index in 0..100_000 {
        keys.push_str(&format!("key_{index}: {index}\n"));
    }
    vec![
        Case {
            name: "nesting 60 deep (read)".into(),
            texts: vec![nested(60)],
        },
        Case {
            name: "nesting 150,000 deep (refused)".into(),
            texts: vec![nested(150_000)],
        },
        Case {
            name: "billion laughs (refused)".into(),
            texts: vec![laughs],
        },
        Case {
            name: "8 MB plain scalar".into(),
            texts: vec![format!("text: {long}\n")],
        },
        Case {
            name: "8 MB double-quoted scalar".into(),
            texts: vec![format!("text: \"{}\"\n", long.replace("amet", "amet\\n"))],
        },
        Case {
            name: "8 MB block scalar".into(),
            texts: vec![format!(
                "text: |\n{}",
                long.split("amet ")
                    .map(|line| format!("  {line}amet\n"))
                    .collect::<String>()
            )],
        },
        Case {
            name: "100,000 keys".into(),
            texts: vec![keys],
        },
    ]
}
