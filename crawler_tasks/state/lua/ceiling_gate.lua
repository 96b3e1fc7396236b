-- The send gate of a host's cluster-wide ceiling (``crawler set-ceiling``): ceiling.lua
-- charges the ceiling when a crawl releases URLs, but between that release and the send lie
-- a broker queue, a thread pool and a share of the CPU, and two crawls' releases that were
-- on time can be sent close together. This gate spaces the sends of every crawl of the host,
-- with no burst (the ceiling has none, ceilings.CEILING_BURST). A request takes its slot
-- only when the slot is due, right before it is sent, and otherwise learns how long to wait
-- before asking again: a slot taken ahead would be kept by a thread that wakes late (a
-- starved process), and the next request, on time, would follow it too closely. A key of
-- its own (no crawl's hash slot): asked in round trips of their own, by the fetches of hosts
-- with a ceiling only.
-- KEYS[1] the host's ceiling gate (string: when the next request may go, Redis's clock)
-- ARGV[1] seconds between two requests at the ceiling  ARGV[2] seconds the key outlives use
-- Returns "0" when the slot is taken (send now), else the seconds to wait before asking again.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local due = tonumber(redis.call('GET', KEYS[1])) or now
if now < due then return string.format('%.6f', due - now) end
redis.call('SET', KEYS[1], string.format('%.6f', now + tonumber(ARGV[1])), 'EX', tonumber(ARGV[2]))
return '0'
