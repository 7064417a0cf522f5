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
    want=$(cat pyproject.toml $(git ls-files '*.c' '*.h' 2>/dev/null || ls ./*/*.c ./*/*/*.c ./*/csrc/*.h) \
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

# The official Node.js RocketMQ client that tests/compat/test_node_client.py drives,
# pinned by tests/compat/node/package-lock.json. Without npm those tests fail and say so.
setup_node_client() {
    local dir=tests/compat/node
    local stamp="$dir/node_modules/.pocketmq-installed" want
    [ -f "$dir/package-lock.json" ] || return 0     # a partial copy of the tree
    if ! command -v npm > /dev/null 2>&1; then
        echo "==> npm not found: the Node.js client tests (tests/compat/test_node_client.py)" \
             "will fail; install Node.js >= 18 with npm" >&2
        return 0
    fi
    want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing the Node.js client for tests/compat into $dir/node_modules"
        local log="$VENV/npm-install.log"
        if ! (cd "$dir" && npm ci --no-audit --no-fund) > "$log" 2>&1; then
            tail -n 40 "$log" >&2
            echo "==> npm ci failed; the whole log is in $log" >&2
            exit 1
        fi
        echo "$want" > "$stamp"
    fi
}

# The dashboard's browser tests (tests/dashboard/test_browser.py) drive Debian's chromium
# through chromedriver. Installed here when missing and we are root with apt-get (a fresh
# CI machine); otherwise those tests fail saying how to install them. Idempotent: nothing
# runs when both are on the PATH.
ensure_browser() {
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "==> chromium/chromedriver missing: the dashboard's browser tests will fail;" \
             "install them with: sudo apt-get install -y chromium chromium-driver" >&2
        return 0
    fi
    echo "==> installing chromium and chromium-driver (the dashboard's browser tests)"
    local log="$VENV/apt.log"
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
           --no-install-recommends chromium chromium-driver; } > "$log" 2>&1; then
        tail -n 20 "$log" >&2
        echo "==> installing chromium failed (whole log: $log); the browser tests will fail" >&2
    fi
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
        setup_node_client
        ensure_browser
        "$VENV/bin/python" -m ruff check .
        "$VENV/bin/python" -m ruff format --check .
        if [ $# -gt 0 ]; then
            exec "$VENV/bin/python" -m pytest -q "$@"
        fi
        "$VENV/bin/python" -m mypy .
        # Most tests wait on real processes, so they run on $POCKETMQ_TEST_WORKERS
        # pytest-xdist workers (default 3 on any core count; 0 runs them in this
        # process), a file's tests on one worker, so module fixtures start once. The
        # fault tests, which kill, freeze and starve processes on purpose, run after
        # them, one at a time. pytest's exit 5 (nothing collected) fails each step: a
        # suite that ran nothing proves nothing.
        local_workers=${POCKETMQ_TEST_WORKERS:-3}
        echo "==> the suite but tests/fault, on $local_workers workers"
        "$VENV/bin/python" -m pytest -q -n "$local_workers" --dist loadfile --durations=25 \
            --ignore=tests/fault
        echo "==> tests/fault, one at a time"
        "$VENV/bin/python" -m pytest -q --durations=10 tests/fault
        # Once more with the ACL on (tests/support/aclmode.py).
        echo "==> tests/fuzz and tests/fault again with the ACL on (POCKETMQ_TEST_ACL=1)"
        POCKETMQ_TEST_ACL=1 exec "$VENV/bin/python" -m pytest -q tests/fuzz tests/fault
        ;;
    *)
        echo "usage: ./dev.sh start [ARGS...] | ./dev.sh test [PYTEST ARGS...]" >&2
        exit 2
        ;;
esac
