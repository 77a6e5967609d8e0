"""Looking at a run: its timeline and spans (pure projections of the log) and the page."""
