"""The command an error gives for a missing extra installs it where ruizn is installed."""

from __future__ import annotations

import json

from ruizn.effects.packaging.extras import command_for

PY = "/home/me/venv/bin/python"


def _direct_url(url: str, **dir_info: object) -> str:
    return json.dumps({"url": url, "dir_info": dir_info})


def test_an_editable_checkout_gets_that_checkout_with_the_extra() -> None:
    record = _direct_url("file:///home/me/src/ruizn", editable=True)
    assert command_for("fleet", record, python=PY) == (
        "/home/me/venv/bin/python -m pip install -e '/home/me/src/ruizn[fleet]'"
    )


def test_a_folder_installed_without_e_gets_the_folder() -> None:
    record = _direct_url("file:///opt/ruizn%20src")
    assert command_for("otel", record, python=PY) == (
        "/home/me/venv/bin/python -m pip install '/opt/ruizn src[otel]'"
    )


def test_an_index_install_gets_the_package_name() -> None:
    assert command_for("fleet", None, python=PY) == (
        "/home/me/venv/bin/python -m pip install 'ruizn[fleet]'"
    )
    # A wheel or a VCS URL is no folder to install from again: the index's name.
    wheel = json.dumps({"url": "https://x/ruizn-1.0-py3-none-any.whl", "archive_info": {}})
    assert command_for("fleet", wheel, python=PY).endswith(" -m pip install 'ruizn[fleet]'")
    assert command_for("fleet", "not json", python=PY).endswith("'ruizn[fleet]'")


def test_a_python_path_with_a_space_is_quoted() -> None:
    assert command_for("fleet", None, python="/my venv/python").startswith("'/my venv/python' -m")
