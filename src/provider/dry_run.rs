//! `lllm run --dry-run`: every provider is wrapped so that a request is
//! captured as it would go on the wire (endpoint and body; never headers,
//! credentials or query values; a key the body holds shown `***`, as the
//! record holds it) and not sent. The call then fails, so a run stops after
//! its first turns.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::digest::{request_sha256, scrubbed_sha256};
use super::{ChatRequest, Provider, ProviderError, WireRequest};
use crate::dialog::Message;

/// The error a dry-run call ends with.
pub const NOT_SENT: &str = "dry run: the request was not sent";

/// One captured request.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The request digest, as the session record has it (to name the agent).
    pub sha256: String,
    pub wire: WireRequest,
}

/// What a dry run captured, in the order the requests were made.
#[derive(Default)]
pub struct DryRun {
    captured: Mutex<Vec<Captured>>,
}

impl DryRun {
    pub fn captured(&self) -> Vec<Captured> {
        self.captured
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// A provider that shows instead of sends.
pub struct DryRunProvider {
    pub inner: Arc<dyn Provider>,
    pub log: Arc<DryRun>,
    /// Shown `***` in a captured body.
    pub secrets: Arc<crate::redact::Secrets>,
}

impl Provider for DryRunProvider {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        let mut wire = self.inner.wire_request(&request);
        // Shown as every URL is: no credentials, no query values.
        wire.url = crate::redact::url(&wire.url).into_owned();
        self.secrets.scrub_value(&mut wire.body);
        let captured = Captured {
            sha256: scrubbed_sha256(&request, &self.secrets)
                .unwrap_or_else(|| request_sha256(&request)),
            wire,
        };
        self.log
            .captured
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(captured);
        Box::pin(async { Err(ProviderError::permanent(NOT_SENT)) })
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        self.inner.wire_request(request)
    }
}
