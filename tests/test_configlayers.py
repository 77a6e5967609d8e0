"""The pure rules of config files (ruizn.configlayers): precedence, and what a project
file in the workspace may set."""

from __future__ import annotations

import pytest

from ruizn.configlayers import ConfigFileError, effective, project_layer, user_layers


def test_config_layers_precedence_and_what_a_project_file_may_set() -> None:
    user = user_layers({"model": "a", "profiles": {"p": {"model": "b"}}}, "~/c.toml", "p")
    project, refused = project_layer(
        {"max-tokens": 5, "workspace": "/", "approval": "never"}, "ws.toml"
    )
    assert project.values == {"max_tokens": 5, "approval": "never"}
    assert refused == (
        "refused: ws.toml sets workspace (moves the workspace): a file in the workspace may"
        " not; set it on the command line or in your own config file",
    )
    merged = effective((*user, project), {"effort": "low"}, {"model": "d", "max_tokens": 1})
    assert merged["model"] == ("b", "~/c.toml [profiles.p]")
    assert merged["max_tokens"] == (5, "ws.toml")
    assert merged["effort"] == ("low", "command line")
    with pytest.raises(ConfigFileError, match="unknown option 'workspace'"):
        user_layers({"workspace": "/"}, "~/c.toml", None)
