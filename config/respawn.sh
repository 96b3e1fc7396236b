#!/bin/sh
# Run "$@" again whenever it exits: honcho stops every process of the Procfile as soon as one
# exits, so a worker crash (or a Redis restart the worker gives up on) would take the whole
# stack down. SIGTERM from honcho (sent to the whole process group) still stops both.
# Workers use CRAWLER_BROKER_URL, else the Procfile's own Redis.
#
# A command that cannot start at all is not retried forever: "not found" (exit 127, e.g. the
# venv is not on PATH) or not executable (126) gives up at once, and RESPAWN_MAX_FAST (5)
# exits in a row each within RESPAWN_FAST_SECONDS (10) of starting give up too, with one line
# saying why; honcho then stops the stack, which is what the operator has to see.
: "${CRAWLER_BROKER_URL:=redis://127.0.0.1:${REDIS_PORT:-6379}/0}"
export CRAWLER_BROKER_URL
delay="${RESPAWN_DELAY:-2}"
fast_limit="${RESPAWN_MAX_FAST:-5}"
fast_seconds="${RESPAWN_FAST_SECONDS:-10}"
fast=0
while :; do
    started=$(date +%s)
    "$@"
    status=$?
    if [ "$status" -eq 127 ] || [ "$status" -eq 126 ]; then
        echo "respawn: cannot run '$1' (exit $status: not found or not executable); is the venv on PATH? (PATH=.venv/bin:\$PATH honcho start); giving up" >&2
        exit "$status"
    fi
    if [ $(($(date +%s) - started)) -lt "$fast_seconds" ]; then
        fast=$((fast + 1))
    else
        fast=0
    fi
    if [ "$fast" -ge "$fast_limit" ]; then
        echo "respawn: '$1 $2 $3 $4' exited $fast times in a row within ${fast_seconds} s of starting (last status $status); giving up" >&2
        exit 1
    fi
    echo "respawn: '$1 $2 $3 $4' exited with status $status; starting it again in $delay s" >&2
    sleep "$delay"
done
