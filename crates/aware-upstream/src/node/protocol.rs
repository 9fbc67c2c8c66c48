//! The paired-node wire protocol (04 §2.2, superseded where docs/upstream.md §4 says so): the
//! catalogs a node serves, its routes and limits, and the typed answers both ends share.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// Most items of the v1 (newest-first) answer, and what the gateway asks for at adoption and in
/// the v1 check (04 §2.2, §10 step 2).
pub const ITEMS_LIMIT: usize = 50;
/// Most items of one page, and the default (decision D24).
pub const PAGE_LIMIT_MAX: usize = 500;
pub const PAGE_LIMIT_DEFAULT: usize = 200;
/// Most catalog entries of one thread-list page, and the default.
pub const THREADS_LIMIT_MAX: usize = 200;
pub const THREADS_LIMIT_DEFAULT: usize = 50;
/// Every node request is bounded by this (04 §2.2).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(10);
/// The error code of the definitive "this thread does not exist" answer (404).
pub const THREAD_NOT_FOUND: &str = "thread_not_found";

/// A session catalog a node serves, each under `/v1/node/<id>/…` with the same routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeCatalog {
    /// Claude Code transcripts (`~/.claude/projects`).
    Claude,
    /// Codex CLI rollouts (`$CODEX_HOME/sessions`).
    Codex,
}

impl NodeCatalog {
    pub const ALL: [NodeCatalog; 2] = [NodeCatalog::Claude, NodeCatalog::Codex];

    /// The catalog id (`catalogId` of the gateway's API, and the route segment).
    pub fn id(self) -> &'static str {
        match self {
            NodeCatalog::Claude => "claude",
            NodeCatalog::Codex => "codex",
        }
    }

    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.id() == id)
    }

    /// The `upstreamKind` of a link to one of this catalog's threads.
    pub fn upstream_kind(self) -> &'static str {
        match self {
            NodeCatalog::Claude => "claude-cli",
            NodeCatalog::Codex => crate::codex::provider::UPSTREAM_KIND,
        }
    }

    /// `GET …?limit=&cursor=`: a [`ThreadsPage`].
    pub fn threads_path(self) -> String {
        format!("/v1/node/{}/threads", self.id())
    }

    /// `GET …?limit=` (an [`ItemsAnswer`]) or `GET …?after=&limit=` (an [`ItemsPage`]).
    pub fn items_path(self, thread_id: &str) -> String {
        format!(
            "/v1/node/{}/threads/{}/items",
            self.id(),
            aware_core::path::seg(thread_id)
        )
    }
}

/// One thread of a node's catalog (04 §2.1); the gateway adds `hostId` and `adoptedSessionKey`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadEntry {
    pub catalog_id: String,
    pub thread_id: String,
    #[serde(default)]
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A page of a node's catalog, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadsPage {
    pub items: Vec<ThreadEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The v1 answer: the newest items of a thread, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemsAnswer<I> {
    pub items: Vec<I>,
}

/// One page of the items after a uuid (decision D24): oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemsPage<I = Value> {
    pub items: Vec<I>,
    /// More items follow the last one of this page.
    pub more: bool,
    /// The `after` uuid was found (always true when reading from the start).
    pub found: bool,
}

/// One item of a Codex thread (docs/upstream.md §4). Its `uuid` is `row:` + the first 32 hex
/// digits of SHA-256 of the rollout line (rollout rows have no id of their own), as for a Claude
/// row without uuid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodexItem {
    pub uuid: String,
    #[serde(flatten)]
    pub body: CodexItemBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CodexItemBody {
    /// A row of a shape the Codex classifier may call human (a prompt event, or a pre-envelope
    /// user message), sent as the slim row of `bigrow::slim_codex_row`: what the classifier
    /// reads, with bounded texts. The gateway classifies it, so its rules apply to node threads
    /// exactly as to local rollouts.
    #[serde(rename = "userMessage")]
    UserMessage { row: Value },
    /// An assistant message's text, for the history imported at adoption.
    #[serde(rename = "agentMessage")]
    AgentMessage { text: String },
    /// A kind a newer node sends that this gateway does not know: never human.
    #[serde(other)]
    Other,
}

/// Why a node request failed.
#[derive(Debug)]
pub enum NodeError {
    /// 404 `thread_not_found`: definitive.
    ThreadNotFound,
    /// 400: the node refused the request as malformed (an older node that does not page).
    Refused(String),
    /// The node could not be reached at all (connection refused, DNS): the rest of a batch is
    /// skipped, it would fail the same way.
    Unreachable(String),
    /// Anything else: another status (a refused token), a timeout, a malformed answer.
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codex_items_on_the_wire() {
        let item = CodexItem {
            uuid: "row:1".into(),
            body: CodexItemBody::UserMessage {
                row: json!({"type": "event_msg"}),
            },
        };
        let v = serde_json::to_value(&item).unwrap();
        assert_eq!(
            v,
            json!({"uuid": "row:1", "type": "userMessage", "row": {"type": "event_msg"}})
        );
        assert_eq!(serde_json::from_value::<CodexItem>(v).unwrap(), item);
        let later: CodexItem =
            serde_json::from_value(json!({"uuid": "row:2", "type": "toolCall", "x": 1})).unwrap();
        assert_eq!(later.body, CodexItemBody::Other);
    }

    #[test]
    fn catalogs_and_paths() {
        assert_eq!(NodeCatalog::from_id("codex"), Some(NodeCatalog::Codex));
        assert_eq!(NodeCatalog::from_id("pi"), None);
        assert_eq!(NodeCatalog::Codex.upstream_kind(), "codex-cli");
        assert_eq!(
            NodeCatalog::Codex.items_path("a b/c%"),
            "/v1/node/codex/threads/a%20b%2Fc%25/items"
        );
        assert_eq!(
            NodeCatalog::Claude.threads_path(),
            "/v1/node/claude/threads"
        );
    }
}
