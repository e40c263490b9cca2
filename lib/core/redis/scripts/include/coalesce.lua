-- include/coalesce.lua — shared by the scripts whose header says "Includes: coalesce".
-- Needs: guard, pushTask, releaseClientSlot
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
-- (enqueueTasks), the start (startCoalesced: the slot takes the latest entry, becomes a runner), and each
-- settle (ackTasks, retryTask, deadLetterTask, requeueTasks: the runner leaves; a retried or returned
-- task waits again only while no newer task of the key was emitted, so an older payload never runs
-- after a newer one). The record is deleted when nothing waits and nothing runs.
-- coalesceOf(entry)
--   For a coalesced entry (`<attempts>|{"v":2,"coalesce":...`: the prefix alone tells, so other entries
--   cost one string match), { key, mode, id, reply }; else nil. Read by string matches in the producer's field
--   order; an entry written otherwise (another producer, escapes in its strings) is decoded.
-- coalesceKey(base, key): the record's key name; coalesceBase(ring): the base of a ring key (`<base>:ring`),
--   for the settle scripts, which are given their keys one by one.
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
-- coalesceEmit(base, root, c, client, entry, priority, delay, id, now)
--   An emit with a coalescing key (c: key, mode, maxWait, reply, ttl): supersede first revokes every
--   running task of the key (its token leaves its worker's processing hash, its worker is told on
--   `<base>:control` and aborts the handler, its heartbeat the backstop; its late settle is refused;
--   counted `replaced`, its send() caller told). Then, while a slot waits (one
--   whose client's list or priority set now holds another type is gone with it: it is forgotten), the emit
--   replaces its latest entry (the slot keeps its place; its caller told), and a debounce moves the
--   slot's due time to min(now + delay, first + maxWait); else the task becomes the slot: parked
--   (keep-last, while one of the key runs), delayed (a delay), or in its client's list. Returns the
--   emit's answer (0 placed, '\1' .. the id it replaced, '\2' .. the id of a running task it
--   superseded) and the due time of the delayed set it wrote (or nil).
-- coalesceDrop(base, processing, record, fields, c, token)
--   The task held under `token` in the processing hash is older than its key's newest: it leaves the worker without running
--   again (its cap slot released, counted `replaced`, its send() caller told), then coalesceLeft.
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

local function coalesceBase(ring)
  return string.sub(ring, 1, -6)
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
  releaseClientSlot(base .. ':counted', base .. ':inflight', base .. ':parked', base .. ':ring', token, false)
  countOutcome(base .. ':counters', 'replaced', 1)
  coalesceTell(fields.root, c.reply, c.id, fields.last, fields.ttl)
  coalesceLeft(base, record, fields, token)
end

local function coalesceEmit(base, root, c, client, entry, priority, delay, id, now)
  local record = coalesceKey(base, c.key)
  local faults = base .. ':faults'
  local fields = coalesceRead(faults, record)
  local answer, due = 0, nil
  if c.mode == 's' then
    for field, value in pairs(fields) do
      if string.sub(field, 1, 2) == 'r:' then
        local token = string.sub(field, 3)
        local worker, ran, reply, ttl = string.match(value, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)$')
        redis.call('HDEL', record, field)
        fields[field] = nil
        if worker and redis.pcall('HDEL', base .. ':processing:' .. worker, token) == 1 then
          releaseClientSlot(base .. ':counted', base .. ':inflight', base .. ':parked', base .. ':ring', token, false)
          countOutcome(base .. ':counters', 'replaced', 1)
          -- Its worker hears it now (its heartbeat is the backstop): the handler's signal aborts in milliseconds.
          redis.call('PUBLISH', base .. ':control', 'revoke\n' .. token .. '\ns\n' .. id)
          coalesceTell(root, reply, ran, id, ttl)
          answer = '\2' .. ran
        end
      end
    end
  end
  if fields.id and fields.where == 'q' and fields.client then
    -- A slot whose client's list (or priority set) now holds another type is gone with it (overwritten by
    -- a stray write): a new slot takes its place, so the stray key never strands the key's later emits. The
    -- newest payload it would have run is replaced by this one (counted, its caller told).
    local list = (tonumber(fields.priority) or 0) > 0 and base .. ':priority:' .. fields.client
      or base .. ':pending:' .. fields.client
    local kind = redis.call('TYPE', list)['ok']
    if kind ~= 'none' and kind ~= ((tonumber(fields.priority) or 0) > 0 and 'zset' or 'list') then
      if fields.last and fields.last ~= fields.id then
        coalesceTell(root, fields.reply, fields.last, id, fields.ttl)
        countOutcome(base .. ':counters', 'replaced', 1)
      end
      redis.call('HDEL', record, unpack(COALESCE_SLOT))
      fields.id = nil
    end
  end
  if fields.id then
    local replaced = fields.last or fields.id
    coalesceTell(root, fields.reply, replaced, id, fields.ttl)
    redis.call('HSET', record, 'mode', c.mode, 'latest', entry, 'last', id, 'reply', c.reply, 'ttl', c.ttl)
    if c.mode == 'd' and fields.where == 'd' and fields.entry then
      local at = redis.pcall('ZSCORE', base .. ':delayed', fields.entry)
      if type(at) == 'string' then
        due = math.min(now + delay, (tonumber(fields.first) or now) + c.maxWait)
        redis.call('ZADD', base .. ':delayed', due, fields.entry)
      end
    end
    countOutcome(base .. ':counters', 'replaced', 1)
    return '\1' .. replaced, due
  end
  local where = 'q'
  if c.mode == 'k' and coalesceRunning(fields) > 0 then
    where = 'p'
  elseif delay > 0 then
    due = now + delay
    healingCall(faults, 'zset', 'ZADD', base .. ':delayed', due, entry)
    where = 'd'
  else
    pushTask(base .. ':pending:' .. client, base .. ':priority:' .. client, base .. ':ring', base .. ':sequence',
      base .. ':prioritized', client, entry, priority, false, faults, base .. ':pending-count')
  end
  -- The payload once: the record keeps the slot's entry only where it is the entry's one home (parked) or a
  -- debounce must find it in the delayed set to move its due time; no `latest` while the slot's own entry is
  -- the newest (last = id).
  redis.call('HSET', record, 'mode', c.mode, 'root', root, 'id', id, 'where', where, 'client', client,
    'priority', priority, 'first', now, 'last', id, 'reply', c.reply, 'ttl', c.ttl)
  if where == 'p' or (where == 'd' and c.mode == 'd') then
    redis.call('HSET', record, 'entry', entry)
  end
  return answer, due
end
