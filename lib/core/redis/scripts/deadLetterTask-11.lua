-- deadLetterTask-11.lua
-- Purpose: move a claimed task to the queue's dead letters with a record of why (malformed entry,
--   failed handler, expired, ...), if the claiming worker still holds it under this fencing token, and
--   free its deduplication key.
--   The record is written before the task leaves the processing hash, and the keys written are
--   type-checked first, so a failure at any step leaves the task held, never gone.
-- Includes: finishTask, releaseClientSlot, follow
-- Builds keys: what follows the task (include/follow.lua) names its keys from the base in KEYS[10] and the
--   root in KEYS[11] (as `QueueKeys` spells them); all share the hash tag, hence the slot.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: dead letters (list of JSON records, newest first)
-- KEYS[3]: result key of the task (string; written only for a send() task)
-- KEYS[4]: deduplication key of the task (string: holder task id; touched only when ARGV[4] is set)
-- KEYS[5]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[6]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[7]: parked (set of clients taken off the ring at their cap)
-- KEYS[8]: ring (list of client ids with pending tasks)
-- KEYS[9]: counters (hash: outcome -> count, for the admin API and metrics)
-- KEYS[10]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[11]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: fencing token; ARGV[2]: dead-letter record (JSON); ARGV[3]: dead-letter cap (count)
-- ARGV[4]: task id when the task holds a deduplication key, else ''
-- ARGV[5], ARGV[6]: the task's index key and entry key (`<base>:task:<id>`, `<base>:task-entry:<id>`; see
--   include/track.lua) when tracked, else ''
-- ARGV[7] (optional): reply channel; ARGV[8]: error reply (JSON); ARGV[9]: result TTL in milliseconds
-- Returns: 1 when dead-lettered; 0 when the token is no longer held (lease lost: nothing is changed)
-- Side effects: HINCRBY counters deadLettered (and failed, for a record whose handler ran and failed: reasons "failed" and "timeout"); HDEL from the processing hash, the client's cap slot released (releaseClientSlot), LPUSH + LTRIM on the dead letters (the oldest beyond
--   the cap are dropped); DEL of the deduplication key if this task holds it; for a reply, SET with
--   PX on the result key and PUBLISH. What follows it (include/follow.lua, move `dead`): a tracked task's
--   index (while it exists, and is a hash) becomes `dead` with the record's reason, detail and error; a task
--   with a coalescing key leaves its key's record (see include/coalesce.lua); a task of a batch records its
--   dead letter for its batch (include/batch.lua).
-- Checked before the first write; the record is stored before the task leaves the processing hash, so
-- a failure at any step leaves the task held (it settles again), never gone.
local entry = checkedCall('hash', 'HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
expectTypes(KEYS[2], 'list', KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'set', KEYS[8], 'list')
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, math.max(1, tonumber(ARGV[3]) or 1) - 1)
finishTask(KEYS[4], ARGV[4], KEYS[3], ARGV[7], ARGV[8], ARGV[9])
redis.call('HDEL', KEYS[1], ARGV[1])
releaseClientSlot(KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[1], false)
countOutcome(KEYS[9], 'deadLettered', 1)
local decoded, record = pcall(cjson.decode, ARGV[2])
if not decoded or type(record) ~= 'table' then
  record = nil
end
if record and (record.reason == 'failed' or record.reason == 'timeout') then
  countOutcome(KEYS[9], 'failed', 1)
end
followTask(followOf(KEYS[10], KEYS[11], entry), 'dead', ARGV[1], ARGV[5], ARGV[6], record)
return 1
