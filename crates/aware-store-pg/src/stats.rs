//! Process-wide counters of the PostgreSQL write and read paths: statements sent, round trips
//! waited for, batches and their time. They cost a relaxed atomic add per call and exist so the
//! benchmarks can say where a write's time goes (docs/performance.md, "PostgreSQL write path").

use std::sync::atomic::{AtomicU64, Ordering};

/// Which connection a counter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Writer,
    Reader,
}

struct Side {
    statements: AtomicU64,
    round_trips: AtomicU64,
}

static WRITER: Side = Side {
    statements: AtomicU64::new(0),
    round_trips: AtomicU64::new(0),
};
static READER: Side = Side {
    statements: AtomicU64::new(0),
    round_trips: AtomicU64::new(0),
};
static BATCHES: AtomicU64 = AtomicU64::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static BATCH_MICROS: AtomicU64 = AtomicU64::new(0);
static BEGIN_MICROS: AtomicU64 = AtomicU64::new(0);
static COMMIT_MICROS: AtomicU64 = AtomicU64::new(0);
static READS: AtomicU64 = AtomicU64::new(0);

fn side(role: Role) -> &'static Side {
    match role {
        Role::Writer => &WRITER,
        Role::Reader => &READER,
    }
}

/// `statements` sent to the server in one exchange that waited for its answer.
pub(crate) fn exchange(role: Role, statements: u64) {
    let s = side(role);
    s.statements.fetch_add(statements, Ordering::Relaxed);
    s.round_trips.fetch_add(1, Ordering::Relaxed);
}

/// One write batch: its ops, the time to begin and take the lock, to commit, and in all.
pub(crate) fn batch(ops: u64, begin_micros: u64, commit_micros: u64, total_micros: u64) {
    BATCHES.fetch_add(1, Ordering::Relaxed);
    OPS.fetch_add(ops, Ordering::Relaxed);
    BEGIN_MICROS.fetch_add(begin_micros, Ordering::Relaxed);
    COMMIT_MICROS.fetch_add(commit_micros, Ordering::Relaxed);
    BATCH_MICROS.fetch_add(total_micros, Ordering::Relaxed);
}

/// One read closure or single-statement read.
pub(crate) fn read() {
    READS.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of the counters of every PostgreSQL store in this process since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    pub writer_statements: u64,
    pub writer_round_trips: u64,
    pub reader_statements: u64,
    pub reader_round_trips: u64,
    /// Read closures and single-statement reads.
    pub reads: u64,
    pub batches: u64,
    pub ops: u64,
    /// Summed over batches: from the first statement to the answer of the commit.
    pub batch_micros: u64,
    /// Summed over batches: `BEGIN` and the cluster-wide lock.
    pub begin_micros: u64,
    /// Summed over batches: the `COMMIT` round trip (its WAL flush included).
    pub commit_micros: u64,
}

impl PathStats {
    /// The counters now.
    pub fn now() -> PathStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PathStats {
            writer_statements: l(&WRITER.statements),
            writer_round_trips: l(&WRITER.round_trips),
            reader_statements: l(&READER.statements),
            reader_round_trips: l(&READER.round_trips),
            reads: l(&READS),
            batches: l(&BATCHES),
            ops: l(&OPS),
            batch_micros: l(&BATCH_MICROS),
            begin_micros: l(&BEGIN_MICROS),
            commit_micros: l(&COMMIT_MICROS),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &PathStats) -> PathStats {
        PathStats {
            writer_statements: self.writer_statements - earlier.writer_statements,
            writer_round_trips: self.writer_round_trips - earlier.writer_round_trips,
            reader_statements: self.reader_statements - earlier.reader_statements,
            reader_round_trips: self.reader_round_trips - earlier.reader_round_trips,
            reads: self.reads - earlier.reads,
            batches: self.batches - earlier.batches,
            ops: self.ops - earlier.ops,
            batch_micros: self.batch_micros - earlier.batch_micros,
            begin_micros: self.begin_micros - earlier.begin_micros,
            commit_micros: self.commit_micros - earlier.commit_micros,
        }
    }
}

impl std::fmt::Display for PathStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        write!(
            f,
            "writer: {} ops in {} batches ({:.1} ops/batch), {:.1} statements and {:.1} round \
             trips per op, batch {:.2} ms (begin+lock {:.2} ms, commit {:.2} ms, ops {:.1} µs/op); \
             readers: {} reads, {:.1} statements and {:.1} round trips per read",
            self.ops,
            self.batches,
            per(self.ops, self.batches),
            per(self.writer_statements, self.ops),
            per(self.writer_round_trips, self.ops),
            per(self.batch_micros, self.batches) / 1e3,
            per(self.begin_micros, self.batches) / 1e3,
            per(self.commit_micros, self.batches) / 1e3,
            per(
                self.batch_micros - self.begin_micros - self.commit_micros,
                self.ops
            ),
            self.reads,
            per(self.reader_statements, self.reads),
            per(self.reader_round_trips, self.reads),
        )
    }
}
