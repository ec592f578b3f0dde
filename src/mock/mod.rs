//! Offline model stand-ins. `script` is the script format (rules, replies in
//! order, a default, faults, latency), read both by the in-process
//! `mock/script` provider and by the `lllm-mock` HTTP server (package
//! `lllm-mock`, which also holds the three wire formats it speaks).

pub mod script;
