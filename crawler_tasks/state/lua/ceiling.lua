-- The cluster-wide ceiling of one host, shared by every crawl (``crawler set-ceiling``): a
-- GCRA bucket in a key of its own (no crawl's hash slot), charged after a crawl's release.lua
-- released ``ARGV[3]`` URLs of the host. Of those, the ones within the ceiling keep their
-- release; the caller hands the others back to their crawl's frontier, to be released again
-- no earlier than the returned wait (and refunds their crawl's own bucket). So two crawls of
-- one host together never release more than ``rate x W + burst`` of its URLs in W seconds.
-- KEYS[1] the host's ceiling state (string: its tat)
-- ARGV[1] seconds between two requests at the ceiling   ARGV[2] burst (requests)
-- ARGV[3] URLs released   ARGV[4] seconds the key outlives its last use
-- Returns {allowed, wait}: how many of the URLs may go now (the first ones), and the seconds
-- from now after which the next one may.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local iv, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local slack = burst * iv
local allowed = 0
while allowed < n and now >= tat - slack do
  tat = math.max(tat, now) + iv
  allowed = allowed + 1
end
redis.call('SET', KEYS[1], string.format('%.6f', tat), 'EX', tonumber(ARGV[4]))
return {allowed, string.format('%.6f', math.max(0, tat - slack - now))}
