//! The server-sent-event splitter every streamed reply goes through: the
//! events it hands over do not depend on how the bytes were cut into chunks.
//! The first byte picks the chunk sizes; the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lllm::provider::sse::SseDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&sizes, stream)) = data.split_first() else {
        return;
    };
    let whole = events(stream, &[]);
    assert_eq!(events(stream, &[1]), whole, "one byte at a time");
    let cut = [sizes % 17 + 1, sizes / 17 + 1];
    assert_eq!(events(stream, &cut), whole, "in chunks of {cut:?}");
    for event in &whole {
        assert!(!event.is_empty(), "an empty event was handed over");
    }
});

/// The events of `stream` fed in chunks whose sizes cycle through `sizes`
/// (all at once when `sizes` is empty); reading stops after an event `stop`.
fn events(stream: &[u8], sizes: &[u8]) -> Vec<String> {
    let mut decoder = SseDecoder::default();
    let mut found = Vec::new();
    let mut take = |data: &str| -> Result<bool, ()> {
        found.push(data.to_string());
        Ok(data != "stop")
    };
    let mut rest = stream;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let size = sizes.next().map_or(rest.len(), |size| usize::from(*size));
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        if decoder.push(chunk, &mut take) != Ok(true) {
            return found;
        }
    }
    let _ = decoder.finish(&mut take);
    found
}
