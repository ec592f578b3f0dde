//! Reading a node of a config as a raw type leniently: a value of the wrong
//! type (or a key the type does not know) is a problem at its path, left out,
//! and the rest read again, so every one is listed and what it belongs to
//! stays (issue 27). Which raw types there are is `raw`'s business.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::places::Problems;
use super::resolve::describe_value;

/// Deserializes `value` as `T`; each node of the wrong type, and each key
/// `T` does not know, is a problem at its path, and is left out (a key) or
/// dropped (a list item) for the rest to be read again: every such node is
/// reported, not only serde's first (issue 27), and what it belongs to
/// stays (an agent whose `tools` is wrong is still an agent). `path` maps a
/// node's path in `value` (`tools[1]`) to its path in the document. `None`
/// when `value` itself is of the wrong type.
pub(super) fn typed<T: serde::de::DeserializeOwned>(
    mut value: Value,
    path: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<T> {
    use serde_path_to_error::Segment;
    // The items dropped from each list so far (by the list's path as
    // written), so that a later problem names an item by its index as written.
    let mut dropped: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // Each round reads the whole value again: past this many problems (more
    // than are shown), the value is given up rather than read again and again.
    for _ in 0..=super::MAX_PROBLEMS_SHOWN {
        let error = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(typed) => return Some(typed),
            Err(error) => error,
        };
        let segments: Vec<Segment> = error.path().iter().cloned().collect();
        let (mut written, mut parent, mut item) = (String::new(), String::new(), None);
        let mut followed = true;
        for segment in &segments {
            parent.clone_from(&written);
            match segment {
                Segment::Map { key } => {
                    written = crate::yaml::child_key(&written, key);
                    item = None;
                }
                Segment::Seq { index } => {
                    let mut index = *index;
                    for gone in dropped.get(&written).into_iter().flatten() {
                        if *gone <= index {
                            index += 1;
                        }
                    }
                    written = crate::yaml::child_index(&written, index);
                    item = Some(index);
                }
                Segment::Enum { .. } | Segment::Unknown => followed = false,
            }
        }
        let at = path(&written);
        let message = error.into_inner().to_string();
        if at.is_empty() {
            problems.file(message);
        } else {
            problems.at(at.clone(), format!("`{at}`: {message}"));
        }
        if !followed || segments.is_empty() || !remove(&mut value, &segments) {
            return None;
        }
        if let Some(index) = item {
            let gone = dropped.entry(parent).or_default();
            gone.push(index);
            gone.sort_unstable();
        }
    }
    None
}

/// Removes the node at `segments` (a key from its mapping, an item from its
/// list); whether there was one.
fn remove(value: &mut Value, segments: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut node = value;
    for segment in parents {
        let next = match (segment, node) {
            (Segment::Map { key }, Value::Object(map)) => map.get_mut(key),
            (Segment::Seq { index }, Value::Array(items)) => items.get_mut(*index),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        node = next;
    }
    match (last, node) {
        (Segment::Map { key }, Value::Object(map)) => map.shift_remove(key).is_some(),
        (Segment::Seq { index }, Value::Array(items)) if *index < items.len() => {
            items.remove(*index);
            true
        }
        _ => false,
    }
}

/// The first key of a path (`tools` of `tools[1].name`).
pub(super) fn top_key(path: &str) -> &str {
    let end = path.find(['.', '[']).unwrap_or(path.len());
    &path[..end]
}

/// The mapping at `path` (an entry of a list of them), or a problem saying
/// what it is instead.
pub(super) fn entry_map(
    value: Value,
    path: &str,
    what: &str,
    problems: &mut Problems,
) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map),
        other => {
            problems.at(
                path,
                format!(
                    "`{path}` must be a mapping ({what}), not {}",
                    describe_value(&other)
                ),
            );
            None
        }
    }
}
