"""`ruizn run --hooks FILE`: the hook's environment holds neither the API key nor a
`*_TOKEN`, unless the person's file names it in the hook's `env`; the run's log records the
names passed, never a value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.conftest import API_KEY, cli_env, run_cli
from tests.fakeapi import Stream, Text

DUMP = "env -0 > {}"


def _environment(path: Path) -> dict[str, str]:
    pairs = (entry.partition("=") for entry in path.read_text().split("\0") if entry)
    return {name: value for name, _, value in pairs}


def test_hooks_get_no_secret_but_those_the_persons_file_passes(
    workspace: Path, server_factory: Any
) -> None:
    bare, passed = workspace.parent / "bare.env", workspace.parent / "passed.env"
    hooks = {
        "SessionStart": [
            {
                "hooks": [
                    {"command": DUMP.format(bare)},
                    {"command": DUMP.format(passed), "env": ["DEPLOY_TOKEN"]},
                ]
            }
        ]
    }
    path = workspace.parent / "hooks.json"
    path.write_text(json.dumps(hooks), encoding="utf-8")
    server = server_factory([Stream((Text("ok"),))])
    env = cli_env(server.base_url, DEPLOY_TOKEN="deploy-secret", OTHER_PASSWORD="pw-secret")
    done = run_cli(["run", "--hooks", str(path), "hi"], workspace=workspace, env=env)
    assert done.code == 0, done.stderr
    seen = _environment(bare)
    assert API_KEY not in seen.values()
    assert not {"ANTHROPIC_API_KEY", "DEPLOY_TOKEN", "OTHER_PASSWORD"} & set(seen)
    given = _environment(passed)
    assert given["DEPLOY_TOKEN"] == "deploy-secret"
    assert "OTHER_PASSWORD" not in given
    assert "ANTHROPIC_API_KEY" not in given
    log = done.log_path.read_text()
    assert '"env": ["DEPLOY_TOKEN"]' in log or '"env":["DEPLOY_TOKEN"]' in log
    assert "deploy-secret" not in log
