//! Pre-flight of a built tactic for a task, before anything is sent: every
//! template and expression the flow reaches is checked against the names it
//! will have at that point (`check_variables`), and, for one task, every one
//! that needs nothing but the task is rendered with the task's values
//! (`trial`), so a template that fails on them — an attribute the value
//! lacks, an operator on the wrong type — is bad input, not a failed run.
//!
//! Templates that need a step's output cannot be rendered before the step
//! ran; for those the static checks (prompt/check.rs) and the step-output
//! shape (`content`, `parsed`, `model`, `cost`) are what pre-flight knows.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::flow::{Condition, base_context, step_names};
use super::{ArgValue, Node, Step, SubStep, Tactic, Task};
use crate::config::{SystemPrompt, TacticConfig, join_path};
use crate::prompt::Prompt;

/// The fields of a step's output in the template context.
const STEP_FIELDS: &[&str] = &["content", "parsed", "model", "cost"];

/// What a step name holds in the context at some point of the flow.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// One output: `{content, parsed, model, cost}`.
    Output,
    /// A list of outputs (the step ran in a `parallel` with `foreach`).
    Outputs,
}

/// Every problem with the variables and step fields the flow's templates
/// read, against what the flow will have at that point: `task`, `args`, the
/// task's argument names, earlier steps and the step's own arguments.
pub(super) fn check_variables(tactic: &Tactic, arg_names: &BTreeSet<String>) -> Vec<String> {
    let mut checker = Checker {
        config: &tactic.config,
        known: arg_names.clone(),
        steps: BTreeMap::new(),
        problems: Vec::new(),
        later: Vec::new(),
    };
    checker.known.insert("task".into());
    checker.known.insert("args".into());
    // A programmed tactic's agents open their dialogs with what its code
    // passes: nothing to check before the run.
    if tactic.nodes.is_empty()
        && tactic.program.is_none()
        && let Some(agent) = tactic.agents.values().next()
    {
        let known = checker.known.clone();
        checker.prompt(
            &agent.system_prompt,
            &known,
            &format!("agent `{}`", agent.name),
            &system_prompt_at(&tactic.config, &agent.name),
        );
    }
    let mut opened: BTreeSet<(String, String)> = BTreeSet::new();
    let mut checks = Vec::new();
    flatten(&tactic.nodes, &mut checks);
    for check in checks {
        match check {
            Check::Condition(condition, place, at) => checker.condition(condition, &place, &at),
            Check::Names(names) => checker.known.extend(names.into_iter().map(str::to_string)),
            Check::Steps(names, shape) => {
                for name in names {
                    checker.known.insert(name.to_string());
                    checker.steps.insert(name.to_string(), shape);
                }
            }
            Check::Tactic(step) => checker.sub_tactic(step),
            Check::Step(step) => {
                if opened.insert((step.agent.clone(), step.dialog.clone()))
                    && let Some(agent) = tactic.agents.get(&step.agent)
                {
                    let place = format!(
                        "step `{}` (system prompt of agent `{}`)",
                        step.name, agent.name
                    );
                    let known = checker.known.clone();
                    checker.prompt(
                        &agent.system_prompt,
                        &known,
                        &place,
                        &system_prompt_at(&tactic.config, &agent.name),
                    );
                }
                let known = checker.known.clone();
                let mut step_known = known.clone();
                for (name, value) in &step.args {
                    if let ArgValue::Template(template) = value {
                        let place = format!("step `{}` argument `{name}`", step.name);
                        checker.prompt(template, &known, &place, &argument_at(&step.at, name));
                    }
                    step_known.insert(name.clone());
                }
                // The step's own arguments hide steps of the same name.
                let hidden: Vec<(String, Shape)> = step
                    .args
                    .iter()
                    .filter_map(|(name, _)| Some((name.clone(), checker.steps.remove(name)?)))
                    .collect();
                checker.prompt(
                    &step.prompt,
                    &step_known,
                    &format!("step `{}`", step.name),
                    &tactic.config.first_written(&step.at, &["prompt", "text"]),
                );
                checker.steps.extend(hidden);
                checker.known.insert(step.name.clone());
                checker.steps.insert(step.name.clone(), Shape::Output);
            }
        }
    }
    if let Some(result) = &tactic.result {
        let known = checker.known.clone();
        checker.prompt(result, &known, "`result`", "result");
    }
    let mut problems = checker.problems;
    problems.extend(checker.later);
    problems
}

