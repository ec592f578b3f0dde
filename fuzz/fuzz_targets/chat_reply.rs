//! OpenAI chat-completions replies: a whole body with headers (the direct
//! reader and the lenient one must agree), a server-sent-event stream of
//! chunks, or an error reply with headers. The first byte picks which; see `lllm_fuzz` for the
//! shared checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lllm::provider::openai::{self, StreamAssembler};
use lllm_fuzz::{assemble, check_error_reply, check_success, reply as reply_parts, use_message};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => body(rest),
        1 => stream(rest),
        _ => check_error_reply(openai::parse_error, rest),
    }
});

fn body(data: &[u8]) {
    let reply = check_success("openai", openai::parse_body, data);
    // `parse_body` reads the usual shape directly and hands anything else to
    // `parse_response`; for a body both can read, they must agree.
    let (_, text) = reply_parts(data);
    if let (Ok(direct), Ok(value)) = (&reply, serde_json::from_str(&text)) {
        let lenient = openai::parse_response(&value);
        let lenient = lenient.expect("the lenient reader refuses what the direct one read");
        assert_eq!(
            serde_json::to_value(direct).ok(),
            serde_json::to_value(&lenient).ok(),
            "the direct and the lenient reader disagree"
        );
    }
}

fn stream(data: &[u8]) {
    // A byte of chunk sizes, then the stream.
    let Some((&sizes, stream)) = data.split_first() else {
        return;
    };
    let (reply, streamed) = assemble::<StreamAssembler>(stream, &[sizes, sizes / 3 + 1]);
    if let Ok(message) = &reply {
        use_message("openai", message);
        // What reached the terminal is what the reply says.
        assert_eq!(message.content, streamed);
    }
}
