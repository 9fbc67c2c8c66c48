//! The benchmarks of aware, each workload next to a floor measured in the same process:
//! [`engine`] (`aware-bench engine`: the engine against raw SQLite), [`http`] (`aware-bench http`: the
//! gateway over loopback HTTP against the engine in-process), [`stall`] (`aware-bench stall`: API
//! latency while outside I/O hangs) and [`soak`] (`aware-bench soak`: the real gateway under a long
//! mixed load, notices checked against a model, its resources sampled). The binary keeps thin
//! entries; no library crate of the workspace depends on this one.

/// `println!` for reports: a closed pipe (`aware-bench engine | head`) ends the process quietly.
macro_rules! say {
    ($($t:tt)*) => {
        $crate::util::out(&format!($($t)*))
    };
}

pub mod engine;
pub mod http;
mod prelude;
mod raw_sqlite;
mod report;
pub mod scale;
pub mod soak;
pub mod stall;
mod store_seam;
mod util;
