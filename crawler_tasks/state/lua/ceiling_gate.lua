-- The send gate of a host's cluster-wide ceiling (``crawler set-ceiling``): ceiling.lua
-- charges the ceiling when a crawl releases URLs, but between that release and the send lie
-- a broker queue, a thread pool and a share of the CPU, and two crawls' releases that were
-- on time can be sent close together. As the host's own gate (gate_lib.lua) does for one
-- crawl, this one spaces the sends of every crawl of the host: each request takes the next
-- free slot, no earlier than the slot its own crawl's gate gave it, and no burst (the
-- ceiling has none, ceilings.CEILING_BURST). A key of its own (no crawl's hash slot), so a
-- fetch of a host with a ceiling asks it in a round trip of its own; other hosts never do.
-- KEYS[1] the host's ceiling gate (string: the next free slot, Redis's clock)
-- ARGV[1] seconds between two requests at the ceiling  ARGV[2] seconds from now before which
-- the request may not go anyway (its crawl's own slot)  ARGV[3] seconds the key outlives use
-- Returns the seconds from now at which the request may be sent (>= ARGV[2]).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local at = math.max(now + tonumber(ARGV[2]), tonumber(redis.call('GET', KEYS[1])) or now)
redis.call('SET', KEYS[1], string.format('%.6f', at + tonumber(ARGV[1])), 'EX', tonumber(ARGV[3]))
return string.format('%.6f', at - now)
