//! API errors: an HTTP status, a stable `code` and a message naming the problem (03 §5.1).

use aware_engine::EngineError;
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

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = match &e {
            EngineError::InvalidKey(_) | EngineError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            EngineError::SessionNotFound(_) | EngineError::RunNotFound(_) => StatusCode::NOT_FOUND,
            EngineError::RunActive(_)
            | EngineError::RunConflict(_)
            | EngineError::LabelTaken(_) => StatusCode::CONFLICT,
            EngineError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            EngineError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            EngineError::SessionNotFound(k) => format!("session \"{k}\" does not exist"),
            other => other.to_string(),
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(event = "store_unavailable", error = %e, "store error answered 503");
        }
        ApiError {
            status,
            code: e.code(),
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
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
