//! The `lllm` binary: parse arguments, run the command, print the error once,
//! exit with the code DESIGN §7 fixes.

use clap::Parser;

/// mimalloc instead of the system allocator: a batch allocates and frees a
/// session record's worth of small objects per task, and glibc's malloc cost a
/// quarter of the runner's CPU in `bench/batch.sh` profiles.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = lllm::cli::Cli::parse();
    let code = match lllm::cli::execute(cli) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            for line in error.to_string().lines() {
                eprintln!("error: {line}");
            }
            error.exit_code()
        }
    };
    std::process::exit(code);
}
