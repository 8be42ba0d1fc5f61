#!/bin/sh
# Container entry point: make sure the store has a writable home, then run the command (gunicorn).
# /cache is meant to be a volume (-v rlboard-cache:/cache); without one the store lives in the container's
# own file system, and when /cache is not writable (e.g. a host folder owned by another user) in a
# temporary folder, with a warning: it is then rebuilt whenever the container starts.
set -eu

cache="${RLBOARD_CACHE_DIR:-/cache}"
if ! mkdir -p "$cache" 2>/dev/null || ! [ -w "$cache" ]; then
    fallback=$(mktemp -d "${TMPDIR:-/tmp}/rlboard-cache.XXXXXX")
    echo "rlboard: $cache is not writable by uid $(id -u); keeping the store in $fallback instead" \
         "(lost with the container; chown the volume to uid $(id -u) to keep it)" >&2
    export RLBOARD_CACHE_DIR="$fallback"
fi
root="${RLBOARD_ROOT:-/data}"
if ! [ -d "$root" ]; then
    echo "rlboard: no rollout folder at $root: mount one with -v /path/to/rollouts:$root:ro" >&2
fi

exec "$@"
