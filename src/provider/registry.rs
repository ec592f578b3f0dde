//! TEMPORARY stand-in (replaced at merge).
use super::Provider;
use super::retry::RetryPolicy;
use std::collections::BTreeMap;
use std::sync::Arc;
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);
pub struct Providers;
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    pub provider_name: String,
    pub model: String,
    pub retry: RetryPolicy,
}
impl Providers {
    pub fn new(
        _c: &BTreeMap<String, crate::config::ProviderConfig>,
        _env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Providers, Error> {
        Ok(Providers)
    }
    pub fn resolve(&self, m: &str) -> Result<Resolved, Error> {
        Err(Error(m.into()))
    }
}
