//! The reconcile preview: what a notice points at, in lines a model reads at once.
//!
//! A notice says only that a session changed and where to read (`changesSince N`): the model
//! must find the status tool, call it, then call `sessions_history` for a human's words, a
//! model round trip each. The preview puts the delta next to the notice line (which stays byte
//! for byte the spec's): per event its number, kind, who (human, which agent, the system),
//! channel and summary, and for a human message its words, clipped; within a byte budget, with
//! an honest pointer to the rest and the history gap when the delta is not exact. It is a read,
//! made after the drain committed (no cost in the writer, none when nothing was handed over).

use crate::{Engine, Result};
use aware_core::event::{ActorType, EventKind};
use aware_core::notice::quote_key;
use aware_core::SessionRef;
use aware_store::StoreExt;

/// Events read for one preview: more than any budget shows, plus one to know more follow.
const MAX_EVENTS: u32 = 40;
/// Recent turns searched for the words of a human message (newest first).
const WORDS_WINDOW: u32 = 60;
/// Characters of a human message shown.
const WORDS_CHARS: usize = 240;

/// One event of the delta as the preview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewEvent {
    pub sequence: i64,
    pub kind: EventKind,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    pub summary: String,
    /// A human message's channel and words (clipped), when its turn is still in reach.
    pub channel: Option<String>,
    pub words: Option<String>,
}

/// The delta after `after` of one target, read in one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Preview {
    pub events: Vec<PreviewEvent>,
    /// More events follow those read.
    pub more: bool,
    /// Events after `after` were pruned: the delta is not exact.
    pub history_gap: bool,
}

impl Engine {
    /// The delta of `target` after `after`, with the words of its human messages.
    pub fn preview(&self, target: &SessionRef, after: i64) -> Result<Preview> {
        let (key, agent) = (target.key.as_str(), target.agent.as_str());
        self.inner.store.read_as(|tx| -> Result<Preview> {
            let mut events = tx.events_after(key, agent, after, MAX_EVENTS + 1)?;
            let more = events.len() > MAX_EVENTS as usize;
            events.truncate(MAX_EVENTS as usize);
            let history_gap = tx
                .head(key, agent)?
                .is_some_and(|h| after < h.pruned_max_sequence);
            let wants_words = events
                .iter()
                .any(|e| e.kind == EventKind::HumanDirectMessage);
            let turns = if wants_words {
                tx.turns_page(key, agent, None, false, WORDS_WINDOW, WORDS_CHARS as u32)?
            } else {
                Vec::new()
            };
            let events = events
                .into_iter()
                .map(|e| {
                    // A human message's event names its turn by the dedupe key `turn:<id>`.
                    let turn = e
                        .dedupe_key
                        .as_deref()
                        .and_then(|k| k.strip_prefix("turn:"))
                        .and_then(|id| turns.iter().find(|t| t.id == id));
                    PreviewEvent {
                        sequence: e.sequence,
                        kind: e.kind,
                        actor_type: e.actor_type,
                        actor_id: e.actor_id,
                        summary: e.summary,
                        channel: turn.and_then(|t| t.channel.clone()),
                        words: turn.map(|t| clip(&t.text, WORDS_CHARS)),
                    }
                })
                .collect();
            Ok(Preview {
                events,
                more,
                history_gap,
            })
        })
    }
}

fn clip(text: &str, chars: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let one_line = one_line.trim();
    match one_line.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line.to_string(),
    }
}

impl PreviewEvent {
    /// `#12 human_direct_message by human via slack: "use the staging database"`.
    fn line(&self) -> String {
        let who = match (self.actor_type, &self.actor_id) {
            (ActorType::Human, Some(id)) => format!("human {}", quote_key(id)),
            (ActorType::Human, None) => "human".to_string(),
            (ActorType::Agent, Some(id)) => format!("agent \"{}\"", quote_key(id)),
            (ActorType::Agent, None) => "an agent".to_string(),
            (ActorType::System, _) => "the system".to_string(),
        };
        let via = self
            .channel
            .as_deref()
            .map(|c| format!(" via {}", quote_key(c)))
            .unwrap_or_default();
        let what = match &self.words {
            Some(w) => format!("\"{}\"", w.replace('"', "\\\"")),
            None => self.summary.clone(),
        };
        format!("#{} {} by {who}{via}: {what}", self.sequence, self.kind)
    }
}

impl Preview {
    /// The lines that follow a notice line: as many events as fit in `budget` bytes, then a
    /// pointer to the rest and the history gap. Empty when there is nothing to show.
    /// `status_tool` is the status tool as the model's CLI names it (`session_status`, or
    /// `mcp__aware__session_status` in Claude Code and Codex).
    pub fn render(&self, target: &str, after: i64, budget: usize, status_tool: &str) -> String {
        if budget == 0 || (self.events.is_empty() && !self.history_gap) {
            return String::new();
        }
        let mut out: Vec<String> = Vec::new();
        let mut used = 0;
        let mut shown: usize = 0;
        for e in &self.events {
            let line = e.line();
            if used + line.len() + 1 > budget && shown > 0 {
                break;
            }
            // A first line longer than the budget is cut rather than dropped: one event at least.
            let line = if line.len() + 1 > budget {
                clip(&line, budget.saturating_sub(2).max(16))
            } else {
                line
            };
            used += line.len() + 1;
            out.push(line);
            shown += 1;
        }
        let last = self.events.get(shown.saturating_sub(1)).map(|e| e.sequence);
        let left = self.events.len() - shown;
        if left > 0 || self.more {
            let n = if self.more {
                format!("{left}+")
            } else {
                left.to_string()
            };
            out.push(format!(
                "… {n} more: {status_tool} sessionKey \"{}\" changesSince {}",
                quote_key(target),
                last.unwrap_or(after)
            ));
        }
        if self.history_gap {
            out.push(format!(
                "(historyGap: events after {after} were pruned; the delta is not exact)"
            ));
        }
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: i64, words: Option<&str>) -> PreviewEvent {
        PreviewEvent {
            sequence: seq,
            kind: EventKind::HumanDirectMessage,
            actor_type: ActorType::Human,
            actor_id: None,
            summary: "human message via slack".into(),
            channel: Some("slack".into()),
            words: words.map(str::to_string),
        }
    }

    #[test]
    fn lines_budget_pointer_and_gap() {
        let p = Preview {
            events: vec![ev(12, Some("use the staging database")), ev(13, None)],
            more: false,
            history_gap: false,
        };
        assert_eq!(
            p.render("agent:main:w", 11, 1024, "session_status"),
            "#12 human_direct_message by human via slack: \"use the staging database\"\n\
             #13 human_direct_message by human via slack: human message via slack"
        );
        // Room for one line: the rest is pointed at from the last one shown.
        assert_eq!(
            p.render("agent:main:w", 11, 80, "session_status"),
            "#12 human_direct_message by human via slack: \"use the staging database\"\n\
             … 1 more: session_status sessionKey \"agent:main:w\" changesSince 12"
        );
        assert_eq!(p.render("agent:main:w", 11, 0, "session_status"), "");
        let gap = Preview {
            events: vec![],
            more: false,
            history_gap: true,
        };
        assert_eq!(
            gap.render("w", 3, 1024, "session_status"),
            "(historyGap: events after 3 were pruned; the delta is not exact)"
        );
    }

    #[test]
    fn words_are_one_clipped_line() {
        assert_eq!(clip("a\nb\u{2028}c", 10), "a b c");
        assert_eq!(clip(&"x".repeat(300), 5), "xxxxx…");
    }
}
