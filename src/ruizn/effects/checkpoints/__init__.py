"""Checkpoints of a workspace's files: a store of snapshots outside the workspace."""
