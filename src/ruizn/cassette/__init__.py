"""The cassette: a run's recording replayed, forked, compared and driven again."""
