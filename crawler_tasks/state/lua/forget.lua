-- Forget the heartbeats of dead worker processes (workers.forget_dead): a process that stopped
-- beating more than ARGV[1] seconds ago (Redis's clock, the one beat.lua writes with) is dead
-- to every reader already (a missing field reads as "never beat"); its field would only stay
-- in the hash for ever, one per killed process. Read and deleted in one script, so a process
-- that beats again in between (a frozen one woken) keeps the beat it just wrote.
-- KEYS[1] the workers hash  ARGV[1] seconds after which a silent process is dead
-- Returns the worker ids forgotten.
local t = redis.call('TIME')
local before = tonumber(t[1]) + tonumber(t[2]) / 1e6 - tonumber(ARGV[1])
local beats = redis.call('HGETALL', KEYS[1])
local gone = {}
for i = 1, #beats, 2 do
  local at = tonumber(beats[i + 1])
  if at == nil or at < before then gone[#gone + 1] = beats[i] end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
return gone
