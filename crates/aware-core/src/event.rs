//! Event kinds, actors, the privacy rules (summary sanitiser, payload whitelist) and the compact
//! event view (spec 01 §5, §7, §10).

use serde_json::{Map, Value};
use std::fmt;

/// How a kind behaves towards watchers. One constant table; not configurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindClass {
    /// Notifies watchers (material update, 02 §5).
    Material,
    /// Log-only for notices, but seeds the producer-passed watcher's cursor (02 §4).
    Seeds,
    /// Kept for reconciliation only; never touches cursors.
    LogOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    HumanDirectMessage,
    GoalChanged,
    UpstreamMissing,
    ChildSpawned,
    RunCompleted,
    RunFailed,
    Compacted,
    Adopted,
    Created,
}

impl EventKind {
    pub const ALL: [EventKind; 9] = [
        EventKind::HumanDirectMessage,
        EventKind::GoalChanged,
        EventKind::UpstreamMissing,
        EventKind::ChildSpawned,
        EventKind::RunCompleted,
        EventKind::RunFailed,
        EventKind::Compacted,
        EventKind::Adopted,
        EventKind::Created,
    ];

    pub fn as_str(self) -> &'static str {
        self.row().0
    }

    pub fn class(self) -> KindClass {
        self.row().1
    }

    /// Payload fields this kind may store (01 §7).
    pub fn payload_whitelist(self) -> &'static [&'static str] {
        self.row().2
    }

    /// The summary template with placeholders filled by `unknown`, used when a test-mode caller
    /// records an event without a summary.
    pub fn default_summary(self) -> &'static str {
        self.row().3
    }

    fn row(
        self,
    ) -> (
        &'static str,
        KindClass,
        &'static [&'static str],
        &'static str,
    ) {
        use KindClass::*;
        match self {
            EventKind::HumanDirectMessage => (
                "human_direct_message",
                Material,
                &["turns"],
                "human message via unknown",
            ),
            EventKind::GoalChanged => ("goal_changed", Material, &[], "goal updated"),
            EventKind::UpstreamMissing => (
                "upstream_missing",
                Material,
                &["channel"],
                "upstream missing via unknown",
            ),
            EventKind::ChildSpawned => ("child_spawned", Seeds, &[], "child session spawned"),
            EventKind::RunCompleted => ("run_completed", LogOnly, &[], "child run completed"),
            EventKind::RunFailed => ("run_failed", LogOnly, &["outcome"], "child run failed"),
            EventKind::Compacted => ("compacted", LogOnly, &[], "session compacted"),
            EventKind::Adopted => (
                "adopted",
                LogOnly,
                &["catalogId", "hostId"],
                "adopted from unknown",
            ),
            EventKind::Created => ("created", LogOnly, &[], "session created"),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn is_material(self) -> bool {
        self.class() == KindClass::Material
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorType {
    Human,
    Agent,
    System,
}

impl ActorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ActorType::Human => "human",
            ActorType::Agent => "agent",
            ActorType::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "human" => Some(ActorType::Human),
            "agent" => Some(ActorType::Agent),
            "system" => Some(ActorType::System),
            _ => None,
        }
    }
}

/// Longest summary kept, in Unicode scalar values.
pub const MAX_SUMMARY_CHARS: usize = 200;
/// Longest string payload value, in characters.
pub const MAX_PAYLOAD_STRING_CHARS: usize = 200;
/// Longest `actorId`, `runId` or `dedupeKey`, in bytes.
pub const MAX_TOKEN_BYTES: usize = 512;

