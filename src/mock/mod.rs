//! Offline model stand-ins. `script` is the script format (rules, replies in
//! order, a default, faults, latency), read both by the in-process
//! `mock/script` provider and by the `lllm-mock` HTTP server; `server` is that
//! server, and `wire` the three APIs it speaks (OpenAI chat completions,
//! OpenAI Responses, Anthropic Messages). Nothing here talks to a network
//! beyond the socket `server` binds.

pub mod script;
pub mod server;
pub mod wire;
