//! Offline model stand-ins: the script format (`script`) read both by the
//! in-process `mock/script` provider and by the `lllm-mock` HTTP server
//! (`server`).

pub mod script;
pub mod server;
