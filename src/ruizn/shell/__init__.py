"""Shell: the CLI and the runner that wires effects to the pure core."""
