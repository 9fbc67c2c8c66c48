//! The backend contract suite (feature `contract`): the promises of [`Store`], [`ReadTx`] and
//! [`WriteTx`] as checks every backend must pass. Each check takes a fresh, empty store; a
//! backend's tests run them all with [`contract_suite!`](crate::contract_suite):
//!
//! ```ignore
//! aware_store::contract_suite!(|| my_fixture());   // a value that derefs to `dyn Store`
//! ```
//!
//! Checks panic on a broken promise, naming it.
// Checks, not production code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A check reads as one scenario, top to bottom: its steps share the state they check.
#![allow(clippy::too_many_lines)]

/// Runs every contract check as its own `#[test]`. `$make` is an expression callable with no
/// arguments that returns a fresh fixture dereferencing to `dyn Store` (it owns whatever the
/// store needs: a temporary directory, a test database).
#[macro_export]
macro_rules! contract_suite {
    ($make:expr) => {
        $crate::contract_suite!(@each $make;
            sequences_increase_and_are_never_reused,
            concurrent_writers_get_distinct_sequences,
            heads_rise_only_and_watermarks_survive_pruning,
            cursor_rows_round_trip_in_the_promised_orders,
            watcher_cursors_and_update_cursor_match_the_row_primitives,
            fifo_insert_delete_clear_expire,
            prune_batches_take_the_lowest_sequences,
            cursor_expiry_spares_muted_rows,
            sweep_pages_and_refreezes_pending_cursors,
            event_reads_page_and_order,
            turns_round_trip_and_page,
            runs_round_trip,
            links_round_trip,
            sessions_round_trip_filter_and_delete,
            console_page_sorts_and_counts,
            console_cursors_of_a_watcher_set_in_one_ordered_read,
            state_page_is_one_snapshot_view,
            failed_ops_roll_back_and_drop_their_hooks,
            nested_savepoints_keep_the_outer_writes,
            failed_commit_fails_every_op_of_the_batch,
            injected_faults_hit_the_backend
        );
        #[test]
        fn export_import_round_trips() {
            let (source, target) = (($make)(), ($make)());
            $crate::contract::export_import_round_trips(&*source, &*target);
        }
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let fixture = ($make)();
                $crate::contract::$name(&*fixture);
            }
        )*
    };
}

mod cursors;
mod dump;
mod log;
mod ops;
mod records;
mod support;

pub use cursors::*;
pub use dump::export_import_round_trips;
pub use log::*;
pub use ops::*;
pub use records::*;
pub use support::{event, session};
