-- include/flow.lua — shared by the scripts whose header says "Includes: flow".
-- Needs: guard, eventSeq, pushTask, track, flowRecord
-- A node of a flow (stored form version 2, its flow id and node id first after `v`) reports each settle to
-- its flow through its own slot, in the same script call as the settle: an event on `<base>:flow-events`
-- (list), `<seq>\n<flow id>\n<node id>\n<outcome>\n<value>`, outcome s (succeeded; value: the handler's
-- result as the worker acknowledged it, `{"id":…,"response":…}` or `{"id":…,"err":…}`), d (dead-lettered;
-- value: `{"reason":…,"name":…,"code":…,"message":…}`), c (cancelled; value: why) or p (waiting again:
-- requeued from dead letters); seq from the shard's sequence (include/eventSeq.lua), so the flow's record
-- applies each node's events in order however often they are folded (foldFlow-5.lua; the worker that
-- settled the node and reapers fold them, see lib/core/flows). Only the default consumer group's runs count
-- (its base is the root).
-- A node's success may instead release its children in the same script, when its flow was made on one Redis
-- server (its entry says `"fold":1` right after `node`, and each node with parents has a release template
-- beside its spec: lib/core/flows/flow-templates.ts); see flowRelease below.
-- flowOf(entry)
--   { flow, node, fold } for a flow node's entry (`<attempts>|{"v":2,"flow":...`), else nil. Read by a string
--   match in the producer's field order; written otherwise (another producer, escapes), decoded.
-- flowRelease(head, base, value)
--   The same-script release of a node's success (`value`: its acknowledged result): applied to its flow's
--   record in the node's own settle, and each child whose parents all succeeded with it released at once: its
--   task written from its template (the Redis clock as its enqueue time, its parents' results spliced in) into
--   its queue, tracked, a copy per consumer group (what the fold's releaser would enqueue; flowPlan, flowWrite),
--   and recorded enqueued (`r`), so no fold releases it again; a success that ends a flow without a completion
--   callback ends it here too (flowEnd). True when done so; false, with nothing written, when the fold has more to
--   decide (the flow not running or unknown, a parent that did not succeed, the end of a flow with a callback, a
--   result that is an error, a template missing, a key of another type): then the event goes to the fold.
-- flowRevive(head, base)
--   A node requeued from dead letters, applied to its flow's record in the requeue's own script (fold; below).
-- flowFollow(task, what, value)
--   Flows' handler of a move (include/follow.lua): completed s, dead d, cancelled and dropped c, revived p;
--   the other moves (retried, requeued) leave the node released, as it was.
local function flowOf(entry)
  local flow, node, after = string.match(entry, '^%d+|{"v":2,"flow":"([^"\\]*)","node":"([^"\\]*)"()')
  if flow then
    return { flow = flow, node = node, fold = string.sub(entry, after, after + 9) == ',"fold":1,' }
  end
  if not string.find(entry, '^%d+|{"v":2,"flow":') then
    return nil
  end
  local ok, envelope = pcall(cjson.decode, string.sub(entry, string.find(entry, '|', 1, true) + 1))
  if not ok or type(envelope) ~= 'table' or type(envelope.flow) ~= 'string' or type(envelope.node) ~= 'string' then
    return nil
  end
  return { flow = envelope.flow, node = envelope.node, fold = envelope.fold == 1 }
end

-- The dead-letter record's why, as the flow keeps it (never its payload, never a stack).
local function flowDeadValue(record)
  if type(record) ~= 'table' then
    return '{"reason":"unknown","message":"dead-lettered"}'
  end
  local err = type(record.error) == 'table' and record.error or {}
  local message = err.message or record.detail or record.reason
  return cjson.encode({
    reason = type(record.reason) == 'string' and record.reason or 'unknown',
    name = type(err.name) == 'string' and err.name or nil,
    code = type(err.code) == 'string' and err.code or nil,
    message = type(message) == 'string' and message or 'dead-lettered',
  })
end

-- A parent's result as its child sees it (`{"state":"succeeded","result":...}`): the JSON of its response cut
-- out of the acknowledged result (`{"id":"...","response":...}`, as the worker writes it: no unescaped
-- `,"` inside a JSON string, so the first `,"response":` is its field); nil for anything else (an error).
local function flowResponse(raw)
  if type(raw) ~= 'string' or string.sub(raw, 1, 7) ~= '{"id":"' or string.sub(raw, -1) ~= '}' then
    return nil
  end
  local at = string.find(raw, ',"response":', 8, true)
  if not at then
    return nil
  end
  return string.sub(raw, at + 12, -2)
end

-- flowPlan(template): a release template (flow-templates.ts, a string of 9 lines: root, task id, client,
--   priority, keep, live and the entry's three parts) as a plan with the bases its task goes to (the root's
--   consumer groups read here: a copy per group), or nil when it is not one or the groups set is of another type.
local function flowPlan(template)
  if type(template) ~= 'string' then
    return nil
  end
  local lines, from = {}, 1
  while true do
    local cut = string.find(template, '\n', from, true)
    if not cut then
      lines[#lines + 1] = string.sub(template, from)
      break
    end
    lines[#lines + 1] = string.sub(template, from, cut - 1)
    from = cut + 1
  end
  if #lines ~= 9 then
    return nil
  end
  local groups = redis.pcall('SMEMBERS', lines[1] .. ':groups')
  if groups.err then
    return nil
  end
  return { bases = groupBases(lines[1], groups), id = lines[2], client = lines[3], priority = tonumber(lines[4]) or 0, keep = lines[5],
    live = lines[6], head = lines[7], middle = lines[8], tail = lines[9] }
end

-- flowWrite(plan, parents, now, specs, node): the node's task written as its plan says (its enqueue time `now`, its
--   parents' outcomes `parents`, JSON), tracked, in each base; its template then leaves the specs hash (the entry
--   moved into its queue: a release on a full Redis adds only the task's index).
local function flowWrite(plan, parents, now, specs, node)
  local entry = plan.head .. string.format('%d', now) .. plan.middle .. parents .. plan.tail
  for _, at in ipairs(plan.bases) do
    local faults = at .. ':faults'
    pushTask(at .. ':pending:' .. plan.client, at .. ':priority:' .. plan.client, at .. ':ring', at .. ':sequence',
      at .. ':prioritized', plan.client, entry, plan.priority, false, faults, at .. ':pending-count')
    trackCreate(at, faults, plan.id, plan.client, plan.priority, 0, '', { keep = plan.keep, live = plan.live, reply = '' },
      entry, now)
  end
  redis.call('HDEL', specs, ',' .. node)
end

-- flowEnd(froot, prefix, nodes, counted, keep, now): the end of a flow with no completion callback, as the fold
--   and its releaser would make it (foldFlow-5.lua, countFlow-2.lua, markFlow-5.lua): succeeded, or failed
--   naming its first node (by id) that did not succeed; its end counted in the prefix's flow counters and on its
--   record (`counted` e), and its five keys expiring `keep` ms from now.
local function flowEnd(froot, prefix, nodes, counted, keep, now)
  local _, firstBad = flowOpen(nodes)
  local state, reason = 'succeeded', ''
  if firstBad then
    state, reason = 'failed', 'node "' .. firstBad .. '" ' .. flowWord(nodes[firstBad].state)
  end
  redis.call('HSET', froot .. ':flow', 'state', state, 'reason', reason, 'ended', string.format('%d', now), 'counted',
    counted .. 'e')
  redis.pcall('HINCRBY', prefix .. ':{%F}:counters', state, 1)
  for _, name in ipairs({ ':flow', ':nodes', ':edges', ':specs', ':results' }) do
    redis.call('PEXPIRE', froot .. name, keep)
  end
end

-- flowRootOf(base, flow): the key root of `flow` (`<prefix>:{%F<flow>}`) and the prefix, from a queue's base; nil
--   when the base names no prefix.
local function flowRootOf(base, flow)
  local prefix = string.match(base, '^(.-):{')
  if not prefix then
    return nil, nil
  end
  return prefix .. ':{%F' .. flow .. '}', prefix
end

local function flowRelease(head, base, value)
  local froot, prefix = flowRootOf(base, head.flow)
  if not froot or not flowResponse(value) then
    return false
  end
  local nodesKey, specsKey, resultsKey = froot .. ':nodes', froot .. ':specs', froot .. ':results'
  local recordKey = froot .. ':flow'
  local record = redis.pcall('HMGET', recordKey, 'state', 'ended', 'complete', 'counted', 'keep')
  if record.err or record[1] ~= 'running' or record[2] then
    return false
  end
  local flatNodes = redis.pcall('HGETALL', nodesKey)
  local flatEdges = redis.pcall('HGETALL', froot .. ':edges')
  if flatNodes.err or flatEdges.err then
    return false
  end
  local nodes = {}
  for i = 1, #flatNodes, 2 do
    local state, seq = string.match(flatNodes[i + 1], '^(%a)/(%d+)$')
    nodes[flatNodes[i]] = { state = state or 'w', seq = tonumber(seq) or 0 }
  end
  local me = nodes[head.node]
  if not me or (me.state ~= 'q' and me.state ~= 'r') then
    return false
  end
  me.state = 's'
  -- Whether any node (a root too) is still waiting or released; its waiting children whose parents all
  -- succeeded now.
  local releases, open = {}, flowOpen(nodes)
  for i = 1, #flatEdges, 2 do
    local node = nodes[flatEdges[i]]
    if node and node.state == 'w' then
      local deps = {}
      for dep in string.gmatch(string.match(flatEdges[i + 1], '^%a|(.*)$') or '', '[^,]+') do
        deps[#deps + 1] = dep
      end
      local mine, waiting, bad = false, false, false
      for _, dep in ipairs(deps) do
        mine = mine or dep == head.node
        local parent = nodes[dep] and nodes[dep].state or 'c'
        if parent == 'w' or parent == 'q' or parent == 'r' then
          waiting = true
        elseif parent ~= 's' then
          bad = true
        end
      end
      if mine and bad then
        return false -- a parent that did not succeed: its policy is the fold's to apply
      elseif mine and not waiting then
        releases[#releases + 1] = { id = flatEdges[i], deps = deps }
      end
    end
  end
  local results = redis.call('TYPE', resultsKey)['ok']
  local counted = record[4] or ''
  if results ~= 'none' and results ~= 'hash' then
    return false
  elseif not open and (record[3] or not string.find(counted, 'c', 1, true)) then
    return false -- the flow's end with a completion callback to enqueue: the fold's releaser does it
  end
  -- Everything read before the first write: a release that cannot be made leaves it all to the fold.
  for _, release in ipairs(releases) do
    release.plan = flowPlan(redis.pcall('HGET', specsKey, ',' .. release.id))
    if not release.plan then
      return false
    end
    local parents = {}
    for i, dep in ipairs(release.deps) do
      local result = flowResponse(dep == head.node and value or redis.pcall('HGET', resultsKey, dep))
      if not result then
        return false
      end
      parents[i] = cjson.encode(dep) .. ':{"state":"succeeded","result":' .. result .. '}'
    end
    release.parents = '{' .. table.concat(parents, ',') .. '}'
  end
  me.seq = nextEventSeq(base)
  redis.call('HSET', resultsKey, head.node, value)
  flowSaveNode(nodesKey, head.node, me)
  local now = redisMs()
  for _, release in ipairs(releases) do
    flowWrite(release.plan, release.parents, now, specsKey, release.id)
    nodes[release.id].state = 'r'
    flowSaveNode(nodesKey, release.id, nodes[release.id])
  end
  if not open then
    flowEnd(froot, prefix, nodes, counted, tonumber(record[5]) or 86400000, now)
  end
  return true
end

-- flowRevive(head, base): a node requeued from dead letters is awaited again, applied to its flow's record in
--   the requeue's own script where the flow is on one Redis server (`fold`), as the fold would apply its `p`:
--   a failed node of a running flow is released again; its seq moves on either way, so an older event of it
--   still on its way to the fold changes nothing. Without this, a success released in a later settle could
--   read the node as failed while its revival waited for the fold, and end the flow failed. True when done
--   (or nothing to do: the flow ended or gone); false, with nothing written, on a key of another type.
local function flowRevive(head, base)
  local froot = flowRootOf(base, head.flow)
  if not froot then
    return false
  end
  local record = redis.pcall('HMGET', froot .. ':flow', 'state', 'ended')
  local raw = redis.pcall('HGET', froot .. ':nodes', head.node)
  if record.err or (type(raw) == 'table' and raw.err) then
    return false
  elseif record[1] ~= 'running' or record[2] or type(raw) ~= 'string' then
    return true
  end
  local state = string.match(raw, '^(%a)/%d+$') or 'w'
  local node = { state = state == 'd' and 'r' or state, seq = nextEventSeq(base) }
  flowSaveNode(froot .. ':nodes', head.node, node)
  return true
end

local function flowFollow(task, what, value)
  if task.base ~= task.root then
    return
  end
  local outcome, carried = nil, ''
  if what == 'completed' then
    outcome, carried = 's', value or ''
  elseif what == 'dead' then
    outcome, carried = 'd', flowDeadValue(value)
  elseif what == 'cancelled' or what == 'dropped' then
    outcome = 'c'
    if type(value) == 'string' then
      carried = value
    end
  elseif what == 'revived' then
    outcome = 'p'
  end
  if task.head.fold and ((outcome == 's' and flowRelease(task.head, task.base, carried))
      or (outcome == 'p' and flowRevive(task.head, task.base))) then
    return
  end
  if outcome then
    local head = task.head
    healingCall(task.base .. ':faults', 'list', 'RPUSH', task.base .. ':flow-events',
      string.format('%d', nextEventSeq(task.base)) .. '\n' .. head.flow .. '\n' .. head.node .. '\n' .. outcome
        .. '\n' .. carried)
  end
end
