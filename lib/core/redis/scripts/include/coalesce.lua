-- include/coalesce.lua — shared by the scripts whose header says "Includes: coalesce".
-- Needs: guard, clock, pushTask, releaseClientSlot, steps
-- Latest wins: tasks emitted with a coalescing key share one record per
-- key and consumer group, `<base>:coalesce:<key>` (hash; QueueKeys.coalesce spells it). Its fields:
--   mode      r (replace), d (debounce), k (keep-last), s (supersede): the last emit's
--   root      the shard's key root (its result keys, for the send() callers told they were replaced)
--   id        the task that waits for the key (the "slot"), absent when none waits; it holds its place in
--             line: its entry lies in its client's list or priority set (where q), the delayed set (where
--             d), or nowhere yet (where p, "parked": keep-last, while another task of the key runs)
--   entry     the slot's entry, kept only where the record is its one home (parked) or a debounce must find
--             it in the delayed set (its due time moves): a payload waiting in a list is kept once; client,
--             priority: where a parked slot goes; first: when the slot was placed (a debounce never waits
--             past first + maxWait)
--   latest    the entry the slot runs once an emit replaced it (an emit while a slot waits puts its entry
--             here, so the slot keeps its place and runs the newest payload; absent while the slot's own
--             entry is the newest); last: the newest task id; reply, ttl: its send() caller's channel ('' none)
--             and how long a reply is kept (ms)
--   r:<token> one per running task of the key: `<worker>\n<task id>\n<reply channel>\n<ttl>`
-- Every step that moves a task of the key updates the record in the same script call: the emit
-- (enqueueTasks, include/coalesceEmit.lua), the start (startCoalesced: the slot takes the latest entry,
-- becomes a runner), and each settle through the seam (include/follow.lua: coalesceAsk, coalesceFollow; the
-- runner leaves; a retried or returned task waits again only while no newer task of the key was emitted, so
-- an older payload never runs after a newer one). The record is deleted when nothing waits and nothing runs.
-- coalesceOf(entry)
--   For a coalesced entry (`<attempts>|{"v":2,"coalesce":...`: the prefix alone tells, so other entries
--   cost one string match), { key, mode, id, reply }; else nil. Read by string matches in the producer's field
--   order; an entry written otherwise (another producer, escapes in its strings) is decoded.
-- coalesceKey(base, key): the record's key name.
-- coalesceRead(faults, record): its fields as a table ({} when absent; another type quarantined).
-- coalesceRunning(fields): how many tasks of the key run.
-- coalesceTell(root, channel, id, by, ttl)
--   A send() caller (channel) of task `id` hears that task `by` replaced it: a TaskReplacedError
--   record, stored under its result key for ttl ms and published.
-- coalesceAgain(fields, id): may task `id`, retried or returned to its queue, wait again? 'slot' (it is
--   the slot itself), 'new' (it is the newest of its key: it becomes the slot), 'drop' (a newer one waits
--   or ran).
-- coalesceLeft(base, record, fields, token)
--   A task of the key left the worker that ran it (`token`; '' none): its runner field goes; a parked
--   slot with no runner left is placed in its client's list; a record with nothing waiting and nothing
--   running is deleted.
-- coalesceDrop(base, processing, record, fields, c, token)
--   The task held under `token` in the processing hash is older than its key's newest: it leaves the worker without running
--   again (its cap slot released, counted `replaced`, its send() caller told, its durable steps deleted), then coalesceLeft.
-- coalesceAsk(task, what, processing, token)
--   The seam's question before a held task of the key waits again (retried, requeued): 'drop' when a newer
--   task of its key waits or ran (coalesceDrop: it has left its worker), else nil; the record read is kept
--   on `task` for coalesceFollow.
-- coalesceFollow(task, what, token, value, due)
--   The seam's handler of a move: completed or dead, the runner leaves (coalesceLeft); a waiting task
--   cancelled or dead-lettered frees the key's slot; retried, the task is its key's waiting task in the delayed set; requeued,
--   in its client's list.
local COALESCE_SLOT = { 'id', 'entry', 'where', 'client', 'priority', 'first', 'latest', 'reply' }

local function coalesceOf(entry)
  if not string.find(entry, '^%d+|{"v":2,"coalesce":') then
    return nil
  end
  -- The producer's own order (codec.ts encodeNewEntry), read without decoding the payload; any escape in
  -- these strings, or another order, takes the decoder.
  local key, mode, id, at = string.match(entry,
    '^%d+|{"v":2,"coalesce":"([^"\\]*)","coalesceMode":"(%a)","id":"([^"\\]*)","clientId":"[^"\\]*","enqueuedAt":[^,]*()')
  if key then
    local reply = string.match(entry, '^,"replyTo":"([^"\\]*)"', at)
    if reply or string.sub(entry, at, at + 10) ~= ',"replyTo":' then
      return { key = key, mode = mode, id = id, reply = reply or '' }
    end
  end
  local ok, envelope = pcall(cjson.decode, string.sub(entry, string.find(entry, '|', 1, true) + 1))
  if not ok or type(envelope) ~= 'table' or type(envelope.coalesce) ~= 'string' or type(envelope.id) ~= 'string' then
    return nil
  end
  return { key = envelope.coalesce, mode = envelope.coalesceMode, id = envelope.id,
    reply = type(envelope.replyTo) == 'string' and envelope.replyTo or '' }