/// Where the system prompt of agent `name` is set: its `system_prompt`
/// or `system_prompt_path`, on its entry or under `global` (its entry when
/// it has the default).
fn system_prompt_at(config: &TacticConfig, name: &str) -> String {
    let Some(agent) = config.agent(name) else {
        return String::new();
    };
    let key = match agent.system_prompt {
        SystemPrompt::Key(_) => "system_prompt_path",
        SystemPrompt::Inline(_) => "system_prompt",
    };
    config.agent_key(&agent.at, key)
}

/// Where argument `name` of the step at `at` is set.
fn argument_at(at: &str, name: &str) -> String {
    join_path(&join_path(at, "args"), name)
}

struct Checker<'c> {
    config: &'c TacticConfig,
    known: BTreeSet<String>,
    /// Step names defined so far, with what they hold.
    steps: BTreeMap<String, Shape>,
    problems: Vec<String>,
    /// Problems of expressions and sub-tactics, listed after the templates'.
    later: Vec<String>,
}

impl Checker<'_> {
    /// The problems of `prompt` (`place` in words, set at `at` in the
    /// document) given the names `available`.
    fn prompt(&mut self, prompt: &Prompt, available: &BTreeSet<String>, place: &str, at: &str) {
        let absent: Vec<String> = prompt
            .template_vars()
            .iter()
            .filter(|name| !available.contains(name.as_str()))
            .map(|name| format!("`{name}`"))
            .collect();
        if !absent.is_empty() {
            let mut have: Vec<String> = available.iter().map(|name| format!("`{name}`")).collect();
            have.truncate(12);
            self.problems.push(self.config.placed(
                at,
                format!(
                    "{place}: prompt `{}` needs {} (available: {})",
                    prompt.path,
                    absent.join(", "),
                    have.join(", ")
                ),
            ));
        }
        let what = format!("prompt `{}`", prompt.path);
        let problems = self.fields(prompt.attributes_read(), &what, place, at);
        self.problems.extend(problems);
    }

    fn condition(&mut self, condition: &Condition, place: &str, at: &str) {
        let absent: Vec<String> = condition
            .variables
            .iter()
            .filter(|name| !self.known.contains(*name))
            .map(|name| format!("`{name}`"))
            .collect();
        if !absent.is_empty() {
            self.later.push(self.config.placed(
                at,
                format!(
                    "{place}: `{}` needs {}",
                    condition.source,
                    absent.join(", ")
                ),
            ));
        }
        let what = format!("`{}`", condition.source);
        let problems = self.fields(&condition.attributes, &what, place, at);
        self.later.extend(problems);
    }

    /// Attributes read on step names that a step's output does not have.
    fn fields(
        &self,
        attributes: &BTreeSet<(String, String)>,
        what: &str,
        place: &str,
        at: &str,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for (name, field) in attributes {
            match self.steps.get(name) {
                Some(Shape::Output) if !STEP_FIELDS.contains(&field.as_str()) => {
                    problems.push(format!(
                        "{place}: {what} reads `{name}.{field}`, but a step's output has only \
                         `content`, `parsed`, `model` and `cost`{}",
                        crate::suggest::hint(field, STEP_FIELDS.iter().copied())
                    ));
                }
                Some(Shape::Outputs) => problems.push(format!(
                    "{place}: {what} reads `{name}.{field}`, but step `{name}` ran once per \
                     `foreach` element, so it is a list of outputs (`{name}[0].content`, \
                     `{name} | map(attribute='content')`)"
                )),
                _ => {}
            }
        }
        problems
            .into_iter()
            .map(|problem| self.config.placed(at, problem))
            .collect()
    }

    fn sub_tactic(&mut self, step: &SubStep) {
        let known = self.known.clone();
        if let Some(task) = &step.task {
            self.prompt(
                task,
                &known,
                &format!("step `{}` `task`", step.name),
                &join_path(&step.at, "task"),
            );
        }
        let mut names = BTreeSet::new();
        for (name, value) in &step.args {
            if let ArgValue::Template(template) = value {
                let place = format!("step `{}` argument `{name}`", step.name);
                self.prompt(template, &known, &place, &argument_at(&step.at, name));
            }
            names.insert(name.clone());
        }
        if let Some(Err(error)) = step.local().map(|tactic| tactic.check(&names)) {
            let place = self.config.placed(&step.at, sub_place(step));
            self.later.extend(
                error
                    .problems
                    .into_iter()
                    .map(|problem| format!("{place}: {problem}")),
            );
        }
        self.known.insert(step.name.clone());
        self.steps.insert(step.name.clone(), Shape::Output);
    }
}

