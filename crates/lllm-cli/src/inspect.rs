//! `lllm inspect TACTIC.yaml [--json]`: a tactic's contract in the shape of
//! upstream lllm-core's `TacticInfo` (`Tactic::info`), then what it is made
//! of: its agents (model, tools, system prompt, the dialogs and prompts its
//! steps give them), the models they use, the tools they are offered and the
//! prompts. Text for people, or one JSON object whose first keys are
//! `TacticInfo`'s, so upstream's `TacticInfo.model_validate` reads it.
//!
//! The tactic is loaded as `lllm models --check` loads it: checked whole,
//! nothing sent, no key needed. What the contract means is the library's.

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use lllm::config::{FlowItem, StepInput, SystemPrompt};
use lllm::error::{Outcome, Result};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The tactic YAML file.
    #[arg(value_name = "TACTIC")]
    pub tactic: PathBuf,
    /// Print one JSON object: upstream's `TacticInfo` keys (name,
    /// description, input_schema, output_schema, capabilities,
    /// runtime_kind, package_ref, service_ref, examples, metadata), then
    /// `agents`, `models`, `tools` and `prompts`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InspectArgs, registry: &lllm::Registry) -> Result<Outcome> {
    let settings = crate::settings::current();
    let defaults = settings.defaults();
    let env = |name: &str| settings.environment.var(name);
    let options = lllm::tactic::LoadOptions {
        env: &env,
        defaults: Some(&defaults),
        ..lllm::tactic::LoadOptions::new(registry)
    };
    let tactic = lllm::tactic::load_unsent(&args.tactic, &options)?;
    let outline = outline(&tactic);
    let text = if args.json {
        let text = serde_json::to_string_pretty(&outline).unwrap_or_default();
        lllm::redact::json_controls(&text).into_owned() + "\n"
    } else {
        render(&outline)
    };
    lllm::output::stdout(&text)?;
    Ok(Outcome::Success)
}

/// The tactic as `--json` prints it: `TacticInfo`'s keys, then its parts.
fn outline(tactic: &lllm::Tactic) -> Map<String, Value> {
    let mut outline = match serde_json::to_value(tactic.info()) {
        Ok(Value::Object(info)) => info,
        _ => Map::new(),
    };
    outline.insert("agents".into(), Value::Array(agents(tactic)));
    outline.insert("models".into(), Value::Array(models(tactic)));
    let tools = tactic
        .tool_specs()
        .into_iter()
        .map(|tool| {
            json!({"name": tool.name, "description": tool.description, "parameters": tool.parameters})
        })
        .collect();
    outline.insert("tools".into(), Value::Array(tools));
    outline.insert("prompts".into(), json!(tactic.prompt_keys()));
    outline
}

/// Each agent: its model, tools, MCP servers and system prompt, and the
/// dialogs and prompts the flow's steps give it (in flow order, each once).
fn agents(tactic: &lllm::Tactic) -> Vec<Value> {
    let config = &tactic.config;
    let mut steps = Vec::new();
    steps_of(&config.flow, &mut steps);
    config
        .agents
        .iter()
        .map(|agent| {
            let system_prompt = match &agent.system_prompt {
                SystemPrompt::Key(key) => key.clone(),
                SystemPrompt::Inline(_) => format!("{}/system (inline)", agent.name),
            };
            let mut dialogs: Vec<&str> = Vec::new();
            let mut prompts: Vec<String> = Vec::new();
            for step in steps.iter().filter(|step| step.agent == agent.name) {
                if !dialogs.contains(&step.dialog.as_str()) {
                    dialogs.push(&step.dialog);
                }
                let prompt = match &step.input {
                    StepInput::Prompt(key) => key.clone(),
                    StepInput::Text(_) => format!("{} (inline)", step.name),
                };
                if !prompts.contains(&prompt) {
                    prompts.push(prompt);
                }
            }
            json!({
                "name": agent.name,
                "model": agent.model_name,
                "tools": agent.tools,
                "mcp_servers": agent.mcp_servers,
                "system_prompt": system_prompt,
                "dialogs": dialogs,
                "prompts": prompts,
            })
        })
        .collect()
}

