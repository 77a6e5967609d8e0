"""Evals: a dataset of goals (pydantic-evals' file format) run many times, each run scored,
the whole reported for a person and for CI; offline from recordings too. `dataset` reads
the file, `scorers` (pure) and `scoring` score a run, `runner` runs the cases, `recordings`
and `rescore` work from saved runs, `report` holds the results and their forms, `api` is
`ruizn.eval`."""
