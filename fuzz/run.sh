#!/usr/bin/env bash
# Short, fixed-time fuzz runs of every cargo-fuzz target on the committed seed corpora.
#
#   bash fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default 15 s, all targets: what CI runs)
#   bash fuzz/run.sh 600                                   (the long run before a release: 10 min each)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`) and a C++ compiler (libFuzzer is built
# by libfuzzer-sys). cargo-fuzz passes nightly-only flags (-Zsanitizer=address, ...); on a stable
# toolchain RUSTC_BOOTSTRAP=1 lets rustc accept them. Each target runs on a temporary copy of
# fuzz/corpus/<target>, so new inputs never land in the repo. A crash leaves its input in
# fuzz/artifacts/<target>/ (git-ignored); reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>     (from fuzz/)
# and minimise it with `cargo fuzz tmin <target> <file>`. Exits non-zero if any target crashed.
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-15}
shift || true
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=(session_key context_key claude_classifier codex_classifier tool_bodies http_path
        request_bodies hook_stdin mcp_stdin node_answers config_file)
fi
case "$secs" in '' | *[!0-9]*) echo "run.sh: seconds must be a whole number (got '$secs')" >&2; exit 2 ;; esac

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "run.sh: cargo-fuzz is missing; install it with: cargo install cargo-fuzz --locked" >&2
    exit 2
fi
echo "== fuzz: $(cargo fuzz --version), $(rustc --version), ${secs} s per target"

# The fuzz package is its own workspace with its own Cargo.lock: refuse a stale lock file as
# `--locked` would (cargo fuzz has no such flag).
cargo metadata --locked --format-version 1 >/dev/null

build_start=$(date +%s)
if [ "$#" -eq 0 ]; then
    cargo fuzz build
else
    for t in "${targets[@]}"; do
        cargo fuzz build "$t"
    done
fi
echo "== fuzz: built in $(( $(date +%s) - build_start )) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/aware-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()
summary=()
for t in "${targets[@]}"; do
    mkdir -p "$work/$t/corpus" "$work/$t/tmp"
    cp -R "corpus/$t/." "$work/$t/corpus/"
    seeds=$(find "corpus/$t" -type f | wc -l)
    echo "== fuzz $t: ${secs} s on $seeds seeds"
    set +e
    # TMPDIR: the tool_bodies gateway's data dir and the config_file target's directory live for
    # the whole process (statics), so they are put where the trap removes them.
    TMPDIR="$work/$t/tmp" cargo fuzz run "$t" "$work/$t/corpus" -- \
        -max_total_time="$secs" -timeout=30 -print_final_stats=1 2>&1 | tee "$work/$t/log" \
        | grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done [0-9]+ runs|==[0-9]+==|thread .* panicked|SUMMARY|artifact_prefix|Test unit written|stat::number_of_executed_units|stat::peak_rss_mb)'
    rc=${PIPESTATUS[0]}
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log" | tail -1)
    corpus_after=$(find "$work/$t/corpus" -type f | wc -l)
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "== fuzz $t: FAILED (exit $rc); last lines of its log:"
        tail -n 40 "$work/$t/log"
    fi
    summary+=("$(printf '%-18s exit %-3s executions %-10s corpus %s -> %s' "$t" "$rc" "${execs:-?}" "$seeds" "$corpus_after")")
done

echo "== fuzz summary (${secs} s per target)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== fuzz: crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz ok"
