"""A plug-in module that cannot be imported: its dependency is missing."""

import ruizn_plugin_example_missing_dependency  # noqa: F401

tools: list[object] = []
