//! The `flow:` of a tactic: steps, `if:` conditions on steps, and `loop:`
//! blocks (`max`, `until`, nested `steps`), parsed recursively with every
//! problem collected.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use super::places::Problems;
use super::raw::{RawStep, STEP_KEYS};
use super::resolve::{describe_value, join};
use super::typed::typed;
use crate::{suggest, yaml};

const LOOP_KEYS: &[&str] = &["loop", "steps"];
const PARALLEL_KEYS: &[&str] = &["parallel", "steps"];

/// A flow step: an agent answers a prompt (or text) in one of its dialogs.
#[derive(Debug, Clone, Serialize)]
pub struct StepConfig {
    /// The step's name, unique; later templates see its result under it.
    pub name: String,
    /// The agent that answers.
    pub agent: String,
    /// The dialog it answers in (opened on first use).
    pub dialog: String,
    /// What the agent receives.
    pub input: StepInput,
    /// Arguments of the step's prompt (strings are templates over the run).
    pub args: Map<String, Value>,
    /// `if:` — a minijinja expression; the step is skipped when it is false.
    pub condition: Option<String>,
    /// `fork:` — the step's dialog starts as a fork of another dialog of its agent.
    pub fork: Option<ForkConfig>,
    /// `stop:` — an expression checked after the step; true ends the tactic here.
    pub stop: Option<String>,
    /// Its path in the document (`flow[0].steps[1]`), for the places of
    /// later problems.
    #[serde(skip)]
    pub(crate) at: String,
}

/// `fork: {from, last_n, first_k}`, as `Dialog::fork` takes them.
#[derive(Debug, Clone, Serialize)]
pub struct ForkConfig {
    /// The dialog forked.
    pub from: String,
    /// Keep the newest `last_n` messages (0: all).
    pub last_n: usize,
    /// Keep the first `first_k` messages besides (the system prompt is one).
    pub first_k: usize,
}

/// What a step's agent receives.
#[derive(Debug, Clone, Serialize)]
pub enum StepInput {
    /// A prompt file's key (`prompt:`), rendered with the step's arguments.
    Prompt(String),
    /// A template (`input:`), rendered over the run.
    Text(String),
}

/// `loop:` — its steps run again until `until` holds or `max` rounds.
#[derive(Debug, Clone, Serialize)]
pub struct LoopConfig {
    /// At most this many rounds.
    pub max: u32,
    /// A minijinja expression checked after each round; true ends the loop.
    pub until: Option<String>,
    /// The steps of one round.
    pub steps: Vec<FlowItem>,
    /// Its path in the document (`flow[2]`).
    #[serde(skip)]
    pub(crate) at: String,
}

/// `parallel:` — its steps run at the same time, each on fresh agents; with
/// `foreach`, the whole `steps` list runs once per element of a list.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelConfig {
    /// A minijinja expression giving a list.
    pub foreach: Option<String>,
    /// The name each element has in the branch's templates (default `item`).
    pub item: String,
    /// The branches.
    pub steps: Vec<FlowItem>,
    /// Its path in the document (`flow[2]`).
    #[serde(skip)]
    pub(crate) at: String,
}

/// A step that runs another tactic file as a unit: `tactic: PATH` (made
/// relative to the file that names it when loading), an optional `task` template (default: this
/// run's task) and `args` (templates) that become the sub-tactic's arguments.
#[derive(Debug, Clone, Serialize)]
pub struct SubTacticConfig {
    /// The step's name, unique.
    pub name: String,
    /// The tactic file run.
    pub path: PathBuf,
    /// Its task, a template (default: this run's task).
    pub task: Option<String>,
    /// Its arguments (strings are templates over the run).
    pub args: Map<String, Value>,
    /// `if:`, as for a step.
    pub condition: Option<String>,
    /// `stop:`, as for a step.
    pub stop: Option<String>,
    /// For a served tactic (`tactic: http://…`): the variable that holds
    /// its bearer token (`token_env:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Its path in the document (`flow[0]`).
    #[serde(skip)]
    pub(crate) at: String,
}

/// One entry of `flow:`.
#[derive(Debug, Clone, Serialize)]
pub enum FlowItem {
    /// An agent's turn.
    Step(Box<StepConfig>),
    /// Another tactic run as a unit.
    Tactic(Box<SubTacticConfig>),
    /// Steps repeated.
    Loop(LoopConfig),
    /// Steps run at once.
    Parallel(ParallelConfig),
}

