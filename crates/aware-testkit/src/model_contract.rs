//! The parts of the reference model that are pure functions of docs/semantics.md and hold no
//! session state: the notice text and context key (02 §8.1, §8.2), prompt rendering (02 §8.4),
//! the system-event FIFO rules (02 §8.3), the wake object and the coalescing rules (02 §10).
//!
//! Written from the text, not from `aware_core`, so a formatting or coalescing bug in production
//! cannot hide behind itself. `model.rs` builds the stateful model on these.

use std::collections::BTreeMap;

/// 02 §8.2: `session-state:` and the lowercase hex of the target key's UTF-8 bytes.
pub fn spec_context_key(target: &str) -> String {
    format!("session-state:{}", spec_hex(target))
}

/// Lowercase hex of the UTF-8 bytes (the context keys of 02 §8.2 and 03 §4.1).
pub fn spec_hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// 02 §8.1, the notice template.
pub fn spec_notice_text(target: &str, last_seen: i64) -> String {
    format!(
        "Session \"{target}\" changed (other actor). Reconcile before acting: session_status \
         sessionKey \"{target}\" changesSince {last_seen}."
    )
}

/// 03 §4.1, the "session created" FIFO line: its text and context key.
pub fn spec_created_line(key: &str, created_via: &str) -> (String, String) {
    (
        format!("New session \"{key}\" created via {created_via}."),
        format!("session-created:{}", spec_hex(key)),
    )
}

/// RFC 3339 UTC with milliseconds (`2026-01-01T00:00:00.000Z`) of Unix milliseconds, by the
/// civil-from-days arithmetic (proleptic Gregorian calendar).
pub fn spec_rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// 02 §8.4: one `System: [<time>] <text>` line per item (system events first, then notices, in
/// the order given), continuation lines of a multi-line text (split at every Unicode line break)
/// prefixed `System: `, joined with
/// `\n`; nothing to show renders `""`.
pub fn spec_prompt(items: &[(i64, String)]) -> String {
    let mut lines = Vec::new();
    for (at, text) in items {
        // Every mandatory line break of UAX #14 starts a line (CR LF is one break).
        let unified = text.replace("\r\n", "\n");
        let breaks = [
            '\n', '\u{0B}', '\u{0C}', '\r', '\u{85}', '\u{2028}', '\u{2029}',
        ];
        for (i, line) in unified.split(breaks).enumerate() {
            if i == 0 {
                lines.push(format!("System: [{}] {line}", spec_rfc3339_ms(*at)));
            } else {
                lines.push(format!("System: {line}"));
            }
        }
    }
    lines.join("\n")
}

/// One entry of a session's system-event FIFO (01 §2.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MSysEvent {
    pub text: String,
    pub context_key: Option<String>,
    pub at: i64,
}

/// What enqueueing did (02 §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoPush {
    /// Refused with 400 `invalid_argument`: blank or over-long text, over-long or reserved key.
    Refused,
    /// The FIFO already holds the same text and context key: nothing changed.
    Duplicate,
    Inserted,
}

/// How many entries a FIFO keeps (02 §8.3).
pub const FIFO_CAP: usize = 20;

/// 02 §8.3: trims, validates, dedupes on (text, normalised key) and keeps the 20 newest.
pub fn fifo_push(
    fifo: &mut Vec<MSysEvent>,
    text: &str,
    context_key: Option<&str>,
    now: i64,
) -> FifoPush {
    let text = text.trim();
    if text.is_empty() || text.chars().count() > 4000 {
        return FifoPush::Refused;
    }
    // An empty key after trimming counts as absent (docs/api.md §2.12).
    let key = context_key
        .map(|k| k.trim().to_lowercase())
        .filter(|k| !k.is_empty());
    if let Some(k) = &key {
        if k.chars().count() > 256 || k.starts_with("session-state:") {
            return FifoPush::Refused;
        }
    }
    if fifo.iter().any(|e| e.text == text && e.context_key == key) {
        return FifoPush::Duplicate;
    }
    fifo.push(MSysEvent {
        text: text.to_string(),
        context_key: key,
        at: now,
    });
    if fifo.len() > FIFO_CAP {
        let extra = fifo.len() - FIFO_CAP;
        fifo.drain(..extra);
    }
    FifoPush::Inserted
}

/// The reasons of 02 §10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MWakeReason {
    SessionState,
    Message,
    Spawn,
}

