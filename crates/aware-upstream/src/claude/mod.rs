//! Claude Code (04 §8–§9): the row classifier, the window scanner with its tool-result probe,
//! and the provider of the local transcripts under `[claude] root`.

pub mod classify;
pub mod local;
mod probe;
pub mod scan;
mod slim;
