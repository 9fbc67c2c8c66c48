//! The one append operation every producer goes through (01 §4), and watcher selection and
//! cursor updates on append (02 §2–§6).

use crate::{Ctx, Engine, EngineError, Result};
use aware_core::event::{clamp_occurred_at, filter_payload, sanitize_summary, validate_token};
use aware_core::{cursor, ActorType, EventKind, KindClass, SessionKey, SessionRef, StoredEvent};
use aware_store::{CursorRow, NewEvent, ReadTx, WriteTx};
use serde_json::Value;

/// A predicate over stored state evaluated inside the append's transaction (e.g. "the link row
/// is unchanged and the session is the same idle incarnation"). Shared, not boxed: the write op
/// that carries it may run more than once (`aware_store::WriteOp`).
pub type Admission = std::sync::Arc<dyn Fn(&dyn ReadTx) -> aware_store::Result<bool> + Send + Sync>;

/// Input of an append.
#[derive(Clone)]
pub struct AppendRequest {
    pub session: SessionRef,
    pub session_id: Option<String>,
    pub kind: EventKind,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    pub run_id: Option<String>,
    pub dedupe_key: Option<String>,
    /// The dedupe key carries an id this very op generated (a new turn's UUID), so no earlier
    /// event can hold it: the lookup is skipped. The store's UNIQUE constraint still guards it
    /// (a clash fails the append like any failed insert).
    pub(crate) fresh_dedupe_key: bool,
    pub summary: String,
    pub payload: Option<Value>,
    pub occurred_at: Option<i64>,
    /// Producer-passed watchers, in order.
    pub watchers: Vec<String>,
    pub only_if_watched: bool,
    pub admission: Option<Admission>,
}

impl AppendRequest {
    pub fn new(session: SessionRef, kind: EventKind, actor_type: ActorType) -> Self {
        AppendRequest {
            session,
            session_id: None,
            kind,
            actor_type,
            actor_id: None,
            run_id: None,
            dedupe_key: None,
            fresh_dedupe_key: false,
            summary: kind.default_summary().to_string(),
            payload: None,
            occurred_at: None,
            watchers: Vec::new(),
            only_if_watched: false,
            admission: None,
        }
    }
}

impl std::fmt::Debug for AppendRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendRequest")
            .field("session", &self.session)
            .field("kind", &self.kind)
            .field("dedupe_key", &self.dedupe_key)
            .finish_non_exhaustive()
    }
}

/// Why nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRecorded {
    AdmissionRefused,
    NotWatched,
    /// The append failed (warning `record_failed`, metric); the primary action still stands.
    Failed,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AppendOutcome {
    Recorded(StoredEvent),
    Deduped(StoredEvent),
    NotRecorded(NotRecorded),
}

impl AppendOutcome {
    pub fn event(&self) -> Option<&StoredEvent> {
        match self {
            AppendOutcome::Recorded(e) | AppendOutcome::Deduped(e) => Some(e),
            AppendOutcome::NotRecorded(_) => None,
        }
    }
    pub fn into_event(self) -> Option<StoredEvent> {
        match self {
            AppendOutcome::Recorded(e) | AppendOutcome::Deduped(e) => Some(e),
            AppendOutcome::NotRecorded(_) => None,
        }
    }
}

/// A validated append: step 1 of 01 §4 done.
struct ValidAppend {
    event: NewEvent,
    fresh_dedupe_key: bool,
    watchers: Vec<String>,
    only_if_watched: bool,
    admission: Option<Admission>,
}

/// Step 1: validate and sanitise. Returns a typed error naming the rule.
fn validate(req: AppendRequest, now: i64) -> Result<ValidAppend> {
    for (field, value) in [
        ("actorId", &req.actor_id),
        ("runId", &req.run_id),
        ("dedupeKey", &req.dedupe_key),
    ] {
        if let Some(v) = value {
            validate_token(field, v).map_err(|e| EngineError::invalid(e.to_string()))?;
        }
    }
    let payload = match &req.payload {
        None => None,
        Some(p) => {
            let filtered =
                filter_payload(req.kind, p).map_err(|e| EngineError::invalid(e.to_string()))?;
            for field in &filtered.dropped {
                tracing::warn!(event = "payload_field_dropped", kind = req.kind.as_str(), field = %field,
                    "payload field dropped by the whitelist");
            }
            filtered.kept
        }
    };
    Ok(ValidAppend {
        event: NewEvent {
            dedupe_key: req.dedupe_key,
            session_key: req.session.key.as_str().to_string(),
            session_id: req.session_id,
            agent_id: req.session.agent.as_str().to_string(),
            kind: req.kind,
            actor_type: req.actor_type,
            actor_id: req.actor_id,
            run_id: req.run_id,
            occurred_at: clamp_occurred_at(req.occurred_at, now),
            summary: sanitize_summary(&req.summary),
            payload,
        },
        fresh_dedupe_key: req.fresh_dedupe_key,
        watchers: req.watchers,
        only_if_watched: req.only_if_watched,
        admission: req.admission,
    })
}