/// The steps of `items`, loops' and branches' included, in flow order.
fn steps_of<'a>(items: &'a [FlowItem], steps: &mut Vec<&'a lllm::config::StepConfig>) {
    for item in items {
        match item {
            FlowItem::Step(step) => steps.push(step),
            FlowItem::Tactic(_) => {}
            FlowItem::Loop(inner) => steps_of(&inner.steps, steps),
            FlowItem::Parallel(inner) => steps_of(&inner.steps, steps),
        }
    }
}

/// Each model once (sub-tactics' included), with the agents that use it
/// and whether its replies will be priced.
fn models(tactic: &lllm::Tactic) -> Vec<Value> {
    let mut models: Vec<(String, Value)> = Vec::new();
    for used in tactic.models() {
        let name = used.name();
        match models.iter_mut().find(|(known, _)| *known == name) {
            Some((_, entry)) => {
                if let Some(Value::Array(agents)) = entry.get_mut("agents")
                    && !agents.contains(&json!(used.agent))
                {
                    agents.push(json!(used.agent));
                }
            }
            None => models.push((
                name.clone(),
                json!({
                    "name": name,
                    "provider": used.provider,
                    "service": used.service,
                    "priced": used.priced(),
                    "agents": [used.agent],
                }),
            )),
        }
    }
    models.into_iter().map(|(_, entry)| entry).collect()
}

/// The text form: the contract, then the parts, every line safe for a
/// terminal (what a YAML file says is shown with its control characters
/// escaped).
fn render(outline: &Map<String, Value>) -> String {
    let text = |key: &str| outline.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut lines = Vec::new();
    let description = text("description");
    lines.push(if description.is_empty() {
        text("name").to_string()
    } else {
        format!("{}: {description}", text("name"))
    });
    lines.push(format!(
        "runtime {} · capabilities {}",
        text("runtime_kind"),
        list(outline.get("capabilities"))
    ));
    for (key, title) in [("input_schema", "input"), ("output_schema", "output")] {
        lines.push(String::new());
        match outline.get(key) {
            Some(Value::Null) | None => lines.push(format!("{title}: any (no {key})")),
            Some(schema) => {
                lines.push(format!("{title} ({key}):"));
                lines.extend(schema_lines(schema));
            }
        }
    }
    let examples = outline
        .get("examples")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !examples.is_empty() {
        lines.push(String::new());
        lines.push(format!("examples ({}):", examples.len()));
        for example in &examples {
            lines.push(format!("  {}", compact(example)));
        }
    }
    if let Some(Value::Object(metadata)) = outline.get("metadata")
        && !metadata.is_empty()
    {
        lines.push(String::new());
        lines.push("metadata:".into());
        for (key, value) in metadata {
            let shown = value
                .as_str()
                .map_or_else(|| compact(value), str::to_string);
            lines.push(format!("  {key}: {shown}"));
        }
    }
    lines.extend(parts_lines(outline));
    let mut out: String = lines
        .iter()
        .map(|line| lllm::redact::terminal_line(line).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    out
}

/// The text form's second half: agents, models, tools and prompts.
fn parts_lines(outline: &Map<String, Value>) -> Vec<String> {
    let mut lines = vec![String::new(), "agents:".to_string()];
    for agent in outline
        .get("agents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = agent["name"].as_str().unwrap_or_default();
        let model = agent["model"].as_str().unwrap_or_default();
        let mut line = format!(
            "  {name}: model {model} · tools {}",
            list(agent.get("tools"))
        );
        if agent["mcp_servers"]
            .as_array()
            .is_some_and(|servers| !servers.is_empty())
        {
            line.push_str(&format!(
                " · MCP servers {}",
                list(agent.get("mcp_servers"))
            ));
        }
        line.push_str(&format!(
            " · system prompt {}",
            agent["system_prompt"].as_str().unwrap_or_default()
        ));
        if agent["dialogs"]
            .as_array()
            .is_some_and(|dialogs| !dialogs.is_empty())
        {
            line.push_str(&format!(
                " · dialogs {} · prompts {}",
                list(agent.get("dialogs")),
                list(agent.get("prompts"))
            ));
        }
        lines.push(line);
    }
    lines.push("models:".into());
    for model in outline
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let priced = if model["priced"].as_bool() == Some(true) {
            ""
        } else {
            " (no price: its cost will be unknown)"
        };
        lines.push(format!(
            "  {}: {}{priced}",
            model["name"].as_str().unwrap_or_default(),
            list(model.get("agents"))
        ));
    }
    lines.push("tools:".into());
    let tools = outline
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if tools.is_empty() {
        lines.push("  none".into());
    }
    for tool in &tools {
        lines.push(format!(
            "  {}: {}",
            tool["name"].as_str().unwrap_or_default(),
            tool["description"].as_str().unwrap_or_default()
        ));
        lines.extend(
            schema_lines(&tool["parameters"])
                .into_iter()
                .map(|line| format!("  {line}")),
        );
    }
    lines.push(format!("prompts: {}", list(outline.get("prompts"))));
    lines
}

