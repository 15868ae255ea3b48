#!/usr/bin/python3
"""clpeak_cmp.py TOL PLAIN_OUT... -- SHIM_OUT... -- compare clpeak results.

Every line that is not a measurement (platform, device, driver version,
compute units, clock, section titles) must be identical in every run.
Measurements ("float16 : 9.71", "Kernel launch latency : 17.87 us") are
compared best against best: the largest value of the runs without clshim
against the largest with it (the smallest for latencies, lower is better).
They agree when min/max >= TOL. On a shared machine single runs of the same
binary differ by 2x, so the check catches what clshim could break (a missing
result, a kernel that no longer runs, launch latency grown many times), not
a few per cent. Prints one line per measurement; exits 1 on a difference.
"""
import re
import sys

MEASURE = re.compile(r"^(\s+)(.*?)\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s)?\s*$")
DEVICE_INFO = ("Compute units", "Clock frequency")


def parse(path):
    fixed, values, section = [], {}, ""
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = MEASURE.match(line)
        if m and m.group(2).strip() not in DEVICE_INFO:
            label = (section + " / " if section else "") + m.group(2).strip()
            values[label] = (float(m.group(3)), m.group(4) or "")
            fixed.append(label)  # the set and order of results must match too
        else:
            if line.strip() and not line.strip().endswith(":") and ":" not in line:
                section = line.strip()
            fixed.append(line)
    return fixed, values


def main():
    tol = float(sys.argv[1])
    args = sys.argv[2:]
    cut = args.index("--")
    plain, shim = args[:cut], args[cut + 1:]
    runs = [(p, parse(p)) for p in plain + shim]
    ref_path, (ref_fixed, _) = runs[0]
    bad = 0
    for path, (fixed, _) in runs[1:]:
        if fixed != ref_fixed:
            print("DIFFERENT OUTPUT: %s vs %s" % (ref_path, path))
            for a, b in zip(ref_fixed + [""] * len(fixed), fixed + [""] * len(ref_fixed)):
                if a != b:
                    print("  < %s\n  > %s" % (a, b))
                    break
            bad = 1
    if bad:
        return 1

    def best(paths, label):
        vals = [dict(r[1][1])[label] for r in runs if r[0] in paths]
        unit = vals[0][1]
        pick = min if unit else max  # a time: lower is better
        return pick(v[0] for v in vals), unit

    for label in runs[0][1][1]:
        a, unit = best(plain, label)
        b, _ = best(shim, label)
        ratio = min(a, b) / max(a, b) if max(a, b) > 0 else 1.0
        ok = ratio >= tol
        bad |= not ok
        print("%-4s %-50s without %10.2f  with %10.2f %s" % ("ok" if ok else "DIFF", label, a, b, unit))
    return bad


if __name__ == "__main__":
    sys.exit(main())