/// Records an event inside an op, in its own savepoint. A failure is contained: it is logged
/// and counted, and the op's other writes stand (01 §12).
pub(crate) fn record(tx: &mut dyn WriteTx, ctx: &mut Ctx, req: AppendRequest) -> AppendOutcome {
    let kind = req.kind;
    let stream = format!("{}|{}", req.session.key, req.session.agent);
    let valid = match validate(req, ctx.now) {
        Ok(v) => v,
        Err(e) => {
            append_failed(ctx, kind, &stream, &e.to_string());
            return AppendOutcome::NotRecorded(NotRecorded::Failed);
        }
    };
    if let Err(e) = tx.savepoint("append") {
        append_failed(ctx, kind, &stream, &e.to_string());
        return AppendOutcome::NotRecorded(NotRecorded::Failed);
    }
    match record_steps(tx, ctx, valid) {
        Ok(outcome) => {
            if tx.release("append").is_err() {
                let _ = tx.rollback_to("append");
                append_failed(ctx, kind, &stream, "release failed");
                return AppendOutcome::NotRecorded(NotRecorded::Failed);
            }
            outcome
        }
        Err(e) => {
            // Effects are pushed only after every fallible step, so a failed append added none.
            let _ = tx.rollback_to("append");
            append_failed(ctx, kind, &stream, &e.to_string());
            AppendOutcome::NotRecorded(NotRecorded::Failed)
        }
    }
}

fn append_failed(ctx: &mut Ctx, kind: EventKind, stream: &str, error: &str) {
    tracing::warn!(event = "record_failed", kind = kind.as_str(), stream = %stream, error = %error,
        "signal-log append failed");
    ctx.effects.append_failures += 1;
}

struct Opened {
    watcher: String,
}

fn record_steps(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    valid: ValidAppend,
) -> aware_store::Result<AppendOutcome> {
    let ValidAppend {
        event,
        fresh_dedupe_key,
        watchers,
        only_if_watched,
        admission,
    } = valid;
    // 2. Admission.
    if let Some(check) = admission {
        if !check(&*tx)? {
            return Ok(AppendOutcome::NotRecorded(NotRecorded::AdmissionRefused));
        }
    }
    // 3. onlyIfWatched.
    if only_if_watched
        && tx
            .live_watchers_of(&event.session_key, &event.agent_id)?
            .is_empty()
    {
        return Ok(AppendOutcome::NotRecorded(NotRecorded::NotWatched));
    }
    // 5. Dedupe.
    if let Some(key) = event.dedupe_key.as_ref().filter(|_| !fresh_dedupe_key) {
        if let Some(existing) = tx.event_by_dedupe(key)? {
            if existing.session_key != event.session_key || existing.agent_id != event.agent_id {
                tracing::warn!(event = "dedupe_key_collision", dedupe_key = %key,
                    "dedupe key belongs to another stream");
            }
            ctx.effects.dedupe_hits += 1;
            return Ok(AppendOutcome::Deduped(existing));
        }
    }
    // 5–6. Insert and head upsert.
    let sequence = tx.insert_event(&event)?;
    tx.upsert_head(&event.session_key, &event.agent_id, sequence, ctx.now)?;
    // 7. Watchers.
    let opened = update_watchers(tx, ctx.now, &event, sequence, &watchers)?;
    ctx.effects.appended.push(event.kind);
    ctx.effects.notices_opened += opened.len() as u64;
    ctx.effects
        .state_wakes
        .extend(opened.into_iter().map(|o| o.watcher));
    Ok(AppendOutcome::Recorded(StoredEvent {
        sequence,
        dedupe_key: event.dedupe_key,
        session_key: event.session_key,
        session_id: event.session_id,
        agent_id: event.agent_id,
        kind: event.kind,
        actor_type: event.actor_type,
        actor_id: event.actor_id,
        run_id: event.run_id,
        occurred_at: event.occurred_at,
        summary: event.summary,
        payload: event.payload,
    }))
}

