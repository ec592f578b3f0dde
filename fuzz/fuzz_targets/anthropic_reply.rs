//! Anthropic Messages API replies: a whole `message` body with headers, a
//! stream of `message_start` … `message_stop` events, or an error reply with
//! headers. The first byte picks which; see `lllm_fuzz` for the shared checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lllm::provider::anthropic::{self, StreamAssembler};
use lllm::provider::exchange::parse_json;
use lllm_fuzz::{assemble, check_error_reply, check_success, use_message};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            // What `AnthropicProvider` reads a body with.
            let parse =
                |body: &str| parse_json(body).and_then(|body| anthropic::parse_response(&body));
            let _ = check_success("anthropic", parse, rest);
        }
        1 => {
            let Some((&sizes, stream)) = rest.split_first() else {
                return;
            };
            let (reply, _) = assemble::<StreamAssembler>(stream, &[sizes, sizes / 3 + 1]);
            if let Ok(message) = &reply {
                use_message("anthropic", message);
            }
        }
        _ => check_error_reply(anthropic::parse_error, rest),
    }
});
