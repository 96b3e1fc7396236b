-- A writer has appended a URL's record to its file: is that copy the one that counts?
-- Asked after the append, not before: a process frozen (SIGSTOP, a VM pause) between a check
-- and its append would otherwise add a second copy after another process, taking the record
-- over (claim.lua), wrote its own. Whoever asks (the writer, or the next writer of its file,
-- which carries the question with its own finish: page_appends.py) holds the file's lock
-- until it acts on the reply, so undoing the copy (truncating the file) never touches another
-- record.
-- KEYS[1] unwritten hash  KEYS[2] fenced hash (the URL's partition's)
-- ARGV[1] url  ARGV[2] the writer's entry up to its record (formats.Unwritten.head: rid, path
-- and ts as Python's json wrote them): compared as text, not decoded, since the record after
-- it holds all the page's outlinks (a link-dense page's KBs were most of this script's time)
-- ARGV[3] the writer's fence (path and time: a claimer in the writer's own file is another)
-- Returns formats.Committed:
--   1 OURS   the entry is still this writer's: it is marked written (removed)
--   0 MOVED  another writer claimed it (the fence names another): undo this copy
--   2 FOUND  gone and not claimed from this writer: a sweep found this copy on disk; keep it
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  if string.sub(v, 1, #ARGV[2]) == ARGV[2] then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
  end
end
local fence = redis.call('HGET', KEYS[2], ARGV[1])
if fence and fence ~= ARGV[3] then return 0 end
if v then return 0 end  -- claimed by another and not yet fenced: cannot happen (one script)
return 2
