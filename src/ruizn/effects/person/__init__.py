"""The person at the keyboard: who answers when a tool call needs approval."""
