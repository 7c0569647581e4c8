#!/usr/bin/env python3
"""latency.py CAMERA.csv HOST.csv — join `rdmacam run --latency-log` (when each frame's TRAILER
first left, right after its last payload byte) with `rdmacam-host --latency-log` (when the host
saw that TRAILER) by block id; both are CLOCK_MONOTONIC, shared by every process and network
namespace of one machine (or one VM). Prints frames, p50, p99 and max in microseconds."""
import csv
import statistics
import sys


def load(path):
    with open(path) as f:
        r = csv.reader(f)
        next(r)
        return {int(b): int(t) for b, t in r}


sent, seen = load(sys.argv[1]), load(sys.argv[2])
lat = sorted((seen[b] - sent[b]) / 1000 for b in seen if b in sent)
if not lat:
    sys.exit("no frame in both logs")
p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
print(f"frames={len(lat)} p50_us={statistics.median(lat):.1f} p99_us={p99:.1f} max_us={lat[-1]:.1f}")
