"""The tool boundary: what a tool is, the built-ins, `@tool` functions and the loader."""
