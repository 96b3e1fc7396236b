-- The send gate of a host: a GCRA over the moments its requests are *sent* (prepended to
-- start.lua, gate.lua and subrequest.lua; EVAL cannot import).
--
-- release.lua paces a host's releases and done.lua charges its bucket from when each request
-- was really sent; both are right only while every request of the host goes through a lease.
-- Between a release and its send lie a broker queue, a process's thread pool and its share of
-- the CPU: a take-back from a process that was only slow, a redelivery, or concurrency > 1
-- with uneven queueing delays can bring two sends closer than the interval although each
-- release was on time. The gate closes that gap where the request leaves: the task asks it
-- in the same round trip that marks the URL begun (start.lua), and sends no earlier than the
-- moment the gate gives it. Each request takes the next free slot: one interval after the
-- previous slot, or at once when the host has been quiet (burst slack as release.lua's), so
-- the sends of a host are a GCRA sequence whatever happened on the way.
-- Fields of the domain's state hash: "sg" the gate's theoretical arrival time, "iv" the
-- interval and "sl" the burst slack release.lua used last (done.lua may lengthen "iv").
-- Returns the seconds from now at which this request may be sent (>= 0), and takes the slot.
local function take_send_slot(dom, now)
  local g = redis.call('HMGET', dom, 'sg', 'iv', 'sl')
  local iv, slack = tonumber(g[2]) or 0, tonumber(g[3]) or 0
  local sg = tonumber(g[1]) or now
  local at = math.max(now, sg - slack)
  redis.call('HSET', dom, 'sg', string.format('%.6f', math.max(sg, at) + iv))
  return at - now
end
