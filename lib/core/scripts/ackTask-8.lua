-- ackTask-8.lua
-- Purpose: settle a task that succeeded: remove it from the worker's processing hash if the worker
--   still holds it under this fencing token; free its deduplication key; for a send() task, store and
--   publish the reply.
--   Never fails after its first write: the keys it writes have their types checked first.
-- Includes: guard, finishTask, releaseClientSlot
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: result key of the task (string; written only for a send() task)
-- KEYS[3]: deduplication key of the task (string: holder task id; touched only when ARGV[2] is set)
-- KEYS[4]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[5]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[6]: parked (set of clients taken off the ring at their cap)
-- KEYS[7]: ring (list of client ids with pending tasks)
-- KEYS[8]: counters (hash: outcome -> count, for the admin API and metrics)
-- ARGV[1]: fencing token; ARGV[2]: task id when the task holds a deduplication key, else ''
-- ARGV[3] (optional): reply channel; ARGV[4]: reply (JSON); ARGV[5]: result TTL in milliseconds
-- Returns: 1 when acknowledged; 0 when the token is no longer held (lease lost: nothing is changed)
-- Side effects: HDEL from the processing hash; HINCRBY counters completed; the client's cap slot released (releaseClientSlot); DEL of the deduplication key if this task holds it;
--   for a reply, SET with PX on the result key and PUBLISH.
-- Checked before the first write: nothing below can fail once the task starts to leave.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
expectTypes(KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'set', KEYS[7], 'list')
finishTask(KEYS[3], ARGV[2], KEYS[2], ARGV[3], ARGV[4], ARGV[5])
redis.call('HDEL', KEYS[1], ARGV[1])
releaseClientSlot(KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[1], false)
countOutcome(KEYS[8], 'completed', 1)
return 1
