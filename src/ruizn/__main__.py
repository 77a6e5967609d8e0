import os
import sys

# `python -m ruizn` puts the current folder first on sys.path: a repository's mcp.py or
# anyio.py would then be imported by ruizn itself. It goes last instead, where `--tool
# MODULE:ATTR` still finds the user's own modules (effects/tools/loader.py).
if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.append(sys.path.pop(0))

from ruizn.cli.main import main  # after sys.path is safe

main()
