"""Everything below the UI: settings, schema, incremental ingest, Parquet store, metrics, queries, cache.

Nothing in this package imports Dash.
"""

from data.config import configure_allocator, configure_regex_limit

configure_allocator()
configure_regex_limit()
