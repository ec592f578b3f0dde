//! `lllm-mock`: an offline HTTP server that speaks the OpenAI chat
//! completions, OpenAI Responses and Anthropic Messages APIs, answering from
//! an lllm mock script (`lllm::mock::script`), as strict about paths, fields
//! and headers as the real APIs. It also emulates the OpenAI Batch API and
//! Anthropic Message Batches over the same script ([`server::BatchOptions`]). The `lllm-mock` binary (package `lllm-cli`)
//! runs [`server::run`]; tests of any crate can run it too.

pub mod server;
pub mod wire;
