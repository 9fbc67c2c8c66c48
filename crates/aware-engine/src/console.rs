//! Reads for the web console: the session table, one session's page and the watch graph, each
//! on one snapshot; and the change generation that tells the console something changed.

use crate::lookup::load_session;
use crate::types::{Notice, Session};
use crate::{Engine, Result};
use aware_core::{SessionRef, StoredEvent};
use aware_store::{ConsoleFilter, ConsoleRow, CursorRow, RunRow, SystemEventRow, TurnRow};
use aware_store::{ReadTx, StoreExt};
use std::collections::{BTreeSet, HashSet, VecDeque};

/// One session as the console's session page shows it.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub session: Session,
    /// Newest first.
    pub events: Vec<StoredEvent>,
    /// More (older) events exist below the last one of `events`.
    pub more_events: bool,
    /// Sequences up to this one were pruned from the stream (0 = never pruned).
    pub pruned_through: i64,
    /// Notices this session holds (as watcher), with their exact text.
    pub notices: Vec<Notice>,
    /// Pending notices other sessions hold on this session (as target).
    pub notices_on: Vec<(String, Notice)>,
    pub system_events: Vec<SystemEventRow>,
    pub watches: Vec<CursorRow>,
    pub watchers: Vec<CursorRow>,
    pub runs: Vec<RunRow>,
    /// The newest turns, oldest first.
    pub turns: Vec<TurnRow>,
    pub turn_count: i64,
}

/// A node of the watch graph: its table row.
pub type GraphNode = ConsoleRow;

/// Where a graph edge comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// The spawn (parent) cursor, stored or implied by `parentSessionKey`.
    Spawn,
    /// An explicit watch.
    Watch,
    /// A muted pair (unwatched).
    Muted,
}

impl EdgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Spawn => "spawn",
            EdgeKind::Watch => "watch",
            EdgeKind::Muted => "muted",
        }
    }
}

#[derive(Debug, Clone)]
pub struct GraphEdge {
    /// The watcher (key, agent).
    pub from: (String, String),
    /// The target (key, agent).
    pub to: (String, String),
    pub kind: EdgeKind,
    pub pending: bool,
    /// No cursor row exists yet; the parent watches by `parentSessionKey` alone.
    pub implied: bool,
    pub cursor: Option<CursorRow>,
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    /// The node limit cut the neighbourhood short.
    pub truncated: bool,
}

/// A session as (key, agent).
type Pair = (String, String);

/// The agent of an agent-qualified key (watchers always are).
fn agent_of(key: &str) -> Option<String> {
    aware_core::SessionKey::parse(key)
        .ok()
        .and_then(|k| k.qualified_agent().map(|a| a.as_str().to_string()))
}

impl Engine {
    /// A page of the session table and the number of matching sessions.
    pub fn console_sessions(&self, filter: &ConsoleFilter) -> Result<(Vec<ConsoleRow>, u64)> {
        Ok(self.inner.store.read_as(|r| r.console_sessions(filter))?)
    }

    /// A session's page: `before` pages the timeline backwards (exclusive sequence).
    pub fn console_session(
        &self,
        s: &SessionRef,
        before: Option<i64>,
        event_limit: u32,
        turn_limit: u32,
    ) -> Result<ConsoleSession> {
        let session = self.get_session(s)?;
        let (key, agent) = (s.key.as_str(), s.agent.as_str());
        self.inner.store.read_as(|tx| {
            (|| -> Result<_> {
                load_session(tx, s)?;
                let mut events =
                    tx.events_before(key, agent, before.unwrap_or(i64::MAX), event_limit + 1)?;
                let more_events = events.len() > event_limit as usize;
                events.truncate(event_limit as usize);
                let pruned_through = tx.head(key, agent)?.map_or(0, |h| h.pruned_max_sequence);
                let qualified = s.key.is_agent_qualified();
                let notices = if qualified {
                    tx.pending_by_watcher(key)?
                        .iter()
                        .map(Notice::from_cursor)
                        .collect()
                } else {
                    Vec::new()
                };
                let watches = if qualified {
                    tx.cursors_by_watcher(key)?
                } else {
                    Vec::new()
                };
                let watchers = tx.cursors_by_target(key, agent)?;
                let notices_on = watchers
                    .iter()
                    .filter(|c| c.state.is_pending())
                    .map(|c| (c.watcher.clone(), Notice::from_cursor(c)))
                    .collect();
                let turn_count = tx.turn_count(key, agent)?;
                // Turn indexes start at 0: the newest `turn_limit` are those above this one.
                let after = turn_count - i64::from(turn_limit) - 1;
                let turns = tx.turns(key, agent, Some(after), turn_limit)?;
                Ok(ConsoleSession {
                    session: session.clone(),
                    events,
                    more_events,
                    pruned_through,
                    notices,
                    notices_on,
                    system_events: tx.system_events(key, agent)?,
                    watches,
                    watchers,
                    runs: tx.runs_of(key, agent, 20)?,
                    turns,
                    turn_count,
                })
            })()
        })
    }

