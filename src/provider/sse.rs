//! Server-sent events as providers stream them: bytes, cut into chunks
//! anywhere, in; the `data:` payload of each event out. `http::post_sse`
//! feeds it from the socket; it never sees one itself, so it is tested (and
//! fuzzed) on bytes alone.
//!
//! Lines end with `\n` (a `\r` before it is dropped); a blank line ends an
//! event; its `data:` lines are joined with `\n`. `event:`, `id:`, `retry:`
//! and `:` comments carry nothing we use.

use std::borrow::Cow;

/// Splits an event stream into its events' data, whatever the chunking: each
/// byte is looked at once, so a long line sent in small chunks costs no more
/// than in one.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The start of a line whose newline has not arrived yet.
    line: Vec<u8>,
    /// The `data:` lines of the event being received.
    data: String,
}

impl SseDecoder {
    /// Takes the next chunk and hands each completed event's data to
    /// `on_data`; `Ok(false)` as soon as `on_data` says to stop.
    pub fn push<E>(
        &mut self,
        chunk: &[u8],
        on_data: &mut impl FnMut(&str) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let mut rest = chunk;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let (head, tail) = rest.split_at(end);
            rest = &tail[1..];
            let line = if self.line.is_empty() {
                Cow::Borrowed(head)
            } else {
                self.line.extend_from_slice(head);
                Cow::Owned(std::mem::take(&mut self.line))
            };
            if !self.take_line(&line, on_data)? {
                return Ok(false);
            }
        }
        self.line.extend_from_slice(rest);
        Ok(true)
    }

    /// At the end of the stream: an event whose blank line never came is
    /// still handed over (a server that closes right after its last `data:`
    /// line loses nothing); a line without its newline is dropped.
    pub fn finish<E>(self, on_data: &mut impl FnMut(&str) -> Result<bool, E>) -> Result<(), E> {
        if !self.data.is_empty() {
            on_data(&self.data)?;
        }
        Ok(())
    }

    fn take_line<E>(
        &mut self,
        line: &[u8],
        on_data: &mut impl FnMut(&str) -> Result<bool, E>,
    ) -> Result<bool, E> {
        // Checked as UTF-8 first: text that is valid (nearly always) is
        // borrowed after a fast check, where the lossy reading looks at it
        // chunk by chunk (a tenth of what a streamed reply's bytes cost to
        // decode, by callgrind, before this).
        let line = match std::str::from_utf8(line) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            if !self.data.is_empty() {
                // The buffer is kept for the next event's data.
                let more = on_data(&self.data);
                self.data.clear();
                return more;
            }
        } else if let Some(payload) = line.strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data
                .push_str(payload.strip_prefix(' ').unwrap_or(payload));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payloads of `stream` fed in chunks of `size` bytes, up to `[DONE]`.
    fn decode(stream: &[u8], size: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut payloads = Vec::new();
        let mut collect = |data: &str| -> Result<bool, ()> {
            payloads.push(data.to_string());
            Ok(data != "[DONE]")
        };
        for chunk in stream.chunks(size.max(1)) {
            if !decoder.push(chunk, &mut collect).unwrap() {
                return payloads;
            }
        }
        decoder.finish(&mut collect).unwrap();
        payloads
    }

    #[track_caller]
    fn case(stream: &str, expected: &[&str]) {
        for size in [1, 2, 3, 7, stream.len().max(1)] {
            assert_eq!(
                decode(stream.as_bytes(), size),
                expected,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn events_are_the_same_in_any_chunking() {
        case(
            "data: {\"a\":1}\n\ndata: [DONE]\n\n",
            &["{\"a\":1}", "[DONE]"],
        );
        case("data: one\r\n\r\ndata:two\r\n\r\n", &["one", "two"]);
        case("data: a\ndata:  b\n\n", &["a\n b"]);
        case(
            "event: message_start\nid: 1\nretry: 5\n: comment\ndata: x\n\n",
            &["x"],
        );
        case("\n\n\ndata: x\n\n\n\n", &["x"]);
        // The stop marker ends reading: what follows is never handed over.
        case("data: [DONE]\n\ndata: late\n\n", &["[DONE]"]);
        // An event cut off before its blank line still counts; a line cut off
        // before its newline does not.
        case("data: last\n", &["last"]);
        case("data: last\ndata: cut", &["last"]);
        case("", &[]);
    }

    #[test]
    fn bad_bytes_and_split_characters_read_as_text() {
        case("data: é😀\n\n", &["é😀"]);
        assert_eq!(decode(b"data: a\xffb\n\n", 1), ["a\u{fffd}b"]);
    }

    #[test]
    fn a_long_line_in_small_chunks_is_read_in_one_pass() {
        // The splitter looked for a newline from the start of everything
        // pending at every chunk, so a line arriving in small chunks took
        // time quadratic in its length (minutes for this one).
        let mut stream = b"data: ".to_vec();
        stream.extend(std::iter::repeat_n(b'x', 1 << 20));
        stream.extend_from_slice(b"\n\n");
        let payloads = decode(&stream, 1);
        assert_eq!(payloads.len(), 1);
        assert_eq!(payloads[0].len(), 1 << 20);
    }

    #[test]
    fn an_error_from_the_reader_stops_decoding() {
        let mut decoder = SseDecoder::default();
        let mut fail = |_: &str| -> Result<bool, String> { Err("bad chunk".into()) };
        assert_eq!(
            decoder.push(b"data: x\n\n", &mut fail),
            Err("bad chunk".to_string())
        );
    }
}
