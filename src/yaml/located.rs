//! Where each node of a YAML document is written: [`Positions`], made by
//! [`parse_located`](super::parse_located) in the same single pass that reads
//! the values, so a problem found after reading (an unknown key, a value of
//! the wrong type, a number out of range) can name its line and column.
//!
//! serde-saphyr gives each node where it is written (`Spanned`), and a
//! node that an alias repeats where its anchor's text is. A mapping entry
//! is placed at its key, a list item at itself (a block mapping at its
//! first key, a flow collection at its bracket). [`Positions::get`] still
//! answers a path without a place of its own (past the budget below) with
//! the nearest placed node around it.
//!
//! Paths are written as lllm's messages name places: keys joined by `.`, list
//! items as `[index]` (`agent_configs[0].model_args.max_tokens`), as
//! `serde_path_to_error` shows them too.

use std::collections::HashMap;

use super::Location;

/// Where each node of a document is written: its path to its line and
/// column (see the module documentation).
///
/// ```
/// let (value, positions) = lllm::yaml::parse_located(
///     "agent_configs:\n  - name: writer\n    model_args:\n      max_tokens: lots\n",
/// )?;
/// assert_eq!(value["agent_configs"][0]["model_args"]["max_tokens"], "lots");
/// let at = positions.get("agent_configs[0].model_args.max_tokens").unwrap();
/// assert_eq!((at.line, at.column), (4, 7));
/// // A list item is where its first key is.
/// let at = positions.get("agent_configs[0]").unwrap();
/// assert_eq!((at.line, at.column), (2, 5));
/// // A path the document does not have has no place.
/// assert!(positions.get("agent_configs[0].tools").is_none());
/// # Ok::<(), lllm::yaml::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Positions {
    /// Every node's path, with its place when known.
    nodes: HashMap<String, Option<Location>>,
}

impl Positions {
    /// Where the node at `path` is written: its own place, else that of the
    /// nearest node around it that has one; `None` when the document has no
    /// node at `path`.
    pub fn get(&self, path: &str) -> Option<Location> {
        if !self.contains(path) {
            return None;
        }
        let mut path = path;
        loop {
            if let Some(Some(location)) = self.nodes.get(path) {
                return Some(*location);
            }
            path = parent(path)?;
        }
    }

    /// Whether the document has a node at `path` (placed or not).
    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// How many nodes the document has, the root not counted.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the document is a scalar or an empty collection.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The path of the node holding `path`'s (`a.b[2]` → `a.b` → `a`); `None` at
/// the root.
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = if path.ends_with(']') {
        path.rfind('[')
    } else {
        path.rfind('.')
    };
    Some(cut.map_or("", |cut| &path[..cut]))
}

/// `key` under the node at `path`.
pub(crate) fn child_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// `relative` (a path inside the node at `prefix`) as a path of the document.
pub(crate) fn join(prefix: &str, relative: &str) -> String {
    match (
        prefix.is_empty(),
        relative.is_empty() || relative.starts_with('['),
    ) {
        (true, _) => relative.to_string(),
        (false, true) => format!("{prefix}{relative}"),
        (false, false) => format!("{prefix}.{relative}"),
    }
}

/// Item `index` of the list at `path`.
pub(crate) fn child_index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// Collects [`Positions`] while the document is turned into values: the
/// path of the node being turned, and the places found so far.
///
/// Writing paths down costs their length for every node: very long keys
/// under deep nesting could make that far more than the text (a 1 MB key
/// above a million short ones). It is bounded by [`PATH_BUDGET`] times the
/// text; past it, the rest of the document has no places (nothing else
/// changes).
pub(super) struct Recorder {
    /// The node being turned.
    path: String,
    positions: Positions,
    /// The path bytes that may still be written; `None` once spent.
    budget: Option<usize>,
}

/// How many bytes of paths a document may make per byte of its text.
pub(super) const PATH_BUDGET: usize = 32;

impl Recorder {
    /// A recorder for a text of `length` bytes.
    pub(super) fn new(length: usize) -> Recorder {
        Recorder {
            path: String::new(),
            positions: Positions::default(),
            budget: Some(length.saturating_mul(PATH_BUDGET).saturating_add(1 << 16)),
        }
    }

    /// Entry `key` of the mapping being turned starts, its key written at
    /// `at`; the length to give back to [`Recorder::leave`].
    pub(super) fn enter_key(&mut self, key: &str, at: Option<Location>) -> usize {
        let back = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        self.record(at);
        back
    }

    /// Item `index` of the list being turned starts, written at `at`; the
    /// length to give back to [`Recorder::leave`].
    pub(super) fn enter_item(&mut self, index: usize, at: Option<Location>) -> usize {
        use std::fmt::Write;
        let back = self.path.len();
        let _ = write!(self.path, "[{index}]");
        self.record(at);
        back
    }

