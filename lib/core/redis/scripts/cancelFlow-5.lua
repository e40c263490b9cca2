-- cancelFlow-5.lua
-- Purpose: cancel a running flow: it becomes `cancelled` (no fold releases a node of it any more) and its
--   waiting nodes cancelled at once; its released ones are stopped by the canceller, from the answer of the
--   fold it makes next (foldFlow-5.lua answers every node still released of a flow that no longer runs).
-- Includes: guard, flowRecord
-- KEYS[1]: the flow's record (hash)
-- KEYS[2]: its nodes (hash: node id -> state and seq)
-- KEYS[3]: their edges (hash)
-- KEYS[4]: their specs (hash)
-- KEYS[5]: their results (hash: node id -> JSON)
-- ARGV[1]: the reason ('' none)
-- Returns: 'running' when cancelled now; else the flow's state (succeeded, failed, cancelled: nothing
--   changed), or 'unknown' (no record)
-- Side effects: HSET of the record's state and reason, of each waiting node's state and why.
flowKeys()
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return 'unknown'
end
if state ~= 'running' then
  return state
end
local reason = 'cancelled'
if ARGV[1] ~= '' then
  reason = 'cancelled (' .. ARGV[1] .. ')'
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'reason', reason)
local nodes = flowNodes(KEYS[2])
for id, node in pairs(nodes) do
  if node.state == 'w' then
    node.state = 'c'
    flowSaveNode(KEYS[2], id, node)
    redis.call('HSET', KEYS[5], id, cjson.encode({ message = 'the flow was ' .. reason }))
  end
end
return 'running'
