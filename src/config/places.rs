//! Where a tactic's settings are written, and its problems with their
//! places: a problem is found on the merged document (the file over its
//! `base` chain, a user's defaults under both) by the path of the node it is
//! about (`agent_configs[0].tools`), and shown as `file:line:column: what`,
//! the file being whichever of the chain wrote that node.
//!
//! What a node's place is in one file is `yaml::Positions`' business; this
//! file only picks the file.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::TacticConfig;
use crate::redact::terminal_line;
use crate::yaml::Positions;

/// The most problems a tactic's error lists; the rest are counted on one
/// more line. A file with hundreds of problems is most likely not a tactic,
/// and its first fifty say so.
pub const MAX_PROBLEMS_SHOWN: usize = 50;

/// Where each node of a tactic's merged document is written.
#[derive(Debug, Clone, Default)]
pub(crate) struct Places {
    /// The files of the document with where their nodes are: the tactic's
    /// own first, then its `base` chain in order. The first file that has a
    /// node wrote it: a mapping merges key by key, and anything else a file
    /// sets replaces the whole node of the files after it.
    sources: Arc<Vec<(String, Positions)>>,
}

impl Places {
    /// Adds a file after those added so far (a `base` after the file naming it).
    pub(crate) fn add(&mut self, file: &str, positions: Positions) {
        Arc::make_mut(&mut self.sources).push((file.to_string(), positions));
    }

    /// `file:line:column` of the node at `path`; of the nearest node
    /// around it when no file wrote it (a key that is missing: the entry
    /// that lacks it), short of a whole top-level section. `None` when no
    /// file wrote any (a user's defaults, a config built in code).
    pub(crate) fn at(&self, path: &str) -> Option<String> {
        let mut path = path;
        loop {
            if let Some(place) = self.written(path) {
                return Some(place);
            }
            path = crate::yaml::parent_path(path).filter(|parent| parent.contains(['.', '[']))?;
        }
    }

    /// `file:line:column` of the node at `path` in the first file that has it.
    fn written(&self, path: &str) -> Option<String> {
        let (file, positions) = self
            .sources
            .iter()
            .find(|(_, positions)| positions.contains(path))?;
        let location = positions.get(path)?;
        Some(format!("{file}:{}:{}", location.line, location.column))
    }

    /// Whether a file of the document has a node at `path`.
    pub(crate) fn has(&self, path: &str) -> bool {
        self.sources
            .iter()
            .any(|(_, positions)| positions.contains(path))
    }

    /// The place of the first of `paths` a file has.
    pub(crate) fn first<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Option<String> {
        paths
            .into_iter()
            .find(|path| self.has(path))
            .and_then(|path| self.at(path))
    }

    /// `problem` with `place` in front (`file:line:column: problem`), or
    /// `problem` alone when it has no place.
    pub(crate) fn placed(place: Option<&str>, problem: &str) -> String {
        match place {
            Some(place) => format!("{place}: {problem}"),
            None => problem.to_string(),
        }
    }
}

/// The names of the agents, providers, tools and MCP servers a tactic's
/// file writes that its config left out for their problems (reported
/// already): a reference to one is not a problem of its own, so the later
/// phases can report everything else while the config has problems.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeftOut {
    pub(crate) agents: BTreeSet<String>,
    pub(crate) providers: BTreeSet<String>,
    pub(crate) tools: BTreeSet<String>,
    pub(crate) mcp_servers: BTreeSet<String>,
}

impl LeftOut {
    /// The names `document` writes under each section that `config` lacks
    /// (a provider is one of `config`'s by its entry, a preset or not).
    pub(super) fn of(document: &Value, config: &TacticConfig) -> LeftOut {
        let named = |section: &str| -> BTreeSet<String> {
            match document.get(section) {
                Some(Value::Array(entries)) => entries
                    .iter()
                    .filter_map(|entry| entry.get("name")?.as_str())
                    .map(str::to_string)
                    .collect(),
                Some(Value::Object(entries)) => entries.keys().cloned().collect(),
                _ => BTreeSet::new(),
            }
        };
        let missing = |section: &str, kept: Vec<&String>| -> BTreeSet<String> {
            let mut names = named(section);
            for name in kept {
                names.remove(name);
            }
            names
        };
        LeftOut {
            agents: missing(
                "agent_configs",
                config.agents.iter().map(|agent| &agent.name).collect(),
            ),
            providers: missing("providers", config.providers.keys().collect()),
            tools: missing(
                "tools",
                config.tools.iter().map(|tool| &tool.name).collect(),
            ),
            mcp_servers: missing(
                "mcp_servers",
                config
                    .mcp_servers
                    .iter()
                    .map(|server| &server.name)
                    .collect(),
            ),
        }
    }
}

/// A problem of a config, with the path of the node it is about (`None`:
/// the file as a whole).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub(crate) at: Option<String>,
    pub(crate) message: String,
}

/// The problems found so far, each once, in the order found.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    found: Vec<Problem>,
}

impl Problems {
    /// A problem of the node at `path`.
    pub(crate) fn at(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.add(Problem {
            at: Some(path.into()),
            message: message.into(),
        });
    }

