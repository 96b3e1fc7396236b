-- One more send slot of a host's gate (gate_lib.lua), for a request that start.lua did not
-- give one: the robots.txt fetch that precedes a page, or a page whose task was held up so
-- long (a starved or frozen process) that the slot start.lua gave it has gone by. In the
-- latter case the URL must still be this task's: a process that stalled past the dead
-- threshold may have had it taken back and sent again by another (dispatcher reclaim), and
-- then this late copy is not sent at all.
-- KEYS[1] the domain's state hash  KEYS[2] inflight (of the URL's partition; "" for robots)
-- ARGV[1] url ("" for robots.txt)  ARGV[2] the inflight mark this task wrote ("s:WORKER")
-- ARGV[3] the partition's address key prefix (keys.py address_prefix)
-- ARGV[4] (optional) seconds from now (<= 0: ago): take no slot, but move the gates on from
-- that moment, when the request went later than its slot: its host's ceiling held it, or a
-- rendered page's subrequest was written late (push_send_slot)
-- Returns the seconds to wait before sending (>= 0), or -1: the URL is no longer this task's.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
if (ARGV[4] or '') ~= '' then
  push_send_slot(KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
  return '0'
end
if ARGV[1] ~= '' then
  local v = redis.call('HGET', KEYS[2], ARGV[1])
  if not v or string.sub(v, -string.len(ARGV[2]) - 1) ~= '|' .. ARGV[2] then return '-1' end
end
return string.format('%.6f', take_send_slot(KEYS[1], now, ARGV[3]))
