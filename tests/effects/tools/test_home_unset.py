"""With HOME unset (a service, cron, `env -i`), ruizn finds the home in the password
database: the sandbox still hides it."""

from __future__ import annotations

import os
import pwd
import secrets
from pathlib import Path

import anyio

from ruizn.effects.tools.bash import ShellJobs, shell_config, shell_tools
from ruizn.effects.tools.bwrap import find_bwrap, shell_environment


def test_with_home_unset_the_real_home_is_still_hidden(tmp_path: Path) -> None:
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    marker = home / f".ruizn-test-{secrets.token_hex(4)}"
    marker.write_text("private")
    environ = {k: v for k, v in shell_environment(os.environ).items() if k != "HOME"}
    jobs = ShellJobs(
        shell_config(
            workspace=tmp_path,
            hidden=(),
            allow_read=(),
            network=False,
            sandbox=True,
            bwrap=find_bwrap(os.environ),
            environ=environ,
            timeout=60,
        )
    )
    bash = shell_tools(jobs)[0]
    command = f"cat {marker} 2>&1; echo ---; ls -A {home}"
    try:
        result = anyio.run(lambda: bash.invoke({"command": command}))
    finally:
        jobs.close()
        marker.unlink()
    assert isinstance(result, str)
    read, listed = result.split("---", 1)
    assert "private" not in result
    assert "No such file or directory" in read
    assert marker.name not in listed
