//! The scenarios' conventions (05 Conventions): the start time, the named sessions, the NT text.
//! Every test crate takes them from here so a change of convention is one edit.

/// The scenarios' start time: 2026-01-01T00:00:00Z in ms.
pub const T0: i64 = 1_767_225_600_000;
/// One day in ms.
pub const DAY: i64 = 86_400_000;
/// The watcher session W.
pub const W: &str = "agent:main:main";
/// The second top-level session X.
pub const X: &str = "agent:main:coord";
/// Subagent C (child of W in the family fixture F).
pub const C: &str = "agent:main:subagent:c1";
pub const D: &str = "agent:main:subagent:d1";
pub const N: &str = "agent:main:subagent:n1";
pub const E: &str = "agent:main:subagent:e1";
/// A session of another agent (`ops`).
pub const O: &str = "agent:ops:main";
/// Hex of the UTF-8 bytes of [`C`] (the encoded-key form of the HTTP surface).
pub const HEX_C: &str = "6167656e743a6d61696e3a7375626167656e743a6331";

/// The scenario server's configuration: no creation notices, pruning out of the way, the
/// upstream monitor off.
pub const DEFAULT_CONFIG: &str = "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";

/// NT(S, n) of the scenarios: the notice text a watcher gets when S changed up to sequence n.
pub fn nt(s: &str, n: i64) -> String {
    format!("Session \"{s}\" changed (other actor). Reconcile before acting: session_status sessionKey \"{s}\" changesSince {n}.")
}
