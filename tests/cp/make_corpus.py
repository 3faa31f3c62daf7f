#!/usr/bin/env python3
"""Write the seed corpus of ringrdma-cp's wire-format fuzzer (tests/cp/corpus).

One valid message of every type plus broken variants; the fuzzer adds its
own finds next to them (tools/fuzz-cp).
"""
import hashlib
import os
import struct
import sys

MAGIC, VERSION = 0x50435252, 9


def msg(t, payload, version=VERSION, magic=MAGIC, plen=None):
    n = len(payload) if plen is None else plen
    return struct.pack("<IBBH", magic, version, t, n) + payload


def meta(mode=0, sec=0, nsec=0):
    """FILE_START's tail: mode, mtime seconds and nanoseconds."""
    return struct.pack("<IqI", mode, sec, nsec)


def entry(t, name, target=b"", mode=0, sec=0, nsec=0):
    """MKDIR (9), SYMLINK (10), DIR_META (11)."""
    return msg(t, struct.pack("<H", len(name)) + name + struct.pack("<H", len(target)) + target
               + meta(mode, sec, nsec))


S = 1 << 26  # a stripe of 64 MiB


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = [
        msg(1, struct.pack("<IIH", 1 << 20, 16, 32) + bytes(range(32))),  # a nonce
        msg(1, struct.pack("<IIH", 1 << 20, 16, 5) + b"token"),  # version 5's token
        msg(1, struct.pack("<IIH", 4096, 1, 0)),
        msg(2, struct.pack("<IIQ", 65536, 8, 0x7F0000001000) + b"p" * 32),
        msg(2, struct.pack("<IIQ", 65536, 8, 0x7F0000001000)),  # version 5's WELCOME
        msg(14, b"n" * 32),  # CHALLENGE
        msg(15, b"a" * 32),  # AUTH
        msg(15, b"a" * 31),
        msg(3, struct.pack("<QIH", 1 << 30, 0, 8) + b"data.bin" + meta()),
        msg(3, struct.pack("<QIH", 0, 1, 10) + b"sub/stream" + meta()),
        msg(3, struct.pack("<QIH", 5, 8, 5) + b"a/b/c" + meta(0o755, 1700000000, 999999999)),
        msg(3, struct.pack("<QIH", 5, 8, 1) + b"s" + meta(0o4755, -1, 0)),
        msg(3, struct.pack("<QIH", 5, 0, 1) + b"s" + meta(0o644, 0, 0)),
        msg(3, struct.pack("<QIH", 5, 0, 8) + b"data.bin"),  # version 4's layout
        msg(3, struct.pack("<QIH", 5, 0, 5) + b"../.." + meta()),
        msg(3, struct.pack("<QIH", 5, 0, 11) + b"/etc/passwd" + meta()),
        msg(3, struct.pack("<QIH", 5, 0, 300) + b"x" * 300 + meta()),
        msg(4, b""),  # FILE_READY of version 2: no longer a type
        msg(5, struct.pack("<IHI", 0xFFFFFFFF, 1, 0x1234)),
        msg(5, struct.pack("<IH3I", 3, 3, 0x100, 0x201, 0x302)),
        msg(5, struct.pack("<IH", 3, 9) + b"\x00" * 8),
        msg(6, struct.pack("<QQ", 123, 0xDEADBEEF)),
        msg(7, struct.pack("<QQ", 0, 0x2D06800538D394C2)),
        msg(8, struct.pack("<IH", 6, 9) + b"disk full"),
        msg(8, struct.pack("<IH", 0, 1) + b"\n"),
        entry(9, b"top"),
        entry(9, b"top/sub"),
        entry(9, b"top/../x"),
        entry(9, b"top", mode=0o755),
        entry(10, b"top/link", b"../../etc/passwd", sec=1700000000, nsec=5),
        entry(10, b"top/link", b""),
        entry(10, b"top/link", b"a\x00b"),
        entry(10, b"l", b"t" * 225),
        entry(11, b"top", mode=0o555, sec=1700000000, nsec=123456789),
        entry(11, b"top", mode=0o1777),
        entry(11, b"top", nsec=1000000000),
        entry(11, b"/top", mode=0o755),
        msg(9, b"\x00" * 16),
        msg(12, b"\x00" * 16),
        msg(3, struct.pack("<QIH", 1 << 34, 2, 3) + b"big" + b"\x00" * 16),  # to resume
        msg(3, struct.pack("<QIH", 0, 3, 1) + b"s" + b"\x00" * 16),  # a stream to resume
        msg(12, struct.pack("<QQI", 1 << 33, 0x1234, 0)),
        msg(12, struct.pack("<QQI", 5, 6, 1)),  # the file under its name
        msg(12, struct.pack("<QQI", 5, 6, 2)),
        msg(12, struct.pack("<QQ", 5, 6)),
        msg(13, struct.pack("<Q", 1 << 33)),
        msg(13, struct.pack("<I", 1)),
        msg(14, b"\x00" * 8),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=1),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=2),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=3),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=4),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=5),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=7),
        msg(1, struct.pack("<IIH", 4096, 3, 0), version=8),
        # BUSY (version 9): 4 bytes, the seconds the receiver was silent.
        msg(17, struct.pack("<I", 65)),
        msg(17, b""),
        msg(17, struct.pack("<Q", 65)),
        # Ranges (version 8): FILE_START with CP_START_RANGE (4) and its
        # offset, length and stripe; FILE_COMMIT (16) with stripe and sum.
        msg(3, struct.pack("<QIH", 5 * S + 9, 6, 3) + b"big" + meta()
            + struct.pack("<QQQ", S, S, S)),
        msg(3, struct.pack("<QIH", 5 * S + 9, 14, 3) + b"big" + meta(0o600, 5, 6)
            + struct.pack("<QQQ", 5 * S, 9, S)),  # the tail
        msg(3, struct.pack("<QIH", 5 * S + 9, 6, 3) + b"big" + meta()
            + struct.pack("<QQQ", 5 * S, S, S)),  # past the size
        msg(3, struct.pack("<QIH", 5 * S + 9, 6, 3) + b"big" + meta()
            + struct.pack("<QQQ", S // 2, S, S)),  # off the stripe
        msg(3, struct.pack("<QIH", 5 * S + 9, 6, 3) + b"big" + meta()
            + struct.pack("<QQQ", 0, S, 0)),  # stripe 0
        msg(3, struct.pack("<QIH", 5 * S + 9, 4, 3) + b"big" + meta()
            + struct.pack("<QQQ", 0, S, S)),  # not to resume
        msg(16, struct.pack("<QIH", 5 * S + 9, 8, 3) + b"big" + meta(0o644, 7, 8)
            + struct.pack("<QQ", S, 0x1122334455667788)),
        msg(16, struct.pack("<QIH", 5 * S + 9, 0, 3) + b"big" + meta()
            + struct.pack("<QQ", 0, 1)),  # stripe 0
        msg(16, struct.pack("<QIH", 5 * S + 9, 2, 3) + b"big" + meta()
            + struct.pack("<QQ", S, 1)),  # a flag of FILE_START's
        msg(16, struct.pack("<QIH", 5 * S + 9, 0, 2) + b".." + meta()
            + struct.pack("<QQ", S, 1)),
        msg(6, struct.pack("<QQ", 1, 2), plen=200),
        b"\x00" * 17,
        b"\xff" * 40,
    ]
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        with open(os.path.join(out, name), "wb") as f:
            f.write(s)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus"))
