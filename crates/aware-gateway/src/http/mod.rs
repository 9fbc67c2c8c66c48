//! The HTTP layer: connections and their deadlines, the edge checks, the route table, strict
//! request parsing, authorization, errors, and the gateway's life (`server`).

pub(crate) mod access;
pub(crate) mod auth_limit;
pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod dispatch;
pub(crate) mod edge;
pub(crate) mod error;
pub(crate) mod request;
pub(crate) mod routes;
pub(crate) mod server;
pub(crate) mod stats;
pub(crate) mod streams;
