//! The cursor triple and its transitions (spec 02 §4, §5, §7, §9, §12), as pure functions of the
//! current row and "now". The store persists the result; nothing here does I/O.
//!
//! Invariants kept by every transition: `last_seen ≤ notified ≤ material`; pending ⇔
//! `notified > last_seen`; a muted row is never pending; `notice_opened_at` is set exactly when
//! the row is pending.

/// How a cursor row was last (re)started. Informational.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    Spawn,
    Watch,
    Parent,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Spawn => "spawn",
            Origin::Watch => "watch",
            Origin::Parent => "parent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "spawn" => Some(Origin::Spawn),
            "watch" => Some(Origin::Watch),
            "parent" => Some(Origin::Parent),
            _ => None,
        }
    }
}

/// The mutable part of a cursor row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorState {
    pub last_seen: i64,
    pub notified: i64,
    pub material: i64,
    pub muted: bool,
    pub origin: Origin,
    pub notice_opened_at: Option<i64>,
    pub updated_at: i64,
}

impl CursorState {
    pub fn is_pending(&self) -> bool {
        !self.muted && self.notified > self.last_seen
    }

    /// Checks the row invariants; used by tests and by debug assertions in the store.
    pub fn invariant_holds(&self) -> bool {
        self.last_seen <= self.notified
            && self.notified <= self.material
            && (!self.muted || (self.last_seen == self.notified && self.notified == self.material))
            && (self.notice_opened_at.is_some() == (self.notified > self.last_seen))
    }

    /// A row started at `at` with nothing pending.
    fn settled(at: i64, muted: bool, origin: Origin, now: i64) -> Self {
        CursorState {
            last_seen: at,
            notified: at,
            material: at,
            muted,
            origin,
            notice_opened_at: None,
            updated_at: now,
        }
    }
}

/// Spawn seeding (02 §4): `None` means "leave the row as it is" (a muted row).
pub fn seed(existing: Option<&CursorState>, sequence: i64, now: i64) -> Option<CursorState> {
    match existing {
        Some(row) if row.muted => None,
        _ => Some(CursorState::settled(sequence, false, Origin::Spawn, now)),
    }
}

/// Outcome of a material update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaterialUpdate {
    pub state: CursorState,
    /// A notice opened (nothing was pending): a wake is requested after commit.
    pub opened: bool,
}

/// The frozen-watermark update (02 §5). A missing row counts as `(0, 0, 0)` with origin
/// `parent`. Returns `None` for a muted row (nothing changes).
pub fn material_update(
    existing: Option<&CursorState>,
    sequence: i64,
    now: i64,
) -> Option<MaterialUpdate> {
    let mut state = match existing {
        Some(row) if row.muted => return None,
        Some(row) => *row,
        None => CursorState::settled(0, false, Origin::Parent, now),
    };
    let opened = state.notified == state.last_seen;
    if opened {
        state.notified = sequence;
        state.notice_opened_at = Some(now);
    }
    state.material = state.material.max(sequence);
    state.updated_at = now;
    Some(MaterialUpdate { state, opened })
}

/// Outcome of acknowledging a consumed notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub state: CursorState,
    /// Material work interleaved: exactly one follow-up notice stays open.
    pub follow_up: bool,
}

/// Ack on consumption (02 §9 step 3): advance to the frozen watermark, never to the head.
pub fn ack(row: &CursorState, now: i64) -> Ack {
    let (n, m) = (row.notified, row.material);
    let follow_up = m > n;
    let state = CursorState {
        last_seen: n,
        notified: m.max(n),
        notice_opened_at: follow_up.then_some(now),
        updated_at: now,
        ..*row
    };
    Ack { state, follow_up }
}

/// Explicit registration (02 §7): a live row keeps its triple (re-watching never clobbers a
/// pending notice); a missing or muted row starts at the target's head.
pub fn register(existing: Option<&CursorState>, head: i64, now: i64) -> CursorState {
    match existing {
        Some(row) if !row.muted => CursorState {
            updated_at: now,
            ..*row
        },
        _ => CursorState::settled(head, false, Origin::Watch, now),
    }
}

/// Unwatch (02 §7): the muted row at the target's head. The caller decides whether the pair
/// qualifies (a row exists or the watcher is the parent, and it is not muted yet).
pub fn mute(existing: Option<&CursorState>, head: i64, now: i64) -> CursorState {
    let origin = existing.map_or(Origin::Spawn, |r| r.origin);
    CursorState::settled(head, true, origin, now)
}

/// Restart sweep re-freeze (02 §12): the notice text is unchanged; the next ack covers
/// everything recorded before the restart.
pub fn sweep(row: &CursorState, now: i64) -> CursorState {
    CursorState {
        notified: row.material,
        notice_opened_at: Some(row.notice_opened_at.unwrap_or(now)),
        updated_at: now,
        ..*row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn triple(s: &CursorState) -> (i64, i64, i64) {
        (s.last_seen, s.notified, s.material)
    }

    #[test]
    fn s021_frozen_watermark() {
        let seeded = seed(None, 1, 0).unwrap();
        let a = material_update(Some(&seeded), 2, 10).unwrap();
        assert!(a.opened);
        let b = material_update(Some(&a.state), 3, 11).unwrap();
        assert!(!b.opened);
        let c = material_update(Some(&b.state), 4, 12).unwrap();
        assert_eq!(triple(&c.state), (1, 2, 4));
        assert_eq!(c.state.notice_opened_at, Some(10));
        assert!(c.state.invariant_holds());
    }

    #[test]
    fn s044_ack_opens_one_follow_up() {
        let row = CursorState {
            last_seen: 1,
            notified: 2,
            material: 3,
            muted: false,
            origin: Origin::Spawn,
            notice_opened_at: Some(0),
            updated_at: 0,
        };
        let first = ack(&row, 2000);
        assert!(first.follow_up);
        assert_eq!(triple(&first.state), (2, 3, 3));
        assert_eq!(first.state.notice_opened_at, Some(2000));
        let second = ack(&first.state, 3000);
        assert!(!second.follow_up);
        assert_eq!(triple(&second.state), (3, 3, 3));
        assert!(second.state.invariant_holds());
    }

    #[test]
    fn muted_rows_ignore_seed_and_material() {
        let m = mute(None, 5, 0);
        assert!(m.invariant_holds());
        assert!(seed(Some(&m), 6, 1).is_none());
        assert!(material_update(Some(&m), 7, 1).is_none());
        let r = register(Some(&m), 9, 2);
        assert_eq!(
            (triple(&r), r.muted, r.origin),
            ((9, 9, 9), false, Origin::Watch)
        );
    }

    #[test]
    fn s088_sweep_refreezes() {
        let row = CursorState {
            last_seen: 1,
            notified: 2,
            material: 4,
            muted: false,
            origin: Origin::Spawn,
            notice_opened_at: Some(5),
            updated_at: 5,
        };
        let s = sweep(&row, 60);
        assert_eq!(triple(&s), (1, 4, 4));
        assert_eq!((s.notice_opened_at, s.updated_at), (Some(5), 60));
    }
}
