-- include/coalesceEmit.lua — latest wins at the emit (enqueueTasks' header says "Includes: coalesceEmit"); the
-- record's fields and every other step are in include/coalesce.lua.
-- Needs: coalesce
-- coalesceEmit(base, root, c, client, entry, priority, delay, id, now)
--   An emit with a coalescing key (c: key, mode, maxWait, reply, ttl): supersede first revokes every
--   running task of the key (its token leaves its worker's processing hash, its worker is told on
--   `<base>:control` and aborts the handler, its heartbeat the backstop; its late settle is refused;
--   counted `replaced`, its send() caller told, its durable steps deleted). Then, while a slot waits (one
--   whose client's list or priority set now holds another type is gone with it: it is forgotten), the emit
--   replaces its latest entry (the slot keeps its place; its caller told; the durable steps of the slot's own
--   task deleted: it runs the newest payload, under the newest id), and a debounce moves the
--   slot's due time to min(now + delay, first + maxWait); else the task becomes the slot: parked
--   (keep-last, while one of the key runs), delayed (a delay), or in its client's list. Returns the
--   emit's answer (0 placed, '\1' .. the id it replaced, '\2' .. the id of a running task it
--   superseded) and the due time of the delayed set it wrote (or nil).
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
          stepsEnd(base, ran)
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
    -- The slot's own task runs the newest payload under the newest id from now on: steps of its earlier runs go.
    stepsEnd(base, fields.id)
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
