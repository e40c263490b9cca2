-- include/flowRecord.lua — shared by the scripts whose header says "Includes: flowRecord".
-- Needs: guard, clock
-- A flow's keys, in a slot of their own (`<prefix>:{%F<flow id>}`; FlowKeys): its record `:flow` (hash:
-- state running | succeeded | failed | cancelled, reason, created and ended (Redis ms), keep (ms its keys
-- are kept once it ended), total, complete (its completion callback, JSON: `{ pattern, payload?, clientId? }`),
-- callback (the callback's task id, once enqueued)); its nodes `:nodes` (hash: node id -> `<state>/<seq>`,
-- state w waiting for parents, q released (its enqueue may still be on its way), r released (enqueued), s
-- succeeded, d failed (dead-lettered), c cancelled, k skipped; seq the last event applied, see
-- include/flow.lua); their edges `:edges` (hash: node id -> `<policy>|<dep>,<dep>...`, policy f fail-flow, s
-- skip, r run); their specs `:specs` (hash: node id -> JSON, read by the releaser only); their results
-- `:results` (hash: node id -> a succeeded node's acknowledged result, a failed node's error, a cancelled
-- or skipped node's why). `created` also names the flow's generation: a flow id used again after its keys
-- expired is a new flow, whose release guards (`flow:<id>:<created>:<node>`) are not the old ones'.
-- flowKeys(): expectTypes over KEYS[1..5], the five in that order.
-- flowExpire(keep): PEXPIRE of the five keys.
-- flowNodes(nodes): { id -> { state, seq } } of every node (one HGETALL).
-- flowSaveNode(nodes, id, node): HSET of its `<state>/<seq>`.
-- flowOpen(nodes): whether a node still waits or is released (the flow runs on), and the first node by id that
--   ended without succeeding (nil: none).
-- flowWord(state): how a node of that state ended, for a failed flow's reason (the fold and a settle that ends the
--   flow give the same one): 'did not succeed' for a letter no script writes (a hand edit).
local function flowKeys()
  expectTypes(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash')
end

local function flowExpire(keep)
  for k = 1, 5 do
    redis.call('PEXPIRE', KEYS[k], keep)
  end
end

local function flowNodes(nodes)
  local flat, all = redis.call('HGETALL', nodes), {}
  for i = 1, #flat, 2 do
    local state, seq = string.match(flat[i + 1], '^(%a)/(%d+)$')
    all[flat[i]] = { state = state or 'w', seq = tonumber(seq) or 0 }
  end
  return all
end

local function flowSaveNode(nodes, id, node)
  redis.call('HSET', nodes, id, node.state .. '/' .. string.format('%d', node.seq))
end

local FLOW_WORDS = { d = 'failed', c = 'was cancelled', k = 'was skipped' }
local function flowWord(state)
  return FLOW_WORDS[state] or 'did not succeed'
end

local function flowOpen(nodes)
  local open, firstBad = false, nil
  for id, node in pairs(nodes) do
    if node.state == 'w' or node.state == 'q' or node.state == 'r' then
      open = true
    elseif node.state ~= 's' and (not firstBad or id < firstBad) then
      firstBad = id
    end
  end
  return open, firstBad
end
