-- include/flow.lua — shared by the scripts whose header says "Includes: flow".
-- Needs: guard, eventSeq
-- A node of a flow (stored form version 2, its flow id and node id first after `v`) reports each settle to
-- its flow through its own slot, in the same script call as the settle: an event on `<base>:flow-events`
-- (list), `<seq>\n<flow id>\n<node id>\n<outcome>\n<value>`, outcome s (succeeded; value: the handler's
-- result as the worker acknowledged it, `{"id":…,"response":…}` or `{"id":…,"err":…}`), d (dead-lettered;
-- value: `{"reason":…,"name":…,"code":…,"message":…}`), c (cancelled; value: why) or p (waiting again:
-- requeued from dead letters); seq from the shard's sequence (include/eventSeq.lua), so the flow's record
-- applies each node's events in order however often they are folded (foldFlow-5.lua; the worker that
-- settled the node and reapers fold them, see lib/core/flows). Only the default consumer group's runs count
-- (its base is the root).
-- flowOf(entry)
--   { flow, node } for a flow node's entry (`<attempts>|{"v":2,"flow":...`), else nil. Read by a string match
--   in the producer's field order; written otherwise (another producer, escapes), decoded.
-- flowFollow(task, what, value)
--   Flows' handler of a move (include/follow.lua): completed s, dead d, cancelled and dropped c, revived p;
--   the other moves (retried, requeued) leave the node released, as it was.
local function flowOf(entry)
  local flow, node = string.match(entry, '^%d+|{"v":2,"flow":"([^"\\]*)","node":"([^"\\]*)"')
  if flow then
    return { flow = flow, node = node }
  end
  if not string.find(entry, '^%d+|{"v":2,"flow":') then
    return nil
  end
  local ok, envelope = pcall(cjson.decode, string.sub(entry, string.find(entry, '|', 1, true) + 1))
  if not ok or type(envelope) ~= 'table' or type(envelope.flow) ~= 'string' or type(envelope.node) ~= 'string' then
    return nil
  end
  return { flow = envelope.flow, node = envelope.node }
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
  if outcome then
    local head = task.head
    healingCall(task.base .. ':faults', 'list', 'RPUSH', task.base .. ':flow-events',
      string.format('%d', nextEventSeq(task.base)) .. '\n' .. head.flow .. '\n' .. head.node .. '\n' .. outcome
        .. '\n' .. carried)
  end
end
