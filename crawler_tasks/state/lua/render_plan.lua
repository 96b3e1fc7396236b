-- render="auto": whether to render a host's pages, decided per host from evidence that every
-- worker shares (one hash per crawl, fields "<host>|<name>"), as Crawlee's adaptive crawler
-- does per page type: render a sample of the host's first pages and compare each with its raw
-- parse (worker/visit/render_step.py says whether rendering added in-scope links or much text);
-- render every page of a host where it did, none where it did not, and keep spot-checking.
--   sampling: each page is rendered; the first render that adds something makes the host
--             "render"; ARGV[3] renders that add nothing make it "raw".
--   render:   every page is rendered; ARGV[5] renders in a row that add nothing make it "raw".
--   raw:      pages are parsed as fetched; one page in ARGV[4] is rendered anyway (a spot
--             check); a spot check that adds something makes the host "render" again.
-- KEYS[1] the crawl's render plan hash (its decisions, not counters)
-- KEYS[2] the crawl's set of URLs (digests) whose render verdict has been counted
-- ARGV[1] "ask" (a fetched page of the host: render it?), "recheck" (a render of a page asked
-- while the host was sampling is about to start: has the host been decided "raw" meanwhile?
-- then it is parsed raw; each sampling host otherwise cost the renders of every page fetched
-- before its sample was told) or "tell" (a render's verdict)
-- ARGV[2] host  ARGV[3] sample size  ARGV[4] spot-check period  ARGV[5] renders in a row
-- without gain that stop rendering  ARGV[6] (tell) 1 if rendering added something, else 0
-- ARGV[7] (tell) the rendered URL's digest
-- Returns, for ask, formats.RenderAsk: 0 (raw), 1 (render, the host still sampling) or 2
-- (render: the host renders, or a spot check); for recheck, formats.RenderRecheck: 0
-- (render), 1 (parse raw) or 2 (wait: the host's sample is being rendered);
-- for tell, the host's mode after it (formats.RenderVerdict).
local h = ARGV[2]
local function get(name) return tonumber(redis.call('HGET', KEYS[1], h .. '|' .. name) or '0') end
local function set(name, v) redis.call('HSET', KEYS[1], h .. '|' .. name, v) end
local mode = redis.call('HGET', KEYS[1], h .. '|mode') or 'sampling'
if ARGV[1] == 'ask' then
  local pages = redis.call('HINCRBY', KEYS[1], h .. '|pages', 1)
  if pages == 1 then set('mode', mode) end
  if mode == 'raw' and pages % tonumber(ARGV[4]) ~= 0 then return 0 end
  redis.call('HINCRBY', KEYS[1], h .. '|asked', 1)
  if mode == 'sampling' then return 1 end
  return 2
end
if ARGV[1] == 'recheck' then
  if mode == 'raw' then
    redis.call('HINCRBY', KEYS[1], h .. '|unqueued', 1)
    return 1
  end
  if mode == 'render' then return 0 end
  -- Sampling: the first ARGV[3] renders to start are the sample; later ones wait for its
  -- verdict (rendered at once, pages of a host fetched together were all rendered).
  if get('claimed') >= tonumber(ARGV[3]) then return 2 end
  redis.call('HINCRBY', KEYS[1], h .. '|claimed', 1)
  return 0
end
-- A URL's verdict counts once: a render told and then lost before its page was recorded
-- (its worker killed, its task redelivered) is rendered and told again. Counted twice, the
-- host showed more renders than pages ("6/5 rendered") and one page weighed twice in the
-- sample and the streak. The second verdict of a URL changes nothing.
if redis.call('SADD', KEYS[2], ARGV[7]) == 0 then return mode end
local renders = redis.call('HINCRBY', KEYS[1], h .. '|renders', 1)
local streak = 0
if ARGV[6] == '1' then
  redis.call('HINCRBY', KEYS[1], h .. '|gains', 1)
  set('streak', 0)
  mode = 'render'
else
  streak = redis.call('HINCRBY', KEYS[1], h .. '|streak', 1)
  if mode == 'sampling' and renders >= tonumber(ARGV[3]) then mode = 'raw' end
  if mode == 'render' and streak >= tonumber(ARGV[5]) then mode = 'raw' end
end
set('mode', mode)
return mode