/// Reads `flow:` (and the `steps` of its loops and branches) into items,
/// each problem at its path. An entry with problems is kept as far as it
/// can be (a step without `agent` or input is a step with none, a loop with
/// a wrong `max` runs once): the tactic is not run with them, and the
/// checks of later templates still know every step's name.
pub(super) struct FlowParser<'a> {
    pub agent_names: Vec<&'a str>,
    pub step_names: BTreeSet<String>,
    pub steps_seen: usize,
    pub problems: &'a mut Problems,
}

impl FlowParser<'_> {
    pub fn parse(&mut self, entries: Vec<Value>, prefix: &str) -> Vec<FlowItem> {
        let mut items = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let label = format!("{prefix}[{index}]");
            let entry = match entry {
                Value::Object(entry) => entry,
                other => {
                    self.problems.at(
                        label.clone(),
                        format!(
                            "`{label}` must be a mapping (a step, a `loop` or a `parallel`), not {}",
                            describe_value(&other)
                        ),
                    );
                    continue;
                }
            };
            let item = if entry.contains_key("loop") {
                self.parse_loop(entry, &label)
            } else if entry.contains_key("parallel") {
                self.parse_parallel(entry, &label)
            } else {
                self.parse_step(entry, &label)
            };
            items.extend(item);
        }
        items
    }

    fn unknown_keys(&mut self, entry: &Map<String, Value>, allowed: &[&str], label: &str) {
        for key in entry.keys().filter(|key| !allowed.contains(&key.as_str())) {
            self.problems.at(
                yaml::child_key(label, key),
                format!(
                    "`{label}`: unknown key `{}`{}",
                    suggest::printable(key),
                    suggest::hint(key, allowed.iter().copied())
                ),
            );
        }
    }

    /// The `steps:` of a loop or branch block, parsed; `None` (a problem)
    /// when there are none.
    fn block(&mut self, entry: &Map<String, Value>, label: &str) -> Option<Vec<FlowItem>> {
        match entry.get("steps") {
            Some(Value::Array(steps)) if !steps.is_empty() => {
                Some(self.parse(steps.clone(), &format!("{label}.steps")))
            }
            Some(_) => {
                self.problems.at(
                    format!("{label}.steps"),
                    format!("`{label}` needs `steps:`, a non-empty list"),
                );
                None
            }
            None => {
                self.problems
                    .at(label, format!("`{label}` needs `steps:`, a non-empty list"));
                None
            }
        }
    }

    fn parse_loop(&mut self, entry: Map<String, Value>, label: &str) -> Option<FlowItem> {
        self.unknown_keys(&entry, LOOP_KEYS, label);
        let loop_at = format!("{label}.loop");
        let settings = match entry.get("loop") {
            Some(Value::Object(settings)) => settings.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(other) => {
                self.problems.at(
                    &loop_at,
                    format!(
                        "`{label}.loop` must be a mapping (`max`, `until`), not {}",
                        describe_value(other)
                    ),
                );
                Map::new()
            }
        };
        for key in settings
            .keys()
            .filter(|key| !matches!(key.as_str(), "max" | "until"))
        {
            self.problems.at(
                yaml::child_key(&loop_at, key),
                format!(
                    "`{label}.loop`: unknown key `{}` (a loop takes `max` and `until`)",
                    suggest::printable(key)
                ),
            );
        }
        let max = match settings.get("max").filter(|max| !max.is_null()) {
            None => {
                self.problems.at(
                    &loop_at,
                    format!("`{label}.loop` needs `max: N` (at least 1) so it always ends"),
                );
                None
            }
            Some(max) => self.problems.numbers(&format!("{loop_at}.max"), |found| {
                super::numbers::read_whole(
                    Some(max),
                    &super::numbers::LOOP_MAX,
                    &format!("`{label}.loop`"),
                    found,
                )
            }),
        };
        let until = match settings.get("until") {
            None | Some(Value::Null) => None,
            Some(Value::String(expression)) => Some(expression.clone()),
            Some(other) => {
                self.problems.at(
                    format!("{loop_at}.until"),
                    format!("`{label}.loop.until` must be an expression in quotes, not {other}"),
                );
                None
            }
        };
        let steps = self.block(&entry, label)?;
        Some(FlowItem::Loop(LoopConfig {
            // In range, so the cast is exact; a wrong `max` was reported.
            max: max.map_or(1, |max| max as u32),
            until,
            steps,
            at: label.to_string(),
        }))
    }

    fn parse_parallel(&mut self, entry: Map<String, Value>, label: &str) -> Option<FlowItem> {
        self.unknown_keys(&entry, PARALLEL_KEYS, label);
        let parallel_at = format!("{label}.parallel");
        let settings = match entry.get("parallel") {
            Some(Value::Object(settings)) => settings.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(other) => {
                self.problems.at(
                    &parallel_at,
                    format!(
                        "`{label}.parallel` must be a mapping (`foreach`, `as`) or empty, not {other}"
                    ),
                );
                Map::new()
            }
        };
        for key in settings
            .keys()
            .filter(|key| !matches!(key.as_str(), "foreach" | "as"))
        {
            self.problems.at(
                yaml::child_key(&parallel_at, key),
                format!(
                    "`{label}.parallel`: unknown key `{}` (it takes `foreach` and `as`)",
                    suggest::printable(key)
                ),
            );
        }
        let text = |key: &str| {
            settings
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let steps = self.block(&entry, label)?;
        Some(FlowItem::Parallel(ParallelConfig {
            foreach: text("foreach"),
            item: text("as").unwrap_or_else(|| "item".into()),
            steps,
            at: label.to_string(),
        }))
    }

    fn parse_step(&mut self, entry: Map<String, Value>, label: &str) -> Option<FlowItem> {
        self.unknown_keys(&entry, STEP_KEYS, label);
        self.steps_seen += 1;
        let known: Map<String, Value> = entry
            .into_iter()
            .filter(|(key, _)| STEP_KEYS.contains(&key.as_str()))
            .collect();
        let step: RawStep = typed(
            Value::Object(known),
            &|relative| join(label, relative),
            self.problems,
        )?;
        let at = |key: &str| yaml::child_key(label, key);
        let name = step
            .step
            .unwrap_or_else(|| format!("step{}", self.steps_seen));
        if matches!(name.as_str(), "task" | "args") {
            self.problems.at(
                at("step"),
                format!("`{label}`: a step cannot be named `{name}` (templates use that name)"),
            );
        }
        if !self.step_names.insert(name.clone()) {
            self.problems.at(
                at("step"),
                format!("step `{name}` is defined twice in `flow`"),
            );
        }
        if let Some(path) = step.tactic {
            let own_keys = [
                ("agent", step.agent.is_some()),
                ("dialog", step.dialog.is_some()),
                ("prompt", step.prompt.is_some()),
                ("text", step.text.is_some()),
                ("fork", step.fork.is_some()),
            ];
            for (key, _) in own_keys.iter().filter(|(_, present)| *present) {
                self.problems.at(
                    at(key),
                    format!(
                        "step `{name}` runs tactic `{path}`, so it takes no `{key}` (the sub-tactic has its own agents)"
                    ),
                );
            }
            return Some(FlowItem::Tactic(Box::new(SubTacticConfig {
                name,
                path: PathBuf::from(path),
                task: step.task,
                args: step.args.unwrap_or_default(),
                condition: step.condition,
                stop: step.stop,
                token_env: step.token_env,
                at: label.to_string(),
            })));
        }
        if step.token_env.is_some() {
            self.problems.at(
                at("token_env"),
                format!(
                    "step `{name}`: `token_env` is for a step that runs a served tactic (`tactic: http://…`)"
                ),
            );
        }
        if step.task.is_some() {
            self.problems.at(
                at("task"),
                format!(
                    "step `{name}`: `task` is for steps that run a `tactic`; an agent step sends `prompt` or `text`"
                ),
            );
        }
        let agent = match step.agent {
            Some(agent) => {
                if !self.agent_names.contains(&agent.as_str()) {
                    self.problems.at(
                        at("agent"),
                        format!(
                            "step `{name}` uses agent `{agent}`, which is not in `agent_configs`{}",
                            suggest::hint(&agent, self.agent_names.iter().copied())
                        ),
                    );
                }
                agent
            }
            None => {
                self.problems
                    .missing(&at("agent"), format!("step `{name}` has no `agent`"));
                String::new()
            }
        };
        let input = match (step.prompt, step.text) {
            (Some(key), None) => StepInput::Prompt(key),
            (None, Some(text)) => StepInput::Text(text),
            (Some(key), Some(_)) => {
                self.problems.at(
                    at("text"),
                    format!("step `{name}` has both `prompt` and `text`; keep one"),
                );
                StepInput::Prompt(key)
            }
            (None, None) => {
                // A `prompt` or `text` of the wrong type was reported already.
                if !self.problems.reported(&at("prompt")) && !self.problems.reported(&at("text")) {
                    self.problems.at(
                        label,
                        format!(
                            "step `{name}` needs a `prompt` (registry key) or a `text` (inline template)"
                        ),
                    );
                }
                StepInput::Text(String::new())
            }
        };
        let dialog = step.dialog.unwrap_or_else(|| "main".into());
        let fork = step.fork.map(|fork| ForkConfig {
            from: fork.from,
            last_n: fork.last_n,
            first_k: fork.first_k,
        });
        if fork.as_ref().is_some_and(|fork| fork.from == dialog) {
            self.problems.at(
                at("fork"),
                format!(
                    "step `{name}` forks dialog `{dialog}` into itself; give the step another `dialog`"
                ),
            );
        }
        Some(FlowItem::Step(Box::new(StepConfig {
            name,
            agent,
            dialog,
            input,
            args: step.args.unwrap_or_default(),
            condition: step.condition,
            fork,
            stop: step.stop,
            at: label.to_string(),
        })))
    }
}

