//! What the render environment offers templates besides the context: its
//! filters, tests and global functions, asked of minijinja itself (it has no
//! public list, so a name is tried once and the answer kept), and the names
//! "did you mean" picks from.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use super::render;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Filter,
    Test,
}

/// Whether the render environment has filter or test `name`. Asked by
/// trying it (minijinja has no public list); answers are kept.
pub(super) fn exists(kind: Kind, name: &str) -> bool {
    static KNOWN: OnceLock<Mutex<HashMap<(Kind, String), bool>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    let key = (kind, name.to_string());
    if let Some(answer) = known
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .get(&key)
    {
        return *answer;
    }
    let environment = render::environment();
    let (source, unknown) = match kind {
        Kind::Filter => (
            format!("none | {name}"),
            minijinja::ErrorKind::UnknownFilter,
        ),
        Kind::Test => (format!("none is {name}"), minijinja::ErrorKind::UnknownTest),
    };
    let answer = match environment.compile_expression(&source) {
        Ok(expression) => !matches!(expression.eval(()), Err(error) if error.kind() == unknown),
        Err(_) => false,
    };
    known
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .insert(key, answer);
    answer
}

/// The environment's global functions (`range`, `dict`, `namespace`, `debug`).
pub(super) fn globals() -> &'static BTreeSet<String> {
    static GLOBALS: OnceLock<BTreeSet<String>> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        render::environment()
            .globals()
            .map(|(name, _)| name.to_string())
            .collect()
    })
}

/// Filters and tests of Jinja and minijinja, for "did you mean" (only the
/// ones the environment has are suggested).
const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "center",
    "chain",
    "count",
    "d",
    "default",
    "dictsort",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "zip",
];
const TESTS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

pub(super) fn suggestion(name: &str, kind: Kind) -> String {
    let candidates = match kind {
        Kind::Filter => FILTERS,
        Kind::Test => TESTS,
    };
    crate::suggest::hint(
        name,
        candidates
            .iter()
            .copied()
            .filter(|candidate| exists(kind, candidate)),
    )
}
