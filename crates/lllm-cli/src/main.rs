//! The `lllm` binary: the command line of `lllm_cli`, on the system's
//! allocator.
//!
//! It ran on mimalloc until `lllm serve`: mimalloc's gain on a whole batch
//! was within the noise of a shared 2-core machine, and a served request in
//! flight held 93 KB (/run) and 127 KB (/stream) of resident memory with
//! it against 78 KB and 88 KB with glibc's malloc, the same build otherwise
//! (`PARTS=memory bench/serve.sh`, docs/benchmarks.md, "Serving").

fn main() -> std::process::ExitCode {
    lllm_cli::main()
}
