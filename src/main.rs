//! The `lllm` binary: parse arguments, run the command, print the error once,
//! exit with the code DESIGN §7 fixes.

use clap::Parser;

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
