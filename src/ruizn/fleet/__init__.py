"""Fleets: many runs at once, on one machine (SQLite) or many (Postgres), on DBOS.

A layer above the runner: it imports the core and (through `driver`, the one adapter) the
runner; nothing below imports it. `dbos` and SQLAlchemy come with the `fleet` extra
(`pip install 'ruizn[fleet]'`, or `pip install -e '.[fleet]'` in a checkout).
"""
