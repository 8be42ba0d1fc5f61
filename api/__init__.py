"""The views as data: each page's answer (its figures' series, its tables' rows, its resolved view state and
notices) built by the same ``data`` functions and ``components`` builders as the page's callbacks, for the
JSON API (``/api/v1/<page>``), the command line (``app.py query``) and snapshots (``app.py snapshot``).

``api`` sits beside ``pages``: it imports ``components`` and ``data``, never ``pages`` (nor they it).
"""