    /// The watch graph: without `focus`, the `limit` most recently updated sessions of
    /// `agents` (all when empty) and the edges among them; with `focus`, its neighbourhood up
    /// to `depth` hops along cursors and parent links in either direction.
    pub fn console_graph(
        &self,
        focus: Option<&SessionRef>,
        depth: u32,
        limit: u32,
        agents: &[String],
    ) -> Result<Graph> {
        self.inner.store.read_as(|tx| {
            let (nodes, known_rows, truncated) = match focus {
                Some(f) => {
                    let (nodes, truncated) = neighbourhood(tx, f, depth, limit, agents)?;
                    (nodes, None, truncated)
                }
                None => {
                    let (rows, total) = tx.console_sessions(&ConsoleFilter {
                        agents: agents.to_vec(),
                        descending: true,
                        limit,
                        ..Default::default()
                    })?;
                    let nodes = rows
                        .iter()
                        .map(|r| (r.session.key.clone(), r.session.agent_id.clone()))
                        .collect();
                    (nodes, Some(rows), total > u64::from(limit))
                }
            };
            let keys: Vec<Pair> = nodes.into_iter().collect();
            // An empty key list means "no restriction" to the store: answer here.
            if keys.is_empty() {
                return Ok(Graph::default());
            }
            let rows = match known_rows {
                Some(rows) => rows,
                None => {
                    tx.console_sessions(&ConsoleFilter {
                        keys: keys.clone(),
                        sort: aware_store::ConsoleSort::Key,
                        limit: keys.len() as u32,
                        ..Default::default()
                    })?
                    .0
                }
            };
            let edges = edges_among(tx, &keys, &rows)?;
            Ok(Graph {
                nodes: rows,
                edges,
                truncated,
            })
        })
    }

    /// Sessions in the store (for the console's overview).
    pub fn session_count(&self) -> Result<u64> {
        Ok(self
            .inner
            .store
            .read_as(|r| r.console_sessions(&ConsoleFilter::default()))?
            .1)
    }

    /// A receiver whose value (a generation number) changes after every committed write op:
    /// the console's "something changed" hint.
    pub fn subscribe_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}