/// Collapses every whitespace run to one space, trims, and cuts to 200 scalar values (199 plus
/// `…` when longer). Summaries are built from templates, so this is the last line of defence.
pub fn sanitize_summary(raw: &str) -> String {
    let collapsed = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= MAX_SUMMARY_CHARS {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(MAX_SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Why a metadata field of an append was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    #[error("{field} must be 1..={MAX_TOKEN_BYTES} bytes without control characters")]
    BadToken { field: &'static str },
    #[error("payload must be a JSON object")]
    PayloadNotObject,
    #[error("channel must match [A-Za-z0-9][A-Za-z0-9._:-]{{0,63}}")]
    BadChannel,
}

/// `actorId`, `runId`, `dedupeKey`: at most 512 bytes, no control characters, not empty.
pub fn validate_token(field: &'static str, value: &str) -> Result<(), FieldError> {
    if value.is_empty() || value.len() > MAX_TOKEN_BYTES || value.chars().any(char::is_control) {
        return Err(FieldError::BadToken { field });
    }
    Ok(())
}

/// Channels are validated at the edge: `[A-Za-z0-9][A-Za-z0-9._:-]{0,63}`.
pub fn validate_channel(channel: &str) -> Result<(), FieldError> {
    let b = channel.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(FieldError::BadChannel)
    }
}

/// Result of filtering a payload through a kind's whitelist.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FilteredPayload {
    /// `None` when no field survived.
    pub kept: Option<Map<String, Value>>,
    /// Names of the fields dropped (for the `payload_field_dropped` warning); never values.
    pub dropped: Vec<String>,
}

/// Applies the per-kind whitelist and the value rules of 03 §5.5 to a payload about to be
/// stored. Only an object is accepted; anything else is an error.
pub fn filter_payload(kind: EventKind, payload: &Value) -> Result<FilteredPayload, FieldError> {
    let Value::Object(map) = payload else {
        return Err(FieldError::PayloadNotObject);
    };
    let allowed = kind.payload_whitelist();
    let mut kept = Map::new();
    let mut dropped = Vec::new();
    for (name, value) in map {
        if allowed.contains(&name.as_str()) && stored_value_ok(name, value) {
            kept.insert(name.clone(), value.clone());
        } else {
            dropped.push(name.clone());
        }
    }
    Ok(FilteredPayload {
        kept: (!kept.is_empty()).then_some(kept),
        dropped,
    })
}

fn stored_value_ok(name: &str, value: &Value) -> bool {
    match name {
        "outcome" => matches!(value.as_str(), Some("error" | "timeout" | "cancelled")),
        "turns" => value.as_i64().is_some_and(|n| n >= 2) && value.is_i64(),
        "channel" | "catalogId" | "hostId" => value
            .as_str()
            .is_some_and(|s| !s.is_empty() && s.chars().count() <= MAX_PAYLOAD_STRING_CHARS),
        _ => false,
    }
}

/// The payload agents see (01 §10): only `outcome`, `channel` and `turns` survive.
pub fn compact_payload(stored: Option<&Map<String, Value>>) -> Option<Map<String, Value>> {
    let stored = stored?;
    let mut out = Map::new();
    for (name, value) in stored {
        let keep = match name.as_str() {
            "outcome" => matches!(value.as_str(), Some("error" | "timeout" | "cancelled")),
            "channel" => value.as_str().is_some_and(|s| !s.is_empty()),
            "turns" => value.is_i64() && value.as_i64().is_some_and(|n| n >= 1),
            _ => false,
        };
        if keep {
            out.insert(name.clone(), value.clone());
        }
    }
    (!out.is_empty()).then_some(out)
}

/// An event as stored (01 §4 step 8).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub sequence: i64,
    pub dedupe_key: Option<String>,
    pub session_key: String,
    pub session_id: Option<String>,
    pub agent_id: String,
    pub kind: EventKind,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    pub run_id: Option<String>,
    pub occurred_at: i64,
    pub summary: String,
    pub payload: Option<Map<String, Value>>,
}

/// What agents see of an event: no session key, session id, agent id or unknown payload.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactEvent {
    pub sequence: i64,
    pub kind: EventKind,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    pub run_id: Option<String>,
    pub occurred_at: i64,
    pub summary: String,
    pub payload: Option<Map<String, Value>>,
}

