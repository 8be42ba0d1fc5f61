# RL Logging Board on a shared server: gunicorn serving `app:server` on port 8050.
#
#   docker build -t rlboard .
#   docker run -d --user "$(id -u):$(id -g)" -p 8050:8050 -v /path/to/rollouts:/data:ro -v rlboard-cache:/cache rlboard
#
# Runs as any uid: --user as the rollouts' owner (they are often mode 0700), or the image's own 10001.
#
# Dependencies come from the committed uv.lock only (exact versions and hashes; nothing is resolved at
# build time). Settings are RLBOARD_* environment variables (see docs/deployment.md and docs/settings.md).

# ---- build stage: a virtualenv holding exactly the locked runtime dependencies -------------------------
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml uv.lock ./
# uv only turns the lock file into a hashed requirements list; pip installs it with --require-hashes, so
# a package or version the lock does not name cannot get in. Wheels only: the slim image has no compiler.
RUN python -m pip install --quiet "uv==0.13.8" \
 && uv export --quiet --frozen --no-dev --no-emit-project --format requirements-txt -o /src/requirements.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet --no-deps --require-hashes --only-binary=:all: -r /src/requirements.txt \
 && /opt/venv/bin/pip check

# ---- runtime stage ---------------------------------------------------------------------------------------
FROM python:3.11-slim

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RLBOARD_ROOT=/data \
    RLBOARD_CACHE_DIR=/cache \
    RLBOARD_HOST=0.0.0.0 \
    RLBOARD_PORT=8050 \
    RLBOARD_DEMO=0

# A fixed non-root user by default. /cache is writable by every uid (sticky, as /tmp), and so is a new named
# volume mounted there (it copies the folder's mode): the container also runs under --user as the owner of
# the rollouts, which may be any uid.
RUN groupadd --system --gid 10001 rlboard \
 && useradd --system --uid 10001 --gid rlboard --home-dir /app --no-create-home --shell /usr/sbin/nologin rlboard \
 && mkdir -p /data /cache \
 && chown rlboard:rlboard /cache \
 && chmod 1777 /cache

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=root:root . /app
RUN chmod 0755 /app/docker/entrypoint.sh

USER rlboard
EXPOSE 8050
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/app/docker/healthcheck.py"]

ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["gunicorn", "--config", "/app/gunicorn.conf.py", "app:server"]
