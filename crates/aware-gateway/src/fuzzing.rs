//! The fuzzing seam: the gateway's pure parsers of untrusted request input, re-exported for the
//! cargo-fuzz targets in `fuzz/` (`http_path`, `request_bodies`) so they fuzz the functions the
//! dispatcher and the handlers call instead of copies. Not an API: nothing outside `fuzz/` may
//! use it, and it may change with the parsers.
//!
//! - [`routes::segments`] and [`routes::parse`]: a request's path into its [`Route`] (what the
//!   dispatcher does with `uri.path()`), captures still percent-encoded;
//! - [`decode_segment`]: the strict percent-decoding of a path capture (a key, a run id, a tool
//!   name, a watch target);
//! - [`Query`]: the strict query parameters; [`Obj`] and [`parse_strict`]: the strict JSON body;
//! - [`parse_turn`] (`POST …/turns`) and [`parse_ack`] (`POST …/ack`): the two bodies parsed
//!   whole before any engine call.

pub use crate::api::notices::parse_ack;
pub use crate::api::turns::parse_turn;
pub use crate::http::body::{parse_strict, Obj, Query};
pub use crate::http::error::ApiError;
pub use crate::http::request::decode_segment;
pub use crate::http::routes::{AdminOp, Parsed, Route, SessionRoute};
/// The `http` types the route parser takes, so a target needs no `http` dependency of its own.
pub use axum::http::{Method, StatusCode, Uri};

/// The route table's two functions, under the names the dispatcher uses.
pub mod routes {
    pub use crate::http::routes::{parse, segments};
}
