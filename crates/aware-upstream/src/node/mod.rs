//! Paired nodes (04 §2.2, §3, §10; decisions D24-D26): both ends of the protocol, apart from the
//! HTTP server itself (`aware-gateway`'s `node_server.rs`, which only maps routes to [`serve`]).
//!
//! - [`protocol`]: the catalogs a node serves (Claude, Codex), routes, limits and the typed
//!   answers ([`ThreadsPage`], [`ItemsAnswer`], [`ItemsPage`], [`CodexItem`]);
//! - [`items`]: the node side's item building, reading a thread from its end in bounded chunks;
//! - [`serve`]: what `aware node serve` answers per route, over its roots;
//! - [`check`]: the gateway side's pure check over fetched items (paged, 04 §10 fallback),
//!   adoption baseline and history;
//! - [`client`]: [`NodeClient`], the gateway side's HTTP [`crate::provider::Provider`].
//! - `fuzzing` (hidden): the check's per-catalog instances for the `node_answers` fuzz target.
//!
//! Claude items are still the JSON objects of 04 §2.2 (`serde_json::Value`); Codex items are
//! typed.

pub mod check;
pub mod client;
#[doc(hidden)]
pub mod fuzzing;
pub mod items;
pub mod protocol;
pub mod serve;

pub use check::{check_items, history_from_items, probe_applies, Paged};
pub use client::NodeClient;
pub use items::{
    codex_item, codex_thread_items, codex_thread_items_after, codex_thread_list, row_to_item,
    thread_items, thread_items_after, thread_list,
};
pub use protocol::NodeError;
pub use protocol::{
    CodexItem, CodexItemBody, ItemsAnswer, ItemsPage, NodeCatalog, ThreadEntry, ThreadsPage,
    ITEMS_LIMIT, NODE_TIMEOUT, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, THREADS_LIMIT_DEFAULT,
    THREADS_LIMIT_MAX, THREAD_NOT_FOUND,
};