end

local function coalesceKey(base, key)
  return base .. ':coalesce:' .. key
end

local function coalesceRead(faults, record)
  local flat = redis.pcall('HGETALL', record)
  if flat.err then
    quarantineKey(faults, record, 'hash')
    return {}
  end
  local fields = {}
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  return fields
end

local function coalesceRunning(fields)
  local n = 0
  for field in pairs(fields) do
    if string.sub(field, 1, 2) == 'r:' then
      n = n + 1
    end
  end
  return n
end

local function coalesceTell(root, channel, id, by, ttl)
  if not channel or channel == '' or not id or not root then
    return
  end
  local message = cjson.encode({ id = id, err = { name = 'TaskReplacedError', code = 'TASK_REPLACED',
    message = 'the task was replaced by task ' .. (by or '?'), taskId = id, replacedBy = by or '', attempt = 0,
    reason = 'replaced', detail = by or '' } })
  redis.call('SET', root .. ':result:' .. id, message, 'PX', tonumber(ttl) or 3600000)
  redis.call('PUBLISH', channel, message)
end

local function coalesceAgain(fields, id)
  if fields.id == id then
    return 'slot'
  end
  if fields.id or (fields.last and fields.last ~= id) then
    return 'drop'
  end
  return 'new'
end

local function coalesceLeft(base, record, fields, token)
  if token ~= '' and fields['r:' .. token] then
    redis.call('HDEL', record, 'r:' .. token)
    fields['r:' .. token] = nil
  end
  local running = coalesceRunning(fields)
  if fields.where == 'p' and running == 0 and fields.client and fields.entry then
    pushTask(base .. ':pending:' .. fields.client, base .. ':priority:' .. fields.client, base .. ':ring',
      base .. ':sequence', base .. ':prioritized', fields.client, fields.entry, tonumber(fields.priority) or 0, false,
      base .. ':faults', base .. ':pending-count')
    -- Its list holds it now: the record keeps the payload no more.
    redis.call('HSET', record, 'where', 'q')
    redis.call('HDEL', record, 'entry')
    fields.where = 'q'
  end
  if not fields.id and running == 0 and next(fields) ~= nil then
    redis.call('DEL', record)
  end
end

local function coalesceDrop(base, processing, record, fields, c, token)
  redis.call('HDEL', processing, token)
  stepsEnd(base, c.id)
  releaseClientSlot(base .. ':counted', base .. ':inflight', base .. ':parked', base .. ':ring', token, false)
  countOutcome(base .. ':counters', 'replaced', 1)
  coalesceTell(fields.root, c.reply, c.id, fields.last, fields.ttl)
  coalesceLeft(base, record, fields, token)
end

local function coalesceRecord(task)
  if not task.record then
    task.record = coalesceKey(task.base, task.head.key)
    task.fields = coalesceRead(task.base .. ':faults', task.record)
  end
  return task.record, task.fields
end

local function coalesceAsk(task, what, processing, token)
  if what ~= 'retried' and what ~= 'requeued' then
    return nil
  end
  local record, fields = coalesceRecord(task)
  task.again = coalesceAgain(fields, task.head.id)
  if task.again == 'drop' then
    coalesceDrop(task.base, processing, record, fields, task.head, token)
    return 'drop'
  end
  return nil
end

local function coalesceFollow(task, what, token, value, due)
  if what == 'dropped' or what == 'revived' then
    return
  end
  local c = task.head
  local record, fields = coalesceRecord(task)
  if what == 'retried' then
    redis.call('HSET', record, 'id', c.id, 'where', 'd', 'first', due, 'last', c.id, 'reply', c.reply)
    redis.call('HDEL', record, 'latest', 'entry')
    if c.mode == 'd' then
      -- A debounce emit while it waits moves its due time: it must find it in the delayed set.
      redis.call('HSET', record, 'entry', value)
    end
    fields.id = c.id
  elseif what == 'requeued' then
    -- It waits again, as its key's slot (it was, or it is the newest of its key).
    redis.call('HSET', record, 'id', c.id, 'where', 'q')
    redis.call('HDEL', record, 'entry')
    if task.again == 'new' then
      redis.call('HSET', record, 'first', redisMs(), 'last', c.id, 'reply', c.reply)
      redis.call('HDEL', record, 'latest')
    end
    fields.id = c.id
  elseif token == '' and fields.id == c.id then
    -- The key's waiting task itself left its place for good (cancelled, or dead-lettered from the delayed
    -- set): the key waits for nothing, so its next emit is placed anew.
    redis.call('HDEL', record, unpack(COALESCE_SLOT))
    fields.id = nil
  end
  coalesceLeft(task.base, record, fields, token)
end
