//! An agent's `wake_webhook` table: checked at start-up, so a typo is a start-up error and not a
//! silent failure per wake.

use super::error::{bad, ConfigError};
use super::file::FileWebhook;

/// A per-agent wake webhook (02 §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub secret: Option<String>,
    pub timeout_ms: u64,
    pub max_attempts: u32,
    /// Deadline of the connect of one attempt: TCP and, for `https://`, the TLS handshake.
    pub connect_timeout_ms: u64,
    /// Deliveries of this agent running at once; further wakes wait in a queue.
    pub max_in_flight: usize,
    /// Sessions with a waiting wake (one each, the newest); beyond this, wakes are dropped.
    pub max_queued: usize,
}

/// The webhook of agent `id`, and whether it is `https://` (the gateway then loads its TLS
/// client settings).
pub(super) fn webhook_of(id: &str, h: FileWebhook) -> Result<(Webhook, bool), ConfigError> {
    // Parsed now so a typo is a start-up error, not a silent failure per wake.
    let parsed = url::Url::parse(&h.url);
    let ok = parsed
        .as_ref()
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
    if !ok {
        let why = match parsed {
            Err(e) => e.to_string(),
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                format!("scheme {:?} is not http or https", u.scheme())
            }
            Ok(_) => "no host".to_string(),
        };
        return Err(bad(format!(
            "agents.{id}.wake_webhook.url must be an http:// or https:// URL with a host (got {:?}: {why})",
            h.url
        )));
    }
    let https = parsed.as_ref().is_ok_and(|u| u.scheme() == "https");
    // Credentials in the URL would travel in the Host header of every delivery and
    // show in every message that names the URL; the receiver's secret is `secret`.
    if parsed
        .as_ref()
        .is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
    {
        return Err(bad(format!(
            "agents.{id}.wake_webhook.url must not carry user:password@ (got {}); put the receiver's credential in agents.{id}.wake_webhook.secret (sent as Authorization: Bearer)",
            aware_store_pg::redact_url(&h.url)
        )));
    }
    let webhook = Webhook {
        url: h.url,
        secret: h.secret,
        timeout_ms: h.timeout_ms.unwrap_or(5000),
        max_attempts: h.max_attempts.unwrap_or(5).max(1),
        connect_timeout_ms: h.connect_timeout_ms.unwrap_or(2000).max(1),
        max_in_flight: h.max_in_flight.unwrap_or(4).max(1),
        max_queued: h.max_queued.unwrap_or(1000),
    };
    Ok((webhook, https))
}
