#!/usr/bin/env python3
"""Check the ICRC of every RoCEv2 frame in a pcap (Ethernet link type) with zlib's CRC-32,
independently of rdmacam's code: the masking of the RoCEv2 annex (8 bytes of 0xFF for the LRH;
IPv4 TOS, TTL, checksum or IPv6 traffic class, flow label, hop limit; the UDP checksum; BTH
byte 4) written out here from the specification, not from the crate.

usage: icrc_check.py FILE.pcap [--expect-bad N]
Prints `frames=N good=N bad=N`; exits 1 unless the number of bad ICRCs is N (default 0).
"""
import struct
import sys
import zlib


def frames(path):
    data = open(path, "rb").read()
    magic = data[:4]
    if magic == b"\xd4\xc3\xb2\xa1":
        end = "<"
    elif magic == b"\xa1\xb2\xc3\xd4":
        end = ">"
    else:
        sys.exit(f"{path}: not a pcap file")
    if struct.unpack(end + "I", data[20:24])[0] != 1:
        sys.exit(f"{path}: not Ethernet")
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(end + "I", data[at + 8:at + 12])[0]
        yield data[at + 16:at + 16 + incl]
        at += 16 + incl


def icrc_ok(frame):
    ethertype = struct.unpack(">H", frame[12:14])[0]
    pkt = bytearray(frame[14:])
    if ethertype == 0x0800:
        ip_len = (pkt[0] & 0x0F) * 4
        pkt[1] = 0xFF
        pkt[8] = 0xFF
        pkt[10:12] = b"\xff\xff"
    elif ethertype == 0x86DD:
        ip_len = 40
        pkt[0] |= 0x0F
        pkt[1:4] = b"\xff\xff\xff"
        pkt[7] = 0xFF
    else:
        return None
    udp = ip_len
    if struct.unpack(">H", pkt[udp + 2:udp + 4])[0] != 4791:
        return None
    pkt[udp + 6:udp + 8] = b"\xff\xff"
    pkt[udp + 8 + 4] = 0xFF
    want = zlib.crc32(b"\xff" * 8 + bytes(pkt[:-4])) & 0xFFFFFFFF
    return struct.unpack("<I", bytes(pkt[-4:]))[0] == want


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    expect_bad = 0
    if "--expect-bad" in args:
        expect_bad = int(args[args.index("--expect-bad") + 1])
    n = good = bad = 0
    for f in frames(args[0]):
        ok = icrc_ok(f)
        if ok is None:
            continue
        n += 1
        good += ok
        bad += not ok
    print(f"frames={n} good={good} bad={bad}")
    sys.exit(0 if bad == expect_bad and n > 0 else 1)


if __name__ == "__main__":
    main()
