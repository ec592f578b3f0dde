//! A line diff of two texts (longest common subsequence), for `lllm compare`.
//!
//! Common leading and trailing lines are matched first; the table of the
//! middle is bounded (4 million cells), beyond which the middle is shown
//! as removed then added: a diff of two huge unrelated texts costs memory in
//! proportion to the texts, never to their product.

use serde::Serialize;

/// One line of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", content = "line")]
pub enum DiffLine {
    /// In both texts.
    #[serde(rename = " ")]
    Same(String),
    /// Only in the first.
    #[serde(rename = "-")]
    Removed(String),
    /// Only in the second.
    #[serde(rename = "+")]
    Added(String),
}

impl DiffLine {
    /// `  line`, `- line`, `+ line`.
    pub fn text(&self) -> String {
        match self {
            DiffLine::Same(line) => format!("  {line}"),
            DiffLine::Removed(line) => format!("- {line}"),
            DiffLine::Added(line) => format!("+ {line}"),
        }
    }
}

const TABLE_CAP: usize = 4_000_000;

/// The lines of `a` and `b` as kept, removed and added.
pub fn lines(a: &str, b: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (middle_a, middle_b) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut out: Vec<DiffLine> = a[..prefix]
        .iter()
        .map(|line| DiffLine::Same(line.to_string()))
        .collect();
    if (middle_a.len() + 1).saturating_mul(middle_b.len() + 1) > TABLE_CAP {
        out.extend(
            middle_a
                .iter()
                .map(|line| DiffLine::Removed(line.to_string())),
        );
        out.extend(
            middle_b
                .iter()
                .map(|line| DiffLine::Added(line.to_string())),
        );
    } else {
        middle(middle_a, middle_b, &mut out);
    }
    out.extend(
        a[a.len() - suffix..]
            .iter()
            .map(|line| DiffLine::Same(line.to_string())),
    );
    out
}

/// The classic LCS table, walked from the start: `length[i][j]` is the LCS of
/// `a[i..]` and `b[j..]`.
fn middle(a: &[&str], b: &[&str], out: &mut Vec<DiffLine>) {
    let width = b.len() + 1;
    let mut length = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            length[i * width + j] = if a[i] == b[j] {
                length[(i + 1) * width + j + 1] + 1
            } else {
                length[(i + 1) * width + j].max(length[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(DiffLine::Same(a[i].to_string()));
            i += 1;
            j += 1;
        } else if length[(i + 1) * width + j] >= length[i * width + j + 1] {
            out.push(DiffLine::Removed(a[i].to_string()));
            i += 1;
        } else {
            out.push(DiffLine::Added(b[j].to_string()));
            j += 1;
        }
    }
    out.extend(
        a[i..]
            .iter()
            .map(|line| DiffLine::Removed(line.to_string())),
    );
    out.extend(b[j..].iter().map(|line| DiffLine::Added(line.to_string())));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(a: &str, b: &str, expected: &[&str]) {
        let got: Vec<String> = lines(a, b).iter().map(DiffLine::text).collect();
        assert_eq!(got, expected, "diff of {a:?} and {b:?}");
    }

    #[test]
    fn diffs_lines() {
        case("a\nb\nc", "a\nb\nc", &["  a", "  b", "  c"]);
        case("a\nb\nc", "a\nx\nc", &["  a", "- b", "+ x", "  c"]);
        case("", "new", &["+ new"]);
        case("old", "", &["- old"]);
        case("a\nb", "b\nc", &["- a", "  b", "+ c"]);
        case("x\na\ny", "a", &["- x", "  a", "- y"]);
    }

    #[test]
    fn a_huge_middle_is_replaced_whole() {
        let a: String = (0..3000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..3000).map(|i| format!("b{i}\n")).collect();
        let diff = lines(&a, &b);
        assert_eq!(diff.len(), 6000);
        assert_eq!(diff[0], DiffLine::Removed("a0".into()));
        assert_eq!(diff[3000], DiffLine::Added("b0".into()));
    }
}
