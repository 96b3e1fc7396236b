-- A writer appended (or failed to append) the records it reserved (archive_reserve.lua):
-- are they the URL's archived ones? Asked after the append, with the WARC file still locked,
-- so a writer that lost its reservation meanwhile (it was frozen or slow, and another took
-- the place over) truncates its own append: one copy per URL, as commit.lua for page records.
-- KEYS[1] archived hash (the URL's partition's)
-- ARGV[1] field  ARGV[2] rid of the reservation  ARGV[3] '1' keep (appended), '0' drop (the
-- append failed: the place is given back if still this writer's)
-- Returns {1} if the records with this rid are the archived ones, else {0, the value that is
-- there instead: another record id or another writer's reservation, or ""} (undo the append).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return {0, ''} end
if v == ARGV[2] then return {1} end  -- committed already (adopted by another writer)
if string.sub(v, 1, 1) ~= '{' or cjson.decode(v).rid ~= ARGV[2] then return {0, v} end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {1}
end
redis.call('HDEL', KEYS[1], ARGV[1])
return {0, ''}
