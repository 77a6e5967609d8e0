"""The imperative shell: the runner (`runner`), the one builder (`agent`: `ruizn.Agent`) and
the `ruizn` command (`cli/`: every print and exit code)."""
