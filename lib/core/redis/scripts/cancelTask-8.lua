-- cancelTask-8.lua
-- Purpose: remove a task that no worker has claimed yet (a send() whose caller gave up waiting, or a task
--   of a cancelled batch), from its client's pending tasks or the delayed set, and free its deduplication
--   key. A task of a batch removed records for its batch that it was cancelled (include/batch.lua). A claimed task is left
--   alone (it runs; its reply has nobody waiting). A client left with nothing pending stays on the ring
--   until the next claim drops it (as for any stale ring entry).
-- Includes: follow
-- Builds keys: what follows the task (include/follow.lua: a tracked task's index, counters, deduplication
--   and result keys; a batch task's event list and counter) names its keys from the base in KEYS[7] and the
--   root in KEYS[8]; all share the root's hash tag, hence its Cluster slot.
-- KEYS[1]: the client's pending list
-- KEYS[2]: the client's priority set (members: 15-digit sequence + encoded entry, score -priority)
-- KEYS[3]: delayed (sorted set: encoded entry -> due time)
-- KEYS[4]: the task's deduplication key (or any key of the queue when it has none; then never touched)
-- KEYS[5]: prioritized (string counter of prioritized pending tasks)
-- KEYS[6]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- KEYS[7]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[8]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: the encoded entry as enqueued; ARGV[2]: its priority (0: none); ARGV[3]: its task id when it
--   holds a deduplication key, else ''; ARGV[4], ARGV[5] (a tracked task): its index key and its entry key
--   (`<base>:task:<id>`, `<base>:task-entry:<id>`, see include/track.lua)
-- Returns: 1 when removed, 0 when it was no longer waiting (claimed, or already gone)
-- Side effects: LREM from the pending list, or ZREM from the priority set (DECR of prioritized), with a DECR of the pending count, or the
--   delayed set; DEL of the deduplication key if this task holds it. Each removal is one command, so
--   nothing is left half done. What follows a removed task (include/follow.lua, move `cancelled`): a tracked
--   task ends `cancelled` (its index, the counters' cancelled); a task of a batch records it for its batch.
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
if removed == 1 then
  followTask(followOf(KEYS[7], KEYS[8], ARGV[1]), 'cancelled', '', ARGV[4] or '', ARGV[5] or '',
    'its send() caller stopped waiting')
end
return removed
