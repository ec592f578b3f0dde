//! The bearer token (D20): with one set, every route but `/health` answers
//! 401 `Unauthorized` to a request without `Authorization: Bearer TOKEN`.
//! The comparison takes the same time wherever the given token differs.
//! `/metrics` needs it too, unless the server was started with
//! `--metrics-public` (`Options::metrics_public`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::routes;

/// The middleware: passes a request that may pass, answers 401 otherwise.
pub async fn check(
    State(state): State<Arc<routes::State>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = state.token.as_deref() else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if path == "/health" || (state.metrics_public && path == "/metrics") {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer);
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "the bearer token is not this server's",
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "this server needs `Authorization: Bearer TOKEN`",
        )
        .into_response(),
    }
}

/// The token of an `Authorization` value (`Bearer` in any case).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `given` is `token`, in time that depends on their lengths only.
fn same(given: &[u8], token: &[u8]) -> bool {
    let mut differ = (given.len() != token.len()) as u8;
    for (index, byte) in token.iter().enumerate() {
        differ |= byte ^ given.get(index).copied().unwrap_or(!byte);
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"s3cret", b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"x3cret"] {
            assert!(!same(other, b"s3cret"), "{other:?}");
        }
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("abc"), None);
    }
}