fn sub_place(step: &SubStep) -> String {
    format!("step `{}` (tactic `{}`)", step.name, step.target_name())
}

/// What `check_variables` looks at, in flow order. A condition is checked
/// where it is evaluated: a step's `if` before the step, a loop's `until` after
/// its body (so it may name the loop's steps).
enum Check<'a> {
    Step(&'a Step),
    Tactic(&'a SubStep),
    /// A condition, its place in words and its path in the document.
    Condition(&'a Condition, String, String),
    /// Names known from here on: a `foreach` element's name inside its block.
    Names(Vec<&'a str>),
    /// Step names known from here on, with what they hold: a loop's steps
    /// inside it (from its second round on they are defined; guard the first
    /// with `is defined`), a `foreach` block's steps after it (lists).
    Steps(Vec<&'a str>, Shape),
}

fn flatten<'a>(nodes: &'a [Node], checks: &mut Vec<Check<'a>>) {
    for node in nodes {
        match node {
            Node::Step(step) => gated(
                checks,
                (&step.name, &step.at),
                [&step.condition, &step.stop],
                Check::Step(step),
            ),
            Node::Tactic(step) => gated(
                checks,
                (&step.name, &step.at),
                [&step.condition, &step.stop],
                Check::Tactic(step),
            ),
            Node::Parallel {
                foreach,
                item,
                nodes,
                at,
            } => {
                if let Some(foreach) = foreach {
                    checks.push(Check::Condition(
                        foreach,
                        "parallel `foreach`".to_string(),
                        join_path(at, "parallel.foreach"),
                    ));
                    checks.push(Check::Names(vec![item.as_str()]));
                }
                flatten(nodes, checks);
                if foreach.is_some() {
                    let mut names = Vec::new();
                    step_names(nodes, &mut names);
                    checks.push(Check::Steps(names, Shape::Outputs));
                }
            }
            Node::Loop {
                until, nodes, at, ..
            } => {
                let mut names = Vec::new();
                step_names(nodes, &mut names);
                checks.push(Check::Steps(names, Shape::Output));
                flatten(nodes, checks);
                if let Some(until) = until {
                    checks.push(Check::Condition(
                        until,
                        "loop `until`".to_string(),
                        join_path(at, "loop.until"),
                    ));
                }
            }
        }
    }
}

/// A step's checks in evaluation order: its `if`, the step, its `stop`.
fn gated<'a>(
    checks: &mut Vec<Check<'a>>,
    (name, at): (&str, &str),
    [condition, stop]: [&'a Option<Condition>; 2],
    step: Check<'a>,
) {
    if let Some(condition) = condition {
        checks.push(Check::Condition(
            condition,
            format!("step `{name}` `if`"),
            join_path(at, "if"),
        ));
    }
    checks.push(step);
    if let Some(stop) = stop {
        checks.push(Check::Condition(
            stop,
            format!("step `{name}` `stop`"),
            join_path(at, "stop"),
        ));
    }
}

/// Renders, in flow order, every template and expression of `tactic` that
/// needs only `task` (and what such templates made: a step's rendered
/// arguments, a sub-tactic's task), as the run would. A step whose `if` is
/// false for this task, or cannot be known yet, is not rendered; a `stop`
/// that holds ends the walk. Problems, once each.
pub(super) fn trial(tactic: &Tactic, task: &Task) -> Vec<String> {
    let mut trial = Trial {
        tactic,
        opened: BTreeSet::new(),
        problems: Vec::new(),
    };
    let context = base_context(task);
    if tactic.nodes.is_empty() {
        if tactic.program.is_none()
            && let Some(agent) = tactic.agents.values().next()
        {
            let at = system_prompt_at(&tactic.config, &agent.name);
            trial.render(&agent.system_prompt, &context, "", &at);
        }
    } else if trial.nodes(&tactic.nodes, &context)
        && let Some(result) = &tactic.result
    {
        trial.render(result, &context, "", "result");
    }
    trial.problems
}

struct Trial<'a> {
    tactic: &'a Tactic,
    /// Dialogs whose system prompt was rendered.
    opened: BTreeSet<(&'a str, &'a str)>,
    problems: Vec<String>,
}

/// Whether every name `needed` is in `context`.
fn ready<'n>(mut needed: impl Iterator<Item = &'n String>, context: &Map<String, Value>) -> bool {
    needed.all(|name| context.contains_key(name))
}

impl<'a> Trial<'a> {
    fn problem(&mut self, problem: String) {
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }

    /// A problem of what is set at `at` in the document.
    fn problem_at(&mut self, at: &str, problem: String) {
        let problem = self.tactic.config.placed(at, problem);
        self.problem(problem);
    }

    /// Renders `template` (set at `at`) if its names are in `context`; its
    /// text, when it rendered.
    fn render(
        &mut self,
        template: &Prompt,
        context: &Map<String, Value>,
        place: &str,
        at: &str,
    ) -> Option<String> {
        if !ready(template.template_vars().iter(), context) {
            return None;
        }
        match template.render_map(context) {
            Ok(text) => Some(text),
            Err(error) => {
                self.problem_at(at, format!("{place}{error}"));
                None
            }
        }
    }

    /// The value of `condition` (set at `at`) if it can be known from `context`.
    fn evaluate(
        &mut self,
        condition: &Condition,
        context: &Map<String, Value>,
        place: &str,
        at: &str,
    ) -> Option<Value> {
        if !ready(condition.variables.iter(), context) {
            return None;
        }
        match condition.value(context) {
            Ok(value) => Some(value),
            Err(error) => {
                self.problem_at(at, format!("{place}: {error}"));
                None
            }
        }
    }

    /// The truth of `condition` (set at `at`) if it can be known from `context`.
    fn truth(
        &mut self,
        condition: &Condition,
        context: &Map<String, Value>,
        place: &str,
        at: &str,
    ) -> Option<bool> {
        if !ready(condition.variables.iter(), context) {
            return None;
        }
        match condition.holds(context) {
            Ok(truth) => Some(truth),
            Err(error) => {
                self.problem_at(at, format!("{place}: {error}"));
                None
            }
        }
    }

    /// Whether the `if` of the step at `at` surely holds (none: it does).
    fn holds(
        &mut self,
        condition: &Option<Condition>,
        context: &Map<String, Value>,
        place: &str,
        at: &str,
    ) -> bool {
        match condition {
            Some(condition) => {
                self.truth(condition, context, place, &join_path(at, "if")) == Some(true)
            }
            None => true,
        }
    }

    /// Whether the `stop` of the step at `at` surely holds.
    fn stops(
        &mut self,
        stop: &Option<Condition>,
        context: &Map<String, Value>,
        place: &str,
        at: &str,
    ) -> bool {
        match stop {
            Some(stop) => self.truth(stop, context, place, &join_path(at, "stop")) == Some(true),
            None => false,
        }
    }

    /// Renders the arguments of the step at `at`; all of them, when every
    /// one could be.
    fn arguments(
        &mut self,
        (step, at): (&str, &str),
        args: &[(String, ArgValue)],
        context: &Map<String, Value>,
    ) -> Option<Map<String, Value>> {
        let mut rendered = Map::new();
        let mut complete = true;
        for (name, value) in args {
            match value {
                ArgValue::Literal(value) => {
                    rendered.insert(name.clone(), value.clone());
                }
                ArgValue::Template(template) => {
                    let place = format!("step `{step}` argument `{name}`: ");
                    match self.render(template, context, &place, &argument_at(at, name)) {
                        Some(text) => {
                            rendered.insert(name.clone(), Value::String(text));
                        }
                        None => complete = false,
                    }
                }
            }
        }
        complete.then_some(rendered)
    }

    /// Walks `nodes`; false when a `stop` surely ends the tactic.
    fn nodes(&mut self, nodes: &'a [Node], context: &Map<String, Value>) -> bool {
        for node in nodes {
            match node {
                Node::Step(step) => {
                    let place = format!("step `{}`", step.name);
                    let at = step.at.as_str();
                    if !self.holds(&step.condition, context, &format!("{place} `if`"), at) {
                        continue;
                    }
                    self.step(step, context);
                    if self.stops(&step.stop, context, &format!("{place} `stop`"), at) {
                        return false;
                    }
                }
                Node::Tactic(step) => {
                    let place = format!("step `{}`", step.name);
                    let at = step.at.as_str();
                    if !self.holds(&step.condition, context, &format!("{place} `if`"), at) {
                        continue;
                    }
                    self.sub_tactic(step, context);
                    if self.stops(&step.stop, context, &format!("{place} `stop`"), at) {
                        return false;
                    }
                }
                Node::Loop {
                    until, nodes, at, ..
                } => {
                    let going = self.nodes(nodes, context);
                    if let Some(until) = until {
                        self.truth(until, context, "loop `until`", &join_path(at, "loop.until"));
                    }
                    if !going {
                        return false;
                    }
                }
                Node::Parallel {
                    foreach,
                    item,
                    nodes,
                    at,
                } => match foreach {
                    None => {
                        self.nodes(nodes, context);
                    }
                    Some(foreach) => {
                        let at = join_path(at, "parallel.foreach");
                        match self.evaluate(foreach, context, "parallel `foreach`", &at) {
                            Some(Value::Array(elements)) => {
                                for element in elements {
                                    let mut branch = context.clone();
                                    branch.insert(item.clone(), element);
                                    self.nodes(nodes, &branch);
                                }
                            }
                            Some(_) => self.problem_at(
                                &at,
                                format!("parallel `foreach`: `{}` is not a list", foreach.source),
                            ),
                            None => {}
                        }
                    }
                },
            }
        }
        true
    }

    fn step(&mut self, step: &'a Step, context: &Map<String, Value>) {
        if step.fork.is_none()
            && self
                .opened
                .insert((step.agent.as_str(), step.dialog.as_str()))
            && let Some(agent) = self.tactic.agents.get(&step.agent)
        {
            let place = format!(
                "step `{}` (system prompt of agent `{}`): ",
                step.name, agent.name
            );
            let at = system_prompt_at(&self.tactic.config, &agent.name);
            self.render(&agent.system_prompt, context, &place, &at);
        }
        let Some(args) = self.arguments((&step.name, &step.at), &step.args, context) else {
            return;
        };
        let mut prompt_context = context.clone();
        prompt_context.extend(args);
        let at = self
            .tactic
            .config
            .first_written(&step.at, &["prompt", "text"]);
        self.render(
            &step.prompt,
            &prompt_context,
            &format!("step `{}`: ", step.name),
            &at,
        );
    }

    fn sub_tactic(&mut self, step: &SubStep, context: &Map<String, Value>) {
        let task = match &step.task {
            Some(template) => {
                let place = format!("step `{}` `task`: ", step.name);
                match self.render(template, context, &place, &join_path(&step.at, "task")) {
                    Some(text) => Value::String(text),
                    None => return,
                }
            }
            None => context.get("task").cloned().unwrap_or(Value::Null),
        };
        let Some(args) = self.arguments((&step.name, &step.at), &step.args, context) else {
            return;
        };
        let input = Task {
            task,
            args,
            ..Task::default()
        };
        let place = self.tactic.config.placed(&step.at, sub_place(step));
        // A served tactic checks its own input (its server answers 400).
        let Some(tactic) = step.local() else {
            return;
        };
        for problem in trial(tactic, &input) {
            self.problem(format!("{place}: {problem}"));
        }
    }
}
