//! The external names every benchmark module uses, in one place.

pub(crate) use anyhow::{anyhow, bail, Context, Result};
pub(crate) use aware_core::{ActorType, EventKind, SessionRef};
pub(crate) use aware_engine::{AppendOutcome, AppendRequest, CreateSession, Engine};
pub(crate) use aware_store_sqlite::Durability;
pub(crate) use rusqlite::{params, Connection};
pub(crate) use serde_json::{json, Value};
pub(crate) use std::collections::{HashMap, HashSet};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Barrier};
pub(crate) use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
