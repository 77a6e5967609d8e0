"""The `ruizn` command: click commands, printing and exit codes, over `ruizn.Agent`."""

import signal

# Ctrl-C before a run has begun (while Python imports the CLI) ends the process quietly, as
# the shell expects, instead of printing a KeyboardInterrupt traceback. Set here, the first
# module of the CLI that runs, so the window before it is as short as it can be; a run
# installs its own handlers (first Ctrl-C cancels cleanly, the second exits). Only the CLI
# imports this package: a library user's process keeps its own SIGINT handling.
signal.signal(signal.SIGINT, signal.SIG_DFL)
