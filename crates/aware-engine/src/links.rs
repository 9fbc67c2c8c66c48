//! Upstream links (04 §4), source identity (04 §5), adoption (04 §3, the engine part) and the
//! engine operations the upstream monitor needs (04 §6, §7).

use crate::append::{record, AppendRequest};
use crate::lookup::{load_session, new_uuid};
use crate::types::*;
use crate::{Engine, Result};
use aware_core::{ActorType, EventKind, SessionKey, SessionRef};
use aware_store::StoreExt;
use aware_store::{LinkRow, ReadTx, SessionRow, TurnRow, UpstreamSource, WriteTx};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Compact JSON with object keys sorted at every level: the canonical form of refs.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    aware_core::hex::lower(&Sha256::digest(bytes))
}

/// `sourceKey16` (04 §5).
pub fn source_key16(host_id: &str, thread_id: &str, ref_json: &Value) -> String {
    let mut input = Vec::new();
    input.extend_from_slice(host_id.as_bytes());
    input.push(0);
    input.extend_from_slice(thread_id.as_bytes());
    input.push(0);
    input.extend_from_slice(canonical_json(ref_json).as_bytes());
    sha256_hex(&input)[..16].to_string()
}

/// The session key adoption mints (04 §3 step 4); the hook derives the same for local threads.
pub fn adopted_key(
    agent: &aware_core::AgentId,
    host_id: &str,
    thread_id: &str,
) -> Result<SessionKey> {
    let hash = if host_id == "gateway:local" {
        sha256_hex(thread_id.as_bytes())
    } else {
        sha256_hex(format!("{host_id}\0{thread_id}").as_bytes())
    };
    Ok(SessionKey::qualified(agent, &format!("claude:{hash}"))?)
}

/// What a link is created or refreshed with.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInput {
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
    pub upstream_kind: String,
    pub upstream_ref: Value,
    pub marker: Value,
}

/// How a settle changes the link.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    Activity(Value),
    Missing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkDelete {
    Deleted,
    Changed,
    Absent,
}

/// A history row to import at adoption (origin `import`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportTurn {
    /// `user` or `assistant`.
    pub role: Role,
    pub text: String,
}

/// The engine part of a catalog continue: everything read from the provider is already here.
#[derive(Debug, Clone)]
pub struct AdoptRequest {
    pub session: SessionRef,
    pub source: UpstreamSource,
    pub caller: Caller,
    /// History to import when the session is created (oldest first).
    pub history: Vec<ImportTurn>,
    /// The link to seed, when the provider could give a baseline.
    pub link: Option<LinkInput>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptResult {
    pub session_key: String,
    pub agent_id: String,
    pub created: bool,
    pub linked: bool,
}

fn same_source(row: &LinkRow, input: &LinkInput) -> bool {
    row.thread_id == input.thread_id
        && row.host_id == input.host_id
        && row.upstream_kind == input.upstream_kind
        && row.upstream_ref_json == canonical_json(&input.upstream_ref)
}

/// Upsert inside an op (04 §4): the same source keeps its marker and scan time.
pub(crate) fn upsert_in(
    tx: &mut dyn WriteTx,
    s: &SessionRef,
    input: &LinkInput,
    now: i64,
) -> Result<LinkRow> {
    let existing = tx.link(s.key.as_str(), s.agent.as_str())?;
    let row = match existing {
        Some(prev) => {
            let keep = same_source(&prev, input);
            LinkRow {
                catalog_id: input.catalog_id.clone(),
                host_id: input.host_id.clone(),
                thread_id: input.thread_id.clone(),
                upstream_kind: input.upstream_kind.clone(),
                upstream_ref_json: canonical_json(&input.upstream_ref),
                last_marker_json: if keep {
                    prev.last_marker_json.clone()
                } else {
                    Some(canonical_json(&input.marker))
                },
                last_scanned_at: if keep { prev.last_scanned_at } else { None },
                updated_at: now.max(prev.updated_at + 1),
                ..prev
            }
        }
        None => LinkRow {
            session_key: s.key.as_str().into(),
            agent_id: s.agent.as_str().into(),
            catalog_id: input.catalog_id.clone(),
            host_id: input.host_id.clone(),
            thread_id: input.thread_id.clone(),
            upstream_kind: input.upstream_kind.clone(),
            upstream_ref_json: canonical_json(&input.upstream_ref),
            last_marker_json: Some(canonical_json(&input.marker)),
            last_scanned_at: None,
            created_at: now,
            updated_at: now,
        },
    };
    tx.put_link(&row)?;
    Ok(row)
}

impl Engine {
    pub fn link(&self, s: &SessionRef) -> Result<Option<LinkRow>> {
        Ok(self
            .inner
            .store
            .read_as(|tx| tx.link(s.key.as_str(), s.agent.as_str()))?)
    }

