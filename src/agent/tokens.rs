//! Token counting for context management: OpenAI's BPE (o200k / cl100k) for
//! OpenAI-family models, an estimate elsewhere (D13). Encoders are built once
//! per process and shared. Without the `bpe` feature every model's tokens
//! are the estimate (the documented count for a model without a tokenizer).

use std::sync::Arc;

use crate::dialog::{Message, Modality};
use crate::provider::models::ModelTable;

/// Counts the tokens of a text as one model's tokenizer would.
pub trait TokenCounter: Send + Sync {
    /// The tokens of `text`.
    fn count(&self, text: &str) -> usize;
}

/// A real BPE encoder.
#[cfg(feature = "bpe")]
struct Bpe(&'static tiktoken_rs::CoreBPE);

#[cfg(feature = "bpe")]
impl TokenCounter for Bpe {
    fn count(&self, text: &str) -> usize {
        self.0.encode_ordinary(text).len()
    }
}

/// Models we have no tokenizer for: a byte is rarely less than a quarter token
/// in BPE vocabularies, so `ceil(bytes / 3)` errs on the side of a smaller
/// context (dropping a little more than needed beats a rejected request).
struct Estimate;

impl TokenCounter for Estimate {
    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(3)
    }
}

/// What tokens of a model are counted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokenizer {
    /// tiktoken's `o200k_base` (GPT-4o, GPT-4.1, GPT-5, the o-series).
    O200k,
    /// tiktoken's `cl100k_base` (GPT-4, GPT-3.5).
    Cl100k,
    /// `ceil(bytes / 3)`, for models without a known tokenizer.
    Estimate,
}

impl Tokenizer {
    /// The tokenizer of a model: the bundled model table's `tokenizer` of
    /// the entry [`ModelTable::lookup`] finds, else the estimate. Prices a
    /// tactic adds do not change it. Always the estimate in a build without
    /// the `bpe` feature (no encoder to count with).
    pub fn of(provider: &str, model: &str) -> Tokenizer {
        const BPE: bool = cfg!(feature = "bpe");
        let info = ModelTable::bundled().lookup(provider, model);
        match info.and_then(|info| info.tokenizer.as_deref()) {
            Some("o200k") if BPE => Tokenizer::O200k,
            Some("cl100k") if BPE => Tokenizer::Cl100k,
            _ => Tokenizer::Estimate,
        }
    }

    /// Its name: tiktoken's encoding, or `estimate`.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::Estimate => "estimate",
        }
    }
}

/// The counter for a model: its [`Tokenizer`], a BPE encoder or the estimate.
pub fn counter_for(provider: &str, model: &str) -> Arc<dyn TokenCounter> {
    match Tokenizer::of(provider, model) {
        #[cfg(feature = "bpe")]
        Tokenizer::O200k => Arc::new(Bpe(tiktoken_rs::o200k_base_singleton())),
        #[cfg(feature = "bpe")]
        Tokenizer::Cl100k => Arc::new(Bpe(tiktoken_rs::cl100k_base_singleton())),
        _ => Arc::new(Estimate),
    }
}

/// Per-message framing tokens (role, separators), as OpenAI counts them.
pub const MESSAGE_OVERHEAD: usize = 4;
/// What an image costs, roughly (a high-detail 512×512 tile set).
pub const IMAGE_TOKENS: usize = 765;

/// The tokens `message` takes in a request: its text with [`IMAGE_TOKENS`]
/// per image, its tool calls (name and arguments, each with
/// [`MESSAGE_OVERHEAD`]), its name and the message's own [`MESSAGE_OVERHEAD`].
pub fn message_tokens(counter: &dyn TokenCounter, message: &Message) -> usize {
    let content = match message.modality {
        Modality::Image => IMAGE_TOKENS,
        Modality::Text => {
            let images = message
                .parts
                .iter()
                .filter(|part| part.image_ref().is_some())
                .count();
            counter.count(&message.content) + images * IMAGE_TOKENS
        }
    };
    let calls: usize = message
        .function_calls
        .iter()
        .map(|call| {
            counter.count(&call.name) + counter.count(&call.arguments_text()) + MESSAGE_OVERHEAD
        })
        .sum();
    content + calls + MESSAGE_OVERHEAD + counter.count(&message.name).min(8)
}

