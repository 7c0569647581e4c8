#!/usr/bin/env python3
"""latency.py CAMERA.csv HOST.csv — join `rdmacam run --latency-log` (when each frame's TRAILER
first left, right after its last payload byte) with `rdmacam-host --latency-log` (when the host
saw that TRAILER, and when the kernel had put it in the host's socket) by block id; all are
CLOCK_MONOTONIC, shared by every process and network namespace of one machine (or one VM).
Prints frames, p50, p99 and max in microseconds of the whole latency, then p50/p99 of its two
parts: until the TRAILER was in the host's socket (the camera's send path, the kernel, and
every packet queued ahead of it), and from there until the host saw it."""
import csv
import statistics
import sys


def load(path):
    with open(path) as f:
        r = csv.reader(f)
        next(r)
        return {int(row[0]): [int(v) for v in row[1:]] for row in r}


def p99(xs):
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


sent, seen = load(sys.argv[1]), load(sys.argv[2])
both = [b for b in seen if b in sent]
lat = sorted((seen[b][0] - sent[b][0]) / 1000 for b in both)
if not lat:
    sys.exit("no frame in both logs")
line = f"frames={len(lat)} p50_us={statistics.median(lat):.1f} p99_us={p99(lat):.1f} max_us={lat[-1]:.1f}"
arrived = [b for b in both if len(seen[b]) > 1 and seen[b][1] > 0]
if arrived:
    queue = sorted((seen[b][1] - sent[b][0]) / 1000 for b in arrived)
    host = sorted((seen[b][0] - seen[b][1]) / 1000 for b in arrived)
    line += (f" to_socket_p50_us={statistics.median(queue):.1f} to_socket_p99_us={p99(queue):.1f}"
             f" host_p50_us={statistics.median(host):.1f} host_p99_us={p99(host):.1f}")
print(line)
