"""Says why on stderr and exits before answering `initialize`."""

import sys

print("exits: missing configuration file demo.toml", file=sys.stderr, flush=True)
sys.exit(1)
