#!/usr/bin/env python3
"""Write the seed scripts of ringrdma-cp's receiver fuzzer (tests/cp/corpus-rx).

Each file is a script for tests/cp/fuzz_rx.c (its header says the format):
whole sessions (HELLO, FILE_START, chunks, FILE_END), a stream file, the
next file begun before the last is done, errors and refusals, writes with
a wrong key or outside their slot, a write that puts the receiver's QP
into error with the peer still connected, a crowd of requests beyond
--max-pending. The fuzzer adds its finds next to them
(tools/fuzz-cp).
"""
import hashlib
import os
import struct
import sys

WIN4, MW_OFF, TOKEN, FORCE, CROWD, BUSY = 2, 8, 16, 32, 0x40, 0xC0


def hello(chunk=0, window=2, token=0):
    return bytes([0, chunk | window << 2 | token << 5])


def start(name=0, size=0, stream=False):
    hi, lo = size >> 11, size & 0x7FF
    assert hi < 16 and lo < 256, size
    return bytes([1, name | (8 if stream else 0) | hi << 4, lo])


def chunks(n, fill=0x41, q=0):
    return bytes([2, fill, q]) * n


def end(bad_sum=False, bad_len=False):
    return bytes([3, (1 if bad_sum else 0) | (2 if bad_len else 0)])


def write(p, length, off, imm=None, key=None):
    s = bytes([4, p]) + struct.pack("<Hh", length, off)
    if imm is not None:
        s += struct.pack("<I", imm)
    if key is not None:
        s += struct.pack("<I", key)
    return s


def raw(b):
    return bytes([5]) + struct.pack("<H", len(b)) + b


WAIT, BYE = bytes([8, 8]), bytes([7])
MAGIC, VERSION = 0x50435252, 9


def msg(t, payload):
    return struct.pack("<IBBH", MAGIC, VERSION, t, len(payload)) + payload


def range_start(off, length, stripe, size=20480, name=b"big"):
    """FILE_START of a range (version 8): resume and range flags."""
    return msg(3, struct.pack("<QIH", size, 6, len(name)) + name + b"\x00" * 16
               + struct.pack("<QQQ", off, length, stripe))


def commit(stripe=8192, size=20480, name=b"big", fold=0):
    return msg(16, struct.pack("<QIH", size, 0, len(name)) + name + b"\x00" * 16
               + struct.pack("<QQ", stripe, fold))


FROM0 = msg(13, struct.pack("<Q", 0))


def main(out):
    os.makedirs(out, exist_ok=True)
    # start(): size = (high nibble << 11) + low byte: 8392 is 4 << 11 + 200.
    sized = start(0, 8392) + chunks(3) + end()
    seeds = [
        bytes([WIN4 | TOKEN]) + hello() + sized + WAIT + BYE,
        bytes([WIN4]) + hello() + sized + start(2, 200) + chunks(1, 0x33) + end() + WAIT + BYE,
        bytes([WIN4]) + hello() + start(7, 0, True) + bytes([2, 1, 10, 2, 2, 63, 2, 3, 0])
        + end() + WAIT + BYE,
        bytes([WIN4]) + hello() + start(0, 8392) + chunks(1) + bytes([6, 9]) + WAIT,
        bytes([WIN4]) + hello() + start(0, 8392) + write(5 << 2, 4096, 0, key=0xDEADBEEF) + WAIT,
        bytes([WIN4]) + hello() + start(0, 8392) + write(0, 4096, 2048) + WAIT,
        bytes([WIN4]) + hello() + start(0, 8392) + write(0, 4096, 4096) + WAIT,
        bytes([WIN4]) + hello() + start(0, 8392) + chunks(3) + end(bad_sum=True) + WAIT,
        bytes([WIN4 | TOKEN]) + hello(token=1) + WAIT,
        bytes([WIN4 | MW_OFF]) + hello() + sized + WAIT + BYE,
        bytes([WIN4]) + bytes([9, 15]),
        bytes([WIN4]) + hello() + sized + WAIT + sized + WAIT + BYE,
        bytes([WIN4 | FORCE]) + hello() + sized + WAIT + sized + WAIT + BYE,
        bytes([WIN4 | BUSY]) + hello() + WAIT,
        bytes([3]) + hello(chunk=1, window=3) + start(3, 18532) + chunks(5, 0x5A) + end() + WAIT + BYE,
        bytes([WIN4]) + hello() + raw(b"RRCP\x04\x03\xff\xff") + WAIT,
        bytes([WIN4]) + hello() + start(4, 10) + WAIT,
        bytes([WIN4]) + hello() + start(0, 8392) + chunks(1) + BYE,
        # Between files, a write with a made-up key, then with the key of
        # a grant used up (stale): the receiver's QP goes into error and
        # the peer never disconnects.
        bytes([WIN4]) + hello() + sized + WAIT + write(5 << 2, 4096, 0, key=0xDEADBEEF) + WAIT,
        bytes([WIN4]) + hello() + sized + WAIT + write(3 << 2, 4096, 0) + WAIT,
        # A crowd of requests while admitted, and while still without HELLO.
        bytes([WIN4 | CROWD]) + hello() + sized + WAIT,
        bytes([WIN4 | CROWD]) + WAIT,
        # Ranges of a striped file (version 8): one into the partial, its
        # FILE_END's sum wrong; ranges then a commit; a commit alone; a
        # range off the chunks.
        bytes([WIN4]) + hello() + raw(range_start(8192, 8192, 8192)) + WAIT + raw(FROM0)
        + chunks(2) + end() + WAIT + BYE,
        bytes([WIN4]) + hello() + raw(range_start(16384, 4096, 8192)) + WAIT + raw(FROM0)
        + chunks(1) + end() + WAIT + raw(commit()) + WAIT + BYE,
        bytes([WIN4]) + hello() + raw(commit()) + WAIT + BYE,
        bytes([WIN4]) + hello() + raw(range_start(6144, 6144, 6144)) + WAIT,
    ]
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        with open(os.path.join(out, name), "wb") as f:
            f.write(s)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus-rx"))
