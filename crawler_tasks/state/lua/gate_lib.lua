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
-- The same holds per server address when the crawl groups hosts by address (ip_rate): the
-- hosts of one address share one more gate, so that release.lua's address bucket, charged at
-- release like the host's, cannot be bunched by the way either. A request goes at the later
-- of its host's and its address's free slots, and both gates count from that moment.
-- Fields of the domain's state hash: "sg" the gate's theoretical arrival time, "iv" the
-- interval and "sl" the burst slack release.lua used last (done.lua may lengthen "iv");
-- "ip" and "ipx" its address and whether it is exempt (release.lua's grouping). Fields of the
-- address's hash (aprefix .. ":" .. A): "sg" its gate, "iv" its interval, written by
-- release.lua only while the crawl groups by address (no "iv": no address gate).
-- Returns the seconds from now at which this request may be sent (>= 0), and takes the slot.
-- The gate of the server address a domain's fields "ip" and "ipx" name: its key, next free
-- slot (``now`` if none yet) and interval; nil when there is none (no address prefix given,
-- the address unresolved or exempt, or no "iv": the crawl does not group by address).
local function address_gate(aprefix, ip, ipx, now)
  if (aprefix or '') == '' or not ip or ip == '?' or ipx == '1' then return nil end
  local akey = aprefix .. ':' .. ip
  local a = redis.call('HMGET', akey, 'sg', 'iv')
  local aiv = tonumber(a[2]) or 0
  if aiv <= 0 then return nil end
  return akey, tonumber(a[1]) or now, aiv
end
-- ``g``: the domain's fields sg, iv, sl, ip, ipx when the caller read them already (start.lua
-- reads them with "dead", in one HMGET).
local function take_send_slot(dom, now, aprefix, g)
  g = g or redis.call('HMGET', dom, 'sg', 'iv', 'sl', 'ip', 'ipx')
  local iv, slack = tonumber(g[2]) or 0, tonumber(g[3]) or 0
  local sg = tonumber(g[1]) or now
  local at = math.max(now, sg - slack)
  local akey, asg, aiv = address_gate(aprefix, g[4], g[5], now)
  -- No burst at an address (release.lua's address bucket has none either).
  if akey then at = math.max(at, asg) end
  redis.call('HSET', dom, 'sg', string.format('%.6f', math.max(sg, at) + iv))
  if akey then redis.call('HSET', akey, 'sg', string.format('%.6f', at + aiv)) end
  return at - now
end
-- A request went later than the slot it took (a host's shared ceiling held it back:
-- ceiling_gate.lua): its host's and its address's gates count from when it goes, ``at``.
local function push_send_slot(dom, at, aprefix)
  local g = redis.call('HMGET', dom, 'sg', 'iv', 'ip', 'ipx')
  local sg = at + (tonumber(g[2]) or 0)
  if sg > (tonumber(g[1]) or 0) then redis.call('HSET', dom, 'sg', string.format('%.6f', sg)) end
  local akey, asg, aiv = address_gate(aprefix, g[3], g[4], at)
  if akey and at + aiv > asg then
    redis.call('HSET', akey, 'sg', string.format('%.6f', at + aiv))
  end
end
