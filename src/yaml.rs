//! Reading user YAML — tactic files, prompt front matter, mock scripts, price
//! files, the user config file — into JSON values. This is serde_yaml_ng with
//! four guards:
//!
//! - flow collections nested deeper than [`MAX_FLOW_DEPTH`] are refused by a
//!   linear pre-scan ([`check_nesting`]) before the parser sees the text:
//!   libyaml's scanner takes time quadratic in the flow depth (150,000 `[` hung
//!   a run), and the deserializer refuses more than 128 nested collections
//!   anyway, so nothing the scan refuses could have loaded;
//! - a key repeated in one mapping is an error at the repeated key, not the
//!   last one silently winning;
//! - numbers without a JSON form stay text, so a numeric key rejects them by
//!   name: `.inf`, `-.inf` and `.nan` become those strings instead of `null`
//!   (which means "the default"), and an integer past 64 bits its digits
//!   instead of an error that hid every other problem of the file (serde_yaml_ng
//!   itself keeps `1e309` as text).
//!
//! [`parse_located`] also gives where each node is written ([`Positions`],
//! `located.rs`), so a problem found after reading names its `line:column`
//! too. What the values mean is each caller's business.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

mod located;
mod nesting;

pub use located::Positions;
use located::Recorder;
pub(crate) use located::{child_index, child_key, join as join_path, parent as parent_path};
pub use nesting::{MAX_FLOW_DEPTH, check_nesting};

/// Why YAML text could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Where, from 1, when the parser knows.
    pub location: Option<Location>,
    /// What is wrong, without the location.
    pub message: String,
}

/// A line and a column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column (in characters), from 1.
    pub column: usize,
}

