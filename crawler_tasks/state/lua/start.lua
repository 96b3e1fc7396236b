-- A fetch task begins: mark its URL as started, if (and only if) it is still in flight.
-- The mark tells the dispatcher's reaper that the fetch message was delivered; the "only if"
-- keeps a late duplicate from resurrecting a URL that already reached its final state.
-- KEYS[1] inflight   ARGV[1] url
-- Returns 1 if the URL is in flight (the task should go on), 0 if not (a duplicate delivery).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
if string.sub(v, -2) ~= '|s' then redis.call('HSET', KEYS[1], ARGV[1], v .. '|s') end
return 1
