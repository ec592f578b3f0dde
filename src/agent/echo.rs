//! A reply that repeats what lllm wrote is no answer (issue 27): a small
//! model echoed the tag parser's repair hint, whose example
//! `<verdict>...</verdict>` parsed, and the run ended `success` with the
//! error text as its delivery. The parsers' hints no longer hold a complete
//! example and a placeholder is no answer (`prompt::parser`); this is the
//! check for every parser, a registered one too: a reply that repeats a
//! line of a repair message of the call (or the error it carries) fails to
//! parse, and goes to the repair loop like any other.
//!
//! What it does not judge: a reply that gives the same value as an example
//! in a prompt's own handler text (`handler: {exception: "… like
//! <verdict>ok</verdict>"}`) may be the right answer, and is kept.

/// A line of lllm's text at least this long (in characters) that a reply
/// holds is an echo; shorter lines (`parsing errors:`) could be the
/// model's own words.
const MIN_LINE: usize = 24;

/// Why `reply` is no answer although it parsed: it repeats a line of
/// `written` (what lllm sent in this call: repair messages and the errors
/// they carry), or all of one. `None` when the answer is the model's own.
pub(super) fn echoed(reply: &str, written: &[String]) -> Option<String> {
    for text in written {
        let repeated = text
            .lines()
            .map(str::trim)
            .find(|line| line.chars().count() >= MIN_LINE && reply.contains(line));
        if let Some(line) = repeated {
            return Some(format!(
                "the reply repeats the message lllm sent (`{}`) instead of answering; \
                 write the answer itself",
                crate::redact::cut(line, 120)
            ));
        }
        if !text.trim().is_empty() && reply.trim() == text.trim() {
            return Some(
                "the reply repeats the message lllm sent instead of answering; write the answer itself"
                    .into(),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(reply: &str, written: &[&str], echo: bool) {
        let written: Vec<String> = written.iter().map(|text| text.to_string()).collect();
        assert_eq!(echoed(reply, &written).is_some(), echo, "{reply:?}");
    }

    #[test]
    fn a_reply_repeating_lllms_text_is_an_echo() {
        // The hint as lllm once wrote it, echoed by Qwen2.5-Coder-0.5B.
        let old_hint = "missing required XML tag <verdict>: write it as <verdict>...</verdict>";
        let repair = format!("Error: parsing errors:\n{old_hint}. Please fix.");
        case(&repair, &[&repair, old_hint], true);
        // Without the wrapper's words, a line of the error is still there.
        case(old_hint, &[&repair, old_hint], true);
        case(
            &format!("Sure! {old_hint}\n<verdict>ok</verdict>"),
            &[old_hint],
            true,
        );
        // A short message repeated whole.
        case(
            "Error: bad. Please fix.",
            &["Error: bad. Please fix."],
            true,
        );
        // The model's own answer, even after the same repair, is no echo;
        // nor is a value that an example of a handler text also shows.
        case("<verdict>fine</verdict>", &[&repair, old_hint], false);
        case(
            "<verdict>ok</verdict>",
            &["Reply like <verdict>ok</verdict>."],
            false,
        );
        case("parsing errors: none", &["parsing errors:"], false);
        case("<verdict>ok</verdict>", &[], false);
    }
}
