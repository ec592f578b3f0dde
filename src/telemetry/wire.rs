//! OTLP's trace messages written as protobuf directly: a span's fields go
//! from the record into the request's bytes, with no message in between.
//!
//! The field numbers and wire types are those of OTLP's `trace.proto` and
//! `common.proto` (opentelemetry-proto's messages carry the same ones), and
//! the encoding is protobuf's. Why by hand: building opentelemetry-proto's
//! span messages (a `String` for every attribute's key and value, three
//! levels of messages under each) and having prost encode them (which sizes
//! each nested message again at every level above it) and free them cost a
//! batch task about 80,000 instructions for its three spans, where writing
//! the bytes directly costs under 10,000 (callgrind, docs/benchmarks.md,
//! "Telemetry"): the difference between tracing costing a batch a fifth of
//! its CPU and a few per cent. The tests decode every request with
//! opentelemetry-proto's messages (prost), so the two cannot drift apart.

use opentelemetry_proto::tonic::trace::v1::{SpanFlags, span, status};

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// A field's key (tag), for field numbers below 16: one byte.
const fn key(field: u8, wire: u8) -> u8 {
    (field << 3) | wire
}

/// Appends `value` as a protobuf varint. (prost's own is `doc(hidden)`,
/// for its generated code only.)
pub(super) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many bytes `value` takes as a varint.
pub(super) const fn varint_len(value: u64) -> usize {
    // One byte per started group of seven bits; zero takes one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A length-delimited field's size: its key, its length, its bytes.
const fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Appends a length-delimited field (a key below 16) of `bytes`.
pub(super) fn bytes_field(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    if bytes.len() < 0x80 {
        out.extend_from_slice(&[key(field, LEN), bytes.len() as u8]);
    } else {
        out.push(key(field, LEN));
        varint(out, bytes.len() as u64);
    }
    out.extend_from_slice(bytes);
}

/// A span's attributes as they are written: each one `Span.attributes`'
/// field (a `KeyValue` holding an `AnyValue`), one after another.
#[derive(Default)]
pub(super) struct Attributes {
    bytes: Vec<u8>,
}

/// `Span.attributes`.
const SPAN_ATTRIBUTES: u8 = 9;

impl Attributes {
    /// Attributes with room for `bytes` of them.
    pub(super) fn with_capacity(bytes: usize) -> Attributes {
        Attributes {
            bytes: Vec::with_capacity(bytes),
        }
    }

    /// Forgets the attributes, keeping the room they took.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
    }

    /// The bytes it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// A `KeyValue` of `key` whose `AnyValue` is `any_len` bytes, written
    /// by `any`.
    fn key_value(&mut self, key_text: &str, any_len: usize, any: impl FnOnce(&mut Vec<u8>)) {
        let out = &mut self.bytes;
        let pair = field_len(key_text.len()) + field_len(any_len);
        out.reserve(field_len(pair));
        if pair < 0x80 {
            // Every length a byte (the common case: a key and a short
            // value): the heads in two writes.
            out.extend_from_slice(&[
                key(SPAN_ATTRIBUTES, LEN),
                pair as u8,
                key(1, LEN),
                key_text.len() as u8,
            ]);
            out.extend_from_slice(key_text.as_bytes());
            out.extend_from_slice(&[key(2, LEN), any_len as u8]);
        } else {
            out.push(key(SPAN_ATTRIBUTES, LEN));
            varint(out, pair as u64);
            bytes_field(out, 1, key_text.as_bytes());
            out.push(key(2, LEN));
            varint(out, any_len as u64);
        }
        let before = out.len();
        any(out);
        debug_assert_eq!(out.len() - before, any_len);
    }

    /// A string attribute (`AnyValue.string_value`).
    pub(super) fn str(&mut self, key_text: &str, value: &str) {
        self.key_value(key_text, field_len(value.len()), |out| {
            bytes_field(out, 1, value.as_bytes());
        });
    }

    /// An integer attribute (`AnyValue.int_value`, an `int64`).
    pub(super) fn int(&mut self, key_text: &str, value: i64) {
        let value = value as u64;
        self.key_value(key_text, 1 + varint_len(value), |out| {
            out.push(key(3, VARINT));
            varint(out, value);
        });
    }

    /// A number attribute (`AnyValue.double_value`).
    pub(super) fn double(&mut self, key_text: &str, value: f64) {
        self.key_value(key_text, 9, |out| {
            out.push(key(4, FIXED64));
            out.extend_from_slice(&value.to_le_bytes());
        });
    }

    /// A boolean attribute (`AnyValue.bool_value`).
    pub(super) fn bool(&mut self, key_text: &str, value: bool) {
        self.key_value(key_text, 2, |out| {
            out.push(key(2, VARINT));
            out.push(u8::from(value));
        });
    }

    /// An array of strings (`AnyValue.array_value`: an `ArrayValue` of
    /// `AnyValue.string_value`s).
    pub(super) fn strings(&mut self, key_text: &str, values: &[&str]) {
        let array: usize = values
            .iter()
            .map(|value| field_len(field_len(value.len())))
            .sum();
        self.key_value(key_text, field_len(array), |out| {
            out.push(key(5, LEN));
            varint(out, array as u64);
            for value in values {
                out.push(key(1, LEN));
                varint(out, field_len(value.len()) as u64);
                bytes_field(out, 1, value.as_bytes());
            }
        });
    }

    /// An attribute of the API's kind (a batch span's): a string, number
    /// or boolean as such, anything else as its text.
    pub(super) fn value(&mut self, key_text: &str, value: &opentelemetry::Value) {
        match value {
            opentelemetry::Value::Bool(value) => self.bool(key_text, *value),
            opentelemetry::Value::I64(value) => self.int(key_text, *value),
            opentelemetry::Value::F64(value) => self.double(key_text, *value),
            opentelemetry::Value::String(value) => self.str(key_text, value.as_str()),
            other => self.str(key_text, &other.to_string()),
        }
    }
}

