-- foldFlow-5.lua
-- Purpose: apply the settle events of a flow's nodes (read from the per-slot event lists, see
--   include/flow.lua) to its record, then decide what follows: each waiting node whose parents all settled is
--   released (`q`), once; a parent that did not succeed (failed, cancelled, skipped) makes its waiting
--   child act on its policy at once: fail-flow fails the flow (its waiting nodes cancelled; its released ones
--   answered as to stop), skip skips the child (and asks its own children in turn), run releases it once every
--   parent settled. A flow with no node waiting or released any more ended: succeeded when every node did,
--   else failed (or cancelled). Each node's events apply in order and once, however often they come (an event
--   not newer than the last applied to its node changes nothing), so the worker that settled a node and reapers
--   may fold the same events at once, or again after a crash, without a lock; the answer always says every
--   release and every stop still to be made, so a fold made again makes a cut-off one again. A node requeued
--   from dead letters (p) is awaited again while the flow runs; once it ended, its later events change nothing.
-- Includes: guard, clock, flowRecord
-- KEYS[1]: the flow's record (hash)
-- KEYS[2]: its nodes (hash: node id -> state and seq)
-- KEYS[3]: their edges (hash: node id -> policy and parents)
-- KEYS[4]: their specs (hash: node id -> JSON)
-- KEYS[5]: their results (hash: node id -> JSON)
-- ARGV[1..]: per event, 4 fields: seq, node id, outcome (s, d, c, p), value
-- Returns: { -1 } when the flow has no record (expired or never created: its events are dropped); else
--   { state, created, ended ('' running on, '1' ended by this call, '2' ended before), reason, callback ('' not
--   enqueued yet), complete ('' none), counted (what of it was counted: c created, e ended; see countFlow-2.lua),
--   keep (ms), n, then per release (while it runs): node id, spec, number of parents,
--   then per parent: its id, its state letter, its result; then m, then per stop (once it failed or was
--   cancelled: every node still released): node id, its state letter (q: maybe not enqueued yet; r: enqueued),
--   spec }
-- Side effects: HSET of each node's state and seq and of a settled node's result (its event's value), or a
--   skipped or cancelled node's why; HSET of the record's state, reason and ended (its keys expire once its end
--   is counted and its callback on record: markFlow-5.lua).
flowKeys()
local fields = redis.call('HMGET', KEYS[1], 'state', 'created', 'ended', 'reason', 'callback', 'complete', 'counted', 'keep')
if not fields[1] then
  return { -1 }
end
local state, reason = fields[1], fields[4] or ''
local nodes = flowNodes(KEYS[2])
local dirty = {}
for i = 1, #ARGV, 4 do
  local seq, id, outcome, value = tonumber(ARGV[i]) or 0, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local node = nodes[id]
  if node and seq > node.seq then
    node.seq = seq
    dirty[id] = true
    if outcome == 'p' then
      if state == 'running' and node.state == 'd' then
        node.state = 'r'
      end
    elseif (outcome == 's' or outcome == 'd' or outcome == 'c') and (node.state == 'q' or node.state == 'r') then
      node.state = outcome
      if value ~= '' then
        redis.call('HSET', KEYS[5], id, value)
      end
    end
  end
end
local before = state
if state == 'running' then
  local edges, flat = {}, redis.call('HGETALL', KEYS[3])
  for i = 1, #flat, 2 do
    local policy, list = string.match(flat[i + 1], '^(%a)|(.*)$')
    local deps = {}
    for dep in string.gmatch(list or '', '[^,]+') do
      deps[#deps + 1] = dep
    end
    edges[flat[i]] = { policy = policy or 'f', deps = deps }
  end
  local progress = true
  while progress and state == 'running' do
    progress = false
    for id, node in pairs(nodes) do
      local edge = edges[id]
      if node.state == 'w' and edge then
        local all, bad = true, nil
        for _, dep in ipairs(edge.deps) do
          local parent = nodes[dep] and nodes[dep].state or 'c'
          if parent == 'w' or parent == 'q' or parent == 'r' then
            all = false
          elseif parent ~= 's' and not bad then
            bad = dep
          end
        end
        if bad and edge.policy == 'f' then
          state = 'failed'
          reason = 'node "' .. bad .. '" ' .. flowWord(nodes[bad].state) .. '; node "' .. id .. '" fails the flow (fail-flow)'
          break
        elseif bad and edge.policy == 's' then
          node.state, dirty[id], progress = 'k', true, true
          redis.call('HSET', KEYS[5], id, cjson.encode({ message = 'parent "' .. bad .. '" ' .. flowWord(nodes[bad].state) }))
        elseif all then
          node.state, dirty[id], progress = 'q', true, true
        end
      end
    end
  end
  if state == 'failed' then
    for id, node in pairs(nodes) do
      if node.state == 'w' then
        node.state, dirty[id] = 'c', true
        redis.call('HSET', KEYS[5], id, cjson.encode({ message = 'the flow failed (' .. reason .. ')' }))
      end
    end
  end
end
local open, firstBad = flowOpen(nodes)
local ended = ''
if fields[3] then
  ended = '2'
elseif not open then
  ended = '1'
  if state == 'running' then
    state = 'succeeded'
    if firstBad then
      state = 'failed'
      reason = 'node "' .. firstBad .. '" ' .. flowWord(nodes[firstBad].state)
    end
  end
  redis.call('HSET', KEYS[1], 'ended', redisMs())
end
if state ~= before then
  redis.call('HSET', KEYS[1], 'state', state, 'reason', reason)
end
for id in pairs(dirty) do
  flowSaveNode(KEYS[2], id, nodes[id])
end
local answer = { state, fields[2] or '0', ended, reason, fields[5] or '', fields[6] or '', fields[7] or '',
  fields[8] or '86400000' }
local releases, stops = {}, {}
for id, node in pairs(nodes) do
  if state == 'running' and node.state == 'q' then
    releases[#releases + 1] = id
  elseif state ~= 'running' and (node.state == 'q' or node.state == 'r') then
    stops[#stops + 1] = id
    stops[#stops + 1] = node.state
  end
end
answer[#answer + 1] = #releases
for _, id in ipairs(releases) do
  local edge = redis.call('HGET', KEYS[3], id) or 'f|'
  local deps = {}
  for dep in string.gmatch(string.sub(edge, 3), '[^,]+') do
    deps[#deps + 1] = dep
  end
  answer[#answer + 1] = id
  answer[#answer + 1] = redis.call('HGET', KEYS[4], id) or '{}'
  answer[#answer + 1] = #deps
  for _, dep in ipairs(deps) do
    answer[#answer + 1] = dep
    answer[#answer + 1] = nodes[dep] and nodes[dep].state or 'c'
    answer[#answer + 1] = redis.call('HGET', KEYS[5], dep) or ''
  end
end
answer[#answer + 1] = #stops / 2
for i = 1, #stops, 2 do
  answer[#answer + 1] = stops[i]
  answer[#answer + 1] = stops[i + 1]
  answer[#answer + 1] = redis.call('HGET', KEYS[4], stops[i]) or '{}'
end
return answer
