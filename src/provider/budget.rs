//! A spending cap every model call passes (`lllm batch --max-cost`).
//!
//! Before a request is sent, the most it could cost is reserved: its input
//! counted as one token per byte of the request body (a byte-level tokenizer
//! never makes more tokens than bytes; the body's JSON syntax adds more than
//! chat templates add) plus `IMAGE_TOKENS` per image, and its output as the
//! request's `max_tokens` (or `max_completion_tokens` / `max_output_tokens`,
//! times `n`), else the model's output limit, else its context window, each
//! at the model's price. A request whose worst case does not fit in what is
//! left (budget − spent − reserved by calls in flight) waits for calls in
//! flight to settle, and is refused (not sent) when none are left to settle.
//! When the reply comes, its reservation is replaced by what it cost, priced
//! as the session record prices it. So the recorded spend never exceeds the
//! budget, as long as the provider reports the usage it bills and keeps to
//! the output limit it was sent.
//!
//! The wrapper sits around each provider of a tactic (like `dry_run`), under
//! the retry loop: every attempt of every call — tool rounds, repairs,
//! retries, sub-tactics — passes it. What the batch does with a refused call
//! is the batch's business; here it is a permanent error with code
//! `REFUSED_CODE`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::models::ModelTable;
use super::{ChatRequest, ErrorKind, Provider, ProviderError, WireRequest, pricing};
use crate::dialog::{InvokeCost, Message, Modality};

/// The error code of a request the budget did not let through.
pub const REFUSED_CODE: &str = "over_budget";

/// Input tokens an image is counted as: more than any model we know bills
/// for one (gpt-4o-mini's largest image is about 48,000; Claude's about 1,600).
pub const IMAGE_TOKENS: u64 = 50_000;

/// Input tokens added to the body's bytes for what a server wraps around it.
const OVERHEAD_TOKENS: u64 = 64;

/// The model arguments that cap a reply's length, by API.
const OUTPUT_LIMITS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// What a run may spend, shared by every call of every task.
pub struct CostBudget {
    max: f64,
    account: Mutex<Account>,
    /// A reservation was settled: waiting calls look again.
    settled: tokio::sync::Notify,
    waiting: AtomicUsize,
    refused: AtomicUsize,
}

#[derive(Debug, Default)]
struct Account {
    spent: f64,
    reserved: f64,
    /// Calls holding a reservation.
    holders: usize,
}

impl CostBudget {
    /// `spent`: what was spent before (earlier runs into the same output).
    pub fn new(max: f64, spent: f64) -> CostBudget {
        CostBudget {
            max,
            account: Mutex::new(Account {
                spent,
                ..Account::default()
            }),
            settled: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }

    fn account(&self) -> MutexGuard<'_, Account> {
        self.account
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn max(&self) -> f64 {
        self.max
    }

    /// Spent so far by the calls that have ended (what `lllm serve`'s
    /// `/metrics` shows).
    pub fn spent(&self) -> f64 {
        self.account().spent
    }

    /// Spent so far, calls in flight counted at what they have reserved.
    pub fn committed(&self) -> f64 {
        let account = self.account();
        account.spent + account.reserved
    }

    /// Whether the budget is used up: nothing costing money can start.
    pub fn is_spent(&self) -> bool {
        self.account().spent >= self.max
    }

    /// Calls refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether some call is waiting for others to settle.
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Reserves `worst`, waiting while calls in flight may free room; `Err`
    /// (what is left) when it cannot fit.
    async fn reserve(&self, worst: f64) -> Result<Reservation<'_>, f64> {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let mut account = self.account();
                if account.spent + account.reserved + worst <= self.max {
                    account.reserved += worst;
                    account.holders += 1;
                    return Ok(Reservation {
                        budget: self,
                        amount: worst,
                        settled: false,
                    });
                }
                if account.holders == 0 {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err((self.max - account.spent - account.reserved).max(0.0));
                }
            }
            let _waiting = Waiting::new(&self.waiting);
            settled.await;
        }
    }

    fn settle(&self, amount: f64, cost: f64) {
        {
            let mut account = self.account();
            account.holders = account.holders.saturating_sub(1);
            // Exactly zero when nothing is held, whatever rounding did.
            account.reserved = if account.holders == 0 {
                0.0
            } else {
                (account.reserved - amount).max(0.0)
            };
            account.spent += cost;
        }
        self.settled.notify_waiters();
    }
}

/// Counts a waiting call while it waits (also when its task is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Room held for one call in flight.
struct Reservation<'a> {
    budget: &'a CostBudget,
    amount: f64,
    settled: bool,
}

impl Reservation<'_> {
    fn settle(mut self, cost: f64) {
        self.settled = true;
        self.budget.settle(self.amount, cost);
    }
}

