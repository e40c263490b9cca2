-- requeueDeadLetters-8+n.lua
-- Purpose: give dead letters a fresh run: remove each record from the dead letters and append its
--   task (attempts reset) to its client's pending tasks, atomically per record, so a record requeued
--   by two callers at once runs once.
--   Each task is pushed before its record leaves the dead letters, so a failure never loses it.
-- Includes: pushTask, follow
-- Builds keys: what follows each task (include/follow.lua: a batch child's event list and counter) names its
--   keys from the base in KEYS[7] and the root in KEYS[8] (as `QueueKeys` spells them); same hash tag, same slot.
-- KEYS[1]: dead letters (list of JSON records)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3]: sequence (string counter; orders equal priorities)
-- KEYS[4]: prioritized (string counter of prioritized pending tasks)
-- KEYS[5]: faults (hash: broken data found and what was done; see guard)
-- KEYS[6]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- KEYS[7]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[8]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- KEYS[9..n+8]: pending lists and priority sets the tasks go to
-- ARGV: per record, 8 fields: the dead-letter record (exactly as stored), index into KEYS of its
--   client's pending list, index of its client's priority set, client id, the fresh encoded entry,
--   priority, its tracked index and tracked entry keys ('' when it is not tracked; `<base>:task:<id>` and
--   `<base>:task-entry:<id>`, in the slot of KEYS[7])
-- Returns: integer, the number of dead letters requeued
-- Side effects: LREM from the dead letters, RPUSH onto pending lists or ZADD onto priority sets (INCR of
--   prioritized; INCR of the pending count); a
--   client with no other pending task is pushed onto the ring's tail. What follows each (include/follow.lua,
--   move `revived`): a tracked task's index says it waits again (pending, its dead letter's why gone, `liveMs`
--   on; include/track.lua), a task of a batch records for its batch that it waits again (include/batch.lua): a
--   batch that has not fired waits for it.
expectTypes(KEYS[1], 'list', KEYS[2], 'list')
local requeued = 0
for i = 1, #ARGV, 8 do
  -- Pushed while the record is still a dead letter, then removed: a failure between never loses it.
  if redis.call('LPOS', KEYS[1], ARGV[i]) then
    pushTask(KEYS[tonumber(ARGV[i + 1])], KEYS[tonumber(ARGV[i + 2])], KEYS[2], KEYS[3], KEYS[4], ARGV[i + 3], ARGV[i + 4],
      tonumber(ARGV[i + 5]) or 0, false, KEYS[5], KEYS[6])
    redis.call('LREM', KEYS[1], 1, ARGV[i])
    followTask(followOf(KEYS[7], KEYS[8], ARGV[i + 4]), 'revived', '', ARGV[i + 6], ARGV[i + 7], ARGV[i + 4], nil)
    requeued = requeued + 1
  end
end
return requeued
