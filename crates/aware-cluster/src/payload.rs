//! The `NOTIFY` payloads: HMAC-signed envelopes (the cluster key, `key.rs`), and the
//! wake, reply and change-hint bodies inside them.

use aware_engine::{RemoteWake, Wake, WakeReason};
use hmac::{KeyInit, Mac};

/// PostgreSQL refuses `NOTIFY` payloads of 8000 bytes or more; the signature's envelope
/// ([`sign`]) takes 72 more.
pub(crate) const MAX_PAYLOAD: usize = 7800;
/// The envelope of a signed payload: this prefix, 64 hex digits of HMAC-SHA-256, `:`, the body.
pub(crate) const SIGNED_PREFIX: &str = "aware1:";

pub(crate) type HmacSha256 = hmac::Hmac<sha2::Sha256>;

pub(crate) fn mac_of(key: &[u8], body: &str) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(body.as_bytes());
    Some(mac)
}

/// Signs a payload body with the cluster key: `aware1:<hex HMAC-SHA-256>:<body>`.
pub fn sign(key: &[u8], body: &str) -> String {
    let hex: String = mac_of(key, body)
        .map(|m| m.finalize().into_bytes().to_vec())
        .unwrap_or_default()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{SIGNED_PREFIX}{hex}:{body}")
}

/// The body of a payload [`sign`]ed with `key`; `None` when it is not signed or the signature
/// does not match (compared in constant time).
pub fn verify<'a>(key: &[u8], payload: &'a str) -> Option<&'a str> {
    let rest = payload.strip_prefix(SIGNED_PREFIX)?;
    let (hex, body) = rest.split_once(':')?;
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let tag: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect::<Option<_>>()?;
    mac_of(key, body)?.verify_slice(&tag).ok()?;
    Some(body)
}

/// The notification payload: the publishing node and the wake (no targets: the receiver reads
/// them from the store).
pub fn encode(node: &str, wake: &Wake) -> String {
    serde_json::json!({
        "node": node,
        "sessionKey": wake.session_key,
        "agentId": wake.agent_id,
        "reason": wake.reason.as_str(),
        "runId": wake.run_id,
        "from": wake.from,
        "at": wake.at,
    })
    .to_string()
}

/// Reads a payload written by [`encode`]; `None` for anything else (ignored: another program
/// may share the channel name).
pub fn decode(payload: &str) -> Option<(String, RemoteWake)> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let (session_key, agent_id) = (s("sessionKey")?, s("agentId")?);
    // An agent-qualified key names its agent: a wake that says otherwise was not made by a
    // gateway (the receiver's visibility filter goes by `agentId`).
    if let Some(rest) = session_key.strip_prefix("agent:") {
        if rest.split(':').next() != Some(agent_id.as_str()) {
            return None;
        }
    }
    Some((
        s("node")?,
        RemoteWake {
            session_key,
            agent_id,
            reason: WakeReason::parse(v.get("reason")?.as_str()?)?,
            run_id: s("runId"),
            from: s("from"),
            at: v.get("at")?.as_i64()?,
        },
    ))
}

/// The notification payload of a reply signal: the publishing node and the run id that got its
/// reply (an assistant turn carrying it, or its end). No `sessionKey`, so [`decode`] refuses it.
pub fn encode_reply(node: &str, run_id: &str) -> String {
    serde_json::json!({"node": node, "reply": run_id}).to_string()
}

/// Reads a payload written by [`encode_reply`]; `None` for anything else.
pub fn decode_reply(payload: &str) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    Some((s("node")?, s("reply")?))
}

/// The notification payload of a change hint: only the publishing node (the receiver's console
/// re-reads the store).
pub fn encode_change(node: &str) -> String {
    serde_json::json!({"node": node, "change": true}).to_string()
}

/// Reads a payload written by [`encode_change`]; `None` for anything else.
pub fn decode_change(payload: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    if v.get("change")?.as_bool()? {
        Some(v.get("node")?.as_str()?.to_string())
    } else {
        None
    }
}