/// A link to another trace's span (`Span.Link`).
pub(super) struct Link {
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
    pub(super) flags: u32,
}

/// One span's fields, borrowed from where they are.
pub(super) struct Fields<'a> {
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
    pub(super) parent_span_id: Option<[u8; 8]>,
    /// `Span.flags` (sampled, and whether the parent is remote).
    pub(super) flags: u32,
    /// The name, as its operation and what it acted on: `chat gpt-4o`.
    pub(super) name: (&'a str, &'a str),
    pub(super) kind: span::SpanKind,
    pub(super) start_nanos: u64,
    pub(super) end_nanos: u64,
    pub(super) attributes: &'a Attributes,
    pub(super) link: Option<&'a Link>,
    /// The status's message when the span failed (its code then `ERROR`).
    pub(super) error: Option<&'a str>,
}

/// The span flags' fixed part: the parent's remoteness is known.
pub(super) fn flags(sampled: bool, remote: bool) -> u32 {
    let mut flags = SpanFlags::ContextHasIsRemoteMask as u32 | u32::from(sampled);
    if remote {
        flags |= SpanFlags::ContextIsRemoteMask as u32;
    }
    flags
}

/// Spans encoded: each one `ScopeSpans.spans`' field (key, length, the
/// `Span` message), one after another, and where each ends.
#[derive(Default)]
pub(super) struct Encoded {
    pub(super) bytes: Vec<u8>,
    pub(super) ends: Vec<usize>,
}

/// `ScopeSpans.spans`.
const SCOPE_SPANS_SPANS: u8 = 2;

impl Encoded {
    /// No spans yet, with room for `bytes` of them and `spans` ends.
    pub(super) fn with_capacity(bytes: usize, spans: usize) -> Encoded {
        Encoded {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(spans),
        }
    }

