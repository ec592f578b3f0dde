#!/usr/bin/env bash
# What a program built on the library pays to compile (docs/benchmarks.md,
# "Build weight"): a hello-world crate outside the workspace, depending on
# the library with the features given, built clean in debug with its own
# target directory, which is deleted afterwards.
#
#   bench/build_weight.sh                 # the library's default features
#   bench/build_weight.sh minimal         # --no-default-features
#   bench/build_weight.sh mcp,zstd        # no defaults, these features
#   LLLM_DIR=/path/to/lllm bench/build_weight.sh   # another checkout
#   TIMINGS=out.html bench/build_weight.sh         # also cargo's per-crate timings
#   IDNA_ADAPTER=1.1.0 bench/build_weight.sh minimal   # url's IDNA on unicode-rs
#     (the hello-world's lock pins idna_adapter, as that crate documents)
#
# Prints one line: the features, the crates in the hello-world's normal
# dependency tree (`cargo tree -e normal`, itself excluded), the crates cargo
# compiled (build scripts' dependencies included: the `Compiling` lines), the
# build's wall time and its user+sys CPU time (steadier on a shared machine),
# and the size the target directory reached. The hello-world asks `mock/echo`
# once through `quick` and once through an `Agent`, and must print its answer.
# Built `minimal`, it also asks for each part it went without (a tactic's
# `mcp_servers:` and a server started from code, a `.zst` file read and a
# `.json.zst` record written, a prompt's `format:` schema, a tactic's `output_schema:`, BPE token counts) and fails unless each is refused with an error naming the feature
# (or, for token counts, gives the documented estimate): the workspace's own
# tests cannot see these paths, since its dev-dependency on `lllm-cli` turns
# every feature on.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
library=${LLLM_DIR:-$repo}
selection=${1:-default}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/lllm-build-weight.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

case "$selection" in
  default) dependency="lllm = { path = \"$library\" }" ;;
  minimal) dependency="lllm = { path = \"$library\", default-features = false }" ;;
  *)
    features=$(printf '"%s", ' ${selection//,/ })
    dependency="lllm = { path = \"$library\", default-features = false, features = [${features%, }] }"
    ;;
esac

mkdir -p "$scratch/src"
cat >"$scratch/Cargo.toml" <<EOF
[package]
name = "hello-lllm"
version = "0.1.0"
edition = "2024"

[dependencies]
$dependency
serde_json = "1"
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }

[profile.dev]
debug = "line-tables-only"

[workspace]
EOF
cat >"$scratch/src/main.rs" <<'EOF'
#[tokio::main]
async fn main() -> Result<(), lllm::BoxError> {
    let reply = lllm::quick("hello").model("mock/echo").await?;
    let mut agent = lllm::Agent::builder("mock/echo").system("You are terse.").build()?;
    agent.open("chat")?;
    agent.receive("world")?;
    let second = agent.respond().await?;
    println!("{} {}", reply.content, second.content);
    if std::env::args().nth(1).as_deref() == Some("--refusals") {
        refusals().await?;
    }
    Ok(())
}

/// What a build without the optional features does when asked for them.
async fn refusals() -> Result<(), lllm::BoxError> {
    let dir = std::env::temp_dir().join(format!("hello-lllm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let yaml = "global: {model_name: mock/echo}\n\
                agent_configs: [{name: a, system_prompt: hi}]\n\
                mcp_servers:\n  - {name: files, command: [server]}\n";
    let mcp = lllm::Tactic::from_yaml(yaml, &dir, &lllm::Registry::new()).err();
    let zst = dir.join("sessions.jsonl.zst");
    std::fs::write(&zst, [0x28, 0xB5, 0x2F, 0xFD, 0, 0, 0, 0])?;
    let zstd = lllm::jsonl::read_text(&zst, 1 << 20).err();
    let schema = serde_json::json!({"type": "object"});
    let jsonschema = lllm::prompt::Prompt::new("city", "Which city?")?.with_format(schema).err();
    let yaml = "agent_configs: [{name: a, model_name: mock/echo}]\noutput_schema: {type: object}\n";
    let output_schema = lllm::Tactic::from_yaml(yaml, &dir, &lllm::Registry::new()).err();
    let record = lllm::quick("hello").model("mock/echo").record().await?;
    let zst_record = record.write(dir.join("run.json.zst")).err();
    let server = lllm::config::McpServerConfig {
        name: "files".into(),
        command: vec!["server".into()],
        args: Vec::new(),
        env: Default::default(),
        cwd: dir.clone(),
        timeout_s: 60.0,
    };
    let servers = lllm::tool::McpServers::new(vec![server], Vec::new());
    let started = servers.start().await.err().map(|problems| problems.join("; "));
    std::fs::remove_dir_all(&dir)?;
    for (feature, error) in [
        ("mcp", mcp.map(|error| error.to_string())),
        ("mcp", started),
        ("zstd", zstd.map(|error| error.to_string())),
        ("zstd", zst_record.map(|error| error.to_string())),
        ("jsonschema", jsonschema.map(|error| error.to_string())),
        ("jsonschema", output_schema.map(|error| error.to_string())),
    ] {
        let error = error.ok_or(format!("accepted without the `{feature}` feature"))?;
        eprintln!("{error}");
        if !error.contains(&format!("the `{feature}` feature")) {
            return Err(format!("the error does not name `{feature}`: {error}").into());
        }
    }
    let tokens = lllm::agent::tokens::counter_for("openai", "gpt-4o").count("hello world");
    eprintln!("tokens of `hello world` for gpt-4o: {tokens} (the estimate, ceil(11 / 3))");
    if tokens != 4 {
        return Err(format!("{tokens} tokens, not the estimate's 4").into());
    }
    Ok(())
}
EOF
# The library's lock file: the same versions it is tested with.
cp "$library/Cargo.lock" "$scratch/Cargo.lock"
cd "$scratch"
if [ -n "${IDNA_ADAPTER:-}" ]; then
  cargo update --quiet -p idna_adapter --precise "$IDNA_ADAPTER"
fi
cargo fetch --quiet
crates=$(cargo tree --offline -e normal --prefix none --format '{p}' \
  | sed 's/ (\*)$//' | sort -u | grep -vc '^hello-lllm ')
timings=()
if [ -n "${TIMINGS:-}" ]; then timings=(--timings); fi
/usr/bin/time -f '%e %U %S' -o time.txt \
  cargo build --offline --target-dir target "${timings[@]}" 2>build.log \
  || { tail -20 build.log >&2; exit 1; }
if [ -n "${TIMINGS:-}" ]; then cp target/cargo-timings/cargo-timing.html "$TIMINGS"; fi
read -r wall user system <time.txt
compiled=$(grep -c '^ *Compiling ' build.log)
size=$(du -sh target | cut -f1)
refusals=()
if [ "$selection" = minimal ]; then refusals=(--refusals); fi
output=$(./target/debug/hello-lllm "${refusals[@]}" 2>refusals.txt) || { cat refusals.txt >&2; exit 1; }
test "$output" = "hello world"
if [ "$selection" = minimal ]; then sed 's/^/  refused: /' refusals.txt; fi
printf 'features=%s tree=%s compiled=%s wall=%.0fs cpu=%.0fs target=%s\n' \
  "$selection" "$crates" "$compiled" "$wall" "$(echo "$user + $system" | bc)" "$size"
