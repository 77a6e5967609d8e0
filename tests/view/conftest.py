"""What the view tests share: the elements of a page Chromium dumped, and `ruizn view` of
a workspace's last run. `workspace` and `server_factory` are fixtures of tests/conftest.py."""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path

from tests.cli.conftest import run_cli

__all__ = ["Dom", "artifacts", "view_page"]


class Dom(HTMLParser):
    """The elements of a dumped page (tag, attributes) and its text, outside <script>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self._in_script = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script -= 1

    def handle_data(self, data: str) -> None:
        if not self._in_script:
            self.texts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]

    def by_class(self, cls: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if cls in (a.get("class") or "").split()]


def view_page(workspace: Path, *args: str) -> Path:
    """`ruizn view last ARGS` in `workspace`: the page it wrote."""
    result = run_cli(["view", "last", *args], workspace=workspace)
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    page = Path(result.stdout.strip())
    assert page.is_absolute() or (workspace / page).is_file()
    return page if page.is_absolute() else workspace / page


def artifacts(tmp_path: Path) -> Path:
    """Where screenshots are kept: RUIZN_TEST_ARTIFACTS, else the test's tmp folder."""
    folder = Path(os.environ.get("RUIZN_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
