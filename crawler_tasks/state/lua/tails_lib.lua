-- Heads and tails of the frontier (prepended to admit.lua and release.lua; state/tails.py).
-- A domain's pending URLs are, in the order they are released: its head (q:D, in Redis, what
-- release.lua pops), then its chunks (ix:D lists their ids, the next to refill first; their
-- entries are in the chunk store, not in Redis), then its spill buffer (sp:D, in Redis). So
-- for breadth-first; for depth-first the buffer, which takes the bottom of the head when it
-- grows past its size, comes before the chunks (it holds newer entries than they do). No I/O
-- happens in Lua: a dispatcher writes a full buffer as a chunk and swaps it for its id
-- (flush.lua), and reads a chunk and moves it into the head (refill.lua).
-- Every tail key is built from the partition's prefixes, so a domain's head, buffer and index
-- share its partition's hash slot (a Redis Cluster runs these scripts).

-- TAILS: {head = n (0: the rule below), seconds = s, iv = default interval (0: no limit),
--         chunk = n, sprefix = .., iprefix = .., dprefix = ..}, read from 7 ARGV from ``at``.
local function tails_args(at)
  return {head = tonumber(ARGV[at]), seconds = tonumber(ARGV[at + 1]),
          iv = tonumber(ARGV[at + 2]), chunk = tonumber(ARGV[at + 3]),
          sprefix = ARGV[at + 4], iprefix = ARGV[at + 5], dprefix = ARGV[at + 6]}
end

-- A head that never fills: a host fetched without a limit (its URLs go as fast as they come).
local HEAD_UNBOUNDED = 1e15
-- The smallest head of the rule (BUbiNG's): a host at a slow pace still has a few URLs ready.
local HEAD_MIN = 4

-- The most URLs domain d's head holds: an explicit size, or about ``seconds`` of fetching at
-- its pace (the interval of its last release, else the crawl's), at least HEAD_MIN.
local function head_size(T, d)
  if T.head > 0 then return T.head end
  local iv = tonumber(redis.call('HGET', T.dprefix .. d, 'iv')) or T.iv
  if iv <= 0 then return HEAD_UNBOUNDED end
  return math.max(HEAD_MIN, math.ceil(T.seconds / iv))
end
