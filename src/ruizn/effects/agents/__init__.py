"""Subagent definition files (Claude Code's format): read from folders, never run here."""