impl StoredEvent {
    pub fn compact(&self) -> CompactEvent {
        CompactEvent {
            sequence: self.sequence,
            kind: self.kind,
            actor_type: self.actor_type,
            actor_id: self.actor_id.clone().filter(|s| !s.is_empty()),
            run_id: self.run_id.clone().filter(|s| !s.is_empty()),
            occurred_at: self.occurred_at,
            summary: self.summary.clone(),
            payload: compact_payload(self.payload.as_ref()),
        }
    }
}

/// Clamps a producer's time into `[now − 24 h, now]` (01 §4 step 4).
pub fn clamp_occurred_at(occurred_at: Option<i64>, now: i64) -> i64 {
    const DAY_MS: i64 = 86_400_000;
    match occurred_at {
        None => now,
        Some(t) => t.clamp(now.saturating_sub(DAY_MS), now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_table_round_trips() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert!(EventKind::HumanDirectMessage.is_material());
        assert_eq!(EventKind::ChildSpawned.class(), KindClass::Seeds);
        assert_eq!(EventKind::RunFailed.class(), KindClass::LogOnly);
    }

    #[test]
    fn s012_summary_is_collapsed_and_cut() {
        let raw = format!("line one\n\n  line two{}", "x".repeat(300));
        let s = sanitize_summary(&raw);
        // Whitespace runs collapse to one space; none is invented between "two" and the x's.
        assert_eq!(s, format!("line one line two{}…", "x".repeat(182)));
        assert_eq!(s.chars().count(), 200);
        assert_eq!(sanitize_summary("  a\t b \r\n"), "a b");
    }

    #[test]
    fn s012_payload_whitelist() {
        let p = json!({"outcome":"timeout","detail":"stack trace","nested":{"a":1}});
        let f = filter_payload(EventKind::RunFailed, &p).unwrap();
        assert_eq!(Value::Object(f.kept.unwrap()), json!({"outcome":"timeout"}));
        assert_eq!(f.dropped.len(), 2);
        let none = filter_payload(EventKind::Compacted, &json!({"x":1})).unwrap();
        assert!(none.kept.is_none());
        assert_eq!(
            filter_payload(EventKind::RunFailed, &json!([1])),
            Err(FieldError::PayloadNotObject)
        );
        let one_turn = filter_payload(EventKind::HumanDirectMessage, &json!({"turns":1})).unwrap();
        assert!(one_turn.kept.is_none(), "a single turn has no payload");
        let bad_outcome = filter_payload(EventKind::RunFailed, &json!({"outcome":"ok"})).unwrap();
        assert!(bad_outcome.kept.is_none());
    }

    #[test]
    fn compact_view_drops_catalog_fields() {
        let stored = json!({"catalogId":"claude","hostId":"gateway:local"});
        assert!(compact_payload(stored.as_object()).is_none());
        let stored = json!({"outcome":"timeout"});
        assert_eq!(
            compact_payload(stored.as_object()).map(Value::Object),
            Some(json!({"outcome":"timeout"}))
        );
    }

    #[test]
    fn s011_channel_pattern() {
        assert!(validate_channel(&"a".repeat(64)).is_ok());
        assert!(validate_channel(&"a".repeat(65)).is_err());
        assert!(validate_channel("tele gram").is_err());
        assert!(validate_channel("x\ny").is_err());
        assert!(validate_channel("claude-code").is_ok());
    }

    #[test]
    fn s009_clamping() {
        let t0 = 1_767_225_600_000;
        assert_eq!(
            clamp_occurred_at(Some(t0 - 172_800_000), t0),
            t0 - 86_400_000
        );
        assert_eq!(clamp_occurred_at(Some(t0 + 3_600_000), t0), t0);
        assert_eq!(clamp_occurred_at(None, t0), t0);
    }
}