    /// `upsert` of 04 §4.
    pub fn link_upsert(&self, s: &SessionRef, input: LinkInput) -> Result<LinkRow> {
        let s2 = s.clone();
        self.write(move |tx, ctx| upsert_in(tx, &s2, &input, ctx.now))
    }

    /// Compare-and-swap settle of 04 §4: applies only when the stored row equals `expected`.
    pub fn link_settle(&self, expected: &LinkRow, settlement: Settlement) -> Result<bool> {
        let expected = expected.clone();
        self.write(move |tx, ctx| {
            let current = tx.link(&expected.session_key, &expected.agent_id)?;
            if current.as_ref() != Some(&expected) {
                return Ok(false);
            }
            match settlement.clone() {
                Settlement::Missing => {
                    tx.delete_link(&expected.session_key, &expected.agent_id)?;
                }
                Settlement::Activity(marker) => {
                    tx.put_link(&LinkRow {
                        last_marker_json: Some(canonical_json(&marker)),
                        last_scanned_at: Some(ctx.now),
                        updated_at: ctx.now.max(expected.updated_at + 1),
                        ..expected.clone()
                    })?;
                }
            }
            Ok(true)
        })
    }

    /// `delete` of 04 §4.
    pub fn link_delete(&self, s: &SessionRef, expected: Option<&LinkRow>) -> Result<LinkDelete> {
        let (s2, expected) = (s.clone(), expected.cloned());
        self.write(move |tx, _ctx| {
            let Some(current) = tx.link(s2.key.as_str(), s2.agent.as_str())? else {
                return Ok(LinkDelete::Absent);
            };
            if expected.as_ref().is_some_and(|e| *e != current) {
                return Ok(LinkDelete::Changed);
            }
            tx.delete_link(s2.key.as_str(), s2.agent.as_str())?;
            Ok(LinkDelete::Deleted)
        })
    }

    /// `listWatched` of 04 §4, with the ambiguity guard. Errors give an empty map.
    pub fn links_watched(&self) -> BTreeMap<String, Vec<LinkRow>> {
        let rows = match self.inner.store.read_as(|tx| tx.watched_links()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(event = "read_failed", read = "listWatched", error = %e, "cannot list watched links");
                return BTreeMap::new();
            }
        };
        let mut agents_per_key: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
        for r in &rows {
            agents_per_key
                .entry(&r.session_key)
                .or_default()
                .insert(&r.agent_id);
        }
        let mut out: BTreeMap<String, Vec<LinkRow>> = BTreeMap::new();
        for r in &rows {
            if agents_per_key
                .get(r.session_key.as_str())
                .is_some_and(|a| a.len() > 1)
            {
                tracing::warn!(event = "upstream_link_ambiguous", session = %r.session_key, "one session key is linked under several agents; skipped");
                continue;
            }
            out.entry(r.catalog_id.clone()).or_default().push(r.clone());
        }
        out
    }

