//! Spots a prompt ported from the Python framework whose `{name}` placeholders
//! would be sent literally: LLLM renders with `str.format` by default, lllm
//! with Jinja, so `Summarize {topic}.` reaches the model as written unless
//! the prompt says `renderer: format`. Loading warns (it does not refuse: a
//! prompt may mean a literal `{name}`, e.g. when it shows code); the warning
//! names the file and line and the two fixes.

use super::{Prompt, Renderer};

/// The warning for a Jinja prompt whose text holds a `{name}` placeholder
/// (`name` an identifier) and no Jinja tag at all (`{{`, `{%`); `None` when
/// the prompt is fine. `file` is where the prompt was read and
/// `template_line` the file line its template starts on (1-based; after
/// the front matter).
pub(crate) fn python_placeholder_warning(
    prompt: &Prompt,
    file: &str,
    template_line: usize,
) -> Option<String> {
    if prompt.renderer != Renderer::Jinja {
        return None;
    }
    let template = prompt.template.as_str();
    let (offset, name) = python_placeholder(template)?;
    let line = template_line + template[..offset].matches('\n').count();
    Some(format!(
        "{file}:{line}: prompt `{}` holds `{{{name}}}`, a Python `str.format` placeholder that \
         Jinja sends literally; add `renderer: format` to its front matter or write `{{{{ {name} }}}}`",
        prompt.path
    ))
}

/// In a Jinja template without a single Jinja tag (`{{`, `{%`): where its
/// first Python `{identifier}` placeholder starts, and the identifier.
pub(crate) fn python_placeholder(template: &str) -> Option<(usize, &str)> {
    if template.contains("{{") || template.contains("{%") {
        return None;
    }
    first_placeholder(template)
}

/// Where the first `{identifier}` starts, and the identifier.
fn first_placeholder(text: &str) -> Option<(usize, &str)> {
    let bytes = text.as_bytes();
    let mut search = 0;
    while let Some(found) = text[search..].find('{') {
        let start = search + found;
        let inner = &text[start + 1..];
        let length = inner
            .bytes()
            .take_while(|byte| byte.is_ascii_alphanumeric() || *byte == b'_')
            .count();
        let name = &inner[..length];
        let is_identifier = name
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_');
        if is_identifier && bytes.get(start + 1 + length) == Some(&b'}') {
            return Some((start, name));
        }
        search = start + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(template: &str, renderer: Renderer, expected: Option<&str>) {
        let prompt = Prompt::with_renderer("ported/summary", template, renderer).unwrap();
        let warning = python_placeholder_warning(&prompt, "prompts/ported/summary.md", 3);
        assert_eq!(warning.as_deref(), expected);
    }

    #[test]
    fn python_placeholders_in_a_jinja_prompt_are_reported_with_their_line() {
        case(
            "Summarize this.\nFor {audience}: {topic}.",
            Renderer::Jinja,
            Some(
                "prompts/ported/summary.md:4: prompt `ported/summary` holds `{audience}`, a Python \
                 `str.format` placeholder that Jinja sends literally; add `renderer: format` to its \
                 front matter or write `{{ audience }}`",
            ),
        );
        case(
            "{_x1}",
            Renderer::Jinja,
            Some(
                "prompts/ported/summary.md:3: prompt `ported/summary` holds `{_x1}`, a Python \
             `str.format` placeholder that Jinja sends literally; add `renderer: format` to its \
             front matter or write `{{ _x1 }}`",
            ),
        );
    }

    #[test]
    fn jinja_prompts_format_prompts_and_other_braces_are_fine() {
        case("Summarize {topic}.", Renderer::Format, None);
        case("Summarize {{ topic }} and {name}.", Renderer::Jinja, None);
        case("{% if x %}{name}{% endif %}", Renderer::Jinja, None);
        case(r#"Reply as JSON: {"verdict": "ok"}"#, Renderer::Jinja, None);
        case("{1} { name } {} {a-b} {9lives}", Renderer::Jinja, None);
        case("no braces at all", Renderer::Jinja, None);
    }
}
