"""The model boundary: the provider protocol and its implementations, and prices."""
