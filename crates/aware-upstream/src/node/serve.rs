//! What `aware node serve` answers (04 §2.2, docs/upstream.md §4), route by route, over the
//! node's roots; the HTTP server (`aware-gateway`'s `node_server.rs`) only parses the request,
//! checks the token and writes these answers.

use super::items::{
    codex_thread_items, codex_thread_items_after, codex_thread_list, thread_items,
    thread_items_after, thread_list,
};
use super::protocol::{ItemsAnswer, NodeCatalog, ThreadsPage};
use crate::provider::ProviderError;
use serde_json::Value;
use std::path::PathBuf;

/// The roots a node serves.
#[derive(Debug, Clone)]
pub struct NodeRoots {
    /// `~/.claude/projects` or `--claude-root`.
    pub claude_root: PathBuf,
    /// `$CODEX_HOME` (default `~/.codex`) or `--codex-home`; `None` with `--no-codex`.
    pub codex_home: Option<PathBuf>,
}

/// The answer of a route, ready for the wire.
fn wire(v: impl serde::Serialize) -> Result<Value, ProviderError> {
    serde_json::to_value(v).map_err(|e| ProviderError::Io(format!("answer not encodable: {e}")))
}

impl NodeRoots {
    /// Whether this node serves `catalog` (a catalog it does not serve has no routes: 404
    /// `not_found`, never `thread_not_found`).
    pub fn serves(&self, catalog: NodeCatalog) -> bool {
        match catalog {
            NodeCatalog::Claude => true,
            NodeCatalog::Codex => self.codex_home.is_some(),
        }
    }

    fn codex_home(&self) -> Result<&PathBuf, ProviderError> {
        self.codex_home
            .as_ref()
            .ok_or_else(|| ProviderError::Io("this node does not serve the codex catalog".into()))
    }

    /// `GET /v1/node/<catalog>/threads?limit=&cursor=`: a [`ThreadsPage`].
    pub fn threads(
        &self,
        catalog: NodeCatalog,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<ThreadsPage, ProviderError> {
        match catalog {
            NodeCatalog::Claude => thread_list(&self.claude_root, limit, cursor),
            NodeCatalog::Codex => codex_thread_list(self.codex_home()?, limit, cursor),
        }
    }

    /// `GET /v1/node/<catalog>/threads/{id}/items?limit=`: the v1 [`ItemsAnswer`], newest first.
    pub fn items(
        &self,
        catalog: NodeCatalog,
        thread_id: &str,
        limit: usize,
    ) -> Result<Value, ProviderError> {
        match catalog {
            NodeCatalog::Claude => wire(ItemsAnswer {
                items: thread_items(&self.claude_root, thread_id, limit)?,
            }),
            NodeCatalog::Codex => wire(ItemsAnswer {
                items: codex_thread_items(self.codex_home()?, thread_id, limit)?,
            }),
        }
    }

    /// `GET /v1/node/<catalog>/threads/{id}/items?after=&limit=`: an
    /// [`super::protocol::ItemsPage`], oldest first (`after` empty: from the start).
    pub fn items_after(
        &self,
        catalog: NodeCatalog,
        thread_id: &str,
        after: &str,
        limit: usize,
    ) -> Result<Value, ProviderError> {
        let after = Some(after).filter(|a| !a.is_empty());
        match catalog {
            NodeCatalog::Claude => wire(thread_items_after(
                &self.claude_root,
                thread_id,
                after,
                limit,
            )?),
            NodeCatalog::Codex => wire(codex_thread_items_after(
                self.codex_home()?,
                thread_id,
                after,
                limit,
            )?),
        }
    }
}
