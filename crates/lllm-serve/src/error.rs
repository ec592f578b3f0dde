//! The one shape every error answer has (docs/serve.md, "Errors"):
//! `{"error": {"type", "message", "tactic", "endpoint", "request_id",
//! "metadata"}}`, upstream lllm-core's `ErrorDetail` at the top level (its
//! client reads it there as well as under FastAPI's `detail`). The message
//! is written for the caller: never a stack trace, a key or a server path
//! (D20); what the run's record says stays in the record.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// An answer that is not a success, with what the caller is told (its
/// `Detail`, boxed: a `Result` carrying it stays small).
#[derive(Debug, Clone)]
pub struct ApiError(Box<Detail>);

/// What an [`ApiError`] says.
#[derive(Debug, Clone)]
pub struct Detail {
    /// The HTTP status.
    pub status: StatusCode,
    /// Upstream's type name where it has one (`TacticNotFound`,
    /// `SchemaError`), ours otherwise (`Unauthorized`, `Busy`, …).
    pub kind: &'static str,
    /// What went wrong, in words.
    pub message: String,
    /// The tactic the request named, when it named one.
    pub tactic: Option<String>,
    /// `run`, `stream`, `info`, `chat.completions`, …
    pub endpoint: Option<&'static str>,
    /// The request's id, once it has one.
    pub request_id: Option<String>,
    /// More about a failed run: its `session_id`, `state`, `cost`.
    pub metadata: Map<String, Value>,
    /// Seconds to wait before trying again (a 429 says it).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error of `kind` answered with `status`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(Detail {
            status,
            kind,
            message: message.into(),
            tactic: None,
            endpoint: None,
            request_id: None,
            metadata: Map::new(),
            retry_after: None,
        }))
    }

    /// 400 `SchemaError`: the request's body or input is not what the tactic takes.
    pub fn bad_input(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "SchemaError", message)
    }

    /// 404 `TacticNotFound`, as upstream names it.
    pub fn no_tactic(name: &str, served: &[&str]) -> ApiError {
        let mut error = ApiError::new(
            StatusCode::NOT_FOUND,
            "TacticNotFound",
            format!(
                "no tactic `{}` is served here (served: {})",
                lllm::suggest::printable(name),
                served.join(", ")
            ),
        );
        // Only a name upstream's client can hold (a path segment).
        if crate::segment_problem(name).is_none() {
            error.tactic = Some(name.to_string());
        }
        error
    }

    /// Names the tactic and endpoint the error is about.
    pub fn at(mut self, tactic: &str, endpoint: &'static str) -> ApiError {
        self.tactic = Some(tactic.to_string());
        self.endpoint = Some(endpoint);
        self
    }

    /// Names the endpoint only (the tactic named is not served).
    pub fn at_endpoint(mut self, endpoint: &'static str) -> ApiError {
        self.endpoint = Some(endpoint);
        self
    }

    /// Names the request.
    pub fn request(mut self, request_id: &str) -> ApiError {
        self.request_id = Some(request_id.to_string());
        self
    }

    /// The body, as sent.
    pub fn body(&self) -> Value {
        json!({"error": {
            "type": self.kind,
            "message": self.message,
            "tactic": self.tactic,
            "endpoint": self.endpoint,
            "request_id": self.request_id,
            "metadata": self.metadata,
        }})
    }
}

impl std::ops::Deref for ApiError {
    type Target = Detail;

    fn deref(&self) -> &Detail {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut Detail {
        &mut self.0
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(id) = self.request_id.as_deref()
            && let Ok(value) = HeaderValue::from_str(id)
        {
            response.headers_mut().insert("x-request-id", value);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
