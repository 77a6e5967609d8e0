"""MCP servers' tools, through the official `mcp` SDK."""
