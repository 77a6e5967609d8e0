"""ruizn's version: one home, read by the package face, the log's run_started and the build."""

__version__ = "0.1.0"
