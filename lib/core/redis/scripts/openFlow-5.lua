-- openFlow-5.lua
-- Purpose: create a flow (see include/flowRecord.lua): its record, and each node waiting for its parents or,
--   without any, released (`q`: its creator enqueues it next; a reaper does, should a crash cut that off,
--   from the flows' due index). Creating a flow that exists (a resend, or a creator that lost the answer)
--   changes nothing: the answer says so.
-- Includes: guard, clock, flowRecord, flow
-- On one Redis server (ARGV[3] set: the creator's connection is not a Cluster) its nodes without parents are
--   written into their queues here (from their templates: include/flow.lua, flowPlan and flowWrite) and recorded
--   enqueued (`r`), and its creation is counted (the prefix's flow counters; `counted` c on its record): nothing
--   is left for a fold. A root whose template is missing or cannot be used stays `q` for the creator's fold, and
--   the flow goes into the due index (`<prefix>:{%F}:due`, at ARGV[3]) so that a crash before that fold leaves it
--   found. On a Cluster (ARGV[3] '') the creator does both, as before.
-- Builds keys: on one Redis server only (where any key is in reach of a script), from the prefix of KEYS[1]: the
--   prefix's flow counters `<prefix>:{%F}:counters` and due index `<prefix>:{%F}:due`, and each root's queue keys
--   from the shard root in its template (`<root>:groups`, `<base>:pending:<client>`, `<base>:ring`,
--   `<base>:task:<id>`, ... as `QueueKeys` spells them; include/flow.lua, flowWrite). On a Cluster, none.
-- KEYS[1]: the flow's record (hash)
-- KEYS[2]: its nodes (hash: node id -> state and seq)
-- KEYS[3]: their edges (hash: node id -> policy and parents)
-- KEYS[4]: their specs (hash: node id -> JSON)
-- KEYS[5]: their results (hash: node id -> JSON)
-- ARGV[1]: how long its keys are kept once it ended (ms); ARGV[2]: the completion callback (JSON, '' none);
--   ARGV[3]: when a reaper checks it, should a root be left (Redis ms), on one Redis server; '' on a Cluster;
--   ARGV[4..]: per node, 4 fields: node id, edges (`<policy>|<dep>,<dep>`, '' after the bar for none), spec
--   (JSON), release template ('' none; a node with parents keeps it in the specs hash as field `,<node id>`)
-- Returns: { 1, created, left } when created now (created: Redis ms, its generation; left: 1 when something is
--   left for the creator's fold, its roots or its count, else 0); { 0, state, created } when it existed
-- Side effects: HSET of the record, the nodes, the edges and the specs (and templates) when it is new; on one
--   server its roots' tasks written (pushTask, trackCreate), HINCRBY of the prefix's `created` flows, ZADD NX of
--   the due index when a root is left.
flowKeys()
local existing = redis.call('HMGET', KEYS[1], 'state', 'created')
if existing[1] then
  return { 0, existing[1], existing[2] or '0' }
end
local oneServer = ARGV[3] ~= ''
local prefix, flow = string.match(KEYS[1], '^(.-):{%%F(.*)}:flow$')
-- Read before the first write: each root's plan (its template and its queue's consumer groups).
local plans, left = {}, not oneServer
for i = 4, #ARGV, 4 do
  if string.sub(ARGV[i + 1], 3) == '' then
    local plan = oneServer and prefix and flowPlan(ARGV[i + 3] ~= '' and ARGV[i + 3] or nil)
    if plan then
      plans[ARGV[i]] = plan
    else
      left = true
    end
  end
end
local created = string.format('%d', redisMs())
local total = 0
for i = 4, #ARGV, 4 do
  local id, edges = ARGV[i], ARGV[i + 1]
  local state = 'w'
  if plans[id] then
    state = 'r'
  elseif string.sub(edges, 3) == '' then
    state = 'q'
  end
  redis.call('HSET', KEYS[2], id, state .. '/0')
  redis.call('HSET', KEYS[3], id, edges)
  redis.call('HSET', KEYS[4], id, ARGV[i + 2])
  if ARGV[i + 3] ~= '' and state == 'w' then
    redis.call('HSET', KEYS[4], ',' .. id, ARGV[i + 3])
  end
  total = total + 1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'created', created, 'keep', ARGV[1], 'total', total)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'complete', ARGV[2])
end
if oneServer and prefix then
  -- In the order the flow lists them (a hash's order is not that).
  for i = 4, #ARGV, 4 do
    if plans[ARGV[i]] then
      flowWrite(plans[ARGV[i]], '{}', tonumber(created), KEYS[4], ARGV[i])
    end
  end
  redis.pcall('HINCRBY', prefix .. ':{%F}:counters', 'created', 1)
  redis.call('HSET', KEYS[1], 'counted', 'c')
  if left then
    redis.call('ZADD', prefix .. ':{%F}:due', 'NX', ARGV[3], flow)
  end
end
return { 1, created, left and 1 or 0 }
