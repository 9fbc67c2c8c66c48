//! What operators and tests use beside the API: `/health` and its probes, `/metrics`, the
//! test-mode admin routes, and the gateway's side of a cluster.

pub(crate) mod admin;
pub(crate) mod cluster;
pub(crate) mod health_probes;
pub(crate) mod health_route;
pub(crate) mod metrics;
