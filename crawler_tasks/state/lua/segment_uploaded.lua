-- A staged segment file's object is in the store (its PUT answered): it no longer waits.
-- One script so that a reader never sees it neither waiting nor uploaded (status counts
-- both), and so that an upload repeated after a kill (the same bytes PUT again under the same
-- deterministic name, worker/output/uploads.py) counts once.
-- KEYS[1] the crawl's segments hash (waiting)  KEYS[2] its uploaded hash
-- ARGV[1] the segment's file name  ARGV[2] its size in bytes
-- Returns 1 the first time the segment is recorded as uploaded, 0 when it was already.
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
