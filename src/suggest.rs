//! "Did you mean …" suggestions for names a user typed (prompt keys, agents,
//! YAML keys, tools), and how such a name is shown in an error line. Every
//! layer that rejects a name asks here, so the hint reads the same everywhere.

use std::borrow::Cow;

/// The candidate closest to `name`, if it is close enough to be a plausible typo.
///
/// Closeness is Jaro-Winkler similarity; 0.8 keeps `writer/drfat` → `writer/draft`
/// and rejects unrelated names.
pub fn closest<'a, I>(name: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(name, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// `"; did you mean `x`?"` or an empty string, for appending to an error line.
pub fn hint<'a, I>(name: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    match closest(name, candidates) {
        Some(candidate) => format!("; did you mean `{candidate}`?"),
        None => String::new(),
    }
}

/// `text` (a name or field a user wrote) as an error line shows it: control
/// characters written as escapes (`\n`, `\x1b`), so the error stays one line
/// and a name cannot drive the terminal, and cut past
/// [`redact::ECHO_CHARS`](crate::redact::ECHO_CHARS) characters with its
/// length, so a huge name cannot bury the line (`redact::echo`, the one rule
/// for every value shown to a person). Other text is unchanged. A whole
/// message (a parser's) is shown with `redact::terminal_line` instead.
pub fn printable(text: &str) -> Cow<'_, str> {
    crate::redact::echo(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_names_are_one_line() {
        assert_eq!(printable("writer/draft é"), "writer/draft é");
        assert_eq!(printable("a\nb\r\tc"), "a\\nb\\r\tc");
        assert_eq!(printable("\u{1b}[31mred"), "\\x1b[31mred");
        assert_eq!(printable("quote\"s"), "quote\"s");
        let long = printable(&"k".repeat(5_000)).into_owned();
        assert!(long.ends_with("… (5000 characters)"), "{long}");
    }

    #[track_caller]
    fn case(name: &str, candidates: &[&str], expected: Option<&str>) {
        assert_eq!(closest(name, candidates.iter().copied()), expected);
    }

    #[test]
    fn suggests_close_names_only() {
        case(
            "writer/drfat",
            &["writer/draft", "critic/system"],
            Some("writer/draft"),
        );
        case(
            "agent_config",
            &["agent_configs", "global"],
            Some("agent_configs"),
        );
        case("zzz", &["writer/draft"], None);
        case("x", &[], None);
    }
}
