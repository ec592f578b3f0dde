//! TEMPORARY stand-in (replaced at merge).
#[derive(Debug, Clone, Default)]
pub struct ModelTable;
impl ModelTable {
    pub fn bundled() -> &'static ModelTable {
        static T: ModelTable = ModelTable;
        &T
    }
    pub fn with_overrides(&self, _v: &serde_json::Value) -> Result<ModelTable, String> {
        Ok(ModelTable)
    }
}