impl Drop for Reservation<'_> {
    /// A call dropped in flight (its task cancelled) may have been billed:
    /// it is counted at its whole reservation.
    fn drop(&mut self) {
        if !self.settled {
            self.budget.settle(self.amount, self.amount);
        }
    }
}

/// USD per token, and the output limit when a request sets none.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rates {
    input: f64,
    output: f64,
    default_output: Option<u64>,
}

/// A provider whose calls pass the budget.
pub struct BudgetedProvider {
    inner: Arc<dyn Provider>,
    budget: Arc<CostBudget>,
    prices: Arc<ModelTable>,
    provider: String,
    /// The hosted service behind the provider's endpoint (prices belong to it).
    service: Option<&'static str>,
    model: String,
    rates: Rates,
}

impl BudgetedProvider {
    /// Wraps `inner` (serving `model` of `provider`), or says why calls to it
    /// cannot be bounded: no price, or no output limit in `model_args` or the
    /// model table. The offline `mock` provider is free.
    pub fn new(
        inner: Arc<dyn Provider>,
        budget: Arc<CostBudget>,
        prices: Arc<ModelTable>,
        provider: &str,
        service: Option<&'static str>,
        model: &str,
        model_args: &Map<String, Value>,
    ) -> Result<BudgetedProvider, String> {
        let name = format!("{provider}/{model}");
        let rates = if provider == "mock" {
            Rates {
                input: 0.0,
                output: 0.0,
                default_output: None,
            }
        } else {
            let Some(info) = prices.price(provider, service, model) else {
                return Err(format!(
                    "`--max-cost` needs a price for every model, and `{name}` has none; hint: \
                     add it under `pricing:` or pass `--prices FILE`"
                ));
            };
            let default_output = info.max_output_tokens.or(info.context_window);
            if output_limit(model_args).is_none() && default_output.is_none() {
                return Err(format!(
                    "`--max-cost` needs a bound on each reply, and `{name}` has none; hint: set \
                     `max_tokens` in its `model_args`, or `max_output_tokens` for it under \
                     `pricing:`"
                ));
            }
            let cached = info.cached_input_per_million.unwrap_or(0.0);
            Rates {
                input: info.input_per_million.max(cached) / 1e6,
                output: info.output_per_million / 1e6,
                default_output,
            }
        };
        Ok(BudgetedProvider {
            inner,
            budget,
            prices,
            provider: provider.to_string(),
            service,
            model: model.to_string(),
            rates,
        })
    }

    /// The most `request` could cost, in USD.
    fn worst_case(&self, request: &ChatRequest<'_>) -> f64 {
        if self.rates.input == 0.0 && self.rates.output == 0.0 {
            return 0.0;
        }
        let body = serde_json::to_vec(&self.inner.wire_request(request).body)
            .map_or(0, |bytes| bytes.len() as u64);
        let images = request
            .messages
            .iter()
            .map(|message| match message.modality {
                Modality::Image => 1,
                Modality::Text => message
                    .parts
                    .iter()
                    .filter(|part| part.image_ref().is_some())
                    .count(),
            })
            .sum::<usize>() as u64;
        let input = body + images * IMAGE_TOKENS + OVERHEAD_TOKENS;
        let choices = request
            .model_args
            .get("n")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        let output = output_limit(request.model_args)
            .or(self.rates.default_output)
            .unwrap_or(0)
            .saturating_mul(choices);
        input as f64 * self.rates.input + output as f64 * self.rates.output
    }

    /// What a reply cost, priced as the session record prices it.
    fn cost_of(&self, reply: &Message) -> f64 {
        let mut usage = reply.usage.clone();
        pricing::apply(
            &self.prices,
            &self.provider,
            self.service,
            &self.model,
            &mut usage,
        );
        InvokeCost::from_usage(&usage).cost.unwrap_or(0.0)
    }
}

/// The largest reply length `model_args` asks for.
fn output_limit(model_args: &Map<String, Value>) -> Option<u64> {
    OUTPUT_LIMITS
        .iter()
        .filter_map(|key| model_args.get(*key).and_then(Value::as_u64))
        .max()
}

