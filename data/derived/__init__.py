"""What a commit writes beside the parts: one module per derived kind (its file, how it is built at the
commit and how it is read), listed once in :mod:`data.derived.registry` and described in docs/store.md.
Readers import these modules, never :mod:`data.ingest` (the write side, which builds them at each commit).
"""
