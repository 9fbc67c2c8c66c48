//! The model of the notices (docs/semantics.md 02): one cursor triple per (watcher, target)
//! pair, moved exactly as the gateway should move it, from what the soak's own requests did.
//!
//! Every session of a team is touched by that team's thread only, so the model knows the
//! complete history of its sessions and a drain must return exactly the pairs the model has
//! pending, each with the model's `lastSeen`: a notice the model does not expect (one the
//! gateway made up, or one returned twice) and a pending notice the drain left out (one lost)
//! are both violations, caught at the drain where they happen.

use std::collections::{BTreeMap, HashMap};

/// A cursor (02 §5): `last_seen ≤ notified ≤ material`; pending ⇔ `notified > last_seen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    last_seen: i64,
    notified: i64,
    material: i64,
    muted: bool,
}

impl Cursor {
    fn at(h: i64, muted: bool) -> Cursor {
        Cursor {
            last_seen: h,
            notified: h,
            material: h,
            muted,
        }
    }

    fn pending(&self) -> bool {
        !self.muted && self.notified > self.last_seen
    }
}

/// The sessions of one team and their cursors.
#[derive(Default)]
pub(crate) struct Model {
    /// Head (stateVersion) of each live session, from the events the requests returned.
    heads: HashMap<String, i64>,
    /// Parent of each live child.
    parents: HashMap<String, String>,
    /// (watcher, target) → cursor. Ordered so a violation message lists pairs stably.
    cursors: BTreeMap<(String, String), Cursor>,
    /// Notices checked against the model (returned by a drain and expected).
    pub(crate) notices_checked: u64,
    /// Drains checked.
    pub(crate) drains_checked: u64,
}

impl Model {
    /// A session created with head `head` (0 without events), with `parent` when it has one;
    /// a child's `child_spawned` (its head) seeds the parent's cursor (02 §4), unless that pair
    /// is muted.
    pub(crate) fn created(&mut self, key: &str, head: i64, parent: Option<&str>) {
        self.heads.insert(key.to_string(), head);
        if let Some(p) = parent {
            self.parents.insert(key.to_string(), p.to_string());
            let pair = (p.to_string(), key.to_string());
            match self.cursors.get(&pair) {
                Some(c) if c.muted => {}
                _ => {
                    self.cursors.insert(pair, Cursor::at(head, false));
                }
            }
        }
    }

    pub(crate) fn head(&self, key: &str) -> Option<i64> {
        self.heads.get(key).copied()
    }

    /// An event `seq` recorded on `target`: the head moves; a material one by `actor` moves
    /// every unmuted cursor on the target (registered ones and the parent's) except the
    /// actor's own (02 §2, §5, §6).
    pub(crate) fn event(&mut self, target: &str, seq: i64, material: bool, actor: Option<&str>) {
        self.heads.insert(target.to_string(), seq);
        if !material {
            return;
        }
        let parent = self.parents.get(target).cloned();
        if let Some(p) = &parent {
            // A producer-passed parent without a row gets one at (0, 0, 0) (02 §5).
            self.cursors
                .entry((p.clone(), target.to_string()))
                .or_insert(Cursor::at(0, false));
        }
        for ((w, t), c) in self.cursors.iter_mut() {
            if t != target || c.muted || actor == Some(w.as_str()) {
                continue;
            }
            if c.notified == c.last_seen {
                c.notified = seq;
            }
            c.material = seq;
        }
    }

    /// `watcher` registers on `target` (02 §7): an unmuted row stays as it is; no row or a muted
    /// one is seeded at the target's head.
    pub(crate) fn register(&mut self, watcher: &str, target: &str) {
        let h = self.head(target).unwrap_or(0);
        let pair = (watcher.to_string(), target.to_string());
        match self.cursors.get(&pair) {
            Some(c) if !c.muted => {}
            _ => {
                self.cursors.insert(pair, Cursor::at(h, false));
            }
        }
    }

    /// `watcher` unwatches `target` (02 §7); the `unwatched` the gateway must answer.
    pub(crate) fn unwatch(&mut self, watcher: &str, target: &str) -> bool {
        let h = self.head(target).unwrap_or(0);
        let pair = (watcher.to_string(), target.to_string());
        let is_parent = self.parents.get(target).map(String::as_str) == Some(watcher);
        match self.cursors.get(&pair) {
            Some(c) if c.muted => false,
            Some(_) => {
                self.cursors.insert(pair, Cursor::at(h, true));
                true
            }
            None if is_parent => {
                self.cursors.insert(pair, Cursor::at(h, true));
                true
            }
            None => false,
        }
    }

