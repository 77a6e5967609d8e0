"""Starts and reads its stdin but never answers anything (not even `initialize`)."""

import sys

print("silent server: I read but never answer", file=sys.stderr, flush=True)
for _line in sys.stdin:
    pass
