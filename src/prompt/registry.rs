//! The prompt registry: a directory of `.md` / `.txt` / `.j2` files, keyed by
//! relative path without extension, each with optional YAML front matter.
//!
//! Loading never hangs and reports every bad file at once (issue 12): only
//! regular files are read (a named pipe, socket or device with a prompt's
//! extension is an error, never a wait), and a file over `MAX_PROMPT_BYTES`
//! is refused. Which files there are is `walk`'s business: it never leaves
//! the directory, reads each directory once and lists at most
//! `MAX_WALK_ENTRIES` entries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::walk::{MAX_WALK_ENTRIES, Walk, key_of, walk};
use super::{Error, Extensions, HandlerTexts, NamedRenderer, Parser, Prompt, Renderer, Result};
use crate::suggest;
use crate::yaml::Positions;

/// The largest prompt file read (a prompt past this is surely a mistake, and
/// every request would carry it).
const MAX_PROMPT_BYTES: u64 = 16 * 1024 * 1024;
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

/// Prompts by key: a directory's files, and prompts inserted from code.
#[derive(Debug, Default, Clone)]
/// Prompts by key, loaded from a directory or inserted from code.
pub struct Registry {
    directory: Option<PathBuf>,
    prompts: BTreeMap<String, Prompt>,
    /// Keys of files that failed to load (their problem was reported).
    broken: BTreeSet<String>,
    /// What loading found suspicious but usable, one line each.
    warnings: Vec<String>,
    /// Where each file's front-matter keys are (`file:line:column`), by
    /// prompt key: for the problems a tactic finds with them later (a tool
    /// the prompt names that the tactic lacks).
    front_matter: BTreeMap<String, BTreeMap<String, String>>,
}

impl Registry {
    /// A registry with no prompts and no directory.
    pub fn empty() -> Registry {
        Registry::default()
    }

    /// Loads every prompt file under `directory` (recursively, in sorted
    /// order); the first problem, if any. `load_all` reports them all.
    pub fn load(directory: &Path) -> Result<Registry> {
        let (registry, mut problems) = Registry::load_all(directory);
        if problems.is_empty() {
            Ok(registry)
        } else {
            Err(problems.swap_remove(0))
        }
    }

    /// Loads every prompt file under `directory` that is usable, with one
    /// problem per file that is not. A key whose file failed is answered by
    /// `get` with `Error::Broken`.
    pub fn load_all(directory: &Path) -> (Registry, Vec<Error>) {
        Registry::load_all_with(directory, &Extensions::default())
    }

    /// `load_all`, where front matter may name the parsers and renderers of
    /// `extensions` (`parser: NAME`, `renderer: NAME`).
    pub fn load_all_with(directory: &Path, extensions: &Extensions) -> (Registry, Vec<Error>) {
        let mut registry = Registry {
            directory: Some(directory.to_path_buf()),
            prompts: BTreeMap::new(),
            broken: BTreeSet::new(),
            warnings: Vec::new(),
            front_matter: BTreeMap::new(),
        };
        let Walk {
            mut files,
            mut problems,
            warnings,
        } = match walk(directory, MAX_WALK_ENTRIES) {
            Ok(found) => found,
            // Too many entries: no file is read.
            Err(problem) => return (registry, vec![problem]),
        };
        registry.warnings = warnings;
        files.sort_by(|(one, _), (other, _)| one.cmp(other));
        let mut origins: BTreeMap<String, PathBuf> = BTreeMap::new();
        for (file, unreadable) in files {
            let Ok(relative) = file.strip_prefix(directory) else {
                continue;
            };
            let key = key_of(&relative.with_extension(""));
            if let Some(first) = origins.get(&key) {
                problems.push(Error::File {
                    path: file.display().to_string(),
                    message: format!(
                        "prompt key `{key}` is also defined by `{}`; keep one",
                        first.display()
                    ),
                });
                continue;
            }
            origins.insert(key.clone(), file.clone());
            let read = match unreadable {
                Some(problem) => Err(problem),
                None => read_prompt(&file),
            };
            // Every problem of a file at once: its front matter's and its
            // template's.
            match read.map_err(|problem| vec![problem]).and_then(|text| {
                let (prompt, places) = parse_file(&key, &text, &file, extensions)?;
                Ok((prompt, places, text))
            }) {
                Ok((prompt, places, text)) => {
                    registry.front_matter.insert(key.clone(), places);
                    let template_line = split_front_matter(&text).map_or(1, |(_, template)| {
                        text[..text.len() - template.len()].lines().count() + 1
                    });
                    registry
                        .warnings
                        .extend(super::placeholders::python_placeholder_warning(
                            &prompt,
                            &file.display().to_string(),
                            template_line,
                        ));
                    registry.prompts.insert(key, prompt);
                }
                Err(errors) => {
                    problems.extend(errors);
                    registry.broken.insert(key);
                }
            }
        }
        (registry, problems)
    }

