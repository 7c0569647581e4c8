"""What this machine's kernel counts for the host scripts here (they share it by import)."""


def rcvbuf_drops():
    """UDP datagrams the kernel dropped for want of socket receive buffer (UDP RcvbufErrors in
    /proc/net/snmp), all sockets of this machine. aravis's socket path at its defaults holds
    less than one frame (docs/virtual-camera.md): a frame lost so is the host's loss."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])