    /// `key` deleted (02 §11): its cursors as watcher and as target go, and so does its head.
    /// The soak never deletes a parent before its children, so no orphan is left.
    pub(crate) fn deleted(&mut self, key: &str) {
        self.heads.remove(key);
        self.parents.remove(key);
        self.cursors.retain(|(w, t), _| w != key && t != key);
    }

    /// Whether `watcher` has a pending notice the model expects (for choosing what to drain).
    pub(crate) fn pending_count(&self, watcher: &str) -> usize {
        self.cursors
            .iter()
            .filter(|((w, _), c)| w == watcher && c.pending())
            .count()
    }

    /// The `lastSeen` of a pair's cursor (what a reconcile would ask `changesSince` of).
    pub(crate) fn last_seen(&self, watcher: &str, target: &str) -> Option<i64> {
        self.cursors
            .get(&(watcher.to_string(), target.to_string()))
            .map(|c| c.last_seen)
    }

    /// A drain of `watcher` returned `got` (target key, lastSeen) with no limit cut: it must be
    /// exactly the pending pairs of the model, each with the model's `lastSeen`. Then every
    /// returned cursor is acked (02 §9): `last_seen := notified`, `notified := max(material,
    /// notified)`. The error lists every difference.
    pub(crate) fn drained(&mut self, watcher: &str, got: &[(String, i64)]) -> Result<(), String> {
        self.drains_checked += 1;
        let mut problems = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for (target, last_seen) in got {
            if seen.contains(&target.as_str()) {
                problems.push(format!("{target} returned twice in one drain"));
                continue;
            }
            seen.push(target);
            match self.cursors.get(&(watcher.to_string(), target.clone())) {
                Some(c) if c.pending() && c.last_seen == *last_seen => {}
                Some(c) if c.pending() => problems.push(format!(
                    "{target}: notice says changesSince {last_seen}, the model {}",
                    c.last_seen
                )),
                Some(c) => problems.push(format!(
                    "{target}: unexpected notice changesSince {last_seen} (model cursor {c:?}: \
                     nothing pending; a duplicate or a notice for no change)"
                )),
                None => problems.push(format!(
                    "{target}: notice changesSince {last_seen} for a pair the model has no \
                     cursor for"
                )),
            }
        }
        for ((w, t), c) in &self.cursors {
            if w == watcher && c.pending() && !seen.contains(&t.as_str()) {
                problems.push(format!(
                    "{t}: lost notice: pending since {} in the model ({c:?}), not returned",
                    c.last_seen
                ));
            }
        }
        if !problems.is_empty() {
            return Err(format!("drain of {watcher}: {}", problems.join("; ")));
        }
        for (w, t) in self.cursors.keys().cloned().collect::<Vec<_>>() {
            if w != watcher {
                continue;
            }
            if let Some(c) = self.cursors.get_mut(&(w, t)) {
                if c.pending() {
                    c.last_seen = c.notified;
                    c.notified = c.notified.max(c.material);
                }
            }
        }
        self.notices_checked += got.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_up_and_self_suppression() {
        let mut m = Model::default();
        m.created("m", 0, None);
        m.created("c", 2, Some("m"));
        m.event("c", 5, true, None);
        m.event("c", 7, true, None);
        assert_eq!(m.drained("m", &[("c".into(), 2)]), Ok(()));
        // Follow-up: 7 arrived after the watermark 5.
        assert_eq!(m.drained("m", &[("c".into(), 5)]), Ok(()));
        assert_eq!(m.drained("m", &[]), Ok(()));
        m.event("c", 9, true, Some("m"));
        assert_eq!(m.drained("m", &[]), Ok(()));
        assert!(m.drained("m", &[("c".into(), 7)]).is_err());
    }

    #[test]
    fn unwatch_mutes_and_register_reseeds() {
        let mut m = Model::default();
        m.created("m", 0, None);
        m.created("c", 2, Some("m"));
        m.event("c", 4, true, None);
        assert!(m.unwatch("m", "c"));
        assert!(!m.unwatch("m", "c"));
        m.event("c", 6, true, None);
        assert_eq!(m.drained("m", &[]), Ok(()));
        m.register("m", "c");
        m.event("c", 8, true, None);
        assert!(m.drained("m", &[]).is_err());
    }
}
