#!/usr/bin/env bash
# PocketMQ's two entry points. Both create .venv/ at the repository root and
# install what they need (idempotent: re-running only reinstalls when
# pyproject.toml or the C accelerator's source changed):
#
#   ./dev.sh start [ARGS...]   standalone nameserver + broker on ./pocketmq-data, with a demo;
#                              installs PocketMQ and what running it needs, nothing more
#   ./dev.sh test  [PYTEST ARGS...]   the whole test suite; installs the test and Spark extras
#                                     too ([dev,spark]). Without arguments the fuzz and
#                                     fault suites run once more with every ACL on
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

# setup PROFILE: "run" installs PocketMQ alone, "test" with its [dev,spark] extras. Each
# profile has its stamp; "test" installs a superset, so it stamps "run" as well.
setup() {
    local profile=$1 target
    case "$profile" in
        run)  target='.' ;;
        test) target='.[dev,spark]' ;;
    esac
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating $VENV with $($PYTHON --version)"
        "$PYTHON" -m venv "$VENV"
    fi
    local stamp="$VENV/.pocketmq-installed-$profile" want
    # Reinstall when the dependencies or a compiled accelerator's source change.
    want=$(cat pyproject.toml $(git ls-files '*.c' 2>/dev/null || ls ./*/*.c ./*/*/*.c) \
           | sha256sum | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing PocketMQ ($target) into $VENV"
        local log="$VENV/install.log"
        if ! { "$VENV/bin/python" -m pip install --upgrade pip setuptools wheel \
               && "$VENV/bin/python" -m pip install -e "$target"; } > "$log" 2>&1; then
            tail -n 40 "$log" >&2
            echo "==> installing failed; the whole log is in $log" >&2
            exit 1
        fi
        echo "$want" > "$stamp"
        [ "$profile" = test ] && echo "$want" > "$VENV/.pocketmq-installed-run"
    fi
    return 0
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    start)
        setup run
        exec "$VENV/bin/pocketmq" standalone --data-dir ./pocketmq-data --demo "$@"
        ;;
    test)
        setup test
        "$VENV/bin/python" -m ruff check .
        if [ $# -gt 0 ]; then
            exec "$VENV/bin/python" -m pytest -q "$@"
        fi
        "$VENV/bin/python" -m pytest -q
        # Once more with the ACL on (tests/support/aclmode.py). pytest's exit 5 (nothing
        # collected) fails here too: a suite that ran nothing proves nothing.
        echo "==> tests/fuzz and tests/fault again with the ACL on (POCKETMQ_TEST_ACL=1)"
        POCKETMQ_TEST_ACL=1 exec "$VENV/bin/python" -m pytest -q tests/fuzz tests/fault
        ;;
    *)
        echo "usage: ./dev.sh start [ARGS...] | ./dev.sh test [PYTEST ARGS...]" >&2
        exit 2
        ;;
esac
