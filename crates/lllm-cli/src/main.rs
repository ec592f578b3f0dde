//! The `lllm` binary: the command line of `lllm_cli`, with mimalloc.

/// mimalloc instead of the system allocator: a batch allocates and frees a
/// session record's worth of small objects per task from many threads, where
/// glibc's malloc showed high in `bench/batch.sh` profiles (the measured gain
/// on the whole run was within the noise of a shared 2-core machine).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    lllm_cli::main()
}