    /// A problem of the file as a whole.
    pub(crate) fn file(&mut self, message: impl Into<String>) {
        self.add(Problem {
            at: None,
            message: message.into(),
        });
    }

    /// That the key at `path` is missing or empty — unless a problem at
    /// that path (or inside it) was reported already: a value of the wrong
    /// type is left out, and is not also said to be missing.
    pub(crate) fn missing(&mut self, path: &str, message: impl Into<String>) {
        if !self.reported(path) {
            self.at(path, message);
        }
    }

    /// Whether a problem at `path`, or inside it, was reported.
    pub(crate) fn reported(&self, path: &str) -> bool {
        self.found.iter().any(|problem| {
            problem.at.as_deref().is_some_and(|at| {
                at.strip_prefix(path)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
        })
    }

    /// The problems [`numbers::read`](super::numbers::read) and its kin
    /// push through `check`, each at `path`.
    pub(crate) fn numbers<T>(
        &mut self,
        path: &str,
        check: impl FnOnce(&mut Vec<String>) -> T,
    ) -> T {
        let mut found = Vec::new();
        let value = check(&mut found);
        for message in found {
            self.at(path, message);
        }
        value
    }

    fn add(&mut self, problem: Problem) {
        if !self.found.contains(&problem) {
            self.found.push(problem);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The problems, in the order found.
    pub(crate) fn into_found(self) -> Vec<Problem> {
        self.found
    }

    /// Each problem as the line the user sees: its place in front when the
    /// node has one (`file:line:column: what`), else `file: what`.
    pub(crate) fn lines(self, places: &Places, file: &str) -> Vec<String> {
        self.found
            .into_iter()
            .map(|problem| {
                let place = problem.at.as_deref().and_then(|path| places.at(path));
                Places::placed(Some(place.as_deref().unwrap_or(file)), &problem.message)
            })
            .collect()
    }
}

/// `lines`, one per line (a control character inside one came from a name
/// it quotes, and is shown escaped), at most [`MAX_PROBLEMS_SHOWN`] of them
/// and a count of the rest.
pub(crate) fn show(lines: &[String]) -> String {
    let mut shown: Vec<String> = lines
        .iter()
        .take(MAX_PROBLEMS_SHOWN)
        .map(|line| terminal_line(line).into_owned())
        .collect();
    if lines.len() > MAX_PROBLEMS_SHOWN {
        shown.push(format!(
            "… and {} more problems",
            lines.len() - MAX_PROBLEMS_SHOWN
        ));
    }
    shown.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places() -> Places {
        let mut places = Places::default();
        let (_, own) = crate::yaml::parse_located(
            "base: b.yaml\nagent_configs:\n  - name: a\n    tools: 5\nglobal:\n  model_name: x\n",
        )
        .unwrap();
        let (_, base) = crate::yaml::parse_located(
            "agent_configs:\n  - name: z\n    tools: [q]\nglobal:\n  model_args: {t: 1}\n  model_name: y\n",
        )
        .unwrap();
        places.add("t.yaml", own);
        places.add("b.yaml", base);
        places
    }

    #[track_caller]
    fn case(path: &str, expected: Option<&str>) {
        assert_eq!(places().at(path).as_deref(), expected, "{path}");
    }

    #[test]
    fn the_first_file_that_has_a_node_wrote_it() {
        case("agent_configs[0].tools", Some("t.yaml:4:5"));
        case("global.model_name", Some("t.yaml:6:3"));
        // A key only the base has, under a mapping both have.
        case("global.model_args.t", Some("b.yaml:5:16"));
        // A node no file has (a user's defaults), nor anything around it
        // short of the whole section.
        case("providers.local", None);
        case("providers.local.rpm", None);
        case("global.api_type", None);
        // A key missing from an entry: the entry.
        case("agent_configs[0].model_name", Some("t.yaml:3:5"));
        assert_eq!(
            places()
                .first(["agent_configs[0].model_args", "global.model_args"])
                .as_deref(),
            Some("b.yaml:5:3")
        );
    }

    #[test]
    fn problems_are_listed_once_with_their_places() {
        let mut problems = Problems::default();
        problems.at("agent_configs[0].tools", "`tools`: wrong");
        problems.at("agent_configs[0].tools", "`tools`: wrong");
        // Reported already: not also missing.
        problems.missing("agent_configs[0].tools", "has no tools");
        // Missing: at the entry that lacks it.
        problems.missing("agent_configs[0].model_name", "has no model");
        problems.file("no flow");
        assert_eq!(
            problems.lines(&places(), "t.yaml"),
            [
                "t.yaml:4:5: `tools`: wrong",
                "t.yaml:3:5: has no model",
                "t.yaml: no flow"
            ]
        );
        let many: Vec<String> = (0..53).map(|index| format!("p{index}")).collect();
        let shown = show(&many);
        assert_eq!(shown.lines().count(), MAX_PROBLEMS_SHOWN + 1);
        assert!(shown.ends_with("p49\n… and 3 more problems"), "{shown}");
    }
}
