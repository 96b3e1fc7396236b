-- Reserve a URL's place in the crawl's WARC archive before appending its records, so that a
-- URL fetched twice (taken back from a frozen or killed process, a redelivered task) has one
-- response record (or one conversion record) per crawl: the first attempt whose records reach
-- the archive keeps them, later attempts write none. The writer holds its WARC file's lock
-- from this call until archive_commit.lua, so nothing else lands in its file meanwhile.
-- KEYS[1] archived hash (the URL's partition's)
-- ARGV[1] field (the kind and the URL's digest, state/archive.py field)
-- ARGV[2] this writer's reservation (formats.ArchiveSlot as JSON: rid, its file, the file's size)
-- ARGV[3] the other writer's reservation the caller found, judged not on disk: taken over
--         if it is still there unchanged ("" on a first call)
-- Returns formats.ArchivePlace first: {1} WRITE (reserved for this writer); {0, rid} ARCHIVED
-- already (keep that rid, write nothing); {2, reservation} PENDING: another writer reserved
-- it and has not committed: the caller judges whether its records are on disk and calls
-- again (or adopts them).
local v = redis.call('HGET', KEYS[1], ARGV[1])
if (not v) or (ARGV[3] ~= '' and v == ARGV[3]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {1}
end
if string.sub(v, 1, 1) ~= '{' then return {0, v} end  -- committed: the record id
return {2, v}
