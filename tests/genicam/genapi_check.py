#!/usr/bin/env python3
"""Load a GigE Vision camera's GenICam XML in EMVA's reference GenApi (PyPI `genicam`, the
implementation behind vendor SDKs and harvesters) the way a host does, and exercise it.

The XML is fetched over GVCP (First URL register, then READMEM), loaded into a NodeMap whose
port reads and writes device memory with GVCP READMEM/WRITEMEM. Then: every readable node
reads; Width, Height, every PixelFormat entry, AcquisitionFrameRate, ExposureTime and Gain are
written and read back; Width's increment follows PixelFormat (2 under YUV422_8, and an odd
width refuses that format); OffsetX's range follows Width; the GigE Vision features a host needs by
SFNC type are there (GevSCPSDoNotFragment and GevSCPSFireTestPacket IBoolean); every feature is
reachable from Root.

usage: genapi_check.py ADDRESS [--port 3956] [--save-xml FILE]
Prints one JSON line; exit 0 only if every check passed.
"""
import argparse
import json
import random
import socket
import struct
import sys

from genicam import genapi

READREG, WRITEREG, READMEM, WRITEMEM = 0x80, 0x82, 0x84, 0x86
CCP = 0x0A00
FIRST_URL = 0x0200


class Gvcp:
    """A minimal GVCP client: one outstanding command, retried on timeout with the same
    req_id (as hosts do), so the camera's retry handling is exercised too."""

    def __init__(self, addr, port):
        self.dst = (addr, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(0.3)
        self.req = random.randint(1, 0xFFF0)
        self.commands = 0

    def command(self, code, payload):
        self.req = self.req % 0xFFFF + 1
        self.commands += 1
        pkt = struct.pack(">BBHHH", 0x42, 0x01, code, len(payload), self.req) + payload
        for _ in range(5):
            self.sock.sendto(pkt, self.dst)
            try:
                while True:
                    data, _ = self.sock.recvfrom(1024)
                    status, ack, length, req = struct.unpack(">HHHH", data[:8])
                    if req == self.req and ack == code + 1:
                        return status, data[8 : 8 + length]
            except socket.timeout:
                continue
        raise IOError("no acknowledge for command 0x%x" % code)

    def read_mem(self, address, size):
        out = b""
        while len(out) < size:
            n = min(512, size - len(out))
            n4 = (n + 3) & ~3
            st, body = self.command(READMEM, struct.pack(">IHH", address + len(out), 0, n4))
            if st != 0:
                raise IOError("READMEM 0x%x: status 0x%04x" % (address + len(out), st))
            out += body[4 : 4 + n]
        return out

    def write_mem(self, address, data):
        pad = (-len(data)) % 4
        st, _ = self.command(WRITEMEM, struct.pack(">I", address) + bytes(data) + bytes(pad))
        if st != 0:
            raise IOError("WRITEMEM 0x%x: status 0x%04x" % (address, st))

    def write_reg(self, address, value):
        st, _ = self.command(WRITEREG, struct.pack(">II", address, value))
        return st


class GvcpPort(genapi.AbstractPort):
    def __init__(self, gvcp):
        genapi.AbstractPort.__init__(self)
        self.gvcp = gvcp

    def get_access_mode(self):
        return genapi.EAccessMode.RW

    def read(self, address, size):
        return self.gvcp.read_mem(address, size)

    def write(self, address, data):
        self.gvcp.write_mem(address, bytes(data))


def fetch_xml(gvcp):
    url = gvcp.read_mem(FIRST_URL, 512).split(b"\0")[0].decode()
    # Local:NAME;ADDRESS;LENGTH (hex)
    scheme, rest = url.split(":", 1)
    if scheme.lower() != "local":
        raise ValueError("First URL is not local: %r" % url)
    name, address, length = rest.split(";")[:3]
    data = gvcp.read_mem(int(address, 16), int(length, 16))
    if name.lower().endswith(".zip"):
        raise ValueError("zipped XML not handled here")
    return url, data.decode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("--port", type=int, default=3956)
    ap.add_argument("--save-xml", help="write the XML as fetched to this file")
    a = ap.parse_args()

    gvcp = Gvcp(a.address, a.port)
    problems = []
    url, xml = fetch_xml(gvcp)
    if a.save_xml:
        with open(a.save_xml, "w", encoding="utf-8") as f:
            f.write(xml)
    nm = genapi.NodeMap()
    nm.load_xml_from_string(xml)  # raises on cycles, unknown nodes, schema violations
    nm.connect(GvcpPort(gvcp), "Device")

    # take control, as a host does before writing
    st = gvcp.write_reg(CCP, 2)
    if st != 0:
        problems.append("CCP write: status 0x%04x" % st)

    # every node reachable from Root (categories and what they list)
    reachable, todo = set(), ["Root"]
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        reachable.add(name)
        node = nm.get_node(name)
        if isinstance(node, genapi.ICategory):
            todo.extend(f.node.name for f in node.features)

    # every readable value node reads
    read = 0
    features = []
    for node in nm.nodes:
        name = node.node.name
        if isinstance(node, genapi.ICategory) or name == "Device":
            continue
        if isinstance(node, (genapi.IInteger, genapi.IFloat, genapi.IBoolean,
                             genapi.IEnumeration, genapi.IString, genapi.ICommand)):
            ns = node.node.name_space
            visibility = node.node.visibility
            if ns == genapi.ENameSpace.Standard or visibility != genapi.EVisibility.Invisible:
                features.append(name)
        if not genapi.is_readable(node.get_access_mode()):
            continue
        if isinstance(node, genapi.ICommand):
            continue
        try:
            node.to_string()
            read += 1
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            problems.append("read %s: %s" % (name, e))
    unreachable = sorted(f for f in features if f not in reachable)
    if unreachable:
        problems.append("not reachable from Root: %s" % ", ".join(unreachable))

    def set_and_check(name, value, same=lambda x, y: x == y):
        node = nm.get_node(name)
        try:
            node.value = value
            got = node.value
            if not same(got, value):
                problems.append("%s: wrote %r, read back %r" % (name, value, got))
        except Exception as e:  # noqa: BLE001
            problems.append("write %s=%r: %s" % (name, value, e))

    close = lambda x, y: abs(x - y) <= 1e-3 * max(1.0, abs(y))  # noqa: E731
    set_and_check("Width", 640)

    # a Bayer image starts on the colour its format names: OffsetX and OffsetY step by 2
    set_and_check("PixelFormat", "BayerRG8")
    for name in ("OffsetX", "OffsetY"):
        node = nm.get_node(name)
        if node.inc != 2:
            problems.append("%s increment %d under BayerRG8, want 2" % (name, node.inc))
        try:
            node.value = 3
            problems.append("%s 3 taken under BayerRG8" % name)
        except Exception:  # noqa: BLE001
            pass
        set_and_check(name, 2)
        set_and_check(name, 0)
    set_and_check("PixelFormat", "Mono8")
    if nm.get_node("OffsetY").inc != 1:
        problems.append("OffsetY increment %d under Mono8, want 1" % nm.get_node("OffsetY").inc)
    set_and_check("Height", 480)
    for entry in nm.get_node("PixelFormat").symbolics:
        set_and_check("PixelFormat", entry)
    set_and_check("PixelFormat", "Mono8")

    # Width goes in pixel pairs under YUV422_8 (its increment follows the format: pInc), as the
    # camera's own writes enforce; in single pixels under Mono8
    width = nm.get_node("Width")
    set_and_check("PixelFormat", "YUV422_8")
    if width.inc != 2:
        problems.append("Width increment %d under YUV422_8, want 2" % width.inc)
    try:
        width.value = 641
        problems.append("Width 641 taken under YUV422_8")
    except Exception:  # noqa: BLE001  (GenApi's OutOfRangeException: off the increment)
        pass
    set_and_check("Width", 642)
    set_and_check("PixelFormat", "Mono8")
    if width.inc != 1:
        problems.append("Width increment %d under Mono8, want 1" % width.inc)
    set_and_check("Width", 641)
    # an odd width does not fit YUV422_8: the camera refuses the format (the reference GenApi
    # passes the write on; the camera's status comes back as an exception)
    try:
        nm.get_node("PixelFormat").value = "YUV422_8"
        problems.append("PixelFormat YUV422_8 taken at Width 641")
    except Exception:  # noqa: BLE001
        pass
    if nm.get_node("PixelFormat").value != "Mono8":
        problems.append("PixelFormat %s after a refused write" % nm.get_node("PixelFormat").value)
    set_and_check("Width", 640)
    set_and_check("AcquisitionFrameRate", 12.5, close)
    set_and_check("ExposureTime", 2000.0, close)
    set_and_check("Gain", 6.0, close)

    # limits follow each other: OffsetX may go up to WidthMax - Width, not beyond
    width_max = nm.get_node("WidthMax").value
    ox = nm.get_node("OffsetX")
    if ox.max != width_max - 640:
        problems.append("OffsetX max %d, want WidthMax - Width = %d" % (ox.max, width_max - 640))
    set_and_check("OffsetX", ox.max)
    set_and_check("OffsetX", 0)
    payload = nm.get_node("PayloadSize").value
    if payload != 640 * 480:
        problems.append("PayloadSize %d after 640x480 Mono8" % payload)

    # SFNC types a host looks these up by
    for name, kind in [("GevSCPSDoNotFragment", genapi.IBoolean),
                       ("GevSCPSFireTestPacket", genapi.IBoolean),
                       ("GevSCPSPacketSize", genapi.IInteger),
                       ("GevGVSPExtendedIDMode", genapi.IEnumeration),
                       ("AcquisitionStart", genapi.ICommand),
                       ("TLParamsLocked", genapi.IInteger)]:
        if not nm.has_node(name) or not isinstance(nm.get_node(name), kind):
            problems.append("%s is missing or not %s" % (name, kind.__name__))

    gvcp.write_reg(CCP, 0)
    ok = not problems
    print(json.dumps({"ok": ok, "url": url, "nodes": len(nm.nodes), "read": read,
                      "reachable": len(reachable), "gvcp_commands": gvcp.commands,
                      "problems": problems[:20]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
