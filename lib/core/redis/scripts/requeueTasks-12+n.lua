-- requeueTasks-12+n.lua
-- Purpose: return claimed tasks from a worker's processing hash to the HEAD of their clients' pending
--   tasks (graceful shutdown, a restarted worker resuming its own hash, recovery of a dead worker).
--   Only tokens still present are moved, so two processes recovering the same worker cannot requeue a
--   task twice, and a task settled meanwhile is left alone. A reaper's recovery is fenced on the lease:
--   when ARGV[2] names the worker, nothing moves unless its lease (in the workers set) still ends at or
--   before ARGV[3], so a worker that renewed its lease since the reaper found it expired keeps its tasks.
--   Each task is pushed before it leaves the processing hash, and the keys written are type-checked
--   (or, a client's own, healed) first, so a failure at any step never loses a task.
-- Includes: pushTask, releaseClientSlot, follow
-- Builds keys: what follows each task (include/follow.lua) names its keys from the base in KEYS[11] and the
--   root in KEYS[12] (as `QueueKeys` spells them); all share the hash tag, hence the slot.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3]: sequence (string counter; orders equal priorities)
-- KEYS[4]: prioritized (string counter of prioritized pending tasks)
-- KEYS[5]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[6]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[7]: parked (set of clients taken off the ring at their cap)
-- KEYS[8]: faults (hash: broken data found and what was done; see guard)
-- KEYS[9]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- KEYS[10]: workers (sorted set: worker id -> lease expiry, Redis time in milliseconds)
-- KEYS[11]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[12]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- KEYS[13..n+12]: pending lists and priority sets the tasks return to
-- ARGV[1]: 1 to count the interrupted run as an attempt, 0 not to
-- ARGV[2]: the worker id whose lease must have expired ('' = no lease check); ARGV[3]: the latest lease
--   expiry (ms) that counts as expired (when ARGV[2] is given)
-- ARGV[4..]: per task, 7 fields: fencing token, index into KEYS of its client's pending list, index of
--   its client's priority set, client id, priority, its index key and entry key (`<base>:task:<id>`,
--   `<base>:task-entry:<id>`; see include/track.lua) when tracked, else ''; pass tokens newest first so that pushes at the head
--   restore the original order
-- Returns: integer, the number of tasks requeued or dropped as replaced (-1 when the worker renewed its
--   lease: nothing moved)
-- Side effects: HDEL from the processing hash, LPUSH onto pending lists or ZADD onto priority sets (INCR
--   of prioritized; INCR of the pending count), the
--   entry's attempt prefix incremented when counted; a client with no other pending task is pushed onto
--   the ring's head; the client's cap slot released (releaseClientSlot). What follows each (include/follow.lua,
--   move `requeued`): a tracked task's index (while it exists, and is a hash) becomes `pending`, its entry key
--   holding the entry as returned (a cancel asked meanwhile stays on it: startTasks applies it before the
--   task runs again). A task with a coalescing key goes back only while no newer task of its key was emitted
--   (then it becomes its key's waiting task); else it leaves the worker without running again, counted
--   `replaced` (see include/coalesce.lua).
local countAttempt = ARGV[1] == '1'
-- Checked before the first write; each task is pushed before it leaves the processing hash.
expectTypes(KEYS[1], 'hash', KEYS[2], 'list', KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'set')
if ARGV[2] ~= '' then
  local lease = redis.call('ZSCORE', KEYS[10], ARGV[2])
  if lease and tonumber(lease) > tonumber(ARGV[3]) then
    return -1
  end
end
local requeued = 0
for i = 4, #ARGV, 7 do
  local token = ARGV[i]
  local entry = redis.call('HGET', KEYS[1], token)
  if entry then
    local returned = entry
    if countAttempt then
      local attempts, rest = string.match(entry, '^(%d+)|(.*)$')
      if attempts then
        returned = tostring(tonumber(attempts) + 1) .. '|' .. rest
      end
    end
    local task = followOf(KEYS[11], KEYS[12], entry)
    if followAsk(task, 'requeued', KEYS[1], token) ~= 'drop' then
      pushTask(KEYS[tonumber(ARGV[i + 1])], KEYS[tonumber(ARGV[i + 2])], KEYS[2], KEYS[3], KEYS[4], ARGV[i + 3], returned,
        tonumber(ARGV[i + 4]) or 0, true, KEYS[8], KEYS[9])
      redis.call('HDEL', KEYS[1], token)
      releaseClientSlot(KEYS[5], KEYS[6], KEYS[7], KEYS[2], token, true)
      followTask(task, 'requeued', token, ARGV[i + 5], ARGV[i + 6], returned)
    end
    requeued = requeued + 1
  end
end
return requeued
