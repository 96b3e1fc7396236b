-- A URL reached its final state (fetched and parsed, failed for good, disallowed, cancelled).
-- Exactly once per admitted URL: the inflight entry is the token; a redelivered or duplicated
-- task finds it gone and changes nothing. The task that brings the counter to zero finishes
-- the crawl, so there is no idle timeout anywhere.
--
-- Output is exactly-once too: the URL's record goes into the unwritten hash in the same step
-- (formats.Unwritten: record id, the writer's file, time, the record), and leaves it only once
-- the record is on disk (recorder.py). A process that dies in between leaves the record here,
-- for the redelivered task, the dispatcher or the finisher to write.
--
-- The last URL does not mark the crawl finished: it marks it 'finishing' (final_status says
-- what it will be); the finisher sets the status once summary.json and the rest are done, so
-- a crawl never says finished with a record or its summary missing.
--
-- KEYS[1] inflight  KEYS[2] outstanding  KEYS[3] stats  KEYS[4] state  KEYS[5] per-second
-- KEYS[6] attempts hash  KEYS[7] unwritten hash
-- ARGV[1] url  ARGV[2] unwritten entry (JSON)  then pairs: stats field, increment
-- Returns URLs still outstanding (0 = this call emptied the crawl), or -1 if already final.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('HSET', KEYS[7], ARGV[1], ARGV[2])
local left = redis.call('DECR', KEYS[2])
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]) end
local t = redis.call('TIME')
redis.call('HINCRBY', KEYS[5], t[1], 1)
if left <= 0 then
  local status = 'finished'
  if redis.call('HGET', KEYS[4], 'cancelled') == '1' then status = 'cancelled' end
  redis.call('HSET', KEYS[4], 'status', 'finishing', 'final_status', status,
             'finished_at', t[1] .. '.' .. string.format('%06d', t[2]))
end
return left
