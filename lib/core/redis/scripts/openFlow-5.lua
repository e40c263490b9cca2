-- openFlow-5.lua
-- Purpose: create a flow (see include/flowRecord.lua): its record, and each node waiting for its parents or,
--   without any, released (`q`: its creator enqueues it next; a reaper does, should a crash cut that off,
--   from the flows' due index). Creating a flow that exists (a resend, or a creator that lost the answer)
--   changes nothing: the answer says so.
-- Includes: guard, clock, flowRecord
-- KEYS[1]: the flow's record (hash)
-- KEYS[2]: its nodes (hash: node id -> state and seq)
-- KEYS[3]: their edges (hash: node id -> policy and parents)
-- KEYS[4]: their specs (hash: node id -> JSON)
-- KEYS[5]: their results (hash: node id -> JSON)
-- ARGV[1]: how long its keys are kept once it ended (ms); ARGV[2]: the completion callback (JSON, '' none);
--   ARGV[3..]: per node, 4 fields: node id, edges (`<policy>|<dep>,<dep>`, '' after the bar for none), spec
--   (JSON), release template ('' none; kept in the specs hash as field `,<node id>`: see include/flow.lua)
-- Returns: { 1, created } when created now (created: Redis ms, its generation); { 0, state, created } when it
--   existed
-- Side effects: HSET of the record, the nodes, the edges and the specs (and templates) when it is new.
flowKeys()
local existing = redis.call('HMGET', KEYS[1], 'state', 'created')
if existing[1] then
  return { 0, existing[1], existing[2] or '0' }
end
local created = string.format('%d', redisMs())
local total = 0
for i = 3, #ARGV, 4 do
  local id, edges = ARGV[i], ARGV[i + 1]
  local state = 'w'
  if string.sub(edges, 3) == '' then
    state = 'q'
  end
  redis.call('HSET', KEYS[2], id, state .. '/0')
  redis.call('HSET', KEYS[3], id, edges)
  redis.call('HSET', KEYS[4], id, ARGV[i + 2])
  if ARGV[i + 3] ~= '' then
    redis.call('HSET', KEYS[4], ',' .. id, ARGV[i + 3])
  end
  total = total + 1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'created', created, 'keep', ARGV[1], 'total', total)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'complete', ARGV[2])
end
return { 1, created }
