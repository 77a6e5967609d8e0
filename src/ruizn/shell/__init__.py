"""The imperative shell: the runner (`runner`), the one builder (`agent`: `ruizn.Agent`) and
what they need. The features (cassette, view, fleet) and the `ruizn` command (`ruizn.cli`)
sit above it."""
