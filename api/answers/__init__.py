"""One module per page: ``PATH``, ``NAME`` and ``answer(query) -> api.answer.Answer`` (see api.registry)."""
