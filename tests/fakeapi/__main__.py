"""`python -m tests.fakeapi ...` is `python -m tests.fakeapi.server ...`."""

from tests.fakeapi.server import main

main()
