//! Compact JSON output for the lines a batch writes (session records, result
//! lines) and the requests it sends: byte for byte what `serde_json::to_writer`
//! writes, faster.
//!
//! Those lines are most of a batch's own CPU. serde_json checks every byte of
//! every string (keys included) against its escape table one at a time; here
//! strings are scanned eight bytes at a time, and writes go straight into the
//! buffer. Numbers are written by `itoa` and, for floats, by serde_json itself,
//! so every value reads the same. Anything this writer does not handle the way
//! serde_json does (a map key that is not a string, bytes, 128-bit integers)
//! makes `write` start over with serde_json, so the output is always
//! serde_json's.

use serde::ser::{self, Impossible, Serialize};

/// `value` as compact JSON appended to `out`, exactly as
/// `serde_json::to_writer(&mut out, value)` would append it.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let start = out.len();
    match value.serialize(&mut Writer { out: &mut *out }) {
        Ok(()) => Ok(()),
        Err(Fallback::Serde(error)) => {
            out.truncate(start);
            Err(error)
        }
        Err(Fallback::Unsupported) => {
            out.truncate(start);
            serde_json::to_writer(out, value)
        }
    }
}

/// `value` as compact JSON.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    write(&mut out, value)?;
    Ok(out)
}

/// The name serde_json's `RawValue` serializes under: its one field is JSON
/// text to copy verbatim.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

#[derive(Debug)]
enum Fallback {
    /// The value's own `Serialize` failed; serde_json would fail the same way.
    Serde(serde_json::Error),
    /// A shape this writer leaves to serde_json.
    Unsupported,
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::Serde(error) => error.fmt(f),
            Fallback::Unsupported => f.write_str("left to serde_json"),
        }
    }
}

impl std::error::Error for Fallback {}

impl ser::Error for Fallback {
    fn custom<T: std::fmt::Display>(message: T) -> Fallback {
        Fallback::Serde(serde_json::Error::custom(message))
    }
}

type Result<T = ()> = std::result::Result<T, Fallback>;

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn integer(&mut self, value: impl itoa::Integer) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn float<T: Serialize>(&mut self, value: T) -> Result {
        serde_json::to_writer(&mut *self.out, &value).map_err(Fallback::Serde)
    }

    fn string(&mut self, value: &str) {
        self.out.reserve(value.len() + 2);
        self.out.push(b'"');
        escape_into(self.out, value.as_bytes());
        self.out.push(b'"');
    }
}

/// The high bit of each byte of `word` that needs escaping, exact up to the
/// lowest one set: a quote, a backslash or a control character below 0x20
/// (bytes from 0x80 up never are; the subtractions' borrows only reach bytes
/// above one that is, so a byte above the first flagged one may be flagged
/// wrongly, never the first itself).
fn flagged(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let control = word.wrapping_sub(ONES * 0x20);
    let quote = (word ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES);
    let backslash = (word ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
    (control | quote | backslash) & !word & HIGHS
}

/// The index of the first byte from `from` on that needs escaping, if any.
/// Eight bytes at a time; the last word overlaps the one before it (a word
/// pieced together in memory from a few bytes stalls the load that reads it).
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let word_at = |at: usize| {
        let chunk: [u8; 8] = bytes[at..at + 8].try_into().unwrap_or_default();
        flagged(u64::from_le_bytes(chunk))
    };
    let first_in = |at: usize, mask: u64| at + (mask.trailing_zeros() / 8) as usize;
    if bytes.len() < from + 8 {
        return (from..bytes.len())
            .find(|&index| matches!(bytes[index], 0x00..=0x1F | b'"' | b'\\'));
    }
    let mut at = from;
    while at + 8 <= bytes.len() {
        let mask = word_at(at);
        if mask != 0 {
            return Some(first_in(at, mask));
        }
        at += 8;
    }
    if at == bytes.len() {
        return None;
    }
    // The overlapping last word: only its bytes from `at` on are new.
    let last = bytes.len() - 8;
    let mask = word_at(last) & (u64::MAX << (8 * (at - last)));
    (mask != 0).then(|| first_in(last, mask))
}