impl fmt::Display for Error {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str(&self.message)?;
        if let Some(Location { line, column }) = self.location {
            write!(formatter, " at line {line} column {column}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<serde_yaml_ng::Error> for Error {
    fn from(error: serde_yaml_ng::Error) -> Error {
        let location = error.location().map(|location| Location {
            line: location.line(),
            column: location.column(),
        });
        let message = error.to_string();
        let message = match message.find(" at line ") {
            Some(cut) => message[..cut].to_string(),
            None => message,
        };
        Error { location, message }
    }
}

/// Parses YAML into a JSON value (see the module documentation for what
/// differs from `serde_yaml_ng::from_str::<Value>`).
/// A leading byte order mark is dropped (`file::without_bom`).
pub fn parse(text: &str) -> Result<Value, Error> {
    let text = crate::file::without_bom(text);
    check_nesting(text)?;
    Tree { recorder: None }
        .deserialize(serde_yaml_ng::Deserializer::from_str(text))
        .map_err(Error::from)
}

/// [`parse`], with where each node is written ([`Positions`]): what a
/// problem found after reading names as `line:column`.
pub fn parse_located(text: &str) -> Result<(Value, Positions), Error> {
    let text = crate::file::without_bom(text);
    check_nesting(text)?;
    let mut recorder = Recorder::new(text);
    let value = Tree {
        recorder: Some(&mut recorder),
    }
    .deserialize(serde_yaml_ng::Deserializer::from_str(text))
    .map_err(Error::from)?;
    Ok((value, recorder.finish()))
}

/// Reads one node into a JSON value (see the module documentation),
/// recording where its nodes are when given a recorder.
struct Tree<'r, 't> {
    recorder: Option<&'r mut Recorder<'t>>,
}

impl<'de> DeserializeSeed<'de> for Tree<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tree<'_, '_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_i128<E>(self, value: i128) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_u128<E>(self, value: u128) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or_else(
            || {
                Value::String(
                    match (value.is_nan(), value > 0.0) {
                        (true, _) => ".nan",
                        (false, true) => ".inf",
                        (false, false) => "-.inf",
                    }
                    .into(),
                )
            },
            Value::Number,
        ))
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Value, E> {
        // A slice of the text: where the scalar is written.
        if let Some(recorder) = self.recorder {
            recorder.enter(Some(value));
        }
        Ok(Value::String(value.to_string()))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut recorder = self.recorder;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Item {
            index: items.len(),
            recorder: recorder.as_deref_mut(),
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut recorder = self.recorder;
        let parent = recorder.as_deref_mut().and_then(Recorder::save);
        let mut map = Map::new();
        while let Some(key) = entries.next_key_seed(NewKey {
            map: &map,
            recorder: recorder.as_deref_mut(),
        })? {
            let value = entries.next_value_seed(Tree {
                recorder: recorder.as_deref_mut(),
            })?;
            if let (Some(recorder), Some(parent)) = (recorder.as_deref_mut(), &parent) {
                recorder.restore(parent);
            }
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

/// Item `index` of a list: its path is set while it is read, and it is
/// placed where it starts.
struct Item<'r, 't> {
    index: usize,
    recorder: Option<&'r mut Recorder<'t>>,
}

impl<'de> DeserializeSeed<'de> for Item<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        let Some(recorder) = self.recorder else {
            return Tree { recorder: None }.deserialize(deserializer);
        };
        let Some(parent) = recorder.enter_item(self.index) else {
            return Tree {
                recorder: Some(recorder),
            }
            .deserialize(deserializer);
        };
        let mark = recorder.mark();
        let value = Tree {
            recorder: Some(&mut *recorder),
        }
        .deserialize(deserializer)?;
        recorder.leave_item(mark, parent);
        Ok(value)
    }
}

/// A mapping's key, refused when the mapping has it already. The check runs
/// while the key itself is read, so the error carries the repeated key's
/// line and column. With a recorder, the entry's path is set (until the
/// mapping resets it after the value) and placed at the key.
struct NewKey<'a, 'r, 't> {
    map: &'a Map<String, Value>,
    recorder: Option<&'r mut Recorder<'t>>,
}

impl<'de> DeserializeSeed<'de> for NewKey<'_, '_, '_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl NewKey<'_, '_, '_> {
    fn accept<E: de::Error>(self, key: &str, written: Option<&str>) -> Result<String, E> {
        if self.map.contains_key(key) {
            return Err(E::custom(format!(
                "duplicate key `{key}`; a key may appear once in a mapping"
            )));
        }
        if let Some(recorder) = self.recorder {
            recorder.enter_key(key, written);
        }
        Ok(key.to_string())
    }
}

impl<'de> Visitor<'de> for NewKey<'_, '_, '_> {
    type Value = String;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<String, E> {
        self.accept(key, Some(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        self.accept(key, None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_without_a_json_form_stay_text() {
        let value = parse(
            "a: .inf\nb: -.inf\nc: .nan\nd: 1e20\ne: [1, -2, 2.5, x, null, true]\nf: {g: .NaN}\n\
             h: 99999999999999999999999999999\ni: -99999999999999999999999999999\n",
        )
        .unwrap();
        assert_eq!(
            value,
            json!({"a": ".inf", "b": "-.inf", "c": ".nan", "d": 1e20,
                   "e": [1, -2, 2.5, "x", null, true], "f": {"g": ".nan"},
                   "h": "99999999999999999999999999999",
                   "i": "-99999999999999999999999999999"})
        );
        // Everything else reads as serde_yaml_ng reads it into JSON.
        let text = "x: 1\ny: 'two'\nz:\n  - {a: 1.5, b: ~}\n";
        assert_eq!(
            parse(text).unwrap(),
            serde_yaml_ng::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn the_located_reading_reads_what_parse_reads() {
        for text in [
            "a: .inf\nb: [1, x, {c: ~}]\nd: 99999999999999999999999999999\n",
            "\u{feff}a: 1\n",
            "t: |\n  block\n'q': \"esc\\t\"\n",
            "a: &x {k: v}\nb: *x\n",
            "- 1\n- [2, 3]\n",
            "",
            "a: [1, 2",
            "a: 1\nb: 2\na: 3\n",
            "a: {b: 1, b: 2}\n",
        ] {
            assert_eq!(
                parse_located(text).map(|(value, _)| value),
                parse(text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_byte_order_mark_is_no_document() {
        // serde_yaml_ng read it as a second document (issue 26).
        assert_eq!(
            parse("\u{feff}a: 1\nb: [x]\n").unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(parse("\u{feff}").unwrap(), Value::Null);
    }

    #[track_caller]
    fn error_case(text: &str, expected: &str) {
        assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text:?}");
    }

    #[test]
    fn errors_carry_the_place() {
        error_case(
            "a: [1, 2",
            "did not find expected ',' or ']' at line 2 column 1",
        );
        error_case(
            "a: 1\nb: 2\na: 3\n",
            "duplicate key `a`; a key may appear once in a mapping at line 3 column 1",
        );
        error_case(
            "agents:\n  - {name: x, model: y, name: z}\n",
            "agents[0]: duplicate key `name`; a key may appear once in a mapping at line 2 column 25",
        );
        error_case(
            "a:\n  b: 1\n  c:\n    d: 1\n    d: 2\n",
            "a.c: duplicate key `d`; a key may appear once in a mapping at line 5 column 5",
        );
        // The same key in two mappings is no repeat.
        assert!(parse("- {a: 1}\n- {a: 2}\n").is_ok());
    }
}