    /// The prompt under `key`; an unknown key is an error with a "did you mean".
    pub fn get(&self, key: &str) -> Result<&Prompt> {
        if self.broken.contains(key) {
            return Err(Error::Broken {
                key: key.to_string(),
            });
        }
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

    /// What loading found suspicious but usable, one line each naming the
    /// file and line: a Jinja prompt holding a Python `{name}` placeholder
    /// and no Jinja tag (it would be sent literally; `renderer: format` or
    /// `{{ name }}` fixes it). `lllm run`, `batch` and `replay --rerun` print
    /// them as warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// `file:line:column` of front-matter key `front_key` in the file of
    /// prompt `key`, when it has one.
    pub(crate) fn place(&self, key: &str, front_key: &str) -> Option<&str> {
        self.front_matter
            .get(key)?
            .get(front_key)
            .map(String::as_str)
    }

    /// Adds `prompt` under its `path`, replacing one with that key.
    pub fn insert(&mut self, prompt: Prompt) {
        self.prompts.insert(prompt.path.clone(), prompt);
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.prompts.keys().map(String::as_str)
    }

    /// How many prompts it holds.
    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    /// Whether it holds no prompt.
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }
}

/// A prompt file's text: a regular file (checked on the open handle, so a
/// pipe swapped in cannot block us), at most `MAX_PROMPT_BYTES`, UTF-8.
fn read_prompt(file: &Path) -> Result<String> {
    let problem = |message: String| Error::File {
        path: file.display().to_string(),
        message,
    };
    let (bytes, size) = crate::file::read_regular(file, MAX_PROMPT_BYTES + 1)
        .map_err(|error| problem(error.to_string()))?;
    if size > MAX_PROMPT_BYTES || bytes.len() as u64 > MAX_PROMPT_BYTES {
        return Err(problem(format!(
            "{size} bytes; a prompt file may have at most {} MiB",
            MAX_PROMPT_BYTES / (1024 * 1024)
        )));
    }
    let text = String::from_utf8(bytes).map_err(|error| {
        problem(format!(
            "not UTF-8 text (invalid byte at offset {})",
            error.utf8_error().valid_up_to()
        ))
    })?;
    // A byte order mark would hide the front matter's `---`.
    Ok(crate::file::without_bom(&text).to_string())
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

/// A prompt file's prompt with where its front-matter keys are
/// (`file:line:column`), or every problem of its front matter and its
/// template, each naming the file and, when known, the line and column.
fn parse_file(
    key: &str,
    text: &str,
    file: &Path,
    extensions: &Extensions,
) -> std::result::Result<(Prompt, BTreeMap<String, String>), Vec<Error>> {
    let file_label = file.display().to_string();
    let Some((front, template)) = split_front_matter(text) else {
        return Prompt::new(key, text)
            .map(|prompt| (prompt, BTreeMap::new()))
            .map_err(|error| vec![with_file(error, &file_label, 0)]);
    };
    // The front matter starts on the file's second line.
    let at = |line: usize, column: usize| format!("{file_label}:{}:{column}", line + 1);
    let (front, positions): (Map<String, Value>, Positions) = if front.trim().is_empty() {
        (Map::new(), Positions::default())
    } else {
        match crate::yaml::parse_located(front) {
            Ok((Value::Object(map), positions)) => (map, positions),
            Ok(_) => {
                return Err(vec![Error::File {
                    path: at(1, 1),
                    message: "the front matter must be a mapping of keys (`parser`, `format`, …)"
                        .into(),
                }]);
            }
            Err(error) => {
                let (line, column) = error
                    .location
                    .map_or((1, 1), |location| (location.line, location.column));
                return Err(vec![Error::File {
                    path: at(line, column),
                    message: error.message,
                }]);
            }
        }
    };
    let mut problems = Vec::new();
    // A problem of the front-matter key at `path`, at its line and column.
    let mut invalid = |path: &str, message: String| {
        problems.push(Error::File {
            path: positions
                .get(path)
                .map_or_else(|| file_label.clone(), |place| at(place.line, place.column)),
            message,
        });
    };
    for key in front.keys() {
        if !FRONT_MATTER_KEYS.contains(&key.as_str()) {
            invalid(
                key,
                format!(
                    "unknown front-matter key `{key}`{}",
                    suggest::hint(key, FRONT_MATTER_KEYS.iter().copied())
                ),
            );
        }
    }
    let renderer = front_renderer(&front, extensions, &mut invalid);
    let front_lines = text[..text.len() - template.len()].lines().count();
    // The template is compiled in its renderer; without one (a wrong
    // `renderer`), the rest of the front matter is still checked on an
    // empty Jinja template.
    let mut template_problem = None;
    let compiled = match &renderer {
        Some(renderer) => Prompt::with_renderer(key, template, renderer.clone())
            .map_err(|error| template_problem = Some(with_file(error, &file_label, front_lines)))
            .ok(),
        None => None,
    };
    let mut prompt = match compiled {
        Some(prompt) => prompt,
        None => Prompt::with_renderer(key, "", renderer.clone().unwrap_or(Renderer::Jinja))
            .map_err(|error| vec![error])?,
    };
    apply_front_matter(&mut prompt, &front, extensions, &mut invalid);
    problems.extend(template_problem);
    if !problems.is_empty() {
        return Err(problems);
    }
    let places = front
        .keys()
        .filter_map(|key| {
            let place = positions.get(key)?;
            Some((key.clone(), at(place.line, place.column)))
        })
        .collect();
    Ok((prompt, places))
}

/// The renderer the front matter names (`jinja` when it names none), or
/// `None` with the problem given to `invalid` (at the key, with its message).
fn front_renderer(
    front: &Map<String, Value>,
    extensions: &Extensions,
    invalid: &mut dyn FnMut(&str, String),
) -> Option<Renderer> {
    match front.get("renderer") {
        None => Some(Renderer::Jinja),
        Some(Value::String(name)) => match name.as_str() {
            "jinja" => Some(Renderer::Jinja),
            "format" => Some(Renderer::Format),
            other => match extensions.renderers.get(other) {
                Some(renderer) => Some(Renderer::Custom(NamedRenderer::new(
                    other,
                    renderer.clone(),
                ))),
                None => {
                    let known = super::extensions::BUILTIN_RENDERERS
                        .iter()
                        .copied()
                        .chain(extensions.renderer_names());
                    invalid(
                        "renderer",
                        format!(
                            "`renderer: {}` must be `jinja`, `format` or a registered renderer{}",
                            suggest::printable(other),
                            suggest::hint(other, known)
                        ),
                    );
                    None
                }
            },
        },
        Some(other) => {
            invalid(
                "renderer",
                format!(
                    "`renderer` must be a name (`jinja`, `format` or a registered one), not {other}"
                ),
            );
            None
        }
    }
}

/// Sets what the front matter says besides the renderer on the prompt
/// compiled from its template: `parser`, `format`, `tools`, `mcp_servers`,
/// `metadata` and `handler`; each problem goes to `invalid` (at the key,
/// with its message).
fn apply_front_matter(
    prompt: &mut Prompt,
    front: &Map<String, Value>,
    extensions: &Extensions,
    invalid: &mut dyn FnMut(&str, String),
) {
    let renderer = prompt.renderer().clone();
    if let Some(parser) = front.get("parser") {
        match Parser::from_value_with(parser, &extensions.parsers) {
            Ok(parser) => prompt.parser = Some(parser),
            Err(message) => invalid("parser", message),
        }
    }
    if let Some(format) = front.get("format")
        && let Err(error) = prompt.set_format(Some(format.clone()))
    {
        invalid("format", error.to_string());
    }
    for (key, list) in [
        ("tools", &mut prompt.tools),
        ("mcp_servers", &mut prompt.mcp_servers),
    ] {
        match string_list(front, key) {
            Ok(names) => *list = names,
            Err(message) => invalid(key, message),
        }
    }
    if let Some(metadata) = front.get("metadata") {
        match metadata.as_object() {
            Some(metadata) => prompt.metadata = metadata.clone(),
            None => invalid("metadata", "`metadata` must be a mapping".into()),
        }
    }
    if front.contains_key("addon_args") {
        // The Python framework's provider add-ons (`web_search`,
        // `computer_use`) were never sent by lllm; refusing them beats a run
        // that silently lacks the search the prompt counts on.
        invalid(
            "addon_args",
            "`addon_args` (the Python framework's provider add-ons such as `web_search` or \
             `computer_use`) are not supported; hint: remove them, and pass a provider's own \
             request options through the agent's `model_args`"
                .into(),
        );
    }
    if let Some(Value::String(name)) = front.get("handler") {
        // A registered handler's name; the tactic checks it exists.
        prompt.handler_name = Some(name.clone());
    } else if let Some(handler) = front.get("handler") {
        match handler_texts(handler, &renderer) {
            Ok(texts) => {
                prompt.handler = texts;
                for (name, problem) in handler_problems(prompt) {
                    invalid(&format!("handler.{name}"), problem);
                }
            }
            Err(message) => invalid("handler", message),
        }
    }
}

/// The problems of a prompt's handler texts, with the name of each text.
/// Each sees one value (or none); it is rendered with a sample of it now,
/// so a text that cannot render is reported before anything is sent, not
/// when a repair or a tool result needs it.
fn handler_problems(prompt: &Prompt) -> Vec<(&'static str, String)> {
    let handlers = [
        (
            "exception",
            &prompt.handler.exception,
            Some("error_message"),
        ),
        ("interrupt", &prompt.handler.interrupt, Some("call_results")),
        ("interrupt_final", &prompt.handler.interrupt_final, None),
    ];
    let mut problems = Vec::new();
    for (name, text, sees) in handlers {
        let handler = match prompt.handler_template(text) {
            Ok(handler) => handler,
            Err(error) => {
                problems.push((name, format!("`handler.{name}`: {error}")));
                continue;
            }
        };
        let unknown: Vec<String> = handler
            .template_vars()
            .iter()
            .filter(|variable| Some(variable.as_str()) != sees)
            .map(|variable| format!("`{variable}`"))
            .collect();
        if !unknown.is_empty() {
            let seen = sees.map_or("nothing".to_string(), |sees| format!("only `{sees}`"));
            problems.push((
                name,
                format!(
                    "`handler.{name}` needs {}, but it sees {seen}",
                    unknown.join(", ")
                ),
            ));
            continue;
        }
        let mut sample = Map::new();
        if let Some(sees) = sees {
            sample.insert(sees.to_string(), Value::String("…".into()));
        }
        if let Err(error) = handler.render_map(&sample) {
            problems.push((name, format!("`handler.{name}`: {error}")));
        }
    }
    problems
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

fn handler_texts(value: &Value, renderer: &Renderer) -> std::result::Result<HandlerTexts, String> {
    let Value::Object(map) = value else {
        return Err(
            "`handler` must be a registered handler's name or a mapping with `exception`, `interrupt` or `interrupt_final`".into(),
        );
    };
    let mut handler = HandlerTexts::defaults(renderer);
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

    #[cfg(unix)]
    #[test]
    fn pipes_and_symlink_loops_are_reported_never_waited_on() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("good.md"), "hello").unwrap();
        std::fs::write(root.join("sub/deep.md"), "deep").unwrap();
        // Reading a pipe without a writer blocks forever.
        nix::unistd::mkfifo(&root.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        symlink(root.join("self.md"), root.join("self.md")).unwrap();
        symlink(root.join("nowhere.md"), root.join("dangling.md")).unwrap();
        // Two links back up: 2^40 paths before the kernel's depth limit.
        symlink("..", root.join("sub/up")).unwrap();
        symlink("..", root.join("sub/again")).unwrap();
        // Harmless: not a prompt's name, or a link to a directory outside.
        nix::unistd::mkfifo(&root.join("notes"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        symlink(root.join("missing"), root.join("broken-link")).unwrap();
        std::fs::write(root.join("bytes.md"), [0x66, 0xff, 0x66]).unwrap();
        let (registry, problems) = Registry::load_all(root);
        assert_eq!(registry.keys().collect::<Vec<_>>(), ["good", "sub/deep"]);
        let mut problems: Vec<String> = problems
            .iter()
            .map(|problem| {
                problem
                    .to_string()
                    .replace(&root.display().to_string(), "ROOT")
            })
            .collect();
        problems.sort();
        assert_eq!(
            problems,
            [
                "ROOT/bytes.md: not UTF-8 text (invalid byte at offset 1)",
                "ROOT/dangling.md: cannot read: No such file or directory (os error 2)",
                "ROOT/pipe.md: a named pipe, not a regular file; a prompt must be a regular file",
                "ROOT/self.md: cannot read: Too many levels of symbolic links (os error 40)",
                "ROOT/sub/again: a symlink back to a directory that contains it (a loop); remove it",
                "ROOT/sub/up: a symlink back to a directory that contains it (a loop); remove it",
            ]
        );
        assert!(matches!(registry.get("pipe"), Err(Error::Broken { .. })));
        assert!(matches!(
            registry.get("nothing"),
            Err(Error::UnknownPrompt { .. })
        ));
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
            &[("a.md", "---\nparser: json\ntools: []\nparser: tags\n---\nx")],
            &["a.md:4:1: duplicate key `parser`"],
        );
        bad_case(
            &[("a.md", "---\n- parser\n---\nx")],
            &["a.md:2:1: the front matter must be a mapping"],
        );
        let deep = format!(
            "---\nmetadata:\n  x: {}{}\n---\nx",
            "[".repeat(200),
            "]".repeat(200)
        );
        bad_case(
            &[("a.md", &deep)],
            &["a.md:3:70: collections nested deeper than 64 levels"],
        );
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

    #[test]
    fn addon_args_are_refused_and_python_placeholders_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ported")).unwrap();
        std::fs::write(
            root.join("search.md"),
            "---\naddon_args: {web_search: true}\n---\nFind {{ topic }}.",
        )
        .unwrap();
        std::fs::write(
            root.join("ported/summary.md"),
            "---\nmetadata: {origin: python}\n---\nSummarize this.\nFor {audience}.",
        )
        .unwrap();
        std::fs::write(root.join("ported/plain.txt"), "Hello {name}").unwrap();
        std::fs::write(
            root.join("ported/format.md"),
            "---\nrenderer: format\n---\nFor {audience}.",
        )
        .unwrap();
        let (registry, problems) = Registry::load_all(root);
        let root = root.display().to_string();
        let problems: Vec<String> = problems
            .iter()
            .map(|problem| problem.to_string().replace(&root, "ROOT"))
            .collect();
        assert_eq!(
            problems,
            [
                "ROOT/search.md:2:1: `addon_args` (the Python framework's provider add-ons such as \
              `web_search` or `computer_use`) are not supported; hint: remove them, and pass a \
              provider's own request options through the agent's `model_args`"
            ]
        );
        let warnings: Vec<String> = registry
            .warnings()
            .iter()
            .map(|warning| warning.replace(&root, "ROOT"))
            .collect();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0]
                .starts_with("ROOT/ported/plain.txt:1: prompt `ported/plain` holds `{name}`"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with(
                "ROOT/ported/summary.md:5: prompt `ported/summary` holds `{audience}`"
            ),
            "{warnings:?}"
        );
        // Sent literally, as the warning says.
        assert_eq!(
            registry.get("ported/summary").unwrap().render(()).unwrap(),
            "Summarize this.\nFor {audience}."
        );
    }
}
