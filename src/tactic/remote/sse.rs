//! Server-Sent Events read off a served tactic's `/stream`, in both
//! dialects: ours (`event:`, `id:` and `data:` lines, and always one closing
//! `result` or `error` event, D17) and upstream lllm-core 0.2's (`data:`
//! lines only, no closing event). This file owns the line protocol and the
//! mapping of each event's data to an [`Event`]; the HTTP body and its
//! limits are `client`'s.

use serde_json::Value;

use crate::dialog::InvokeCost;
use crate::event::{Event, EventKind};

/// The largest event (its `data:` lines together) a stream may send, in
/// bytes: a longer one is refused, not buffered without bound.
pub(crate) const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One event as the wire framed it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    /// Its `event:` line, when it had one.
    pub event: Option<String>,
    /// Its `id:` line, when it had one.
    pub id: Option<String>,
    /// Its `data:` lines, joined with `\n`.
    pub data: String,
}

/// Splits a byte stream into frames: lines end at `\n` (a `\r` before it is
/// dropped), a blank line ends an event, `:` lines are comments, fields
/// other than `event`, `id` and `data` are passed over (SSE's rules).
#[derive(Debug, Default)]
pub(crate) struct Parser {
    line: Vec<u8>,
    event: Option<String>,
    id: Option<String>,
    data: Option<String>,
    /// Whether any frame had an `event:` line: the server is ours, and
    /// promises a closing event.
    pub named: bool,
}

impl Parser {
    /// The frames `chunk` completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, String> {
        let mut frames = Vec::new();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|byte| *byte == b'\n') {
            self.line.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line)
                .map_err(|_| "the stream sent a line that is not UTF-8".to_string())?;
            if let Some(frame) = self.line_done(&line)? {
                frames.push(frame);
            }
        }
        self.line.extend_from_slice(rest);
        if self.line.len() > MAX_EVENT_BYTES {
            return Err(format!(
                "the stream sent a line longer than {MAX_EVENT_BYTES} bytes"
            ));
        }
        Ok(frames)
    }

    /// The frame left when the body ended without the blank line after it
    /// (upstream's last event may lack it).
    pub fn finish(&mut self) -> Result<Option<Frame>, String> {
        if !self.line.is_empty() {
            let line = String::from_utf8(std::mem::take(&mut self.line))
                .map_err(|_| "the stream sent a line that is not UTF-8".to_string())?;
            self.line_done(line.trim_end_matches('\r'))?;
        }
        Ok(self.frame())
    }

    fn line_done(&mut self, line: &str) -> Result<Option<Frame>, String> {
        if line.is_empty() {
            return Ok(self.frame());
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.named = true;
                self.event = Some(value.to_string());
            }
            "id" => self.id = Some(value.to_string()),
            "data" => match &mut self.data {
                None => self.data = Some(value.to_string()),
                Some(data) => {
                    if data.len() + value.len() > MAX_EVENT_BYTES {
                        return Err(format!(
                            "the stream sent an event larger than {MAX_EVENT_BYTES} bytes"
                        ));
                    }
                    data.push('\n');
                    data.push_str(value);
                }
            },
            _ => {}
        }
        Ok(None)
    }

    fn frame(&mut self) -> Option<Frame> {
        let data = self.data.take();
        let event = self.event.take();
        let id = self.id.take();
        // An event without data is dispatched by nobody (SSE's rule).
        data.map(|data| Frame { event, id, data })
    }
}

/// What one frame says: an event of the run, or its failure (D18: an error
/// event is an error for the caller, never data).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Said {
    /// An event (boxed: an event is large, a failure small).
    Event(Box<Event>),
    /// The run failed, in the server's words.
    Failed(String),
}

/// A frame's data as an [`Event`]: our own event JSON as it is; upstream's
/// `TacticEvent` (`{"kind", "data", …}`) with its `result` made our
/// `result` (the output as the delivery's text) and its `error` a failure;
/// any other kind, or data that is not an event, as
/// [`EventKind::Remote`].
pub(crate) fn said(frame: &Frame) -> Said {
    let value: Value = match serde_json::from_str(&frame.data) {
        Ok(value) => value,
        Err(_) => Value::String(frame.data.clone()),
    };
    if let Ok(event) = serde_json::from_value::<Event>(value.clone()) {
        return match event.kind {
            EventKind::Error { message, .. } => Said::Failed(message),
            _ => Said::Event(Box::new(event)),
        };
    }
    let mut event = Event::new(EventKind::Remote {
        kind: "message".into(),
        data: value.clone(),
    });
    let Value::Object(object) = &value else {
        return Said::Event(Box::new(event));
    };
    let (Some(Value::String(kind)), Some(data)) = (object.get("kind"), object.get("data")) else {
        return Said::Event(Box::new(event));
    };
    if let Some(Value::String(id)) = object.get("id") {
        event.id = id.clone();
    }
    if let Some(timestamp) = object.get("timestamp").and_then(Value::as_f64) {
        event.timestamp = timestamp;
    }
    if let Some(Value::Object(metadata)) = object.get("metadata") {
        event.metadata = metadata.clone();
    }
    event.kind = match kind.as_str() {
        "error" => {
            let message = data
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| data.to_string(), str::to_string);
            return Said::Failed(message);
        }
        "result" => EventKind::Result {
            delivery: output_text(data),
            state: "success".into(),
            session_id: String::new(),
            cost: None,
            usage: InvokeCost::default(),
        },
        _ => EventKind::Remote {
            kind: kind.clone(),
            data: data.clone(),
        },
    };
    Said::Event(Box::new(event))
}

