"""What a workspace tells the model about itself: its instructions files (AGENTS.md)."""
