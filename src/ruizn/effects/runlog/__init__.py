"""Run logs on disk: the writer, the reader, run folders, the store and the trust record."""
