-- revokeTask-2.lua
-- Purpose: cancel a tracked task by id, wherever it is. Waiting (its client's list or priority set, or
--   the delayed set; the entry its index holds says where): removed at once. Running: its fencing token
--   leaves the worker's processing hash, so the worker's next heartbeat finds it gone (its handler's
--   signal aborts), its late settle is refused, and no recovery can return it. Either way it ends
--   `cancelled`: its deduplication key freed, a send() caller answered with a TaskCancelledError record.
--   A task a claim recorded running (include/track.lua, trackClaimed) is running here, started or not.
--   When the task is between places (claimed but not recorded: a flow's node; or just returned to its queue by a
--   recovery), the cancel is recorded on its index and the step that next holds it (startTasks) cancels
--   it before any handler starts.
-- Includes: guard, finishTask, releaseClientSlot, track, flow, steps, body
-- Tracking's own step, not a move through the seam (include/follow.lua): a tracked task carries no other
--   feature's record but a flow's (model/task-traits.ts, TRAIT_CONFLICTS), so its cancel is handed to its flow
--   directly (include/flow.lua); the seam's whole dispatcher would cost every tracked cancel 2.5 µs (measured).
-- Builds keys: every key is named from the base in KEYS[1] (`<base>:task:<id>`, `<base>:pending:<client>`,
--   `<base>:task-entry:<id>`, `<base>:priority:<client>`, `<base>:delayed`, `<base>:processing:<worker>`, ... as `QueueKeys` spells
--   them) and the root in KEYS[2] (`<root>:dedup:<key>`, `<root>:result:<id>`); all share the hash tag.
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group); not a key itself
-- KEYS[2]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: task id; ARGV[2]: reason ('' none); ARGV[3]: this cancel call's id (a resent call answers as
--   the first did)
-- Returns: { outcome, state }: 'cancelled' with what the task was doing (pending | delayed | running);
--   'requested' with its state (between places: it is cancelled before it runs again); 'ended' with its
--   final state (completed | cancelled | dead: nothing changed); 'unknown' (no index: not tracked, or
--   expired)
-- Side effects: LREM / ZREM of the waiting entry (DECR of the pending count and prioritized), or HDEL of
--   the token from the processing hash with the client's cap slot released and PUBLISH on `<base>:control`
--   of `revoke\n<token>\nc\n<reason>` (its worker aborts the handler at once); the deduplication key freed,
--   the reply stored and published, HINCRBY counters cancelled, the index `cancelled`, its durable steps and
--   out-of-line payload deleted (include/steps.lua, include/body.lua), a node of a flow's
--   cancel on `<base>:flow-events` (include/flow.lua); or HSET of the
--   index's `cancel`. An index of another type is quarantined (see guard).
local base, root = KEYS[1], KEYS[2]
local id, reason, call = ARGV[1], ARGV[2], ARGV[3]
local key, entryKey = base .. ':task:' .. id, base .. ':task-entry:' .. id
local faults, counters = base .. ':faults', base .. ':counters'
-- { keep, live, state, client, priority, worker, token, call, was }
local index = trackedIndex(faults, key, 'state', 'client', 'priority', 'worker', 'token', 'call', 'was')
if not index then
  return { 'unknown', '' }
end
local state, client, priority, worker, token = index[3] or '', index[4], tonumber(index[5]) or 0, index[6], index[7]
if state == 'cancelled' and index[8] == call then
  return { 'cancelled', index[9] or '' }
end
if state ~= 'pending' and state ~= 'delayed' and state ~= 'running' then
  return { 'ended', state }
end
local counted, inflight, parked, ring = base .. ':counted', base .. ':inflight', base .. ':parked', base .. ':ring'
if redis.call('EXISTS', counted) == 1 then
  expectTypes(counted, 'hash', inflight, 'hash', parked, 'set', ring, 'list')
end
local was, entry = nil, nil
-- A key of another type (a processing hash, the entry key, a list or set) holds no task of ours.
if state == 'running' then
  local taken = worker and token and redis.pcall('HGET', base .. ':processing:' .. worker, token)
  if type(taken) == 'string' and redis.pcall('HDEL', base .. ':processing:' .. worker, token) == 1 then
    entry = taken
    releaseClientSlot(counted, inflight, parked, ring, token, false)
    was = 'running'
    -- Its worker hears it now (its heartbeat is the backstop): the handler's signal aborts in milliseconds.
    redis.call('PUBLISH', base .. ':control', 'revoke\n' .. token .. '\nc\n' .. reason)
  end
else
  -- Waiting: in the delayed set, or (promoted meanwhile) in its client's list or priority set.
  entry = redis.pcall('GET', entryKey)
  if type(entry) ~= 'string' or not client then
    entry = nil
  elseif redis.pcall('ZREM', base .. ':delayed', entry) == 1 then
    was = 'delayed'
  elseif priority > 0 then
    local set = base .. ':priority:' .. client
    local members = redis.pcall('ZRANGEBYSCORE', set, -priority, -priority)
    if type(members) == 'table' and not members.err then
      for _, member in ipairs(members) do
        if string.sub(member, 16) == entry then
          redis.call('ZREM', set, member)
          redis.pcall('DECR', base .. ':prioritized')
          redis.pcall('DECR', base .. ':pending-count')
          was = 'pending'
          break
        end
      end
    end
  elseif redis.pcall('LREM', base .. ':pending:' .. client, 1, entry) == 1 then
    redis.pcall('DECR', base .. ':pending-count')
    was = 'pending'
  end
end
if not was then
  redis.call('HSET', key, 'cancel', reason)
  return { 'requested', state }
end
cancelledTask(key, index, root, was, reason, call, entryKey)
stepsEnd(base, ARGV[1])
bodyEnd(base, entry)
countOutcome(counters, 'cancelled', 1)
-- A node of a flow reports its cancel to its flow (its index is done above).
local node = entry and flowOf(entry)
if node then
  flowFollow({ base = base, root = root, head = node }, 'cancelled', reason)
end
return { 'cancelled', was }
