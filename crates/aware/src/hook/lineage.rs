//! The processes a waiting hook answers to: the CLI that started it (and the shell it runs the
//! command in). A waiter whose CLI is gone must not drain, since a drain acknowledges and nobody
//! would read the notice.
//!
//! Taken first, before anything can block (reading stdin, connecting), so a CLI that exits
//! meanwhile leaves a lineage that is already dead, not a reparented one (init or a subreaper,
//! which never exits). Fails closed: without `/proc` nothing can be checked, so the hook does
//! not wait.

/// The fields of `/proc/<pid>/stat` the checks need.
pub struct Stat {
    comm: String,
    pub ppid: u32,
    /// Start time after boot in clock ticks (field 22): with the pid, names one process for good.
    pub start: u64,
}

impl Stat {
    pub fn read(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `comm` is in parentheses and may itself hold spaces and parentheses: split at the last.
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_string();
        let rest: Vec<&str> = text.get(close + 2..)?.split(' ').collect();
        // After comm: state(0) ppid(1) … starttime is field 22 of the line, index 19 here.
        Some(Stat {
            comm,
            ppid: rest.get(1)?.parse().ok()?,
            start: rest.get(19)?.parse().ok()?,
        })
    }

    fn is_shell(&self) -> bool {
        matches!(self.comm.as_str(), "sh" | "bash" | "dash" | "zsh" | "ash")
    }
}

/// Most ancestors walked looking for `CLAUDE_PID` (process trees are shallow; this bounds a
/// loop on a corrupted chain).
const MAX_DEPTH: usize = 64;

/// Each process as (pid, start time).
pub struct Lineage(Vec<(u32, u64)>);

impl Lineage {
    /// The ancestors up to the CLI: up to `CLAUDE_PID` when Claude Code names itself there and
    /// it is on this process's parent chain (an environment variable alone proves nothing, and
    /// a CLAUDE_PID that is no ancestor means the waiter does not answer to it); without it, the
    /// parent, and its parent too when the parent is a shell (hooks run as `sh -c …`). An error
    /// (the hook does not wait) when the chain cannot be read, the parent is already init (the
    /// CLI is gone), or CLAUDE_PID is not an ancestor. `claude_pid`: whether CLAUDE_PID is
    /// read at all (the CLI is Claude Code).
    pub fn of_this_process(claude_pid: bool) -> Result<Lineage, String> {
        let mut chain: Vec<(u32, Stat)> = Vec::new();
        let mut pid = std::os::unix::process::parent_id();
        while pid != 0 && chain.len() < MAX_DEPTH {
            // A higher ancestor may be unreadable (another pid namespace, hidepid): the chain
            // is what could be read, and at least the parent must be.
            let Some(st) = Stat::read(pid) else { break };
            let next = st.ppid;
            chain.push((pid, st));
            if pid == 1 {
                break;
            }
            pid = next;
        }
        if chain.is_empty() {
            return Err(format!(
                "cannot read /proc/{}/stat: without /proc the waiting hook cannot tell whether \
                 the CLI that started it is still there, so it does not wait",
                std::os::unix::process::parent_id()
            ));
        }
        let claude = std::env::var("CLAUDE_PID")
            .ok()
            .filter(|p| claude_pid && !p.trim().is_empty());
        if let Some(claude) = claude {
            let found = claude
                .trim()
                .parse::<u32>()
                .ok()
                .and_then(|c| chain.iter().position(|(p, _)| *p == c));
            let Some(i) = found else {
                return Err(format!(
                    "CLAUDE_PID {claude:?} is not a process this hook runs under (its CLI is gone \
                     or the variable is not its own); not waiting"
                ));
            };
            return Ok(Lineage(
                chain
                    .iter()
                    .take(i + 1)
                    .map(|(p, st)| (*p, st.start))
                    .collect(),
            ));
        }
        if chain.first().is_some_and(|(p, _)| *p == 1) {
            return Err(
                "the process that started the hook is gone (its parent is now init); not waiting"
                    .into(),
            );
        }
        let mut kept = Vec::new();
        for (p, st) in chain.iter().take(2) {
            kept.push((*p, st.start));
            if !st.is_shell() {
                break;
            }
        }
        Ok(Lineage(kept))
    }

    /// False once any of them has exited (or its pid names another process now), and when
    /// nothing can be read.
    pub fn alive(&self) -> bool {
        !self.0.is_empty()
            && self
                .0
                .iter()
                .all(|(pid, start)| Stat::read(*pid).is_some_and(|s| s.start == *start))
    }
}
