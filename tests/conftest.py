"""Shared test options: `pytest --update-goldens` re-blesses the expected files."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of the golden tests (review the git diff after)",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
