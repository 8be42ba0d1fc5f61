#!/bin/sh
# Container entry point, for any uid (`docker run --user "$(id -u):$(id -g)"` as the rollouts' owner, or the
# image's 10001): make sure the store has a writable home, say once in the log what cannot be read, then run
# the command (gunicorn).
# /cache is meant to be a volume (-v rlboard-cache:/cache; the image makes a new one writable by every uid).
# Without one the store lives in the container's own file system. When /cache is not writable by this uid
# (a host folder or an older volume of another uid), the store goes to a temporary folder, with a warning:
# it is then rebuilt whenever the container starts. Stores another uid left in /cache are not touched: this
# uid keeps its own in /cache/uid-<uid>.
set -eu

uid=$(id -u)
cache="${RLBOARD_CACHE_DIR:-/cache}"
var=RLBOARD_CACHE_DIR
case "$cache" in
    *://*)
        # The stores on object storage (RLBOARD_CACHE_DIR=s3://…): /cache keeps their local working copies.
        var=RLBOARD_WORK_DIR
        cache="${RLBOARD_WORK_DIR:-/cache}"
        export RLBOARD_WORK_DIR="$cache"
        ;;
esac
if ! mkdir -p "$cache" 2>/dev/null || ! [ -w "$cache" ]; then
    fallback=$(mktemp -d "${TMPDIR:-/tmp}/rlboard-cache.XXXXXX")
    echo "rlboard: $cache is not writable by uid $uid (it is $(stat -c 'uid %u, mode %a' "$cache" 2>/dev/null || echo 'not there'));" \
         "keeping the store in $fallback instead (lost with the container; chown the volume to uid $uid to keep it)" >&2
    export "$var=$fallback"
elif [ -n "$(find "$cache" -mindepth 1 -maxdepth 1 ! -name 'uid-*' ! -writable -print -quit 2>/dev/null)" ]; then
    # Stores written by another uid (the container was run with another --user before): this uid could
    # not update them, so it keeps its own beside them.
    echo "rlboard: $cache holds stores of another uid; uid $uid keeps its own in $cache/uid-$uid" >&2
    mkdir -p "$cache/uid-$uid"
    export "$var=$cache/uid-$uid"
fi

root="${RLBOARD_ROOT:-/data}"
if ! [ -e "$root" ]; then
    echo "rlboard: no rollout folder at $root: mount one with -v /path/to/rollouts:$root:ro" >&2
elif ! [ -r "$root" ] || ! [ -x "$root" ]; then
    echo "rlboard: $root cannot be read by uid $uid, gid $(id -g) (it is $(stat -c 'uid %u, gid %g, mode %a' "$root"))." \
         "Run the container as its owner: docker run --user \"\$(id -u):\$(id -g)\" ..., or make it readable" \
         "by uid $uid; the runs page says more. Serving anyway." >&2
fi

exec "$@"
