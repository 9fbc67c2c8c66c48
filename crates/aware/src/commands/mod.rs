//! The client commands (`status`, `list`, `send`, `spawn`, `turn`, `drain`, `pending`, `watch`,
//! `unwatch`, `history`, `adopt`, `catalog`): each builds its request from the parsed flags,
//! calls the gateway and prints the answer.

mod acts;
mod common;
mod reads;

use crate::context::Conn;
use crate::{client, Command};

/// Runs one client command (everything but serve, node, mcp, hook, init, doctor, completions,
/// demo and the benches).
#[expect(
    clippy::too_many_lines,
    reason = "one arm per client command, each only handing clap's fields to the command's function"
)]
pub(crate) fn run(cmd: Command, outer: &Conn, outer_json: bool) -> client::CliResult<()> {
    match cmd {
        Command::Status {
            key,
            changes_since,
            limit,
            common,
        } => reads::cmd_status(key, changes_since, limit, common, outer, outer_json),
        Command::List {
            kinds,
            limit,
            wide,
            common,
        } => reads::cmd_list(kinds, limit, wide, common, outer, outer_json),
        Command::Send {
            args: positional,
            watch,
            timeout,
            no_wait,
            label,
            conn,
            json,
        } => acts::cmd_send(
            positional, watch, timeout, no_wait, label, conn, json, outer, outer_json,
        ),
        Command::Reply {
            key,
            text,
            run_id,
            common,
        } => acts::cmd_reply(key, text, run_id, common, outer, outer_json),
        Command::Delete { key, yes, common } => {
            acts::cmd_delete(key, yes, common, outer, outer_json)
        }
        Command::Create {
            key,
            parent,
            label,
            kind,
            agent_id,
            common,
        } => acts::cmd_create(
            key, parent, label, kind, agent_id, common, outer, outer_json,
        ),
        Command::Spawn {
            task,
            label,
            child_agent,
            run_timeout,
            common,
        } => acts::cmd_spawn(
            task,
            label,
            child_agent,
            run_timeout,
            common,
            outer,
            outer_json,
        ),
        Command::Turn {
            key,
            text,
            role,
            provenance,
            source,
            channel,
            human_id,
            run_id,
            common,
        } => acts::cmd_turn(
            key, text, role, provenance, source, channel, human_id, run_id, common, outer,
            outer_json,
        ),
        Command::Drain {
            key,
            peek,
            follow,
            common,
        } => reads::cmd_drain(key, peek, follow, common, outer, outer_json),
        Command::Pending { key, common } => reads::cmd_pending(key, common, outer, outer_json),
        Command::Watch {
            target,
            target_agent,
            common,
        } => acts::cmd_watch(target, target_agent, common, outer, outer_json),
        Command::Unwatch {
            target,
            target_agent,
            common,
        } => acts::cmd_unwatch(target, target_agent, common, outer, outer_json),
        Command::History {
            key,
            limit,
            offset,
            include_tools,
            common,
        } => reads::cmd_history(key, limit, offset, include_tools, common, outer, outer_json),
        Command::Adopt {
            thread,
            catalog,
            host,
            into_agent,
            common,
        } => acts::cmd_adopt(thread, catalog, host, into_agent, common, outer, outer_json),
        Command::Catalog {
            catalog,
            host,
            limit,
            common,
        } => acts::cmd_catalog(catalog, host, limit, common, outer, outer_json),
        _ => Ok(()),
    }
}
