"""Starts and reads its stdin but never answers anything (not even `initialize`)."""

import os
import sys

print(f"silent server pid {os.getpid()}: I read but never answer", file=sys.stderr, flush=True)
for _line in sys.stdin:
    pass