/// A served tactic's output as a delivery: a string as it is, anything else
/// as its JSON text.
pub(crate) fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&str]) -> (Vec<Frame>, bool) {
        let mut parser = Parser::default();
        let mut frames = Vec::new();
        for chunk in chunks {
            frames.extend(
                parser
                    .push(chunk.as_bytes())
                    .unwrap_or_else(|error| panic!("{error}")),
            );
        }
        frames.extend(parser.finish().unwrap_or_else(|error| panic!("{error}")));
        (frames, parser.named)
    }

    #[test]
    fn our_dialect_frames_events_with_names_and_ids() {
        let (frames, named) = frames(&[
            "event: text_delta\nid: e1\ndata: {\"a\":",
            "1}\n\n: keep-alive\n\nevent: result\r\nid: e2\r\ndata: x\r\n\r\n",
        ]);
        assert!(named);
        assert_eq!(
            frames,
            vec![
                Frame {
                    event: Some("text_delta".into()),
                    id: Some("e1".into()),
                    data: "{\"a\":1}".into()
                },
                Frame {
                    event: Some("result".into()),
                    id: Some("e2".into()),
                    data: "x".into()
                },
            ]
        );
    }

    #[test]
    fn upstream_dialect_has_data_only_and_may_end_without_a_blank_line() {
        let (frames, named) =
            frames(&["data: {\"kind\": \"message\", \"data\": 1}\n\ndata: one\ndata: two"]);
        assert!(!named);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].data, "one\ntwo");
        assert_eq!(frames[1].event, None);
    }

    #[test]
    fn a_chunk_split_anywhere_gives_the_same_frames() {
        let text = "event: a\nid: 1\ndata: {\"x\": \"é\"}\n\nevent: b\ndata: 2\n\n";
        let whole = frames(&[text]).0;
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            let mut parser = Parser::default();
            let mut got = parser
                .push(&bytes[..cut])
                .unwrap_or_else(|error| panic!("{error}"));
            got.extend(
                parser
                    .push(&bytes[cut..])
                    .unwrap_or_else(|error| panic!("{error}")),
            );
            assert_eq!(got, whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_line_without_an_end_past_the_cap_is_refused() {
        let mut parser = Parser::default();
        let long = vec![b'x'; MAX_EVENT_BYTES + 1];
        let error = parser.push(&long).err().unwrap_or_default();
        assert!(error.contains("longer than"), "{error}");
        let mut parser = Parser::default();
        assert!(parser.push(b"data: \xff\xfe\n").is_err());
    }

    #[test]
    fn our_events_are_read_back_and_an_error_event_is_a_failure() {
        let event = Event::new(EventKind::TextDelta {
            agent: "a".into(),
            dialog: "main".into(),
            text: "hi".into(),
        });
        let frame = Frame {
            event: Some("text_delta".into()),
            id: None,
            data: serde_json::to_string(&event).unwrap_or_default(),
        };
        assert_eq!(said(&frame), Said::Event(Box::new(event)));
        let error = Event::new(EventKind::Error {
            message: "step `x`: boom".into(),
            state: "failure".into(),
            session_id: "s".into(),
            cost: None,
            usage: InvokeCost::default(),
        });
        let frame = Frame {
            event: Some("error".into()),
            id: None,
            data: serde_json::to_string(&error).unwrap_or_default(),
        };
        assert_eq!(said(&frame), Said::Failed("step `x`: boom".into()));
    }

    #[test]
    fn upstream_events_map_to_ours() {
        let frame = |data: &str| Frame {
            event: None,
            id: None,
            data: data.into(),
        };
        // Its error event is a failure (upstream's client yields it as data).
        assert_eq!(
            said(&frame(
                r#"{"id": "u1", "timestamp": 1.5, "kind": "error", "data": {"message": "bad"}, "metadata": {}}"#
            )),
            Said::Failed("bad".into())
        );
        let Said::Event(result) = said(&frame(
            r#"{"id": "u2", "timestamp": 2.0, "kind": "result", "data": {"category": "bug"}, "metadata": {}}"#,
        )) else {
            panic!("a result is an event");
        };
        assert_eq!(result.id, "u2");
        assert!(result.kind.is_closing());
        let EventKind::Result { delivery, .. } = &result.kind else {
            panic!("{result:?}")
        };
        assert_eq!(delivery, r#"{"category":"bug"}"#);
        let Said::Event(message) = said(&frame(
            r#"{"id": "u3", "timestamp": 3.0, "kind": "message", "data": "partial", "metadata": {"k": 1}}"#,
        )) else {
            panic!("a message is an event");
        };
        assert_eq!(
            message.kind,
            EventKind::Remote {
                kind: "message".into(),
                data: "partial".into()
            }
        );
        assert_eq!(message.metadata["k"], 1);
        // Not an event at all: its data as a message.
        let Said::Event(plain) = said(&frame("just text")) else {
            panic!("plain data is an event")
        };
        assert_eq!(
            plain.kind,
            EventKind::Remote {
                kind: "message".into(),
                data: "just text".into()
            }
        );
    }
}
