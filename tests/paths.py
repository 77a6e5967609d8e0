"""Where the suite's own files are: one home for the paths tests share, so a test file
can move between folders without counting parents."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# Real Messages API traffic beside the repo (not in it): ../shared/anthropic-recordings.
RECORDINGS = REPO.parent / "shared" / "anthropic-recordings"
