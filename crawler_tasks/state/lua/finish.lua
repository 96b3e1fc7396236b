-- A URL reached its final state (fetched and parsed, failed for good, disallowed, cancelled).
-- Exactly once per admitted URL: the inflight entry is the token; a redelivered or duplicated
-- task finds it gone and changes nothing. The partition's "out" count grows by one; when it
-- reaches the partition's "in", the caller checks every partition (ledger.drained) and the
-- task that finds the whole crawl drained marks it finishing, so there is no idle timeout.
--
-- Output is exactly-once too: the URL's record goes into the unwritten hash in the same step
-- (formats.Unwritten: record id, the writer's file, time, the record), and leaves it only once
-- the record is on disk (recorder.py). A process that dies in between leaves the record here,
-- for the redelivered task, the dispatcher or the finisher to write.
--
-- All keys are the URL's partition's.
-- KEYS[1] inflight  KEYS[2] flow hash  KEYS[3] stats  KEYS[4] per-second
-- KEYS[5] attempts hash  KEYS[6] unwritten hash
-- ARGV[1] url  ARGV[2] unwritten entry (JSON; "" = the URL has no record, robots.txt refused
-- it)  then pairs: stats field, increment
-- Returns the partition's URLs still outstanding (0: check the crawl, ledger.drained), or -1
-- if the URL was final already.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
redis.call('HDEL', KEYS[5], ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[6], ARGV[1], ARGV[2]) end
local out = redis.call('HINCRBY', KEYS[2], 'out', 1)
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]) end
local t = redis.call('TIME')
redis.call('HINCRBY', KEYS[4], t[1], 1)
return tonumber(redis.call('HGET', KEYS[2], 'in') or '0') - out
