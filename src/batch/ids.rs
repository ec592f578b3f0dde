//! Task ids held by the million: what pre-flight (duplicate ids) and
//! `--resume` (the latest result of each id) keep of each id is a 128-bit
//! digest, 16 bytes whatever the id's length, in sorted vectors instead of
//! hash maps of strings (issue 17: a 1,000,000-task batch in < 100 MB, where
//! a `HashMap<String, _>` of the ids alone took ~100 MB).
//!
//! Two different ids share a digest with probability ~n²/2¹²⁹ (10⁻²⁷ for a
//! million ids), far below a disk's undetected error rate; the digests live
//! only in memory, so their algorithm may change between versions.

use std::hash::{Hash, Hasher};

/// The ids of a line's runs under `--repeat N`: its own id when `N` is 1,
/// else `ID#1` … `ID#N` (issue 32).
pub fn repeated(id: &str, repeat: u32) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    let once = (repeat <= 1).then_some(std::borrow::Cow::Borrowed(id));
    let many = (repeat > 1)
        .then(|| (1..=repeat).map(move |run| std::borrow::Cow::Owned(format!("{id}#{run}"))))
        .into_iter()
        .flatten();
    once.into_iter().chain(many)
}

/// A task id's 128-bit digest (two SipHash-1-3 passes with different keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdKey([u64; 2]);

impl IdKey {
    pub fn of(id: &str) -> IdKey {
        let half = |salt: u8| {
            let mut hasher = std::hash::DefaultHasher::new();
            salt.hash(&mut hasher);
            id.hash(&mut hasher);
            hasher.finish()
        };
        IdKey([half(0), half(1)])
    }
}

/// The ids met, in file order, with their line numbers; [`Seen::duplicates`]
/// sorts them once at the end (16 + 8 bytes an id).
#[derive(Debug, Default)]
pub struct Seen {
    ids: Vec<(IdKey, usize)>,
}

impl Seen {
    pub fn add(&mut self, id: &str, line: usize) {
        self.ids.push((IdKey::of(id), line));
    }

    /// Each line whose id an earlier line had, with that earlier (first) line,
    /// in line order.
    pub fn duplicates(mut self) -> Vec<(usize, usize)> {
        // Sorting by (key, line) puts each id's lines together, first first.
        self.ids.sort_unstable();
        let mut found = Vec::new();
        for group in self.ids.chunk_by(|left, right| left.0 == right.0) {
            let first = group[0].1;
            found.extend(group[1..].iter().map(|&(_, line)| (line, first)));
        }
        found.sort_unstable();
        found
    }
}

/// A value per id, looked up by binary search: pushed in file order (a later
/// value of an id replaces an earlier one), then [`finish`](Latest::finish)ed
/// and read. 24 bytes an entry for a one-byte value.
#[derive(Debug)]
pub struct Latest<T> {
    /// Key, position in push order (lines past 4 billion share the last), value.
    entries: Vec<(IdKey, u32, T)>,
    pushed: u32,
}

impl<T> Default for Latest<T> {
    fn default() -> Latest<T> {
        Latest {
            entries: Vec::new(),
            pushed: 0,
        }
    }
}

impl<T: Copy> Latest<T> {
    pub fn push(&mut self, id: &str, value: T) {
        self.entries.push((IdKey::of(id), self.pushed, value));
        self.pushed = self.pushed.saturating_add(1);
    }

    /// Keeps the last value of each id; returns the positions (in push
    /// order, ascending) of the values that lost.
    pub fn finish(&mut self) -> Vec<u32> {
        self.entries
            .sort_unstable_by_key(|&(key, position, _)| (key, position));
        let mut superseded = Vec::new();
        let mut kept = 0;
        for at in 0..self.entries.len() {
            let entry = self.entries[at];
            if self
                .entries
                .get(at + 1)
                .is_some_and(|next| next.0 == entry.0)
            {
                superseded.push(entry.1);
            } else {
                self.entries[kept] = entry;
                kept += 1;
            }
        }
        self.entries.truncate(kept);
        superseded.sort_unstable();
        superseded
    }

    /// The last value of `id` (after `finish`).
    pub fn get(&self, id: &str) -> Option<T> {
        let key = IdKey::of(id);
        self.entries
            .binary_search_by(|entry| entry.0.cmp(&key))
            .ok()
            .map(|at| self.entries[at].2)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_name_every_repeat_with_the_first_line() {
        let mut seen = Seen::default();
        for (line, id) in ["a", "b", "a", "c", "b", "a"].iter().enumerate() {
            seen.add(id, line + 1);
        }
        assert_eq!(seen.duplicates(), vec![(3, 1), (5, 2), (6, 1)]);
        let mut unique = Seen::default();
        (0..1000).for_each(|n| unique.add(&format!("t{n}"), n));
        assert!(unique.duplicates().is_empty());
    }

    #[test]
    fn the_last_value_of_an_id_wins_and_the_others_are_named() {
        let mut latest = Latest::default();
        for (id, value) in [("a", 1), ("b", 2), ("a", 3), ("a", 4)] {
            latest.push(id, value);
        }
        let superseded = latest.finish();
        assert_eq!(latest.get("a"), Some(4));
        assert_eq!(latest.get("b"), Some(2));
        assert_eq!(latest.get("c"), None);
        assert_eq!(latest.len(), 2);
        assert_eq!(superseded, vec![0, 2]);
    }

    #[test]
    fn keys_differ_for_near_ids() {
        let keys: std::collections::HashSet<IdKey> =
            ["", "a", "b", "ab", "ba", "a\0", "line-1", "line-10"]
                .iter()
                .map(|id| IdKey::of(id))
                .collect();
        assert_eq!(keys.len(), 8);
    }
}
