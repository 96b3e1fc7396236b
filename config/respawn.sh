#!/bin/sh
# Run "$@" again whenever it exits: honcho stops every process of the Procfile as soon as one
# exits, so a worker crash (or a Redis restart the worker gives up on) would take the whole
# stack down. SIGTERM from honcho (sent to the whole process group) still stops both.
# Workers use CRAWLER_BROKER_URL, else the Procfile's own Redis.
: "${CRAWLER_BROKER_URL:=redis://127.0.0.1:${REDIS_PORT:-6379}/0}"
export CRAWLER_BROKER_URL
while :; do
    "$@"
    echo "respawn: '$1 $2 $3 $4' exited with status $?; starting it again in 2 s" >&2
    sleep 2
done
