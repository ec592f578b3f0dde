//! TEMPORARY stand-in (replaced at merge).
use super::{ChatRequest, Provider, ProviderError};
use crate::dialog::Message;
use std::time::Duration;
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub base: Duration,
    pub cap: Duration,
    pub jitter: f64,
}
#[derive(Debug, Clone)]
pub struct FailedAttempt {
    pub attempt: u32,
    pub error: ProviderError,
    pub latency: Duration,
    pub waited: Duration,
}
pub struct Attempted {
    pub message: Message,
    pub attempts: u32,
    pub latency: Duration,
}
pub struct Failed {
    pub error: ProviderError,
    pub attempts: u32,
}
pub async fn invoke_with_retry<F: FnMut(&FailedAttempt)>(
    provider: &dyn Provider,
    request: ChatRequest<'_>,
    _p: &RetryPolicy,
    _m: u32,
    _f: F,
) -> Result<Attempted, Failed> {
    match provider.invoke(request).await {
        Ok(message) => Ok(Attempted {
            message,
            attempts: 1,
            latency: Duration::ZERO,
        }),
        Err(error) => Err(Failed { error, attempts: 1 }),
    }
}