/// Watcher selection (02 §2) and the per-watcher action (02 §3).
fn update_watchers(
    tx: &mut dyn WriteTx,
    now: i64,
    event: &NewEvent,
    sequence: i64,
    passed: &[String],
) -> aware_store::Result<Vec<Opened>> {
    let class = event.kind.class();
    if class == KindClass::LogOnly {
        return Ok(Vec::new());
    }
    let registered = if class == KindClass::Material {
        tx.live_watchers_of(&event.session_key, &event.agent_id)?
    } else {
        Vec::new()
    };
    if passed.is_empty() && registered.is_empty() {
        return Ok(Vec::new());
    }
    // The parent of an orphaned target is not a producer-passed watcher (03 §3.6).
    let orphaned_parent = if passed.is_empty() {
        None
    } else {
        tx.session(&event.session_key, &event.agent_id)?
            .filter(|s| s.orphaned)
            .and_then(|s| s.parent_key)
            .and_then(|p| {
                SessionKey::parse(&p)
                    .ok()
                    .filter(|k| k.is_agent_qualified())
                    .map(|k| k.as_str().to_string())
            })
    };
    // Candidates first (parse, the orphan rule, duplicates, the target itself), then one read
    // of every candidate's session and cursor, then the per-watcher action. Each candidate
    // writes only its own cursor, so reading them all before any write reads what the
    // one-by-one loop read.
    let mut seen = std::collections::HashSet::with_capacity(passed.len() + registered.len());
    let mut candidates: Vec<(String, String)> = Vec::with_capacity(passed.len() + registered.len());
    let all = passed
        .iter()
        .map(|w| (w, true))
        .chain(registered.iter().map(|w| (w, false)));
    for (raw, from_producer) in all {
        let Ok(key) = SessionKey::parse(raw) else {
            continue;
        };
        let watcher = key.as_str();
        let Some(agent) = key.qualified_agent() else {
            continue;
        };
        // The orphaned child's parent is removed from the producer-passed list before
        // duplicates are removed, so a re-created parent that explicitly registered on the
        // child is still notified, whichever producer records the event (see ARCHITECTURE.md).
        if from_producer && orphaned_parent.as_deref() == Some(watcher) {
            continue;
        }
        if !seen.insert(watcher.to_string()) {
            continue;
        }
        if watcher == event.session_key && agent.as_str() == event.agent_id {
            continue;
        }
        candidates.push((watcher.to_string(), agent.as_str().to_string()));
    }
    let lookups: Vec<(&str, &str)> = candidates
        .iter()
        .map(|(w, a)| (w.as_str(), a.as_str()))
        .collect();
    let found = tx.watcher_cursors(&event.session_key, &event.agent_id, &lookups)?;
    let mut opened = Vec::new();
    for ((watcher, _), (exists, existing)) in candidates.iter().zip(found) {
        if !exists {
            continue;
        }
        let existing_state = existing.as_ref().map(|c| &c.state);
        let created_at = existing.as_ref().map_or(now, |c| c.created_at);
        let new_state = match class {
            KindClass::Seeds => cursor::seed(existing_state, sequence, now),
            KindClass::Material => {
                if event.actor_id.as_deref() == Some(watcher.as_str()) {
                    continue; // self-suppression (02 §6)
                }
                cursor::material_update(existing_state, sequence, now).map(|u| {
                    if u.opened {
                        opened.push(Opened {
                            watcher: watcher.clone(),
                        });
                    }
                    u.state
                })
            }
            KindClass::LogOnly => None,
        };
        if let Some(state) = new_state {
            let row = CursorRow {
                watcher: watcher.clone(),
                target_key: event.session_key.clone(),
                target_agent: event.agent_id.clone(),
                state,
                created_at,
            };
            match &existing {
                Some(before) => tx.update_cursor(before, &row)?,
                None => tx.put_cursor(&row)?,
            }
        }
    }
    Ok(opened)
}

impl Engine {
    /// Records one event through the append of 01 §4 (the test-mode admin route and embedders).
    /// Invalid input is an error here, since the caller chose it; producers inside the engine
    /// treat it as an append failure instead.
    pub fn append(&self, req: AppendRequest) -> Result<AppendOutcome> {
        let now = self.now();
        // Validate up front so a bad request is a typed error, not a silent "not recorded".
        let probe = AppendRequest {
            session: req.session.clone(),
            session_id: None,
            kind: req.kind,
            actor_type: req.actor_type,
            actor_id: req.actor_id.clone(),
            run_id: req.run_id.clone(),
            dedupe_key: req.dedupe_key.clone(),
            fresh_dedupe_key: false,
            summary: String::new(),
            payload: req.payload.clone(),
            occurred_at: None,
            watchers: Vec::new(),
            only_if_watched: false,
            admission: None,
        };
        validate(probe, now)?;
        let session = req.session.clone();
        self.write(move |tx, ctx| {
            if !tx.session_exists(session.key.as_str(), session.agent.as_str())? {
                return Err(EngineError::SessionNotFound(session.to_string()));
            }
            Ok(record(tx, ctx, req.clone()))
        })
    }
}
