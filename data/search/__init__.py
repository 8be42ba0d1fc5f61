"""The text search of the responses page and the orders it feeds: :mod:`.texts` (the text index and the
top of the reward order, read without state), :mod:`.engine` (searches, their hits, progress and
background work in this process) and :mod:`.order` (a filter's matches, their count and their order)."""
