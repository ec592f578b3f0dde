//! The `lllm` binary: parse arguments, run the command, print the error once
//! (one `error:` line per line of it, control characters escaped), exit with
//! the code DESIGN §7 fixes.

use clap::Parser;

/// mimalloc instead of the system allocator: a batch allocates and frees a
/// session record's worth of small objects per task from many threads, where
/// glibc's malloc showed high in `bench/batch.sh` profiles (the measured gain
/// on the whole run was within the noise of a shared 2-core machine).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = lllm::cli::Cli::parse();
    let code = match lllm::cli::execute(cli) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            for line in error.to_string().lines() {
                lllm::output::stderr_line(&format!("error: {line}"));
            }
            error.exit_code()
        }
    };
    std::process::exit(code);
}
