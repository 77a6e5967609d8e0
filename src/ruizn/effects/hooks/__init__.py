"""Hook commands (Claude Code's contract, see ruizn.hooks): reading their configuration and
running them."""
