//! The library's optional parts (Cargo features, docs/library.md "Features")
//! as the errors say them: a program built without one is told which
//! feature the thing it asked for needs, where it asked, never given a
//! silently different answer. Each part's own module decides where it asks.

/// `what` (a file, a key of a tactic) needs Cargo feature `feature` of the
/// library, which this program was built without: one line, with the fix.
pub(crate) fn missing(what: &str, feature: &str) -> String {
    format!(
        "{what} needs the `{feature}` feature of the lllm library, which this program was built \
         without; hint: enable it in Cargo.toml (`lllm = {{ features = [\"{feature}\"] }}`)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_feature_and_how_to_enable_it() {
        let message = missing("`mcp_servers`", "mcp");
        assert_eq!(
            message,
            "`mcp_servers` needs the `mcp` feature of the lllm library, which this program was \
             built without; hint: enable it in Cargo.toml (`lllm = { features = [\"mcp\"] }`)"
        );
        assert!(!message.contains('\n'));
    }
}