    /// Back at the node around the one entered when the path was `length`
    /// bytes long.
    pub(super) fn leave(&mut self, length: usize) {
        self.path.truncate(length);
    }

    pub(super) fn finish(self) -> Positions {
        self.positions
    }

    /// The node at the current path exists, written at `at`.
    fn record(&mut self, at: Option<Location>) {
        match self.budget {
            Some(left) if self.path.len() <= left => {
                self.budget = Some(left - self.path.len());
                self.positions.nodes.insert(self.path.clone(), at);
            }
            _ => self.budget = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_located;
    use super::*;

    #[track_caller]
    fn case(text: &str, places: &[(&str, Option<(usize, usize)>)]) {
        let (_, positions) = parse_located(text).unwrap();
        for (path, expected) in places {
            let found = positions
                .get(path)
                .map(|location| (location.line, location.column));
            assert_eq!(found, *expected, "`{path}` in {text:?}");
        }
    }

    #[test]
    fn entries_are_where_their_keys_are() {
        case(
            "a: 1\nb:\n  c: x\n  d:\n    e: [1, 2]\n",
            &[
                ("a", Some((1, 1))),
                ("b", Some((2, 1))),
                ("b.c", Some((3, 3))),
                ("b.d.e", Some((5, 5))),
                ("x", None),
                ("b.x", None),
            ],
        );
        // Flow mappings, quoted keys (at the quote), keys after multi-byte
        // characters (columns count characters).
        case(
            "m: {a: 1, 'b c': 2, \"d\": 3}\né: {ü: 1}\n",
            &[
                ("m.a", Some((1, 5))),
                ("m.b c", Some((1, 11))),
                ("m.d", Some((1, 21))),
                ("é.ü", Some((2, 5))),
            ],
        );
    }

    #[test]
    fn list_items_are_where_they_start() {
        case(
            "l:\n  - x\n  - 'y'\n  - name: z\n    v: 1\n  - 3\n  - [p, q]\n  - {}\n",
            &[
                ("l[0]", Some((2, 5))),
                ("l[1]", Some((3, 5))),
                // A block mapping item: its first key.
                ("l[2]", Some((4, 5))),
                ("l[2].v", Some((5, 5))),
                // Numbers and flow collections: where they are written.
                ("l[3]", Some((6, 5))),
                ("l[4]", Some((7, 5))),
                ("l[4][1]", Some((7, 9))),
                ("l[5]", Some((8, 5))),
                ("l[6]", None),
            ],
        );
    }

    #[test]
    fn entries_are_at_their_keys_whatever_is_written_in_them() {
        case(
            "a:\n  b: \"esc\\taped\"\n  \"k\\t\": 1\nn: [1, 2, 3]\n",
            &[
                // A value is at its key.
                ("a.b", Some((2, 3))),
                // A key with an escape too.
                ("a.k\t", Some((3, 3))),
                ("n[2]", Some((4, 11))),
            ],
        );
        // Block scalars: the key.
        case(
            "t: |\n  line one\n  line two\nu: >\n  folded\n",
            &[("t", Some((1, 1))), ("u", Some((4, 1)))],
        );
        // An alias is where its anchor's text is.
        case(
            "a: &x {k: v}\nb: *x\n",
            &[("b", Some((2, 1))), ("b.k", Some((1, 8)))],
        );
    }

    #[test]
    fn a_byte_order_mark_and_line_ends_do_not_shift_places() {
        case(
            "\u{feff}a: 1\nb: 2\n",
            &[("a", Some((1, 1))), ("b", Some((2, 1)))],
        );
        case("a: 1\r\nb:\r\n  c: 2\r\n", &[("b.c", Some((3, 3)))]);
    }

    #[test]
    fn paths_past_the_budget_leave_the_rest_without_places() {
        // A long key above many short ones: writing every path down would
        // take far more than the text.
        let key = "k".repeat(1_000);
        let mut text = format!("first: 1\n{key}:\n");
        for index in 0..2_000 {
            text.push_str(&format!("  e{index}: 1\n"));
        }
        text.push_str("last: 1\n");
        let (value, positions) = parse_located(&text).unwrap();
        // The values are all read; the places stop once the budget is spent.
        assert_eq!(value[&key].as_object().unwrap().len(), 2_000);
        assert_eq!(value["last"], 1);
        assert!(positions.get("first").is_some());
        assert!(positions.get("last").is_none());
        assert!(positions.len() < 2_000, "{}", positions.len());
        // A document within it has every place.
        let (_, positions) = parse_located("a:\n  b: [x, {c: 1}]\n").unwrap();
        assert_eq!(positions.len(), 5);
    }

    #[test]
    fn parents_of_paths() {
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a.b"), Some("a"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent("[0]"), Some(""));
        assert_eq!(parent(""), None);
    }
}
