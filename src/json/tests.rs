use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::*;

#[track_caller]
fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
    let expected = serde_json::to_vec(value).unwrap();
    let mut ours = b"prefix".to_vec();
    write(&mut ours, value).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ours[6..]),
        String::from_utf8_lossy(&expected)
    );
}

#[test]
fn every_escaped_byte_at_every_place_of_a_chunk() {
    let specials: Vec<char> = (0u8..0x20)
        .map(char::from)
        .chain([
            '"', '\\', '/', '\u{7f}', 'é', '€', '😀', ' ', '!', '#', '[', ']',
        ])
        .collect();
    for special in specials {
        for before in 0..18 {
            for after in [0, 1, 7, 8, 9] {
                let text = format!("{}{special}{}", "a".repeat(before), "b".repeat(after));
                same_as_serde_json(&text);
            }
        }
    }
}

#[test]
fn two_escapes_at_every_distance_in_long_text() {
    // Runs between escapes are found a word at a time: the second escape may
    // sit in the same word as the first, the next one, or the overlapping
    // last word of the string.
    for length in [8, 9, 15, 16, 17, 31, 40] {
        for first in 0..length {
            for second in first..length {
                let text: String = (0..length)
                    .map(|index| match index {
                        _ if index == first => '"',
                        _ if index == second => '\n',
                        _ if index % 5 == 0 => 'é',
                        _ => 'a',
                    })
                    .collect();
                same_as_serde_json(&text);
            }
        }
    }
}

#[test]
fn random_strings_read_as_serde_json_writes_them() {
    let alphabet: Vec<char> = "ab \"\\\n\t\r\u{0}\u{1f}\u{8}\u{c}é😀{}:,/"
        .chars()
        .collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..3000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = (state >> 58) as usize;
        let text: String = (0..len)
            .map(|index| {
                let pick = (state.rotate_left(index as u32 * 5) >> 40) as usize;
                alphabet[pick % alphabet.len()]
            })
            .collect();
        same_as_serde_json(&text);
        same_as_serde_json(&json!({ text.clone(): [text] }));
    }
}

#[test]
fn values_of_every_kind() {
    same_as_serde_json(&json!(null));
    same_as_serde_json(&json!({
        "int": -42, "big": u64::MAX, "small": i64::MIN, "float": 4.5e-6, "tenth": 0.1,
        "huge": 1e300, "whole": 3.0, "t": true, "f": false, "none": null,
        "empty_list": [], "empty_map": {}, "nested": [[], [{}], {"a": [1, "x", null]}],
        "unicode key é\n": "value",
    }));
    same_as_serde_json(&f64::NAN);
    same_as_serde_json(&f32::INFINITY);
    same_as_serde_json(&1.5f32);
    same_as_serde_json(&'\n');
    same_as_serde_json(&Some(7u8));
    same_as_serde_json(&(1, "two", 3.5));
    same_as_serde_json(&());
}

#[derive(Serialize)]
enum Shape {
    Unit,
    Newtype(u32),
    Tuple(u32, String),
    EmptyTuple(),
    Struct { width: u32, label: Option<String> },
    EmptyStruct {},
}

#[derive(Serialize)]
struct Unit;

#[derive(Serialize)]
struct Wrapper(String);

#[derive(Serialize)]
struct Record {
    shapes: Vec<Shape>,
    unit: Unit,
    wrapper: Wrapper,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<u8>,
    raw: Box<RawValue>,
    raw_list: Vec<Box<RawValue>>,
    by_shape: BTreeMap<String, Shape>,
}

#[test]
fn structs_enums_and_raw_json() {
    let raw = RawValue::from_string(r#"{ "kept" : [1, 2] , "as": "is" }"#.into()).unwrap();
    same_as_serde_json(&Record {
        shapes: vec![
            Shape::Unit,
            Shape::Newtype(3),
            Shape::Tuple(1, "a\"b".into()),
            Shape::EmptyTuple(),
            Shape::Struct {
                width: 2,
                label: None,
            },
            Shape::EmptyStruct {},
        ],
        unit: Unit,
        wrapper: Wrapper("w".into()),
        skipped: None,
        raw: raw.clone(),
        raw_list: vec![raw.clone(), RawValue::from_string("null".into()).unwrap()],
        by_shape: BTreeMap::from([("k".to_string(), Shape::Newtype(1))]),
    });
}

#[test]
fn what_it_leaves_to_serde_json_reads_the_same() {
    // Keys that are not strings, bytes and 128-bit integers take the
    // serde_json path, at any depth.
    same_as_serde_json(&json!([1, {"a": 2}]).as_array().map(|items| {
        let mut keyed = BTreeMap::new();
        keyed.insert(5u32, items.clone());
        keyed.insert(7u32, Vec::new());
        keyed
    }));
    same_as_serde_json(&BTreeMap::from([(true, 1), (false, 2)]));
    same_as_serde_json(&(1u8, serde_bytes_like(), u128::MAX, i128::MIN));
    // A key serde_json refuses is refused here too.
    let refused = BTreeMap::from([(vec![1u8], 1)]);
    assert!(serde_json::to_vec(&refused).is_err());
    assert!(to_vec(&refused).is_err());
}

fn serde_bytes_like() -> impl Serialize {
    struct Bytes;
    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(
            &self,
            serializer: S,
        ) -> std::result::Result<S::Ok, S::Error> {
            serializer.serialize_bytes(b"\x00\xff")
        }
    }
    Bytes
}

#[test]
fn a_failing_value_leaves_the_buffer_as_it_was() {
    struct Fails;
    impl Serialize for Fails {
        fn serialize<S: serde::Serializer>(&self, _: S) -> std::result::Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("no such thing"))
        }
    }
    let mut out = b"kept".to_vec();
    let error = write(&mut out, &json!({"a": 1}).as_object().map(|_| vec![Fails])).unwrap_err();
    assert_eq!(error.to_string(), "no such thing");
    assert_eq!(out, b"kept");
}
