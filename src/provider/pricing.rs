//! TEMPORARY stand-in (replaced at merge).
use super::models::ModelTable;
pub fn apply(
    _t: &ModelTable,
    _p: &str,
    _m: &str,
    _u: &mut serde_json::Map<String, serde_json::Value>,
) -> bool {
    true
}
#[derive(Default)]
pub struct UnknownPriceWarnings;
impl UnknownPriceWarnings {
    pub fn warn_once(&self, _p: &str, _m: &str) -> Option<String> {
        None
    }
}