    /// How many spans.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends a copy of `other`'s spans after these.
    pub(super) fn extend_from(&mut self, other: &Encoded) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| base + end));
    }

    /// Forgets the spans, keeping the room they took.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The bytes it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Takes the first `count` spans (all of them, when there are fewer).
    pub(super) fn take_front(&mut self, count: usize) -> Encoded {
        if count == 0 {
            return Encoded::default();
        }
        if count >= self.ends.len() {
            return std::mem::take(self);
        }
        let cut = self.ends[count - 1];
        // The rest gets room for another batch as large as the one taken,
        // so the queue does not grow to it again by doubling.
        let mut rest_bytes = Vec::with_capacity(cut.max(self.bytes.len() - cut));
        rest_bytes.extend_from_slice(&self.bytes[cut..]);
        self.bytes.truncate(cut);
        let rest_ends = self.ends.split_off(count);
        let front = Encoded {
            bytes: std::mem::replace(&mut self.bytes, rest_bytes),
            ends: std::mem::take(&mut self.ends),
        };
        self.ends = rest_ends.into_iter().map(|end| end - cut).collect();
        front
    }

    /// Appends a span of `fields`.
    pub(super) fn push(&mut self, fields: &Fields<'_>) {
        let (operation, subject) = fields.name;
        let name_len = operation.len() + usize::from(!subject.is_empty()) + subject.len();
        let status_len = match fields.error {
            // The message, and the code `ERROR` (2) as a varint.
            Some(message) => {
                (if message.is_empty() {
                    0
                } else {
                    field_len(message.len())
                }) + 2
            }
            None => 0,
        };
        let link_len = 2 + 16 + 2 + 8 + 5;
        let body = 2
            + 16
            + 2
            + 8
            + if fields.parent_span_id.is_some() {
                2 + 8
            } else {
                0
            }
            + field_len(name_len)
            + 2
            + if fields.start_nanos != 0 { 9 } else { 0 }
            + if fields.end_nanos != 0 { 9 } else { 0 }
            + fields.attributes.bytes.len()
            + if fields.link.is_some() {
                field_len(link_len)
            } else {
                0
            }
            + field_len(status_len)
            + 2
            + 4;
        let out = &mut self.bytes;
        out.reserve(field_len(body));
        out.push(key(SCOPE_SPANS_SPANS, LEN));
        varint(out, body as u64);
        let start = out.len();
        bytes_field(out, 1, &fields.trace_id);
        bytes_field(out, 2, &fields.span_id);
        if let Some(parent) = &fields.parent_span_id {
            bytes_field(out, 4, parent);
        }
        out.push(key(5, LEN));
        varint(out, name_len as u64);
        out.extend_from_slice(operation.as_bytes());
        if !subject.is_empty() {
            out.push(b' ');
            out.extend_from_slice(subject.as_bytes());
        }
        out.push(key(6, VARINT));
        out.push(fields.kind as u8);
        if fields.start_nanos != 0 {
            out.push(key(7, FIXED64));
            out.extend_from_slice(&fields.start_nanos.to_le_bytes());
        }
        if fields.end_nanos != 0 {
            out.push(key(8, FIXED64));
            out.extend_from_slice(&fields.end_nanos.to_le_bytes());
        }
        out.extend_from_slice(&fields.attributes.bytes);
        if let Some(link) = fields.link {
            out.push(key(13, LEN));
            varint(out, link_len as u64);
            bytes_field(out, 1, &link.trace_id);
            bytes_field(out, 2, &link.span_id);
            out.push(key(6, FIXED32));
            out.extend_from_slice(&link.flags.to_le_bytes());
        }
        // The status, always present (empty when the span did not fail), as
        // the SDK's exporter sends it.
        out.push(key(15, LEN));
        varint(out, status_len as u64);
        if let Some(message) = fields.error {
            if !message.is_empty() {
                bytes_field(out, 2, message.as_bytes());
            }
            out.push(key(3, VARINT));
            out.push(status::StatusCode::Error as u8);
        }
        // Field 16 takes a two-byte key.
        varint(out, (16 << 3) | u64::from(FIXED32));
        out.extend_from_slice(&fields.flags.to_le_bytes());
        debug_assert_eq!(out.len() - start, body);
        self.ends.push(out.len());
    }
}

/// The parts of an `ExportTraceServiceRequest` around its spans, encoded
/// once: the resource and the instrumentation scope (by prost, from
/// opentelemetry-proto's messages) and their schemas.
pub(super) struct Envelope {
    resource: Vec<u8>,
    resource_schema: String,
    scope: Vec<u8>,
    scope_schema: String,
}

impl Envelope {
    pub(super) fn new(
        resource: &opentelemetry_proto::tonic::resource::v1::Resource,
        resource_schema: String,
        scope: &opentelemetry_proto::tonic::common::v1::InstrumentationScope,
        scope_schema: String,
    ) -> Envelope {
        Envelope {
            resource: prost::Message::encode_to_vec(resource),
            resource_schema,
            scope: prost::Message::encode_to_vec(scope),
            scope_schema,
        }
    }

