//! Seeded runs of the model tests (decision D48). A run has one seed (printed at start;
//! `AWARE_TEST_SEED`, else `PROPTEST_RNG_SEED`, repeats it); case `i` draws its operations from
//! its own *case seed*, derived from the run seed and `i`, so one failing case can be kept and
//! replayed alone. The case seeds listed in a test's regression file run first, every time.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use std::time::{SystemTime, UNIX_EPOCH};

/// The run seed: `AWARE_TEST_SEED`, else `PROPTEST_RNG_SEED`, else drawn from the time. A value
/// that is not an unsigned 64-bit integer is refused (a typo must not run a random seed).
pub fn run_seed() -> u64 {
    for var in ["AWARE_TEST_SEED", "PROPTEST_RNG_SEED"] {
        if let Ok(v) = std::env::var(var) {
            return v
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{var}={v:?}: an unsigned 64-bit integer is accepted"));
        }
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    splitmix(nanos ^ u64::from(std::process::id()))
}

/// The seed of case `index` of the run `seed` (SplitMix64 of the pair).
pub fn case_seed(seed: u64, index: u64) -> u64 {
    splitmix(seed ^ splitmix(index))
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The case seeds of a regression file: one decimal seed per line, `#` starts a comment.
pub fn regression_seeds(text: &str) -> Vec<u64> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse()
                .unwrap_or_else(|_| panic!("regression seed {l:?} is not an unsigned integer"))
        })
        .collect()
}

/// The number of cases from the environment variable `var`, else `default`.
pub fn cases_from_env(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?}: a number of cases is accepted")),
        Err(_) => default,
    }
}

/// Runs the regression case seeds, then `cases` cases of the run seed, each one case of
/// `strategy` (shrunk on failure) through `test`. A failure names the case seed to keep in the
/// regression file and the run seed that repeats the whole run.
pub fn run_seeded<S: Strategy>(
    label: &str,
    regressions: &[u64],
    cases: u64,
    max_shrink_iters: u32,
    strategy: &S,
    test: impl Fn(S::Value),
) where
    S::Value: std::fmt::Debug,
{
    let seed = run_seed();
    eprintln!(
        "{label}: seed {seed}, {cases} cases after {} regression case seeds \
         (AWARE_TEST_SEED={seed} repeats the run)",
        regressions.len()
    );
    let from_file = regressions.iter().map(|&s| (s, "regression file"));
    let drawn = (0..cases).map(|i| (case_seed(seed, i), "run"));
    for (n, (cs, origin)) in from_file.chain(drawn).enumerate() {
        let config = Config {
            cases: 1,
            failure_persistence: None,
            max_shrink_iters,
            rng_seed: RngSeed::Fixed(cs),
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let result = runner.run(strategy, |v| {
            test(v);
            Ok(())
        });
        if let Err(e) = result {
            panic!(
                "{label}: case {n} ({origin}) with case seed {cs} of run seed {seed} failed: {e}\n\
                 keep it: add the line `{cs}` to the test's regression seed file (docs/testing.md, \
                 \"Model tests\"); repeat the run: AWARE_TEST_SEED={seed}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_files_and_case_seeds() {
        let text = "# header\n\n42 # kept 2026-12-01\n  7\n";
        assert_eq!(regression_seeds(text), vec![42, 7]);
        assert_eq!(case_seed(1, 2), case_seed(1, 2));
        assert_ne!(case_seed(1, 2), case_seed(1, 3));
        assert_ne!(case_seed(1, 2), case_seed(2, 2));
    }

    #[test]
    fn a_case_seed_draws_the_same_case_again() {
        let draw = |cs: u64| {
            let config = Config {
                rng_seed: RngSeed::Fixed(cs),
                ..Config::default()
            };
            let mut runner = TestRunner::new(config);
            proptest::collection::vec(0..1000u32, 5..10)
                .new_tree(&mut runner)
                .map(|t| proptest::strategy::ValueTree::current(&t))
                .ok()
        };
        assert_eq!(draw(case_seed(9, 0)), draw(case_seed(9, 0)));
        assert_ne!(draw(case_seed(9, 0)), draw(case_seed(9, 1)));
    }
}
