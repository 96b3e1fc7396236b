-- A task begins work on a URL: mark it (stage and worker) if, and only if, it is still in
-- flight. The mark tells the dispatcher's reaper that the fetch message was delivered, and
-- its reclaimer whose heartbeat to watch (a URL held by a dead worker goes back to the
-- frontier in seconds, not after the broker's visibility timeout). The "only if" keeps a late
-- duplicate from resurrecting a URL that already reached its final state.
-- A fetch also learns here, in the same round trip, whether the crawl was cancelled and
-- whether its host was declared dead (done.lua).
-- Several URLs of one partition may begin together (the URLs of a fetch_many message): one
-- round trip for all, each judged on its own.
-- KEYS[1] inflight  KEYS[2] unwritten hash  KEYS[3] flow hash (fetch only: its copy of the
-- crawl's cancelled flag)   (all the URLs' partition's)
-- ARGV[1] stage (formats.Inflight: 's' fetch, 'p' parse, 'w' render started...)  ARGV[2] worker
-- ARGV[3] domain-state key prefix (fetch only, else "")  ARGV[4] the partition's address key
-- prefix (keys.py address_prefix; fetch only)  ARGV[5..] the URLs
-- Returns, per URL: 1 if the URL is in flight (the task should go on), 2 if it is final but
-- its record is not on disk yet (the task that finished it died: write it), 0 otherwise (a
-- duplicate); for a fetch in flight, 3 if the crawl is cancelled, 4 if its host is dead.
-- A fetch that goes on also takes its host's next send slot here (gate_lib.lua), in this
-- same round trip: after the codes come, per URL, the seconds to wait before sending it
-- ("0" for a URL that does not go on), then per URL 1 if its host's next URL waits for a
-- lease rather than a token (release.lua's "aw": the lease goes back once the response is
-- read, settle.py), else 0.
local cancelled = nil
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local function start(url)
  local v = redis.call('HGET', KEYS[1], url)
  if not v then
    if redis.call('HEXISTS', KEYS[2], url) == 1 then return 2 end
    return 0
  end
  -- "domain|released_at|depth" then "|<stage>:<worker>" (formats.Inflight): keep the first
  -- three.
  local a = string.find(v, '|', 1, true)
  local b = string.find(v, '|', a + 1, true)
  local c = string.find(v, '|', b + 1, true)
  local base = c and string.sub(v, 1, c - 1) or v
  redis.call('HSET', KEYS[1], url, base .. '|' .. ARGV[1] .. ':' .. ARGV[2])
  if KEYS[3] then
    if cancelled == nil then cancelled = redis.call('HGET', KEYS[3], 'cancelled') == '1' end
    if cancelled then return 3 end
    local dom = ARGV[3] .. string.sub(v, 1, a - 1)
    local g = redis.call('HMGET', dom, 'sg', 'iv', 'sl', 'ip', 'ipx', 'dead', 'aw')
    if g[6] == '1' then return 4 end
    return 1, take_send_slot(dom, now, ARGV[4], g), g[7] == '1'
  end
  return 1
end
local out, waits, awaited = {}, {}, {}
for i = 5, #ARGV do
  local code, wait, aw = start(ARGV[i])
  out[#out + 1] = code
  waits[#waits + 1] = string.format('%.6f', wait or 0)
  awaited[#awaited + 1] = aw and 1 or 0
end
if KEYS[3] then
  for _, w in ipairs(waits) do out[#out + 1] = w end
  for _, a in ipairs(awaited) do out[#out + 1] = a end
end
return out
