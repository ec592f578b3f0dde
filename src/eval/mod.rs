//! Scoring a delivery (issue 32): assertions in promptfoo's shape (`type`,
//! `value`, `weight`, `threshold`, `metric`) read from a tactic's `asserts:`
//! and a task line's `expected` / `asserts`, and the scores they give.
//!
//! This room owns the assertion items (`assertion`: read and checked when a
//! tactic or a task line is read, so a bad one is refused before anything is
//! sent), the checks that need nothing but the delivery and its numbers
//! (`check`), and how scores add up (`score`). The two graders that run
//! something, a command and a judge tactic, are run by the batch
//! (`batch::grade`), which has the tactics and the processes; here they are
//! only read and checked.

mod assertion;
mod check;
mod json_path;
mod score;

pub use assertion::{Assertion, Assertions, Kind, Schema, expected, parse_list};
pub use check::{Subject, check};
pub use score::{FAILING_IDS_LISTED, Score, Scored, Spread, Tally, TallySummary, combine, round};
