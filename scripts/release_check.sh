#!/usr/bin/env bash
# Release check: everything a release must pass, in order, stopping at the first step that fails.
#
#   lint    ruff check .
#   types   mypy (strict, src/)
#   demo    genworker check on the demo workspace as git tracks it: OK, no warning
#   compat  genworker check on each workspace of tests/fixtures/compat/ (upstream's format): no error
#   suite   the test suite (pytest; arguments after -- go to pytest)
#
# Usage: scripts/release_check.sh [--only STEP[,STEP...]] [-- PYTEST_ARGS...]
# Environment: VENV (default .venv, as the Makefile's), DEMO_WORKSPACE (check this folder instead of
# the demo as git tracks it).
# Exit status: 0 every step passed, 1 a step failed (named on the last line), 2 bad usage.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
STEPS=(lint types demo compat suite)
only=""
pytest_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --only) only=${2:-}; shift 2 || { echo "release_check: --only needs a step list" >&2; exit 2; } ;;
        --only=*) only=${1#--only=}; shift ;;
        --) shift; pytest_args=("$@"); break ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "release_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
selected=("${STEPS[@]}")
if [[ -n "$only" ]]; then
    IFS=, read -r -a selected <<< "$only"
    for step in "${selected[@]}"; do
        [[ " ${STEPS[*]} " == *" $step "* ]] || { echo "release_check: unknown step '$step' (steps: ${STEPS[*]})" >&2; exit 2; }
    done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step_lint() { "$VENV/bin/ruff" check .; }

step_types() { "$VENV/bin/mypy"; }

step_demo() {
    local demo=${DEMO_WORKSPACE:-}
    if [[ -z "$demo" ]]; then  # the tracked files only: not what a developer added or a server wrote
        demo="$tmp/demo"
        local file
        while IFS= read -r -d '' file; do
            mkdir -p "$demo/$(dirname "$file")" && cp "$file" "$demo/$file" || return 1
        done < <(git ls-files -z workspace)
        demo="$demo/workspace"
    fi
    local out
    out=$("$VENV/bin/genworker" check --workspace "$demo") || { echo "$out"; return 1; }
    echo "$out"
    if grep -q "warning" <<< "$out"; then
        echo "the demo workspace must load without a warning" >&2
        return 1
    fi
}

step_compat() {
    local failed=0 corpus out
    for corpus in tests/fixtures/compat/*/; do
        [[ -d "${corpus}tenants" ]] || continue
        if out=$("$VENV/bin/genworker" check --workspace "$corpus"); then
            echo "${corpus%/}: ${out##*$'\n'}"
        else
            echo "$out"
            failed=1
        fi
    done
    return "$failed"
}

step_suite() { "$VENV/bin/python" -m pytest "${pytest_args[@]}"; }

for step in "${selected[@]}"; do
    echo "== $step"
    if ! "step_$step"; then
        echo "release check FAILED at: $step" >&2
        exit 1
    fi
done
echo "release check OK: ${selected[*]}"
