#!/usr/bin/env python3
"""Holds what tests/apps/sim_cost_probe measured on the sim against the
cost table the sim was charging (SIMCUDA_COSTS): a test of the sim's model
of time (tests/sim/README.md, "Time").

Usage: check_sim_costs.py TABLE.json MEASURED.json [--baseline BASE.json]
                          [--factor F] [--own-factor O] [--slack-us S]

For every call of the table and every size the probe timed it at, the
median must be at least 0.9 x the table's cost at that size (per_call_us +
per_granule_us x 2 MiB granules): the sim's waits never end early, so this
bound is deterministic. And at most O x the sim's own time for the call
(its median in BASE.json, the probe run with SIMCUDA_COSTS=off; 0 without
one) + F x cost + S microseconds (default 1.5 x own + 1.1 x cost + 50 us):
a charge that oversleeps (a 1.5 us cost charged by a sleep that ends a
timer slack of 50 us late comes out near 100 us) or is charged per byte
instead of per granule shows there; F and S leave room for a loaded
machine, and O for the sim's own time, which varies between two runs in
proportion to itself: under ThreadSanitizer an address reservation (an
mmap it shadows) took 140 us in the run without costs and 250 us in the
run with them, whose table adds 19 us.
"""

import argparse
import json
import sys

GRANULE = 2 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("measured")
    ap.add_argument("--baseline")
    ap.add_argument("--factor", type=float, default=1.1)
    ap.add_argument("--own-factor", type=float, default=1.5)
    ap.add_argument("--slack-us", type=float, default=50.0)
    args = ap.parse_args()
    table = json.load(open(args.table))["calls"]
    measured = json.load(open(args.measured))["calls"]
    own = {}
    if args.baseline:
        for call, entry in json.load(open(args.baseline))["calls"].items():
            for s in entry.get("samples", []):
                own[(call, s["bytes"])] = s["median_us"]
    bad = []
    for call, cost in sorted(table.items()):
        samples = measured.get(call, {}).get("samples", [])
        if not samples:
            bad.append(f"{call}: not measured")
            continue
        for s in samples:
            granules = -(-s["bytes"] // GRANULE)
            want = cost["per_call_us"] + cost["per_granule_us"] * granules
            got = s["median_us"]
            base = own.get((call, s["bytes"]), 0.0)
            low, high = 0.9 * want, args.own_factor * base + args.factor * want + args.slack_us
            verdict = "ok" if low <= got <= high else "OUT OF BOUNDS"
            print(f"{call} at {s['bytes'] >> 20} MiB: median {got:.2f} us, p90 {s['p90_us']:.2f} us; "
                  f"table {want:.2f} us, the sim's own {base:.2f} us "
                  f"(allowed {low:.2f} .. {high:.2f}): {verdict}")
            if verdict != "ok":
                bad.append(f"{call} at {s['bytes']} B: {got:.2f} us against {want:.2f}")
    if bad:
        print(f"{len(bad)} out of bounds: " + "; ".join(bad))
        sys.exit(1)
    print(f"every median of {len(table)} calls within the table's bounds")


if __name__ == "__main__":
    main()