/// The sessions within `depth` hops of `focus` along cursors and parent links in either
/// direction, of the `agents` shown (all when empty), at most `limit`; and whether the limit cut
/// the walk short.
fn neighbourhood(
    tx: &dyn ReadTx,
    focus: &SessionRef,
    depth: u32,
    limit: u32,
    agents: &[String],
) -> Result<(BTreeSet<Pair>, bool)> {
    let visible = |agent: &str| agents.is_empty() || agents.iter().any(|a| a == agent);
    load_session(tx, focus)?;
    let start = (
        focus.key.as_str().to_string(),
        focus.agent.as_str().to_string(),
    );
    let mut nodes: BTreeSet<Pair> = BTreeSet::new();
    let mut queue = VecDeque::from([(start.clone(), 0u32)]);
    nodes.insert(start);
    while let Some(((key, agent), d)) = queue.pop_front() {
        if d >= depth {
            continue;
        }
        // (neighbour, must be checked to exist). Cursor ends and children
        // exist (deleting a session deletes its cursors); only a parent
        // link may name a session that is gone, so only it costs a lookup.
        let mut next: Vec<((String, String), bool)> = Vec::new();
        for c in tx.cursors_by_target(&key, &agent)? {
            if let Some(a) = agent_of(&c.watcher) {
                next.push(((c.watcher, a), false));
            }
        }
        if agent_of(&key).is_some() {
            for c in tx.cursors_by_watcher(&key)? {
                next.push(((c.target_key, c.target_agent), false));
            }
        }
        if let Some(row) = tx.session(&key, &agent)? {
            if let Some(p) = row.parent_key {
                let pa = agent_of(&p).unwrap_or_else(|| agent.clone());
                next.push(((p, pa), true));
            }
        }
        let children = tx.list_sessions(&aware_store::SessionFilter {
            parent_key: Some(key.clone()),
            limit: limit + 1,
            ..Default::default()
        })?;
        next.extend(children.into_iter().map(|c| ((c.key, c.agent_id), false)));
        for (n, check) in next {
            if !visible(&n.1) || nodes.contains(&n) {
                continue;
            }
            if nodes.len() >= limit as usize {
                return Ok((nodes, true));
            }
            if !check || tx.session_exists(&n.0, &n.1)? {
                nodes.insert(n.clone());
                queue.push_back((n, d + 1));
            }
        }
    }
    Ok((nodes, false))
}

/// The edges among `keys` (whose table rows are `rows`): every stored cursor between two of
/// them, and the implied spawn edge of a child whose parent is shown, sorted.
fn edges_among(tx: &dyn ReadTx, keys: &[Pair], rows: &[ConsoleRow]) -> Result<Vec<GraphEdge>> {
    // One query for the cursors of every node: reading them watcher by watcher was
    // most of the route's time at 300 nodes. Watchers are agent-qualified keys.
    let watchers: Vec<String> = keys
        .iter()
        .filter(|(k, a)| agent_of(k).as_deref() == Some(a.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    let member: HashSet<(&str, &str)> =
        keys.iter().map(|(k, a)| (k.as_str(), a.as_str())).collect();
    let mut edges: Vec<GraphEdge> = Vec::new();
    // Rows come unique per (watcher, target), so no edge repeats here.
    for c in tx.console_cursors_held_by(&watchers)? {
        let Some(wa) = agent_of(&c.watcher) else {
            continue;
        };
        if !member.contains(&(c.watcher.as_str(), wa.as_str()))
            || !member.contains(&(c.target_key.as_str(), c.target_agent.as_str()))
        {
            continue;
        }
        let kind = if c.state.muted {
            EdgeKind::Muted
        } else if c.state.origin == aware_core::Origin::Watch {
            EdgeKind::Watch
        } else {
            EdgeKind::Spawn
        };
        edges.push(GraphEdge {
            from: (c.watcher.clone(), wa),
            to: (c.target_key.clone(), c.target_agent.clone()),
            kind,
            pending: c.state.is_pending(),
            implied: false,
            cursor: Some(c),
        });
    }
    // A child's parent watches it before any cursor row exists (02 §5).
    let mut implied = Vec::new();
    {
        let stored: HashSet<(&Pair, &Pair)> = edges.iter().map(|e| (&e.from, &e.to)).collect();
        for r in rows {
            let Some(p) = &r.session.parent_key else {
                continue;
            };
            let Some(pa) = agent_of(p) else { continue };
            let from = (p.clone(), pa);
            let to = (r.session.key.clone(), r.session.agent_id.clone());
            if member.contains(&(from.0.as_str(), from.1.as_str()))
                && !stored.contains(&(&from, &to))
            {
                implied.push(GraphEdge {
                    from,
                    to,
                    kind: EdgeKind::Spawn,
                    pending: false,
                    implied: true,
                    cursor: None,
                });
            }
        }
    }
    edges.extend(implied);
    edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    Ok(edges)
}
