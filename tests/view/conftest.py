"""The view tests drive the real CLI against the fake API, like tests/cli."""

from tests.shell.cli.conftest import (  # noqa: F401 (shared fixtures)
    server_factory,
    workspace,
)
