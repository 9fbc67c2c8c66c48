//! API errors: an HTTP status, a stable `code` and a message naming the problem (03 §5.1).

use aware_engine::{EngineError, ErrorKind};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            message,
        )
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// The HTTP status and error code of each kind of engine failure (03 §5.1). One row per kind and
/// no catch-all: a kind the engine adds (a backend's own failure) does not compile until it has
/// its row here. A store that fails an op answers 503 `store_unavailable`, whatever the backend.
fn engine_status(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::InvalidKey => (StatusCode::BAD_REQUEST, "invalid_session_key"),
        ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
        ErrorKind::SessionNotFound => (StatusCode::NOT_FOUND, "session_not_found"),
        ErrorKind::RunNotFound => (StatusCode::NOT_FOUND, "run_not_found"),
        ErrorKind::RunActive => (StatusCode::CONFLICT, "run_active"),
        ErrorKind::RunConflict => (StatusCode::CONFLICT, "run_conflict"),
        ErrorKind::LabelTaken => (StatusCode::CONFLICT, "label_taken"),
        ErrorKind::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        ErrorKind::StoreUnavailable => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let (status, code) = engine_status(e.kind());
        let message = match &e {
            EngineError::SessionNotFound(k) => format!("session \"{k}\" does not exist"),
            other => other.to_string(),
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(event = "store_unavailable", error = %e, "store error answered 503");
        }
        ApiError {
            status,
            code,
            message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.code == "starting" {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.code == "too_many_streams" {
            // A client refused a stream must not keep the connection slot it asked on.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