/// A list of strings as `a, b`, or `none`.
fn list(value: Option<&Value>) -> String {
    let items: Vec<&str> = value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// A JSON Schema for people: an object's properties one per line (`name:
/// type, required, one of …, other keywords — description`), anything
/// else as one line of JSON.
fn schema_lines(schema: &Value) -> Vec<String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return vec![format!("  {}", compact(schema))];
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut lines: Vec<String> = properties
        .iter()
        .map(|(name, property)| {
            let mut parts = vec![match property.get("type") {
                Some(Value::String(kind)) => kind.clone(),
                Some(other) => compact(other),
                None => "any".into(),
            }];
            if required.contains(&name.as_str()) {
                parts.push("required".into());
            }
            if let Some(Value::Array(values)) = property.get("enum") {
                let values: Vec<String> = values
                    .iter()
                    .map(|value| {
                        value
                            .as_str()
                            .map_or_else(|| compact(value), str::to_string)
                    })
                    .collect();
                parts.push(format!("one of {}", values.join(", ")));
            }
            if let Some(keywords) = property.as_object() {
                for (keyword, value) in keywords {
                    if !matches!(keyword.as_str(), "type" | "enum" | "description" | "title") {
                        parts.push(format!("{keyword} {}", compact(value)));
                    }
                }
            }
            let description = property
                .get("description")
                .and_then(Value::as_str)
                .map(|text| format!(" — {text}"))
                .unwrap_or_default();
            format!("  {name}: {}{description}", parts.join(", "))
        })
        .collect();
    let rest: Map<String, Value> = schema
        .as_object()
        .map(|keywords| {
            keywords
                .iter()
                .filter(|(keyword, _)| {
                    !matches!(
                        keyword.as_str(),
                        "type" | "properties" | "required" | "description" | "title"
                    )
                })
                .map(|(keyword, value)| (keyword.clone(), value.clone()))
                .collect()
        })
        .unwrap_or_default();
    if !rest.is_empty() {
        lines.push(format!("  (and {})", compact(&Value::Object(rest))));
    }
    lines
}

/// One line of JSON.
fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_reads_one_property_per_line() {
        let schema = json!({
            "type": "object",
            "required": ["ticket"],
            "additionalProperties": false,
            "properties": {
                "ticket": {"type": "string", "minLength": 1, "description": "The message"},
                "category": {"type": "string", "enum": ["billing", "other"]},
                "anything": {},
            },
        });
        assert_eq!(
            schema_lines(&schema),
            [
                "  ticket: string, required, minLength 1 — The message",
                "  category: string, one of billing, other",
                "  anything: any",
                "  (and {\"additionalProperties\":false})",
            ]
        );
        assert_eq!(
            schema_lines(&json!({"type": "string"})),
            ["  {\"type\":\"string\"}"]
        );
    }
}