/// Appends `bytes` (UTF-8) escaped as serde_json escapes them: quotes,
/// backslashes and the control characters below 0x20; nothing else. The runs
/// between escapes are found a word at a time and copied whole, so text with
/// a newline every line costs about what text without one does.
fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut run_start = 0;
    while let Some(index) = next_escape(bytes, run_start) {
        out.extend_from_slice(&bytes[run_start..index]);
        run_start = index + 1;
        let byte = bytes[index];
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0A => b'n',
            0x0C => b'f',
            0x0D => b'r',
            _ => b'u',
        };
        if short == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xF)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
    }
    out.extend_from_slice(&bytes[run_start..]);
}

impl<'a, 'b> ser::Serializer for &'a mut Writer<'b> {
    type Ok = ();
    type Error = Fallback;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    fn serialize_bool(self, value: bool) -> Result {
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_i16(self, value: i16) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_i32(self, value: i32) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_i64(self, value: i64) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_u8(self, value: u8) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_u16(self, value: u16) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_u32(self, value: u32) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_u64(self, value: u64) -> Result {
        self.integer(value);
        Ok(())
    }

    fn serialize_i128(self, _: i128) -> Result {
        Err(Fallback::Unsupported)
    }

    fn serialize_u128(self, _: u128) -> Result {
        Err(Fallback::Unsupported)
    }

    fn serialize_f32(self, value: f32) -> Result {
        self.float(value)
    }

    fn serialize_f64(self, value: f64) -> Result {
        self.float(value)
    }

    fn serialize_char(self, value: char) -> Result {
        self.string(value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result {
        self.string(value);
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Result {
        Err(Fallback::Unsupported)
    }

    fn serialize_none(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.string(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.out.push(b'{');
        self.string(variant);
        self.out.push(b':');
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a, 'b>> {
        Ok(Compound::open(self, len, b"[]"))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'b>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a, 'b>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'b>> {
        self.out.push(b'{');
        self.string(variant);
        self.out.push(b':');
        Ok(Compound::open(self, Some(len), b"[]").closing_variant())
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a, 'b>> {
        Ok(Compound::open(self, len, b"{}"))
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, 'b>> {
        if name == RAW_VALUE_TOKEN {
            return Ok(Compound {
                writer: self,
                state: State::Raw,
                close: 0,
                variant: false,
            });
        }
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'b>> {
        self.out.push(b'{');
        self.string(variant);
        self.out.push(b':');
        Ok(Compound::open(self, Some(len), b"{}").closing_variant())
    }
}

/// An open array or object.
struct Compound<'a, 'b> {
    writer: &'a mut Writer<'b>,
    state: State,
    /// `]` or `}`; 0 when there is nothing to close.
    close: u8,
    /// Also closes the `{"variant": …}` around it.
    variant: bool,
}

#[derive(PartialEq)]
enum State {
    First,
    Rest,
    /// Declared empty and already closed, as serde_json does.
    Empty,
    /// serde_json's `RawValue`: its field is JSON text.
    Raw,
}

impl<'a, 'b> Compound<'a, 'b> {
    fn open(
        writer: &'a mut Writer<'b>,
        len: Option<usize>,
        brackets: &[u8; 2],
    ) -> Compound<'a, 'b> {
        let [open, close] = *brackets;
        writer.out.push(open);
        let (state, close) = if len == Some(0) {
            writer.out.push(close);
            (State::Empty, 0)
        } else {
            (State::First, close)
        };
        Compound {
            writer,
            state,
            close,
            variant: false,
        }
    }

    fn closing_variant(mut self) -> Compound<'a, 'b> {
        self.variant = true;
        self
    }

    /// The comma before every entry but the first.
    fn separate(&mut self) -> Result {
        match self.state {
            State::First => self.state = State::Rest,
            State::Rest => self.writer.out.push(b','),
            // An entry in what said it was empty: serde_json's business.
            State::Empty | State::Raw => return Err(Fallback::Unsupported),
        }
        Ok(())
    }

    fn close(self) -> Result {
        if self.close != 0 {
            self.writer.out.push(self.close);
        }
        if self.variant {
            self.writer.out.push(b'}');
        }
        Ok(())
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.separate()?;
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result {
        if self.state == State::Raw {
            return value.serialize(RawText {
                out: &mut *self.writer.out,
            });
        }
        self.separate()?;
        self.writer.string(key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }
}

/// The array and object parts of `Compound`: each entry goes to
/// `element` (arrays) or `field` (structs), and `end` closes.
macro_rules! compound {
    ($($trait:ident: $method:ident($($key:ident: $key_type:ty,)?) => $entry:ident;)*) => {
        $(impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Fallback;

            fn $method<T: Serialize + ?Sized>(&mut self, $($key: $key_type,)? value: &T) -> Result {
                self.$entry($($key,)? value)
            }

            fn end(self) -> Result {
                self.close()
            }
        })*
    };
}

compound! {
    SerializeSeq: serialize_element() => element;
    SerializeTuple: serialize_element() => element;
    SerializeTupleStruct: serialize_field() => element;
    SerializeTupleVariant: serialize_field() => element;
    SerializeStruct: serialize_field(key: &'static str,) => field;
    SerializeStructVariant: serialize_field(key: &'static str,) => field;
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.separate()?;
        key.serialize(KeyWriter {
            writer: &mut *self.writer,
        })?;
        self.writer.out.push(b':');
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result {
        self.close()
    }
}

/// The parts of a `Serializer` that only takes a string (a map key, the text
/// of a raw value): every other shape is left to serde_json. The impl adds
/// `serialize_str`, `serialize_unit_variant` and `serialize_newtype_struct`.
macro_rules! strings_only {
    () => {
        type Ok = ();
        type Error = Fallback;
        type SerializeSeq = Impossible<(), Fallback>;
        type SerializeTuple = Impossible<(), Fallback>;
        type SerializeTupleStruct = Impossible<(), Fallback>;
        type SerializeTupleVariant = Impossible<(), Fallback>;
        type SerializeMap = Impossible<(), Fallback>;
        type SerializeStruct = Impossible<(), Fallback>;
        type SerializeStructVariant = Impossible<(), Fallback>;

        strings_only!(
            serialize_bool(bool),
            serialize_i8(i8),
            serialize_i16(i16),
            serialize_i32(i32),
            serialize_i64(i64),
            serialize_i128(i128),
            serialize_u8(u8),
            serialize_u16(u16),
            serialize_u32(u32),
            serialize_u64(u64),
            serialize_u128(u128),
            serialize_f32(f32),
            serialize_f64(f64),
            serialize_char(char),
            serialize_bytes(&[u8]),
            serialize_none(),
            serialize_unit(),
            serialize_unit_struct(&'static str),
        );

        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result {
            Err(Fallback::Unsupported)
        }

        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result {
            Err(Fallback::Unsupported)
        }

        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
            Err(Fallback::Unsupported)
        }

        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
            Err(Fallback::Unsupported)
        }

        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct> {
            Err(Fallback::Unsupported)
        }

        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant> {
            Err(Fallback::Unsupported)
        }

        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
            Err(Fallback::Unsupported)
        }

        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
            Err(Fallback::Unsupported)
        }

        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant> {
            Err(Fallback::Unsupported)
        }
    };
    ($($method:ident($($argument:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $argument),*) -> Result<Self::Ok> {
            Err(Fallback::Unsupported)
        })*
    };
}

/// A map key: a string (or a unit variant or newtype around one) is written
/// here; every other key goes to serde_json, which quotes or refuses it.
struct KeyWriter<'a, 'b> {
    writer: &'a mut Writer<'b>,
}

impl ser::Serializer for KeyWriter<'_, '_> {
    strings_only!();

    fn serialize_str(self, value: &str) -> Result {
        self.writer.string(value);
        Ok(())
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.writer.string(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }
}

/// The JSON text inside a `RawValue`, copied as it is.
struct RawText<'a> {
    out: &'a mut Vec<u8>,
}

impl ser::Serializer for RawText<'_> {
    strings_only!();

    fn serialize_str(self, value: &str) -> Result {
        self.out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result {
        Err(Fallback::Unsupported)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result {
        Err(Fallback::Unsupported)
    }
}

#[cfg(test)]
mod tests;