/// An upper bound of [`message_tokens`] for every counter, computed without
/// tokenizing: [`message_tokens`] with each text's bytes in place of its
/// tokens (a BPE token is at least one byte; the estimate is a third of that).
pub fn message_bytes(message: &Message) -> usize {
    let content = match message.modality {
        Modality::Image => IMAGE_TOKENS,
        Modality::Text => {
            let images = message
                .parts
                .iter()
                .filter(|part| part.image_ref().is_some())
                .count();
            message.content.len() + images * IMAGE_TOKENS
        }
    };
    let calls: usize = message
        .function_calls
        .iter()
        .map(|call| call.name.len() + call.arguments_text().len() + MESSAGE_OVERHEAD)
        .sum();
    content + calls + MESSAGE_OVERHEAD + message.name.len().min(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn tokenizer(provider: &str, model: &str, expected: &str) {
        assert_eq!(Tokenizer::of(provider, model).name(), expected, "{model}");
    }

    #[cfg(feature = "bpe")]
    #[test]
    fn tokenizers_follow_tiktokens_families() {
        tokenizer("openai", "gpt-4o-mini", "o200k_base");
        tokenizer("openai", "gpt-4o-2024-08-06", "o200k_base");
        tokenizer("openai", "gpt-5", "o200k_base");
        tokenizer("openai", "o3-mini", "o200k_base");
        tokenizer("openai", "gpt-4-turbo", "cl100k_base");
        tokenizer("openai", "gpt-3.5-turbo", "cl100k_base");
        // Whoever serves it, as the context manager counts.
        tokenizer("local", "gpt-4o-mini", "o200k_base");
        tokenizer("anthropic", "claude-sonnet-4-5", "estimate");
        tokenizer("local", "llama3", "estimate");
    }

    #[test]
    fn bytes_bound_the_tokens_of_every_kind_of_message() {
        use crate::dialog::FunctionCall;
        let long_name = "a_tool_with_a_long_name_".repeat(2);
        let mut with_calls = Message::assistant("agent_with_a_long_name", "");
        with_calls.function_calls = (0..5)
            .map(|index| {
                let arguments = format!(r#"{{"q": "{}"}}"#, "x ".repeat(40 * index));
                FunctionCall::from_model("c1", &long_name, &arguments)
            })
            .collect();
        let mut image = Message::user("a.png");
        image.modality = Modality::Image;
        let messages = [
            Message::user(""),
            Message::user("Zürich — 日本語 \"quoted\"\n".repeat(30)),
            Message::system("word ".repeat(500)),
            with_calls,
            image,
        ];
        for counter in [
            counter_for("openai", "gpt-4o"),
            counter_for("local", "llama"),
        ] {
            for message in &messages {
                let tokens = message_tokens(counter.as_ref(), message);
                assert!(
                    message_bytes(message) >= tokens,
                    "{message:?}: {tokens} tokens"
                );
            }
        }
    }

    #[cfg(feature = "bpe")]
    #[test]
    fn openai_models_use_their_bpe_and_others_an_estimate() {
        assert_eq!(counter_for("openai", "gpt-4o").count("hello world"), 2);
        assert_eq!(
            counter_for("openai", "gpt-3.5-turbo").count("hello world"),
            2
        );
        assert_eq!(counter_for("local", "llama").count("hello world"), 4);
        let message = Message::user("hello world");
        assert_eq!(
            message_tokens(counter_for("openai", "gpt-4o").as_ref(), &message),
            2 + 4 + 1
        );
    }
}
