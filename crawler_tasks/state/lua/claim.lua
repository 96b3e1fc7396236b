-- Claim an unwritten record (finish.lua left it; its writer died or froze) before writing it:
-- of two processes that find it at once (a redelivered task and a finisher, say), one wins.
-- The claim names the claimer's file and the time, so if the claimer dies in turn, the next
-- one looks for the record in that file, after orphan_record_seconds.
-- The claim also fences the earlier writer: it may only be frozen, and wake up to append its
-- copy after ours; commit.lua then tells it to undo that copy (the fence names our file and
-- time: the writer fenced may be a slow thread of our own process, appending to our file).
-- KEYS[1] unwritten hash  KEYS[2] fenced hash (the URL's partition's)
-- ARGV[1] url  ARGV[2] rid and ARGV[3] ts of the entry as the caller read it
-- ARGV[4] the claimed entry (formats.Unwritten JSON: same rid and record, new path and ts)
-- ARGV[5] the fence: the claimed entry's path and time (formats.Unwritten.fence)
-- Returns 1 if claimed, 0 if the entry is gone (written) or changed (claimed by another).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local e = cjson.decode(v)
if e.rid ~= ARGV[2] or e.ts ~= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
return 1
