-- Claim an unwritten record (finish.lua left it; its writer died or froze) before writing it:
-- of two processes that find it at once (a redelivered task and a finisher, say), one wins.
-- The claim names the claimer's file and the time, so if the claimer dies in turn, the next
-- one looks for the record in that file, after orphan_record_seconds.
-- KEYS[1] unwritten hash (the URL's partition's)
-- ARGV[1] url  ARGV[2] rid and ARGV[3] ts of the entry as the caller read it
-- ARGV[4] the claimed entry (formats.Unwritten JSON: same rid and record, new path and ts)
-- Returns 1 if claimed, 0 if the entry is gone (written) or changed (claimed by another).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local e = cjson.decode(v)
if e.rid ~= ARGV[2] or e.ts ~= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
