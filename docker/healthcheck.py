"""The image's health check (Dockerfile HEALTHCHECK, compose.yaml): GET /healthz of the server in this
container, at the port and URL prefix the server reads from RLBOARD_*; exit status 0 when it answers 200."""

import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.config import load_settings  # noqa: E402

settings = load_settings()
url = f"http://127.0.0.1:{settings.port}{settings.url_prefix}healthz"
try:
    with urllib.request.urlopen(url, timeout=4) as r:
        sys.exit(0 if r.status == 200 else 1)
except OSError as e:
    print(f"{url}: {e}", file=sys.stderr)
    sys.exit(1)
