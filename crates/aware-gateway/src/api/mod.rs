//! The resources of the API (03 §5.4), one handler module each, the agent tools (03 §6), and
//! wake delivery: the SSE stream and the per-agent webhooks with their lanes (02 §10).

pub(crate) mod catalog;
pub(crate) mod console;
pub(crate) mod notices;
pub(crate) mod sessions;
pub mod tools;
pub(crate) mod turns;
pub(crate) mod wakes;
pub(crate) mod watches;
pub(crate) mod webhook;
pub(crate) mod webhook_lanes;
