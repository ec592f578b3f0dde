//! The prompt registry: a directory of `.md` / `.txt` / `.j2` files, keyed by
//! relative path without extension, each with optional YAML front matter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{Error, Handler, Parser, Prompt, Renderer, Result};
use crate::suggest;

const EXTENSIONS: &[&str] = &["md", "txt", "j2"];
const FRONT_MATTER_KEYS: &[&str] = &[
    "parser",
    "format",
    "tools",
    "mcp_servers",
    "handler",
    "metadata",
    "renderer",
    "addon_args",
];

#[derive(Debug, Default, Clone)]
pub struct Registry {
    directory: Option<PathBuf>,
    prompts: BTreeMap<String, Prompt>,
}

impl Registry {
    pub fn empty() -> Registry {
        Registry::default()
    }

    /// Loads every prompt file under `directory` (recursively, in sorted order).
    pub fn load(directory: &Path) -> Result<Registry> {
        let mut files = Vec::new();
        collect(directory, &mut files)?;
        files.sort();
        let mut registry = Registry {
            directory: Some(directory.to_path_buf()),
            prompts: BTreeMap::new(),
        };
        let mut origins: BTreeMap<String, PathBuf> = BTreeMap::new();
        for file in files {
            let Ok(relative) = file.strip_prefix(directory) else {
                continue;
            };
            let key = relative
                .with_extension("")
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            if let Some(first) = origins.get(&key) {
                return Err(Error::File {
                    path: file.display().to_string(),
                    message: format!(
                        "prompt key `{key}` is also defined by `{}`; keep one",
                        first.display()
                    ),
                });
            }
            let text = std::fs::read_to_string(&file).map_err(|error| Error::File {
                path: file.display().to_string(),
                message: error.to_string(),
            })?;
            let prompt = parse_file(&key, &text, &file)?;
            origins.insert(key.clone(), file);
            registry.prompts.insert(key, prompt);
        }
        Ok(registry)
    }

    pub fn get(&self, key: &str) -> Result<&Prompt> {
        self.prompts.get(key).ok_or_else(|| {
            let hint = match suggest::closest(key, self.prompts.keys().map(String::as_str)) {
                Some(close) => format!("; did you mean `{close}`?"),
                None if self.prompts.is_empty() => match &self.directory {
                    Some(directory) => format!(" (the prompt directory `{}` is empty)", directory.display()),
                    None => " (no prompt directory: set `prompts:` in the tactic or add ./prompts beside it)".into(),
                },
                None => {
                    let keys: Vec<String> = self.prompts.keys().take(5).map(|key| format!("`{key}`")).collect();
                    format!(" (known: {})", keys.join(", "))
                }
            };
            Error::UnknownPrompt { key: key.to_string(), hint }
        })
    }

    pub fn insert(&mut self, prompt: Prompt) {
        self.prompts.insert(prompt.path.clone(), prompt);
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.prompts.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }
}

fn collect(directory: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(directory).map_err(|error| Error::File {
        path: directory.display().to_string(),
        message: format!("cannot read the prompt directory: {error}"),
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| EXTENSIONS.contains(&extension))
        {
            files.push(path);
        }
    }
    Ok(())
}

/// Splits `---` front matter from the template; returns (front matter, its
/// first line number in the file, template).
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let template = &rest[offset + line.len()..];
            return Some((&rest[..offset], template));
        }
        offset += line.len();
    }
    None
}

fn parse_file(key: &str, text: &str, file: &Path) -> Result<Prompt> {
    let file_label = file.display().to_string();
    let invalid = |message: String| Error::File {
        path: file_label.clone(),
        message,
    };
    let Some((front, template)) = split_front_matter(text) else {
        return Prompt::new(key, text).map_err(|error| with_file(error, &file_label, 0));
    };
    let front: Map<String, Value> = if front.trim().is_empty() {
        Map::new()
    } else {
        serde_yaml_ng::from_str(front).map_err(|error| {
            let (line, column) = error
                .location()
                .map_or((1, 1), |location| (location.line(), location.column()));
            let message = error.to_string();
            let message = message
                .split(" at line ")
                .next()
                .unwrap_or(&message)
                .to_string();
            Error::File {
                path: format!("{file_label}:{}:{column}", line + 1),
                message,
            }
        })?
    };
    for key in front.keys() {
        if !FRONT_MATTER_KEYS.contains(&key.as_str()) {
            return Err(invalid(format!(
                "unknown front-matter key `{key}`{}",
                suggest::hint(key, FRONT_MATTER_KEYS.iter().copied())
            )));
        }
    }
    let renderer = match front.get("renderer").and_then(Value::as_str) {
        None | Some("jinja") => Renderer::Jinja,
        Some("format") => Renderer::Format,
        Some(other) => {
            return Err(invalid(format!(
                "`renderer: {other}` must be `jinja` or `format`"
            )));
        }
    };
    let front_lines = text[..text.len() - template.len()].lines().count();
    let mut prompt = Prompt::with_renderer(key, template, renderer)
        .map_err(|error| with_file(error, &file_label, front_lines))?;
    if let Some(parser) = front.get("parser") {
        prompt.parser = Some(Parser::from_value(parser).map_err(invalid)?);
    }
    if let Some(format) = front.get("format") {
        prompt
            .set_format(Some(format.clone()))
            .map_err(|error| invalid(error.to_string()))?;
    }
    prompt.tools = string_list(&front, "tools").map_err(invalid)?;
    prompt.mcp_servers = string_list(&front, "mcp_servers").map_err(invalid)?;
    if let Some(metadata) = front.get("metadata") {
        prompt.metadata = metadata
            .as_object()
            .cloned()
            .ok_or_else(|| invalid("`metadata` must be a mapping".into()))?;
    }
    if let Some(addon_args) = front.get("addon_args") {
        prompt.addon_args = addon_args
            .as_object()
            .cloned()
            .ok_or_else(|| invalid("`addon_args` must be a mapping".into()))?;
    }
    if let Some(handler) = front.get("handler") {
        prompt.handler = handler_texts(handler, renderer).map_err(invalid)?;
        for text in [
            &prompt.handler.exception,
            &prompt.handler.interrupt,
            &prompt.handler.interrupt_final,
        ] {
            prompt
                .with_template(text.clone())
                .map_err(|error| invalid(format!("`handler`: {error}")))?;
        }
    }
    Ok(prompt)
}