/// A wake object (02 §10) without its process-local `id`: `targets` for `session-state`,
/// `run_id` and `from` for `message` and `spawn`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MWake {
    pub session: String,
    pub reason: MWakeReason,
    pub targets: Vec<String>,
    pub run_id: Option<String>,
    pub from: Option<String>,
    pub at: i64,
}

/// The `session-state` coalescing of 02 §10, per watcher, on the engine clock. With a clock that
/// jumps, "the scheduled moment" is when the timers run at or after the due time: the merged
/// wake carries that time and `last(W)` becomes it (decision D48).
#[derive(Debug, Clone, Default)]
pub struct MCoalescer {
    pub window: i64,
    last: BTreeMap<usize, i64>,
    scheduled: BTreeMap<usize, i64>,
}

impl MCoalescer {
    pub fn new(window: i64) -> Self {
        MCoalescer {
            window,
            ..Default::default()
        }
    }

    /// A request at `now`; true when it is delivered at once.
    pub fn request(&mut self, w: usize, now: i64) -> bool {
        match self.last.get(&w) {
            Some(&last) if now - last < self.window => {
                self.scheduled.entry(w).or_insert(last + self.window);
                false
            }
            _ => {
                self.last.insert(w, now);
                true
            }
        }
    }

    /// Scheduled deliveries due at `now`, in due order (then watcher); they are unscheduled.
    pub fn take_due(&mut self, now: i64) -> Vec<usize> {
        let mut due: Vec<(i64, usize)> = self
            .scheduled
            .iter()
            .filter(|(_, &t)| t <= now)
            .map(|(&w, &t)| (t, w))
            .collect();
        due.sort();
        for (_, w) in &due {
            self.scheduled.remove(w);
        }
        due.into_iter().map(|(_, w)| w).collect()
    }

    /// A merged delivery went out at `at`.
    pub fn delivered(&mut self, w: usize, at: i64) {
        self.last.insert(w, at);
    }

    /// A deleted watcher leaves no wake state (02 §11).
    pub fn forget(&mut self, w: usize) {
        self.last.remove(&w);
        self.scheduled.remove(&w);
    }

    /// Whether a merged delivery is scheduled for `w`.
    pub fn is_scheduled(&self, w: usize) -> bool {
        self.scheduled.contains_key(&w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_examples_of_the_spec() {
        assert_eq!(spec_context_key("ab"), "session-state:6162");
        assert_eq!(
            spec_context_key("agent:main:subagent:c1"),
            "session-state:6167656e743a6d61696e3a7375626167656e743a6331"
        );
        assert_eq!(
            spec_rfc3339_ms(1_767_225_600_000),
            "2026-01-01T00:00:00.000Z"
        );
        assert_eq!(spec_rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(spec_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(spec_prompt(&[]), "");
        assert_eq!(
            spec_prompt(&[
                (1_767_225_600_000, "a\nb".into()),
                (1_767_225_600_001, "c".into())
            ]),
            "System: [2026-01-01T00:00:00.000Z] a\nSystem: b\nSystem: [2026-01-01T00:00:00.001Z] c"
        );
    }

    #[test]
    fn fifo_rules() {
        let mut f = Vec::new();
        assert_eq!(fifo_push(&mut f, "  ", None, 1), FifoPush::Refused);
        assert_eq!(
            fifo_push(&mut f, "x", Some("session-state:61"), 1),
            FifoPush::Refused
        );
        assert_eq!(fifo_push(&mut f, " x ", Some(" K "), 1), FifoPush::Inserted);
        assert_eq!(fifo_push(&mut f, "x", Some("k"), 2), FifoPush::Duplicate);
        assert_eq!(fifo_push(&mut f, "x", None, 2), FifoPush::Inserted);
        assert_eq!(fifo_push(&mut f, "x", None, 3), FifoPush::Duplicate);
        for i in 0..25 {
            fifo_push(&mut f, &format!("l{i}"), None, 4);
        }
        assert_eq!(f.len(), FIFO_CAP);
        assert_eq!(f[0].text, "l5");
    }

    #[test]
    fn coalescing_window() {
        let mut c = MCoalescer::new(20_000);
        assert!(c.request(0, 0));
        assert!(!c.request(0, 5_000));
        assert!(!c.request(0, 6_000));
        assert!(c.take_due(19_999).is_empty());
        assert_eq!(c.take_due(20_000), vec![0]);
        c.delivered(0, 20_000);
        assert!(!c.request(0, 39_999));
        assert!(c.request(1, 39_999));
        c.forget(0);
        assert!(c.request(0, 40_000));
    }
}
