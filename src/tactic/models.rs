//! The models a tactic uses and what each is priced at (`lllm models
//! --check`): every agent's model, sub-tactics' included, priced the way a
//! reply is (`pricing::apply`), so a model without a price is found before a
//! batch starts rather than as `cost: unknown` after it.

use std::path::PathBuf;

use super::Tactic;
use crate::provider::models::ModelInfo;

/// One agent's model, as the run would send to and price it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelUse {
    /// The tactic file the agent is defined in.
    pub tactic: PathBuf,
    /// The agent's name.
    pub agent: String,
    /// The provider's name in the tactic (`openai`, `local`, …).
    pub provider: String,
    /// The provider's own model id.
    pub model: String,
    /// The hosted service behind the provider's endpoint, whose published
    /// prices apply; `None` for a local server, a proxy or any other host.
    pub service: Option<&'static str>,
    /// What it costs: the tactic's `pricing:`, `--prices`, else the bundled
    /// price of `service`; `None` when unknown.
    pub price: Option<ModelInfo>,
    /// Costs nothing whatever the table says (the offline `mock` provider).
    pub free: bool,
}

impl ModelUse {
    /// `provider/model`, as a tactic names it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    /// Whether a reply's cost will be known.
    pub fn priced(&self) -> bool {
        self.free || self.price.is_some()
    }
}

impl Tactic {
    /// Every agent's model, this tactic's first, then its sub-tactics' in
    /// flow order (with the `--model` and `--prices` they were built with).
    pub fn models(&self) -> Vec<ModelUse> {
        let mut uses = Vec::new();
        let mut pending = vec![self];
        while let Some(tactic) = pending.pop() {
            for agent in tactic.agents.values() {
                let resolved = &agent.model;
                let price = tactic
                    .runtime
                    .prices
                    .price(&resolved.provider_name, resolved.service, &resolved.model)
                    .cloned();
                uses.push(ModelUse {
                    tactic: tactic.config.path.clone(),
                    agent: agent.name.clone(),
                    provider: resolved.provider_name.clone(),
                    model: resolved.model.clone(),
                    service: resolved.service,
                    price,
                    // As `pricing::apply` decides.
                    free: resolved.provider_name == "mock",
                });
            }
            // Popped last first: pushed in reverse to keep the flow's order.
            pending.extend(tactic.sub_tactics().into_iter().rev());
        }
        uses
    }
}
