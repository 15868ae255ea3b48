#!/usr/bin/python3
"""plan_from_trace.py TRACE PLAN -- a fusion plan naming every kernel launched.

TRACE holds one "QUEUE KERNEL_NAME" line per kernel launch, in launch order
(launch_trace.py writes it). PLAN (docs/fusion.md, file form) gets:
  - every ordered pair a+b where b was the next kernel launched on a's queue
    (other commands between them are not recorded: such a pair is held and
    then cancelled by that command, which is a case worth running too), so
    the sequences that really run back to back fuse;
  - for a kernel that starts no such pair (launched only last on its queue),
    the sequence k+k, so it too is named and held.
Pairs are never prefixes of one another, so the plan is valid whatever the
names. With more pairs than a plan may hold (4096), the most frequent are
kept and every kernel stays named. Prints "KERNELS SEQUENCES" on stdout.
"""
import collections
import re
import sys

MAX_SEQS = 4096  # PLAN_MAX_SEQS in fusion/plan.h
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")  # what a plan accepts


def main():
    trace, out = sys.argv[1], sys.argv[2]
    last = {}
    pairs = collections.Counter()
    order = {}  # kernel -> first launch index, for a stable plan
    launches = 0
    with open(trace) as f:
        for i, line in enumerate(f):
            parts = line.split()
            if len(parts) != 2 or not NAME.match(parts[1]):
                continue
            queue, name = parts
            launches += 1
            order.setdefault(name, i)
            prev = last.get(queue)
            if prev is not None:
                pairs[(prev, name)] += 1
            last[queue] = name
    ranked = [p for p, _ in sorted(pairs.items(), key=lambda kv: (-kv[1], order[kv[0][0]], order[kv[0][1]]))]
    kernels = sorted(order, key=order.get)
    if len(kernels) > MAX_SEQS:
        sys.exit("plan_from_trace: %d kernels cannot all be named in %d sequences" % (len(kernels), MAX_SEQS))
    keep = min(len(ranked), MAX_SEQS)
    while True:
        seqs = ranked[:keep]
        starts = {a for a, _ in seqs}
        seqs += [(k, k) for k in kernels if k not in starts]
        if len(seqs) <= MAX_SEQS:
            break
        keep -= len(seqs) - MAX_SEQS
    with open(out, "w") as f:
        f.write("# make compat armed mode: every kernel of the recorded run, %d launches\n" % launches)
        for a, b in seqs:
            f.write("fuse %s+%s\n" % (a, b))  # joined: a kernel may be named "internal"
    print(len(order), len(seqs))


if __name__ == "__main__":
    main()
