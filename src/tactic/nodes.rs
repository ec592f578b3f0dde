//! The flow as the engine runs it, built from the config's `flow:` items:
//! steps with their prompts looked up, conditions and arguments compiled,
//! sub-tactic files built (cycles refused), loops and parallel blocks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::config::{FlowItem, StepConfig, StepInput, SubTacticConfig, TacticConfig, join_path};
use crate::prompt::{Prompt, Registry};
use crate::tool::Toolbox;

use super::build::{Builder, Problems, check_prompt_tools, lookup};
use super::{ArgValue, Node, Step, SubStep, SubTarget, flow, load};

pub(super) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Loads and builds the tactic a step runs; its problems are this tactic's,
/// each naming the step and the file.
fn build_sub_tactic(
    parent: &TacticConfig,
    step: &SubTacticConfig,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> Option<SubStep> {
    let place = format!("step `{}` (tactic `{}`)", step.name, step.path.display());
    // The step's own templates are checked whatever becomes of the tactic
    // it runs, so their problems are listed with the tactic's.
    let task = step.task.as_ref().and_then(|text| {
        problems
            .take_at(
                parent,
                &join_path(&step.at, "task"),
                Prompt::new(format!("{}.task", step.name), text.clone()),
            )
            .map(Arc::new)
    });
    let args = template_args(parent, &step.at, &step.name, &step.args, problems);
    let (condition, stop) = step_conditions(
        parent,
        &step.at,
        &step.name,
        &step.condition,
        &step.stop,
        problems,
    );
    if let Some(url) = step
        .path
        .to_str()
        .filter(|path| crate::tactic::remote::is_url(path))
    {
        let remote = remote_tactic(parent, step, url, builder, problems)?;
        return Some(SubStep {
            name: step.name.clone(),
            target: SubTarget::Remote(Arc::new(remote)),
            task,
            args,
            condition,
            stop,
            at: step.at.clone(),
        });
    }
    if step.token_env.is_some() {
        problems.push(parent.placed(
            &join_path(&step.at, "token_env"),
            format!("{place}: `token_env` is for a served tactic (`tactic: http://…`)"),
        ));
    }
    let path = canonical(&step.path);
    if builder.stack.contains(&path) {
        let mut chain: Vec<String> = builder
            .stack
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        chain.push(path.display().to_string());
        problems.push(parent.placed(
            &join_path(&step.at, "tactic"),
            format!(
                "{place}: tactics run each other in a cycle: {}",
                chain.join(" → ")
            ),
        ));
        return None;
    }
    let adjust = |config: &mut TacticConfig| {
        for warning in &config.warnings {
            crate::report::warn(&format!("{place}: {warning}"));
        }
        if let Some(model) = &parent.model_override {
            config.override_model(model);
        }
        if let Some(prices) = &parent.price_overrides {
            config.override_prices(prices.clone());
        }
        config.override_model_args(&parent.model_args_override);
    };
    let tactic = match load::load_config(&step.path, adjust, builder, None) {
        Ok(tactic) => tactic,
        Err(error) => {
            // Where the step is, then the sub-tactic's own place of each.
            let place = parent.placed(&step.at, &place);
            for problem in error.problems {
                problems.push(format!("{place}: {problem}"));
            }
            return None;
        }
    };
    Some(SubStep {
        name: step.name.clone(),
        target: SubTarget::Local(Arc::new(tactic)),
        task,
        args,
        condition,
        stop,
        at: step.at.clone(),
    })
}

/// The served tactic a step (or a tool) names by URL, with its token from
/// the variable `token_env` names: a URL that is not one of a served
/// tactic, or a variable that is not set, is a problem at `at`. A re-run
/// needs no token (nothing is sent).
pub(super) fn remote_tactic(
    parent: &TacticConfig,
    step: &SubTacticConfig,
    url: &str,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> Option<crate::tactic::remote::RemoteTactic> {
    remote_at(
        parent,
        (&step.at, &format!("step `{}`", step.name)),
        url,
        step.token_env.as_deref(),
        builder,
        problems,
    )
}

/// [`remote_tactic`] for any entry at `at`, named `who` in problems.
pub(super) fn remote_at(
    parent: &TacticConfig,
    (at, who): (&str, &str),
    url: &str,
    token_env: Option<&str>,
    builder: &Builder<'_>,
    problems: &mut Problems,
) -> Option<crate::tactic::remote::RemoteTactic> {
    let remote = match crate::tactic::remote::RemoteTactic::new(url) {
        Ok(mut remote) => {
            remote.dry_run = builder.dry_run.is_some();
            remote
        }
        Err(error) => {
            problems.push(parent.placed(&join_path(at, "tactic"), format!("{who}: {error}")));
            return None;
        }
    };
    let Some(variable) = token_env else {
        return Some(remote);
    };
    if builder.replacement.is_some() {
        return Some(remote);
    }
    match (builder.env)(variable).filter(|token| !token.trim().is_empty()) {
        Some(token) => Some(remote.token(token)),
        None => {
            problems.push(parent.placed(
                &join_path(at, "token_env"),
                format!(
                    "{who}: `token_env` names `{variable}`, which is not set; export the served tactic's token in it"
                ),
            ));
            None
        }
    }
}

/// A step's `if` and `stop` expressions, compiled.
fn step_conditions(
    config: &TacticConfig,
    at: &str,
    name: &str,
    condition: &Option<String>,
    stop: &Option<String>,
    problems: &mut Problems,
) -> (Option<flow::Condition>, Option<flow::Condition>) {
    let mut compile = |source: &Option<String>, key: &str| {
        source.as_ref().and_then(|source| {
            problems.take_at(
                config,
                &join_path(at, key),
                flow::Condition::new(source, &format!("step `{name}` `{key}`")),
            )
        })
    };
    (compile(condition, "if"), compile(stop, "stop"))
}

/// A step's `args`: strings are templates, anything else a literal value.
fn template_args(
    config: &TacticConfig,
    at: &str,
    step: &str,
    values: &serde_json::Map<String, Value>,
    problems: &mut Problems,
) -> Vec<(String, ArgValue)> {
    let mut args = Vec::new();
    for (name, value) in values {
        let value = match value {
            // A template that does not compile is reported here; its name
            // stays, so the step's prompt is not also said to lack it.
            Value::String(text) => problems
                .take_at(
                    config,
                    &join_path(&join_path(at, "args"), name),
                    Prompt::new(format!("{step}.args.{name}"), text.clone()),
                )
                .map_or(ArgValue::Literal(Value::Null), |prompt| {
                    ArgValue::Template(Arc::new(prompt))
                }),
            other => ArgValue::Literal(other.clone()),
        };
        args.push((name.clone(), value));
    }
    args
}

/// What stands for a step or sub-tactic that could not be built: a step
/// with an empty prompt, so the checks of later templates still know its
/// name (`draft.content` is no unknown `draft`). The tactic has problems
/// then, and never runs.
fn stand_in(name: &str, at: &str) -> Node {
    Node::Step(Step {
        name: name.to_string(),
        agent: String::new(),
        dialog: String::new(),
        prompt: Arc::new(Prompt::bare(format!("{name} (not built)"))),
        args: Vec::new(),
        condition: None,
        fork: None,
        stop: None,
        at: at.to_string(),
    })
}

/// The node of a step: its prompt (a prompt file's, or its inline text
/// compiled), arguments and conditions; a stand-in when its prompt does not
/// build (its problems are in `problems`). The prompt goes to `prompts`
/// (the record keeps it).
fn build_step(
    config: &TacticConfig,
    step: &StepConfig,
    registry: &Registry,
    toolbox: &Toolbox,
    problems: &mut Problems,
    prompts: &mut BTreeMap<String, Arc<Prompt>>,
) -> Node {
    let prompt = match &step.input {
        StepInput::Prompt(key) => lookup(
            registry,
            key,
            &format!("step `{}`", step.name),
            problems,
            (config, &join_path(&step.at, "prompt")),
        ),
        StepInput::Text(text) => problems
            .take_at(
                config,
                &join_path(&step.at, "text"),
                Prompt::new(format!("{} (inline)", step.name), text.clone()),
            )
            .map(Arc::new),
    };
    let args = template_args(config, &step.at, &step.name, &step.args, problems);
    let (condition, stop) = step_conditions(
        config,
        &step.at,
        &step.name,
        &step.condition,
        &step.stop,
        problems,
    );
    let Some(prompt) = prompt else {
        return stand_in(&step.name, &step.at);
    };
    check_prompt_tools(config, toolbox, (&prompt, registry), problems);
    prompts.insert(prompt.path.clone(), prompt.clone());
    Node::Step(Step {
        name: step.name.clone(),
        agent: step.agent.clone(),
        dialog: step.dialog.clone(),
        prompt,
        args,
        condition,
        fork: step.fork.clone(),
        stop,
        at: step.at.clone(),
    })
}

/// The nodes of the flow `items`, a loop's and a parallel's steps built
/// inside them; every problem goes to `problems`, and each prompt a step
/// uses to `prompts` (the record keeps them).
pub(super) fn build_nodes(
    config: &TacticConfig,
    items: &[FlowItem],
    registry: &Registry,
    toolbox: &Toolbox,
    problems: &mut Problems,
    prompts: &mut BTreeMap<String, Arc<Prompt>>,
    builder: &Builder<'_>,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for item in items {
        let step = match item {
            FlowItem::Loop(settings) => {
                let until = settings.until.as_ref().and_then(|source| {
                    problems.take_at(
                        config,
                        &join_path(&settings.at, "loop.until"),
                        flow::Condition::new(source, "loop `until`"),
                    )
                });
                let inner = build_nodes(
                    config,
                    &settings.steps,
                    registry,
                    toolbox,
                    problems,
                    prompts,
                    builder,
                );
                nodes.push(Node::Loop {
                    max: settings.max,
                    until,
                    nodes: inner,
                    at: settings.at.clone(),
                });
                continue;
            }
            FlowItem::Parallel(settings) => {
                let foreach = settings.foreach.as_ref().and_then(|source| {
                    problems.take_at(
                        config,
                        &join_path(&settings.at, "parallel.foreach"),
                        flow::Condition::new(source, "parallel `foreach`"),
                    )
                });
                let inner = build_nodes(
                    config,
                    &settings.steps,
                    registry,
                    toolbox,
                    problems,
                    prompts,
                    builder,
                );
                nodes.push(Node::Parallel {
                    foreach,
                    item: settings.item.clone(),
                    nodes: inner,
                    at: settings.at.clone(),
                });
                continue;
            }
            FlowItem::Tactic(step) => {
                nodes.push(
                    build_sub_tactic(config, step, builder, problems)
                        .map_or_else(|| stand_in(&step.name, &step.at), Node::Tactic),
                );
                continue;
            }
            FlowItem::Step(step) => step,
        };
        nodes.push(build_step(
            config, step, registry, toolbox, problems, prompts,
        ));
    }
    nodes
}