    /// The last 10 non-imported user turns of the current incarnation, newest first, as
    /// normalised texts (`upstreamText` when present) — the self-echo list of 04 §6.
    pub fn own_recent_user_texts(&self, s: &SessionRef) -> Result<Vec<String>> {
        // One indexed query for the 10 rows, not the whole transcript: the monitor asks twice
        // per probe on every tick.
        let turns = self.inner.store.read_as(|tx| {
            load_session(tx, s)
                .and_then(|_| Ok(tx.recent_own_user_turns(s.key.as_str(), s.agent.as_str(), 10)?))
        })?;
        Ok(turns
            .iter()
            .map(|t| {
                t.upstream_text
                    .as_deref()
                    .unwrap_or(&t.text)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|t| !t.is_empty())
            .collect())
    }

    /// The engine part of adoption (04 §3 steps 5–7), in one writer op.
    pub fn adopt(&self, req: AdoptRequest) -> Result<AdoptResult> {
        self.write(move |tx, ctx| {
            let s = &req.session;
            let existing = tx.session(s.key.as_str(), s.agent.as_str())?;
            let created = existing.is_none();
            match existing {
                Some(row) if row.upstream.as_ref() == Some(&req.source) => {}
                Some(mut row) => {
                    row.kind = SessionKind::Adopted.as_str().into();
                    row.upstream = Some(req.source.clone());
                    row.updated_at = ctx.now;
                    tx.update_session(&row)?;
                    record_adopted(tx, ctx, &row, &req);
                }
                None => {
                    let create = CreateSession {
                        key: s.key.clone(),
                        agent: Some(s.agent.clone()),
                        kind: None,
                        label: None,
                        parent: None,
                        caller: req.caller.clone(),
                        created_via: CreatedVia::Adoption,
                    };
                    let mut row = crate::sessions::create_in(tx, ctx, s, &create, None)?;
                    row.upstream = Some(req.source.clone());
                    tx.update_session(&row)?;
                    for (index, turn) in req.history.iter().enumerate() {
                        tx.insert_turn(&row.key, &row.agent_id, &TurnRow {
                            id: new_uuid(),
                            index: index as i64,
                            role: turn.role.as_str().into(),
                            text: crate::lookup::without_nul(&turn.text),
                            at: ctx.now,
                            actor_type: if turn.role == Role::User { ActorType::Human } else { ActorType::Agent },
                            actor_id: (turn.role != Role::User).then(|| row.key.clone()),
                            provenance_json: r#"{"kind":"human"}"#.into(),
                            channel: Some(req.source.catalog_id.clone()),
                            run_id: None,
                            origin: Some("import".into()),
                            upstream_text: None,
                            idempotency_key: None,
                        })?;
                    }
                    record_adopted(tx, ctx, &row, &req);
                }
            }
            // Link seeding is best effort: a failure leaves `linked: false` (04 §3 step 6).
            if let Some(input) = &req.link {
                tx.savepoint("link")?;
                match upsert_in(tx, s, input, ctx.now) {
                    Ok(_) => tx.release("link")?,
                    Err(e) => {
                        tx.rollback_to("link")?;
                        tracing::warn!(event = "link_seed_failed", session = %s.key, error = %e, "adoption stands without a link");
                    }
                }
            }
            let linked = tx.link(s.key.as_str(), s.agent.as_str())?.is_some();
            Ok(AdoptResult { session_key: s.key.as_str().into(), agent_id: s.agent.as_str().into(), created, linked })
        })
    }

    /// Records an upstream event (human activity or missing) with the admission check "the link
    /// row still equals the snapshot, and the session is the same incarnation and idle" (04 §7).
    pub fn record_upstream(
        &self,
        snapshot: &LinkRow,
        session_id: &str,
        mut req: AppendRequest,
    ) -> Result<crate::AppendOutcome> {
        let (snap, sid) = (snapshot.clone(), session_id.to_string());
        req.admission = Some(std::sync::Arc::new(move |tx: &dyn ReadTx| {
            let link_same = tx.link(&snap.session_key, &snap.agent_id)?.as_ref() == Some(&snap);
            let session_ok = tx
                .session(&snap.session_key, &snap.agent_id)?
                .is_some_and(|s| s.session_id == sid && s.active_run_id.is_none());
            Ok(link_same && session_ok)
        }));
        let s = req.session.clone();
        self.write(move |tx, ctx| {
            let row = load_session(tx, &s)?;
            let parent = crate::lookup::parent_ref(&row).map(|p| p.key.as_str().to_string());
            req.session_id = Some(row.session_id.clone());
            req.only_if_watched = parent.is_none();
            req.watchers = parent.into_iter().collect();
            Ok(record(tx, ctx, req.clone()))
        })
    }
}

fn record_adopted(
    tx: &mut dyn WriteTx,
    ctx: &mut crate::Ctx,
    row: &SessionRow,
    req: &AdoptRequest,
) {
    let (actor_type, actor_id) = match req.caller.session() {
        Some(c) => (ActorType::Agent, Some(c.key.as_str().to_string())),
        None => (ActorType::Human, None),
    };
    let mut ev = AppendRequest::new(req.session.clone(), EventKind::Adopted, actor_type);
    ev.session_id = Some(row.session_id.clone());
    ev.actor_id = actor_id;
    ev.dedupe_key = Some(format!("adopted:{}", row.key));
    ev.summary = format!("adopted from {}", req.source.catalog_id);
    ev.payload =
        Some(serde_json::json!({"catalogId": req.source.catalog_id, "hostId": req.source.host_id}));
    record(tx, ctx, ev);
}
