//! [`DebugError`]: why the debug port has no answer. Every computation of the port returns
//! it; it becomes a gRPC status in one place (`From<DebugError> for tonic::Status`) and an
//! HTTP answer in one place (`IntoResponse`: `{"error": message}` with 400, 404 or 500).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};

/// Why a question to the debug port has no answer; the message is for people and names
/// the parameter or the thing that is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugError {
    /// The request itself is wrong (gRPC `INVALID_ARGUMENT`, HTTP 400).
    BadRequest(String),
    /// No such proxy, resource or epoch (gRPC `NOT_FOUND`, HTTP 404).
    NotFound(String),
    /// The port failed to compute the answer (gRPC `INTERNAL`, HTTP 500).
    Internal(String),
}

impl DebugError {
    pub fn message(&self) -> &str {
        match self {
            DebugError::BadRequest(m) | DebugError::NotFound(m) | DebugError::Internal(m) => m,
        }
    }
}

impl std::fmt::Display for DebugError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for DebugError {}

/// A computation run off the async workers that panicked or was cancelled.
impl From<tokio::task::JoinError> for DebugError {
    fn from(e: tokio::task::JoinError) -> Self {
        DebugError::Internal(e.to_string())
    }
}

impl From<DebugError> for tonic::Status {
    fn from(e: DebugError) -> Self {
        match e {
            DebugError::BadRequest(m) => tonic::Status::invalid_argument(m),
            DebugError::NotFound(m) => tonic::Status::not_found(m),
            DebugError::Internal(m) => tonic::Status::internal(m),
        }
    }
}

/// The body of every HTTP error answer.
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl IntoResponse for DebugError {
    fn into_response(self) -> Response {
        let status = match self {
            DebugError::BadRequest(_) => StatusCode::BAD_REQUEST,
            DebugError::NotFound(_) => StatusCode::NOT_FOUND,
            DebugError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (
            status,
            Json(ErrorBody {
                error: self.message(),
            }),
        )
            .into_response()
    }
}