impl Provider for BudgetedProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(async move {
            let worst = self.worst_case(&request);
            let reservation = self
                .budget
                .reserve(worst)
                .await
                .map_err(|left| ProviderError {
                    kind: ErrorKind::Permanent,
                    status: None,
                    endpoint: None,
                    code: Some(REFUSED_CODE.into()),
                    message: format!(
                        "not sent: the call could cost up to ${worst:.6}, and ${left:.6} of the \
                         ${} budget is left",
                        self.budget.max()
                    ),
                    retry_after: None,
                    network: false,
                })?;
            let result = self.inner.invoke(request).await;
            // A failed attempt is counted at $0, as its record counts it.
            let cost = result.as_ref().map_or(0.0, |reply| self.cost_of(reply));
            reservation.settle(cost);
            result
        })
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        self.inner.wire_request(request)
    }

    fn limiter(&self) -> Option<&super::limit::Limiter> {
        self.inner.limiter()
    }

    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        self.inner.wire_digest(request)
    }

    fn check_reply(&self, reply: Message) -> Result<Message, ProviderError> {
        self.inner.check_reply(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::Role;

    /// Answers every request with `usage` after `gate` opens.
    struct Billing {
        usage: (u64, u64),
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl Provider for Billing {
        fn invoke<'a>(
            &'a self,
            _request: ChatRequest<'a>,
        ) -> BoxFuture<'a, Result<Message, ProviderError>> {
            Box::pin(async move {
                let _open = self.gate.acquire().await;
                let mut reply = Message::new(Role::Assistant, "a", "ok");
                let (prompt, completion) = self.usage;
                reply.usage =
                    serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion})
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                Ok(reply)
            })
        }
    }

    fn table() -> Arc<ModelTable> {
        Arc::new(
            ModelTable::default()
                .with_overrides(&serde_json::json!({"m": {"input_per_million": 1.0, "output_per_million": 2.0}}))
                .unwrap(),
        )
    }

    fn args(max_tokens: u64) -> Map<String, Value> {
        serde_json::json!({"max_tokens": max_tokens})
            .as_object()
            .cloned()
            .unwrap()
    }

    #[test]
    fn models_without_a_price_or_an_output_bound_cannot_be_budgeted() {
        let budget = Arc::new(CostBudget::new(1.0, 0.0));
        let inner: Arc<dyn Provider> = Arc::new(Billing {
            usage: (1, 1),
            gate: Arc::new(tokio::sync::Semaphore::new(100)),
        });
        let new = |model: &str, model_args: &Map<String, Value>| {
            BudgetedProvider::new(
                inner.clone(),
                budget.clone(),
                table(),
                "local",
                None,
                model,
                model_args,
            )
            .map(|_| ())
        };
        assert!(
            new("unpriced", &args(10))
                .unwrap_err()
                .contains("needs a price")
        );
        assert!(new("m", &Map::new()).unwrap_err().contains("`max_tokens`"));
        assert!(new("m", &args(10)).is_ok());
        let free =
            BudgetedProvider::new(inner, budget, table(), "mock", None, "script", &Map::new());
        assert!(free.is_ok(), "mock is free");
    }

    #[tokio::test]
    async fn calls_in_flight_never_take_the_spend_over_the_budget() {
        // Each reply: 1000 input tokens ($0.001) and 100 output tokens
        // ($0.0002). The worst case of a call is far more: 200 output tokens
        // and its body's bytes as input.
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let budget = Arc::new(CostBudget::new(0.01, 0.0));
        let provider = Arc::new(
            BudgetedProvider::new(
                Arc::new(Billing {
                    usage: (1000, 100),
                    gate: gate.clone(),
                }),
                budget.clone(),
                table(),
                "local",
                None,
                "m",
                &args(200),
            )
            .unwrap(),
        );
        let messages = vec![Arc::new(Message::user("x".repeat(2000)))];
        let model_args = args(200);
        let worst = provider.worst_case(&ChatRequest {
            model: "m",
            messages: &messages,
            tools: &[],
            format: None,
            model_args: &model_args,
            api_type: Default::default(),
            stream: None,
        });
        assert!(worst > 0.0012 && worst < 0.003, "{worst}");
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let provider = provider.clone();
            let messages = messages.clone();
            calls.spawn(async move {
                let model_args = args(200);
                provider
                    .invoke(ChatRequest {
                        model: "m",
                        messages: &messages,
                        tools: &[],
                        format: None,
                        model_args: &model_args,
                        api_type: Default::default(),
                        stream: None,
                    })
                    .await
                    .map(|_| ())
            });
        }
        // Let every call reach the budget before any reply comes.
        while budget.committed() + worst <= 0.01 || !budget.is_waiting() {
            tokio::task::yield_now().await;
        }
        assert!(budget.committed() <= 0.01);
        gate.add_permits(1000);
        let (mut sent, mut refused) = (0, 0);
        while let Some(outcome) = calls.join_next().await {
            match outcome.unwrap() {
                Ok(()) => sent += 1,
                Err(error) => {
                    assert_eq!(error.code.as_deref(), Some(REFUSED_CODE));
                    assert!(error.message.starts_with("not sent"), "{}", error.message);
                    refused += 1;
                }
            }
        }
        let spent = budget.committed();
        assert!(
            (spent - sent as f64 * 0.0012).abs() < 1e-12,
            "{spent} for {sent}"
        );
        assert!(spent <= 0.01, "{spent}");
        // Every call that still fitted was sent: the last one did not fit.
        assert!(spent + worst > 0.01, "{spent} + {worst}");
        assert_eq!((sent + refused, budget.refused()), (40, refused));
    }
}