    /// The envelope of this process's spans: the SDK's resource (from the
    /// standard variables) and the instrumentation scope.
    pub(super) fn from_sdk(
        resource: &opentelemetry_sdk::Resource,
        scope: &opentelemetry::InstrumentationScope,
    ) -> Envelope {
        use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
        let attributes = ResourceAttributesWithSchema::from(resource);
        let scope_message: opentelemetry_proto::tonic::common::v1::InstrumentationScope =
            (scope, None).into();
        Envelope::new(
            &opentelemetry_proto::tonic::resource::v1::Resource {
                attributes: attributes.attributes.0,
                ..Default::default()
            },
            attributes.schema_url.unwrap_or_default(),
            &scope_message,
            scope.schema_url().unwrap_or_default().to_string(),
        )
    }

    /// The request (`ExportTraceServiceRequest`) carrying `spans`: one
    /// `ResourceSpans` holding one `ScopeSpans`.
    pub(super) fn request(&self, spans: &Encoded) -> Vec<u8> {
        let optional = |text: &str| {
            if text.is_empty() {
                0
            } else {
                field_len(text.len())
            }
        };
        let scope_spans =
            field_len(self.scope.len()) + spans.bytes.len() + optional(&self.scope_schema);
        let resource_spans = field_len(self.resource.len())
            + field_len(scope_spans)
            + optional(&self.resource_schema);
        let mut out = Vec::with_capacity(field_len(resource_spans));
        out.push(key(1, LEN));
        varint(&mut out, resource_spans as u64);
        bytes_field(&mut out, 1, &self.resource);
        out.push(key(2, LEN));
        varint(&mut out, scope_spans as u64);
        bytes_field(&mut out, 1, &self.scope);
        out.extend_from_slice(&spans.bytes);
        if !self.scope_schema.is_empty() {
            bytes_field(&mut out, 3, self.scope_schema.as_bytes());
        }
        if !self.resource_schema.is_empty() {
            bytes_field(&mut out, 3, self.resource_schema.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue as Array, InstrumentationScope, KeyValue, any_value,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    #[test]
    fn varints_are_protobufs_at_every_length() {
        for value in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint(&mut out, value);
            assert_eq!(out.len(), varint_len(value), "{value}");
            let mut expected = Vec::new();
            prost::encoding::encode_varint(value, &mut expected);
            assert_eq!(out, expected, "{value}");
        }
    }

    fn any(value: any_value::Value) -> Option<AnyValue> {
        Some(AnyValue { value: Some(value) })
    }

    fn pair(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: any(value),
            ..Default::default()
        }
    }

    /// The first span of the test below, as opentelemetry-proto's message.
    fn chat_span(long: &str) -> Span {
        use any_value::Value::*;
        Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            parent_span_id: vec![3; 8],
            flags: flags(true, true),
            name: "chat gpt-4o".into(),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            end_time_unix_nano: 1_700_000_001_000_000_000,
            attributes: vec![
                pair("gen_ai.operation.name", StringValue("chat".into())),
                pair("lllm.long", StringValue(long.to_string())),
                pair("lllm.empty", StringValue(String::new())),
                pair("gen_ai.usage.input_tokens", IntValue(1234)),
                pair("lllm.negative", IntValue(-5)),
                pair("lllm.cost_usd", DoubleValue(0.125)),
                pair("lllm.cached", BoolValue(true)),
                pair(
                    "gen_ai.response.finish_reasons",
                    ArrayValue(Array {
                        values: vec![
                            AnyValue {
                                value: Some(StringValue("stop".into())),
                            },
                            AnyValue {
                                value: Some(StringValue(long.to_string())),
                            },
                        ],
                    }),
                ),
                pair("lllm.tasks", IntValue(7)),
            ],
            links: vec![span::Link {
                trace_id: vec![7; 16],
                span_id: vec![8; 8],
                flags: flags(true, true),
                ..Default::default()
            }],
            status: Some(Status {
                message: long.to_string(),
                code: status::StatusCode::Error as i32,
            }),
            ..Default::default()
        }
    }