fn with_file(error: Error, file: &str, line_offset: usize) -> Error {
    match error {
        Error::Syntax { line, message, .. } => Error::File {
            path: match line {
                Some(line) => format!("{file}:{}", line + line_offset),
                None => file.to_string(),
            },
            message,
        },
        other => other,
    }
}

fn string_list(front: &Map<String, Value>, key: &str) -> std::result::Result<Vec<String>, String> {
    match front.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`{key}` must list names"))
            })
            .collect(),
        Some(_) => Err(format!("`{key}` must be a list of names")),
    }
}

fn handler_texts(value: &Value, renderer: Renderer) -> std::result::Result<Handler, String> {
    let Value::Object(map) = value else {
        return Err(
            "`handler` must be a mapping with `exception`, `interrupt` or `interrupt_final`".into(),
        );
    };
    let mut handler = Handler::defaults(renderer);
    for (key, text) in map {
        let text = text
            .as_str()
            .ok_or_else(|| format!("`handler.{key}` must be text"))?
            .to_string();
        match key.as_str() {
            "exception" => handler.exception = text,
            "interrupt" => handler.interrupt = text,
            "interrupt_final" => handler.interrupt_final = text,
            other => {
                return Err(format!(
                    "unknown handler `{other}`{}",
                    suggest::hint(other, ["exception", "interrupt", "interrupt_final"])
                ));
            }
        }
    }
    Ok(handler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Registry>) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let registry = Registry::load(dir.path());
        (dir, registry)
    }

    #[test]
    fn loads_nested_files_with_front_matter() {
        let (_dir, registry) = registry(&[
            ("writer/system.md", "You write.\n"),
            (
                "writer/draft.txt",
                "---\nparser: json\ntools: [wc]\nmetadata: {version: 2}\nrenderer: format\n---\nDraft {text}\n",
            ),
            (
                "critic.j2",
                "---\nparser: {type: tags, required_xml_tags: [verdict]}\nhandler: {exception: \"Fix: {{ error_message }}\"}\n---\nReview",
            ),
            ("notes.json", "ignored"),
        ]);
        let registry = registry.unwrap();
        assert_eq!(
            registry.keys().collect::<Vec<_>>(),
            ["critic", "writer/draft", "writer/system"]
        );
        assert_eq!(
            registry.get("writer/system").unwrap().template,
            "You write.\n"
        );
        let draft = registry.get("writer/draft").unwrap();
        assert_eq!(draft.template, "Draft {text}\n");
        assert_eq!(draft.tools, ["wc"]);
        assert_eq!(draft.metadata["version"], 2);
        assert!(draft.template_vars().contains("text"));
        let critic = registry.get("critic").unwrap();
        assert_eq!(critic.handler.exception, "Fix: {{ error_message }}");
        assert!(critic.parse("no").is_err());
    }

    #[test]
    fn unknown_keys_suggest_the_closest() {
        let (_dir, registry) = registry(&[("writer/draft.md", "x")]);
        let error = registry
            .unwrap()
            .get("writer/drfat")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "unknown prompt `writer/drfat`; did you mean `writer/draft`?"
        );
        let error = Registry::empty().get("x").unwrap_err().to_string();
        assert!(error.contains("no prompt directory"), "{error}");
    }

    #[track_caller]
    fn bad_case(files: &[(&str, &str)], expected: &[&str]) {
        let (_dir, registry) = registry(files);
        let error = registry.unwrap_err().to_string();
        for text in expected {
            assert!(error.contains(text), "expected {text:?} in {error}");
        }
    }

    #[test]
    fn bad_files_are_named() {
        bad_case(
            &[("a.md", "x"), ("a.txt", "y")],
            &["a.txt", "prompt key `a` is also defined by", "a.md"],
        );
        bad_case(
            &[("a.md", "---\nparsr: json\n---\nx")],
            &[
                "a.md",
                "unknown front-matter key `parsr`; did you mean `parser`?",
            ],
        );
        bad_case(&[("a.md", "---\ntools: [a\n---\nx")], &["a.md:"]);
        bad_case(
            &[("a.md", "---\nparser: json\n---\nline one\n{% if %}\n")],
            &["a.md:5"],
        );
        bad_case(
            &[("a.md", "---\nhandler: {exeption: x}\n---\nx")],
            &["did you mean `exception`?"],
        );
        bad_case(
            &[("a.md", "---\nrenderer: mako\n---\nx")],
            &["`renderer: mako`"],
        );
    }
}
