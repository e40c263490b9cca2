-- include/track.lua — shared by the scripts whose header says "Includes: track" (after guard and
-- finishTask). A tracked task's index, `<base>:task:<id>` (hash; QueueKeys.task spells it), is made by
-- enqueueTasks alone; every later step updates it only while it exists, so a task enqueued without
-- tracking never gets a key, and every index carries a TTL (`live` ms while the task waits or runs,
-- `keep` ms once it ended). Its fields: id, state (pending | delayed | running | completed | cancelled |
-- dead), at (Redis ms of the last change), enq (when enqueued), client, priority, entry (while waiting:
-- the entry as it lies in its list or set, so a cancel can take it out), due and why (delayed: `delay` or
-- `retry`), worker, token, attempt and started (running), progress and pseq (the last progress value and
-- its sequence), result (a send() task's reply), reason, detail and error (dead), was (what a cancelled
-- task was doing), cancel (a cancel asked while the task was between places: its reason; the next step
-- that holds the task cancels it), call (the cancel call that settled it), reply (a send() caller's
-- channel), dedup (its deduplication key), keep and live.
-- trackedIndex(faults, key)
--   Whether `key` is an index to update: '' or absent, no; a key of another type, no: it is set aside
--   (quarantined, recorded in faults) when `faults` is given, else left alone; the task goes on untracked.
-- trackState(key, state, ...)
--   Moves the index to `state`: drops the fields of the state it leaves, sets `at`, the given field/value
--   pairs, and the TTL (`live` while waiting or running, `keep` once ended).
-- cancelledTask(key, root, was, reason, call)
--   The cancelled outcome of a task that has just left every place it could be (its list or set, or the
--   processing hash): its deduplication key freed, a send() caller answered with a TaskCancelledError
--   record (stored under its result key for `keep` ms and published), the index `cancelled`.
local function trackedIndex(faults, key)
  if key == '' then
    return false
  end
  local found = redis.call('TYPE', key)['ok']
  if found == 'hash' then
    return true
  end
  if found ~= 'none' and faults then
    quarantineKey(faults, key, 'hash')
  end
  return false
end

local TRACK_DEFAULT_TTL = 86400000

local function trackState(key, state, ...)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local live = state == 'pending' or state == 'delayed' or state == 'running'
  if state ~= 'running' then
    redis.call('HDEL', key, 'worker', 'token', 'started')
  end
  if state ~= 'delayed' then
    redis.call('HDEL', key, 'due', 'why')
  end
  if not live or state == 'running' then
    redis.call('HDEL', key, 'entry')
  end
  if not live then
    redis.call('HDEL', key, 'cancel')
  end
  redis.call('HSET', key, 'state', state, 'at', now, ...)
  local ttl = tonumber(redis.call('HGET', key, live and 'live' or 'keep'))
  redis.call('PEXPIRE', key, ttl or TRACK_DEFAULT_TTL)
end

local function cancelledTask(key, root, was, reason, call)
  local fields = redis.call('HMGET', key, 'id', 'reply', 'dedup', 'keep', 'cancel')
  local id = fields[1] or ''
  reason = reason or fields[5] or ''
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
  finishTask(dedupKey, holder, root .. ':result:' .. id, fields[2], message, tonumber(fields[4]) or TRACK_DEFAULT_TTL)
  trackState(key, 'cancelled', 'was', was, 'reason', reason, 'call', call)
end
