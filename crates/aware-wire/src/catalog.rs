//! The catalog of upstream threads a gateway can adopt (docs/api.md §4): the listing, the
//! continue (adopt) request and its answer. Field order is the order on the wire.

use serde::{Deserialize, Serialize};

/// One thread of `GET /v1/catalog`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogItem {
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The key of the session of the caller's agent that adopted this thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_session_key: Option<String>,
}

/// `GET /v1/catalog`: a page of threads, newest first; `nextCursor` when more follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogPage {
    pub items: Vec<CatalogItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/catalog/continue`: adopt a thread (or find the session that already did).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContinueArgs {
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
    /// The agent whose session adopts it [default: the caller's, else the gateway's default].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// The answer of `POST /v1/catalog/continue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Adopted {
    pub session_key: String,
    pub agent_id: String,
    /// The session was made by this call (false: it existed).
    pub created: bool,
    /// The thread's transcript was found: new prompts typed into it are noticed.
    pub linked: bool,
}