/// A dialog of an agent: (agent, dialog).
type DialogKey = (String, String);

/// Every step whose `fork: {from}` names a dialog its agent cannot have when
/// the step opens its own (issue 26: found at run time, after earlier steps
/// were paid for). A dialog is opened by the first step that uses it, so
/// `from` must be the dialog of a step before it of the same agent, at any
/// depth and whatever its `if:` (the check never refuses a flow that can
/// run); inside a `loop`, a dialog any step of the loop opens counts too (a
/// later round has it). A `parallel` branch runs on fresh agents: only its
/// own steps open its dialogs, and what it opens stays in the branch.
pub(super) fn check_forks(items: &[FlowItem], problems: &mut Problems) {
    forks_in(items, &mut BTreeSet::new(), &BTreeSet::new(), problems);
}

/// `opened`: the dialogs steps before this point open (grows as it goes);
/// `looped`: those the steps of the enclosing loops open.
fn forks_in(
    items: &[FlowItem],
    opened: &mut BTreeSet<DialogKey>,
    looped: &BTreeSet<DialogKey>,
    problems: &mut Problems,
) {
    for item in items {
        match item {
            FlowItem::Step(step) => {
                let own = (step.agent.clone(), step.dialog.clone());
                if let Some(fork) = &step.fork
                    // A step whose dialog is open already does not fork.
                    && !opened.contains(&own)
                    // Named as a problem of its own by the parser.
                    && fork.from != step.dialog
                {
                    let from = (step.agent.clone(), fork.from.clone());
                    if !opened.contains(&from) && !looped.contains(&from) {
                        let open: Vec<String> = opened
                            .iter()
                            .chain(looped)
                            .filter(|(agent, _)| *agent == step.agent)
                            .map(|(_, dialog)| format!("`{}`", suggest::printable(dialog)))
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        let open = if open.is_empty() {
                            "none".to_string()
                        } else {
                            open.join(", ")
                        };
                        problems.at(
                            format!("{}.fork.from", step.at),
                            format!(
                                "step `{}`: `fork.from` names dialog `{}`, which no step of agent \
                             `{}` opens before it (open then: {open}); hint: a dialog is opened \
                             by the first step that uses it, and a `parallel` branch starts \
                             with none",
                                suggest::printable(&step.name),
                                suggest::printable(&fork.from),
                                suggest::printable(&step.agent),
                            ),
                        );
                    }
                }
                opened.insert(own);
            }
            FlowItem::Tactic(_) => {}
            FlowItem::Loop(config) => {
                let mut looped = looped.clone();
                opened_by(&config.steps, &mut looped);
                forks_in(&config.steps, opened, &looped, problems);
            }
            FlowItem::Parallel(config) => {
                let branches: Vec<&[FlowItem]> = match config.foreach {
                    Some(_) => vec![&config.steps],
                    None => config.steps.iter().map(std::slice::from_ref).collect(),
                };
                for branch in branches {
                    forks_in(branch, &mut BTreeSet::new(), &BTreeSet::new(), problems);
                }
            }
        }
    }
}

/// The dialogs `items` open, at any depth outside `parallel` branches.
fn opened_by(items: &[FlowItem], opened: &mut BTreeSet<DialogKey>) {
    for item in items {
        match item {
            FlowItem::Step(step) => {
                opened.insert((step.agent.clone(), step.dialog.clone()));
            }
            FlowItem::Loop(config) => opened_by(&config.steps, opened),
            FlowItem::Tactic(_) | FlowItem::Parallel(_) => {}
        }
    }
}
