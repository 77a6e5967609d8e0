"""What is installed: the command that brings one of ruizn's extras."""
