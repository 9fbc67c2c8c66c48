//! A team: a manager that spawns workers, a peer that watches some of them through
//! `sessions_send` with `watch`, humans posting turns and goals on the workers, drains,
//! reconciles, unwatches, deletes and re-creates. One thread owns a team's sessions, so its
//! model (`soak/model.rs`) sees their whole history and checks every drain exactly.

mod ops;
mod state;

pub(crate) use state::{Team, TeamReport};
