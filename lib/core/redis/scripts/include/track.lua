-- include/track.lua — shared by the scripts whose header says "Includes: track".
-- Needs: guard, finishTask, clock, steps
-- A tracked task's index, `<base>:task:<id>` (hash; QueueKeys.task spells it), is made by
-- enqueueTasks alone (trackCreate); every later step updates it only while it exists, so a task enqueued without
-- tracking never gets a key, and every index carries a TTL (`live` ms while the task waits or runs,
-- `keep` ms once it ended). Its fields: id, state (pending | delayed | running | completed | cancelled |
-- dead), at (Redis ms of the last change; none at its creation, whose time is `enq`, nor when its run starts, whose
-- time is `started`), enq (when enqueued), client, priority (absent: 0), due and why (delayed: `delay` or
-- `retry`), worker, token, attempt and started (running), progress and pseq (the last progress value and
-- its sequence), result (a send() task's reply), reason, detail and error (dead), was (what a cancelled
-- task was doing), cancel (a cancel asked while the task was between places: its reason; the next step
-- that holds the task cancels it), call (the cancel call that settled it), reply (a send() caller's
-- channel), dedup (its deduplication key), keep and live. While the task waits, the entry as it lies in its
-- list or set (so a cancel can take it out) is kept beside the index, under `<base>:task-entry:<id>`
-- (string, same TTL): out of the hash, so the index stays a small listpack encoding once the task runs.
-- trackCreate(base, faults, id, client, priority, delay, dedup, track, entry, now)
--   The index of a tracked task just written (enqueueTasks; track: keep, live, reply): pending, or delayed
--   (why `delay`) when it has a delay; one HSET, no read first: an id used before (the HSET added fewer fields than
--   it set) starts a new index, and a key of another type (the HSET refused) is set aside, recorded in faults; its
--   entry kept beside it for a cancel. Both live `live` ms.
-- trackedIndex(faults, key, ...)
--   The index to update, as { keep, live, <the fields named> } (one HMGET), or false: '' or absent (every
--   index has `keep`), or a key of another type, which is set aside (quarantined, recorded in faults) when
--   `faults` is given, else left alone; the task goes on untracked.
-- trackState(key, index, state, entryKey, entry, ...)
--   Moves the index to `state`: one HDEL of the fields of the states it leaves (`index.drops` when the caller
--   names them; none when the caller knows it holds none of them: `index.dropsNothing`), one HSET of `state`,
--   `at` (not when running: its `started` is given) and the given field/value pairs, one PEXPIRE (`live` while
--   waiting or running, `keep` once ended). An ended index keeps its last run's worker, attempt, started and token.
--   Waiting again (pending, delayed) with `entry`: SET of the entry key; running or ended: DEL of it.
-- cancelledTask(key, index, root, was, reason, call, entryKey)
--   The cancelled outcome of a task that has just left every place it could be (its list or set, or the
--   processing hash): its deduplication key freed, a send() caller answered with a TaskCancelledError
--   record (stored under its result key for `keep` ms and published), the index `cancelled`.
-- trackClaimed(faults, base, worker, token, entry)
--   A task a claim just took (claimTasks): when its entry says it is tracked (`"track":1` in the envelope's head,
--   before its payload) and is no flow's node (stored form version 2: left to startTasks, which hands a cancel to
--   its flow), and its index waits (pending, delayed; or running, a stale record), the index is recorded `running`
--   under `token` as startTasks records it (worker, token, attempt: the entry's attempts + 1, started; its entry
--   key deleted), and its `keep` is returned (as stored; '' when it is not a positive integer): the worker starts its
--   handler without a startTasks call, and sends the keep back with the task's success. False, the
--   index untouched (the worker's startTasks decides): not tracked, a cancel asked while the task was between
--   places, no index (expired: it runs untracked), an index that ended.
-- trackFollow(task, what, key, entryKey, value, due)
--   Tracking's handler of a move (include/follow.lua): the index `key` (while it exists; one HMGET, which also
--   tells whether a final state has anything to drop) becomes completed (with the reply as `result`), delayed (why `retry`, its due time), pending (requeued, or
--   revived from dead letters: its death's why dropped), dead (the dead-letter record's reason, detail and error)
--   or cancelled (counted in the queue's `cancelled`).
local TRACK_DEFAULT_TTL = 86400000
local function trackCreate(base, faults, id, client, priority, delay, dedup, track, entry, now)
  local index = base .. ':task:' .. id
  -- Written as it is at its creation: no `at` (its `enq` is its last change), no `priority` when 0.
  local fields = { 'id', id, 'state', delay > 0 and 'delayed' or 'pending', 'enq', now, 'client', client,
    'keep', track.keep, 'live', track.live }
  if tonumber(priority) ~= 0 then
    fields[#fields + 1], fields[#fields + 2] = 'priority', priority
  end
  if delay > 0 then
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'due', now + delay, 'why', 'delay'
  end
  if track.reply ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'reply', track.reply
  end
  if dedup ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'dedup', dedup
  end
  -- One HSET, no read first: it adds every field to a new index. Fewer added means an id used before (a task
  -- enqueued again under its id): that index is replaced. A key of another type is set aside.
  local added = redis.pcall('HSET', index, unpack(fields))
  if type(added) == 'table' or added < #fields / 2 then
    if type(added) ~= 'table' then
      redis.call('DEL', index)
    elseif string.sub(added.err, 1, 9) == 'WRONGTYPE' then
      quarantineKey(faults, index, 'hash')
    else
      error(added)
    end
    redis.call('HSET', index, unpack(fields))
  end
  redis.call('PEXPIRE', index, tonumber(track.live) or TRACK_DEFAULT_TTL)
  -- Where it waits, for a cancel: a string beside the index (any value it held replaced).
  redis.call('SET', base .. ':task-entry:' .. id, entry, 'PX', tonumber(track.live) or TRACK_DEFAULT_TTL)
end

local function trackedIndex(faults, key, ...)
  if key == '' then
    return false
  end
  local fields = redis.pcall('HMGET', key, 'keep', 'live', ...)
  if fields.err then
    if faults then
      quarantineKey(faults, key, 'hash')
    end
    return false
  end
  if not fields[1] then
    return false
  end
  return fields
end

-- What each state drops of the states before it (a final state keeps who ran it last: worker, attempt,
-- started).
local TRACK_DROPS = {
  pending = { 'worker', 'token', 'started', 'due', 'why' },
  delayed = { 'worker', 'token', 'started' },
  running = { 'due', 'why' },
}
-- A final state keeps its last run's token too: nothing reads it once the task ended (each reader checks the state).
local TRACK_FINAL_DROPS = { 'due', 'why', 'cancel' }
-- A dead letter requeued drops its death's why and what `pending` drops (one HDEL).
local TRACK_REVIVED_DROPS = { 'reason', 'detail', 'error', unpack(TRACK_DROPS.pending) }

local function trackState(key, index, state, entryKey, entry, ...)
  local drops = TRACK_DROPS[state]
  if not index.dropsNothing then
    redis.call('HDEL', key, unpack(index.drops or drops or TRACK_FINAL_DROPS))
  end
  if state == 'running' then
    -- Its `started` (among the pairs given) is its last change: no `at` of its own.
    redis.call('HSET', key, 'state', state, ...)
  else
    redis.call('HSET', key, 'state', state, 'at', redisMs(), ...)
  end
  local ttl = tonumber(drops and index[2] or index[1]) or TRACK_DEFAULT_TTL
  redis.call('PEXPIRE', key, ttl)
  if entryKey ~= '' then
    if entry and (state == 'pending' or state == 'delayed') then
      redis.call('SET', entryKey, entry, 'PX', ttl)
    elseif state ~= 'pending' and state ~= 'delayed' then
      redis.call('DEL', entryKey)
    end
  end
end

local function cancelledTask(key, index, root, was, reason, call, entryKey)
  local fields = redis.call('HMGET', key, 'id', 'reply', 'dedup', 'cancel')
  local id = fields[1] or ''
  reason = reason or fields[4] or ''
  local message = nil
  if fields[2] then
    local text = 'the task was cancelled'
    if reason ~= '' then
      text = text .. ': ' .. reason
    end
    message = cjson.encode({ id = id, err = { name = 'TaskCancelledError', code = 'TASK_CANCELLED', message = text,
      taskId = id, attempt = 0, reason = 'cancelled', detail = reason } })
  end
  local dedupKey, holder = '', ''
  if fields[3] then
    dedupKey, holder = root .. ':dedup:' .. fields[3], id
  end
  finishTask(dedupKey, holder, root .. ':result:' .. id, fields[2], message, tonumber(index[1]) or TRACK_DEFAULT_TTL)
  trackState(key, index, 'cancelled', entryKey, nil, 'was', was, 'reason', reason, 'call', call)
end

local function trackClaimed(faults, base, worker, token, entry)
  -- Most entries are not tracked: one search tells (a payload after the head may hold the text too).
  local at = string.find(entry, ',"track":1', 1, true)
  if not at then
    return false
  end
  local payload = string.find(entry, ',"payload":', 1, true)
  if (payload and payload < at) or string.find(entry, '^%d+|{"v":2,') then
    return false
  end
  local id = stepsIdOf(entry)
  if not id then
    return false
  end
  local key = base .. ':task:' .. id
  -- { keep, live, state, cancel, due }
  local index = trackedIndex(faults, key, 'state', 'cancel', 'due')
  if not index or index[4] or not (index[3] == 'pending' or index[3] == 'delayed' or index[3] == 'running') then
    return false
  end
  -- Only a task that waited for a retry or a delay has `due` and `why` to drop (one HDEL fewer).
  index.dropsNothing = not index[5]
  trackState(key, index, 'running', base .. ':task-entry:' .. id, nil, 'worker', worker, 'token', token,
    'attempt', (tonumber(string.match(entry, '^(%d+)|')) or 0) + 1, 'started', redisMs())
  return string.match(index[1], '^[1-9]%d*$') or ''
end

local function trackFollow(task, what, key, entryKey, value, due)
  -- { keep, live, cancel, due }: an index with neither (`why` comes and goes with `due`) has nothing a final
  -- state drops (one HDEL fewer).
  local index = trackedIndex(nil, key, 'cancel', 'due')
  if not index then
    return
  end
  if what == 'completed' or what == 'dead' then
    index.dropsNothing = not index[3] and not index[4]
  end
  if what == 'completed' then
    trackState(key, index, 'completed', entryKey, nil, 'result', value or '')
  elseif what == 'retried' then
    trackState(key, index, 'delayed', entryKey, value, 'due', due, 'why', 'retry')
  elseif what == 'requeued' then
    trackState(key, index, 'pending', entryKey, value)
  elseif what == 'revived' then
    -- A dead letter requeued: waiting again, its death's why gone.
    index.drops = TRACK_REVIVED_DROPS
    trackState(key, index, 'pending', entryKey, value)
  elseif what == 'dead' then
    local record = type(value) == 'table' and value or {}
    trackState(key, index, 'dead', entryKey, nil, 'reason', type(record.reason) == 'string' and record.reason or '',
      'detail', type(record.detail) == 'string' and record.detail or '',
      'error', type(record.error) == 'table' and cjson.encode(record.error) or '')
  elseif what == 'cancelled' then
    cancelledTask(key, index, task.root, 'pending', value, '', entryKey)
    countOutcome(task.base .. ':counters', 'cancelled', 1)
  end
end
