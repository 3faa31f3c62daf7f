#!/usr/bin/python3
# The source tree of the ranks' lab test and measurement: FILES small
# files (1 to 8 KiB, the same bytes every time) in 20 directories, and
# "big" of MB MiB from /dev/urandom.
#   make_src.py DIR FILES MB
import os
import random
import sys

root, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(47)
for i in range(n):
    d = os.path.join(root, "d%02d" % (i % 20))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(r.randbytes(r.randint(1, 8) * 1024))
os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "big"), "wb") as f, open("/dev/urandom", "rb") as u:
    for _ in range(mb):
        f.write(u.read(1 << 20))
