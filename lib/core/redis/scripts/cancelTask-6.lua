-- cancelTask-6.lua
-- Purpose: remove a task that no worker has claimed yet (a send() whose caller gave up waiting, or a task
--   of a cancelled batch), from its client's pending tasks or the delayed set, and free its deduplication
--   key. A task of a batch removed records for its batch that it was cancelled (include/batch.lua). A claimed task is left
--   alone (it runs; its reply has nobody waiting). A client left with nothing pending stays on the ring
--   until the next claim drops it (as for any stale ring entry).
-- Includes: guard, finishTask, track, batch
-- Builds keys: a tracked task's counters, `<root>:counters`, from the root in ARGV[6], and (through
--   include/track.lua) its deduplication and result keys; a batch task's event list and counter
--   (include/batch.lua) from the base of the pending count in KEYS[6]; all share the root's hash tag, hence
--   its Cluster slot.
-- KEYS[1]: the client's pending list
-- KEYS[2]: the client's priority set (members: 15-digit sequence + encoded entry, score -priority)
-- KEYS[3]: delayed (sorted set: encoded entry -> due time)
-- KEYS[4]: the task's deduplication key (or any key of the queue when it has none; then never touched)
-- KEYS[5]: prioritized (string counter of prioritized pending tasks)
-- KEYS[6]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- ARGV[1]: the encoded entry as enqueued; ARGV[2]: its priority (0: none); ARGV[3]: its task id when it
--   holds a deduplication key, else ''; ARGV[4], ARGV[5], ARGV[6] (a tracked task): its index key, its
--   entry key (`<base>:task:<id>`, `<base>:task-entry:<id>`, see include/track.lua) and the queue's root
--   (its counters are `<root>:counters`)
-- Returns: 1 when removed, 0 when it was no longer waiting (claimed, or already gone)
-- Side effects: LREM from the pending list, or ZREM from the priority set (DECR of prioritized), with a DECR of the pending count, or the
--   delayed set; DEL of the deduplication key if this task holds it. Each removal is one command, so
--   nothing is left half done. A tracked task removed ends `cancelled` (its index, the counters' cancelled).
local removed = 0
local priority = tonumber(ARGV[2]) or 0
if priority > 0 then
  for _, member in ipairs(checkedCall('zset', 'ZRANGEBYSCORE', KEYS[2], -priority, -priority)) do
    if string.sub(member, 16) == ARGV[1] then
      removed = redis.call('ZREM', KEYS[2], member)
      if removed == 1 then
        redis.pcall('DECR', KEYS[5])
      end
      break
    end
  end
else
  removed = redis.call('LREM', KEYS[1], 1, ARGV[1])
end
if removed == 1 then
  redis.pcall('DECR', KEYS[6])
end
if removed == 0 then
  removed = redis.call('ZREM', KEYS[3], ARGV[1])
end
if removed == 1 and ARGV[3] ~= '' and redis.pcall('GET', KEYS[4]) == ARGV[3] then
  redis.call('DEL', KEYS[4])
end
if removed == 1 and ARGV[4] then
  local index = trackedIndex(nil, ARGV[4])
  if index then
    cancelledTask(ARGV[4], index, ARGV[6], 'pending', 'its send() caller stopped waiting', '', ARGV[5])
    countOutcome(ARGV[6] .. ':counters', 'cancelled', 1)
  end
end
if removed == 1 then
  local child = batchOf(ARGV[1])
  if child then
    batchEvent(string.sub(KEYS[6], 1, -15), child, 'c')
  end
end
return removed