    /// What is written decodes, by opentelemetry-proto's messages, to the
    /// span prost would have encoded from them: every kind of attribute,
    /// a parent, a link, a failed status, long values (two-byte lengths),
    /// and an empty batch.
    #[test]
    fn a_written_request_decodes_to_the_messages_it_stands_for() {
        use any_value::Value::*;
        let long = "é".repeat(300);
        let mut attributes = Attributes::default();
        attributes.str("gen_ai.operation.name", "chat");
        attributes.str("lllm.long", &long);
        attributes.str("lllm.empty", "");
        attributes.int("gen_ai.usage.input_tokens", 1234);
        attributes.int("lllm.negative", -5);
        attributes.double("lllm.cost_usd", 0.125);
        attributes.bool("lllm.cached", true);
        attributes.strings("gen_ai.response.finish_reasons", &["stop", &long]);
        attributes.value("lllm.tasks", &opentelemetry::Value::I64(7));
        let link = Link {
            trace_id: [7; 16],
            span_id: [8; 8],
            flags: flags(true, true),
        };
        let mut spans = Encoded::default();
        spans.push(&Fields {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: Some([3; 8]),
            flags: flags(true, true),
            name: ("chat", "gpt-4o"),
            kind: span::SpanKind::Client,
            start_nanos: 1_700_000_000_000_000_000,
            end_nanos: 1_700_000_001_000_000_000,
            attributes: &attributes,
            link: Some(&link),
            error: Some(&long),
        });
        let mut plain = Attributes::default();
        plain.str("k", "v");
        let mut second = Encoded::default();
        second.push(&Fields {
            trace_id: [1; 16],
            span_id: [4; 8],
            parent_span_id: None,
            flags: flags(false, false),
            name: ("invoke_workflow", ""),
            kind: span::SpanKind::Internal,
            start_nanos: 0,
            end_nanos: 5,
            attributes: &plain,
            link: None,
            error: Some(""),
        });
        spans.extend_from(&second);
        assert_eq!(spans.len(), 2);
        let resource = Resource {
            attributes: vec![pair("service.name", StringValue("lllm".into()))],
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: "lllm".into(),
            version: "0.1.0".into(),
            ..Default::default()
        };
        let envelope = Envelope::new(
            &resource,
            "https://opentelemetry.io/schemas/1.42.0".into(),
            &scope,
            String::new(),
        );
        let body = envelope.request(&spans);
        let decoded: ExportTraceServiceRequest =
            prost::Message::decode(body.as_slice()).expect("decodes");
        let expected_first = chat_span(&long);
        let expected_second = Span {
            trace_id: vec![1; 16],
            span_id: vec![4; 8],
            flags: flags(false, false),
            name: "invoke_workflow".into(),
            kind: span::SpanKind::Internal as i32,
            end_time_unix_nano: 5,
            attributes: vec![pair("k", StringValue("v".into()))],
            status: Some(Status {
                message: String::new(),
                code: status::StatusCode::Error as i32,
            }),
            ..Default::default()
        };
        let expected = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope.clone()),
                    spans: vec![expected_first.clone(), expected_second],
                    schema_url: String::new(),
                }],
                schema_url: "https://opentelemetry.io/schemas/1.42.0".into(),
            }],
        };
        assert_eq!(decoded, expected);
        // Byte for byte what prost writes from those messages.
        assert_eq!(body, prost::Message::encode_to_vec(&expected));

        // Taken apart at a span's end, each part is a request of its own.
        let mut rest = Encoded::default();
        rest.extend_from(&spans);
        let front = rest.take_front(1);
        assert_eq!((front.len(), rest.len()), (1, 1));
        // What stays has room for another part as large as the one taken.
        assert!(rest.capacity() >= front.bytes.len());
        let decoded: ExportTraceServiceRequest =
            prost::Message::decode(envelope.request(&front).as_slice()).unwrap();
        assert_eq!(
            decoded.resource_spans[0].scope_spans[0].spans,
            vec![expected_first]
        );
        let decoded: ExportTraceServiceRequest =
            prost::Message::decode(envelope.request(&rest).as_slice()).unwrap();
        assert_eq!(
            decoded.resource_spans[0].scope_spans[0].spans[0].span_id,
            vec![4; 8]
        );
        assert!(rest.take_front(5).len() == 1 && rest.is_empty());
        let empty: ExportTraceServiceRequest =
            prost::Message::decode(envelope.request(&rest).as_slice()).unwrap();
        assert!(empty.resource_spans[0].scope_spans[0].spans.is_empty());
    }
}
