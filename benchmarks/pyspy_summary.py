"""Summarise a ``py-spy record --format raw`` profile: where the samples went.

Prints the share of samples per function by self time (the frame on top of
the stack) and by inclusive time (anywhere on the stack), optionally only for
stacks that pass through a given function. Not part of the test run::

    py-spy record -r 250 --format raw -o prof.txt -- .venv/bin/python benchmarks/...
    .venv/bin/python benchmarks/pyspy_summary.py prof.txt [--top 25] [--within NAME]
"""

from __future__ import annotations

import argparse
import collections
import sys


def frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})" if path else name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--within", default="", help="only stacks with a frame containing this")
    args = parser.parse_args()
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with open(args.profile) as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            if args.within and args.within not in stack:
                continue
            count = int(count_text)
            frames = [frame_name(fr) for fr in stack.split(";") if fr]
            total += count
            self_time[frames[-1]] += count
            for name in set(frames):
                inclusive[name] += count
    print(f"{total} samples{f' within {args.within!r}' if args.within else ''}")
    for title, counter in (("self", self_time), ("inclusive", inclusive)):
        print(f"-- top {args.top} by {title} time")
        for name, count in counter.most_common(args.top):
            print(f"  {count / max(total, 1) * 100:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
