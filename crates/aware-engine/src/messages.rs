//! Messages to sessions that an agent CLI runs (Claude Code, Codex through `aware hook`):
//! handed to the model, answered from the model's reply.
//!
//! `sessions_send` records the message as a user turn of the target (03 §6.1). A host runtime
//! that runs its sessions itself reads that turn; a CLI does not, it only hears what its hook
//! hands over, and every hand-over is a drain. So for a session a CLI runs (one a hook created, or
//! an adopted one), the message is also queued as a line of the target's system-event FIFO
//! (context key `message:<runId>`, never a duplicate of another): the next drain (the next tool
//! call, prompt or stop, or the waiting hook's wake) hands it over exactly once, because the
//! drain deletes what it returns in the same write.
//!
//! The answer: when the agent stops, its hook posts the turn's last assistant text to
//! `…/replies`, and each message handed over and not yet answered gets it as its reply (an
//! assistant turn carrying the message's run id, which ends the sender's wait). "Handed over"
//! is read from the state, not stored: a message turn whose FIFO line is gone. A line the FIFO
//! cap pushed out (20 newer lines queued unread) counts as handed over too; its words stay in
//! `sessions_history`.

use crate::lookup::load_session;
use crate::turns::post_turn_in;
use crate::{Ctx, Engine, NewTurn, ProvenanceKind, Result, Role};
use aware_core::notice::quote_key;
use aware_core::SessionRef;
use aware_store::{SessionRow, WriteTx};

/// The context key of a message's FIFO line.
const CONTEXT_PREFIX: &str = "message:";
/// Characters of the message a line carries; the rest is read with `sessions_history` (the FIFO
/// holds at most 4,000 characters a line).
const MAX_LINE_CHARS: usize = 3_000;
/// How far back a reply looks for messages still open (turns, newest first).
const REPLY_WINDOW: u32 = 200;

/// Does a CLI run this session through aware's hook (so only its hook's drains reach the model)?
pub(crate) fn cli_backed(row: &SessionRow) -> bool {
    matches!(row.created_via.as_str(), "hook" | "adoption") || row.upstream.is_some()
}

/// The line that hands a message over, naming the sender and how the answer travels.
pub(crate) fn message_line(sender: &str, target: &str, text: &str) -> String {
    let total = text.chars().count();
    let body: String = text.chars().take(MAX_LINE_CHARS).collect();
    let more = if total > MAX_LINE_CHARS {
        format!(
            " … [{} more characters: sessions_history sessionKey \"{}\"]",
            total - MAX_LINE_CHARS,
            quote_key(target)
        )
    } else {
        String::new()
    };
    format!(
        "Message from session \"{}\" (another agent, by sessions_send): {body}{more}\n\
         The text you end this turn with is sent back to \"{}\" as your reply.",
        quote_key(sender),
        quote_key(sender)
    )
}

/// Queues the hand-over line of a message just recorded on `target`, when a CLI runs it.
pub(crate) fn queue_in(
    tx: &mut dyn WriteTx,
    ctx: &Ctx,
    target: &SessionRow,
    sender: &str,
    run_id: &str,
    text: &str,
) -> Result<()> {
    if !cli_backed(target) {
        return Ok(());
    }
    let line = message_line(sender, &target.key, text);
    let context = format!("{CONTEXT_PREFIX}{run_id}");
    crate::fifo::push(
        tx,
        &target.key,
        &target.agent_id,
        &line,
        Some(&context),
        ctx.now,
    )?;
    Ok(())
}

impl Engine {
    /// Records `text` as the reply to every message of `target` handed over and not yet
    /// answered (oldest first); returns their run ids. Idempotent: an answered message has its
    /// reply, so a second call finds nothing open.
    pub fn reply_handed_over(&self, target: &SessionRef, text: &str) -> Result<Vec<String>> {
        crate::lookup::check_text("text", text)?;
        let (t, text) = (target.clone(), text.to_string());
        self.write(move |tx, ctx| {
            let row = load_session(tx, &t)?;
            let queued: Vec<String> = tx
                .system_events(&row.key, &row.agent_id)?
                .into_iter()
                .filter_map(|e| e.context_key)
                .collect();
            let recent = tx.turns_page(&row.key, &row.agent_id, None, false, REPLY_WINDOW, 0)?;
            let mut open = Vec::new();
            for turn in &recent {
                let Some(run) = turn.run_id.as_deref() else {
                    continue;
                };
                let is_message = turn.role == Role::User.as_str()
                    && serde_json::from_str::<serde_json::Value>(&turn.provenance_json)
                        .ok()
                        .and_then(|p| p.get("kind").and_then(|k| k.as_str()).map(str::to_string))
                        .as_deref()
                        == Some(ProvenanceKind::InterSession.as_str());
                let still_queued = queued.iter().any(|k| {
                    k.strip_prefix(CONTEXT_PREFIX)
                        .is_some_and(|queued_run| queued_run == run)
                });
                if is_message
                    && !still_queued
                    && tx.reply_for_run(&row.key, &row.agent_id, run)?.is_none()
                {
                    open.push(run.to_string());
                }
            }
            for run in &open {
                let mut turn = NewTurn::user(text.clone()).role(Role::Assistant);
                turn.run_id = Some(run.clone());
                turn.origin = Some("hook".into());
                post_turn_in(tx, ctx, &t, turn)?;
            }
            Ok(open)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_sender_and_clips_long_messages() {
        let l = message_line("agent:main:lead", "agent:main:w", "please rebase");
        assert_eq!(
            l,
            "Message from session \"agent:main:lead\" (another agent, by sessions_send): please \
             rebase\nThe text you end this turn with is sent back to \"agent:main:lead\" as your \
             reply."
        );
        let long = "é".repeat(MAX_LINE_CHARS + 5);
        let l = message_line("agent:main:lead", "agent:main:w", &long);
        assert!(l.contains("… [5 more characters: sessions_history sessionKey \"agent:main:w\"]"));
        assert!(l.chars().count() < aware_core::notice::MAX_SYSTEM_EVENT_CHARS);
    }
}
