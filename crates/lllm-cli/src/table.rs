//! Aligned text tables for a person (`logs cost`, `cache stats`, `models`):
//! each column as wide as its widest cell, names left, numbers right, the
//! last column unpadded. What the cells hold is the commands' business.
//!
//! A cell is cut to [`CELL_CHARS`] characters (with `…`) and its control
//! characters escaped, and padding is counted here: std's `{:width$}`
//! panics on a width past 65,535, which one long tag in the store reached,
//! so `logs cost` failed (exit 101) for the whole store (issue 26).

use std::borrow::Cow;

/// The most characters a cell shows; a longer value ends in `…`. JSON
/// output (`--json`) keeps every value whole.
pub const CELL_CHARS: usize = 60;

/// Where a column's cells sit in their width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// Rows of cells under one alignment per column.
pub struct Table {
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose columns align as `aligns` says (one per column).
    pub fn new(aligns: &[Align]) -> Table {
        Table {
            aligns: aligns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra ones are dropped.
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells
            .into_iter()
            .take(self.aligns.len())
            .map(|cell| shown(cell.as_ref()).into_owned())
            .collect();
        row.resize(self.aligns.len(), String::new());
        self.rows.push(row);
    }

    /// The lines, each ending in `\n`, without trailing spaces; columns are
    /// two spaces apart.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.aligns.len())
            .map(|column| {
                self.rows
                    .iter()
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut text = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                let last = column + 1 == row.len();
                let room = widths[column].saturating_sub(cell.chars().count());
                match self.aligns[column] {
                    Align::Left if last => line.push_str(cell),
                    Align::Left => {
                        line.push_str(cell);
                        pad(&mut line, room);
                    }
                    Align::Right => {
                        pad(&mut line, room);
                        line.push_str(cell);
                    }
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// A cell as the table shows it: one line, at most [`CELL_CHARS`] characters.
fn shown(cell: &str) -> Cow<'_, str> {
    let escaped = lllm::redact::terminal_line(cell);
    match escaped.char_indices().nth(CELL_CHARS - 1) {
        Some((end, _)) if escaped.chars().count() > CELL_CHARS => {
            Cow::Owned(format!("{}…", &escaped[..end]))
        }
        _ => escaped,
    }
}

fn pad(line: &mut String, spaces: usize) {
    line.extend(std::iter::repeat_n(' ', spaces));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(aligns: &[Align], rows: &[&[&str]], expected: &str) {
        let mut table = Table::new(aligns);
        for row in rows {
            table.row(row.iter());
        }
        assert_eq!(table.render(), expected);
    }

    #[test]
    fn columns_align_by_their_widest_cell() {
        use Align::{Left, Right};
        case(
            &[Left, Right, Left],
            &[
                &["model", "hits", "note"],
                &["a/long-name", "7", ""],
                &["b", "12345", "x"],
            ],
            "model         hits  note\na/long-name      7\nb            12345  x\n",
        );
        case(&[Left, Right], &[&["only"]], "only\n");
        case(&[Left], &[], "");
    }

    #[test]
    fn a_huge_cell_is_cut_and_cannot_panic() {
        // Past u16::MAX: `format!("{:<width$}")` with this width panics.
        let huge = "t".repeat(70_000);
        let mut table = Table::new(&[Align::Left, Align::Right]);
        table.row([huge.as_str(), "1"]);
        table.row(["total", "2"]);
        let text = table.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("{}…  1", "t".repeat(CELL_CHARS - 1)));
        assert_eq!(lines[0].chars().count(), lines[1].chars().count());
        assert!(lines[1].starts_with("total "), "{text}");
    }

    #[test]
    fn cells_are_one_line() {
        case(
            &[Align::Left, Align::Left],
            &[&["a\nb\x1b[2J", "c"]],
            "a\\nb\\x1b[2J  c\n",
        );
    }
}
