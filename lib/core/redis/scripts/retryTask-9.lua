-- retryTask-9.lua
-- Purpose: schedule a failed task's next attempt: move it from the worker's processing hash into the
--   queue's delayed set, due after a backoff measured on the Redis clock, with its attempt counted.
--   The task leaves its client's in-flight count while it waits (a retry runs after newer tasks).
--   The delayed entry is written before the task leaves the processing hash, and the keys written are
--   type-checked first, so a failure at any step leaves the task held, never gone.
-- Includes: releaseClientSlot, follow
-- Builds keys: what follows the task (include/follow.lua) names its keys from the base in KEYS[8] and the
--   root in KEYS[9] (as `QueueKeys` spells them); all share the hash tag, hence the slot.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: delayed (sorted set: encoded entry -> due time, Redis time in milliseconds)
-- KEYS[3]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[4]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[5]: parked (set of clients taken off the ring at their cap)
-- KEYS[6]: ring (list of client ids with pending tasks)
-- KEYS[7]: counters (hash: outcome -> count, for the admin API and metrics)
-- KEYS[8]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[9]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: fencing token; ARGV[2]: backoff delay in milliseconds; ARGV[3], ARGV[4] (optional): the task's
--   index key and entry key (`<base>:task:<id>`, `<base>:task-entry:<id>`; see include/track.lua) when tracked,
--   else ''; ARGV[5] (optional): how the run counts: '' or `attempt` (a failed attempt, counted), `step` (a
--   durable step failed with attempts of its own left: a failure, not counted), `yield` (the run gave the task
--   back at a step boundary, at shutdown or past its maxRuntimeMs: neither a failure nor an attempt)
-- Returns: the due time (integer, ms) when scheduled; 0 when the token is no longer held (lease lost:
--   nothing is changed); -1 when a task with a coalescing key is not retried because a newer task of its
--   key was emitted (it waits or ran: the older payload never runs after it): it left the worker, counted
--   `failed` and `replaced`, its send() caller told
-- Side effects: HDEL from the processing hash; ZADD into the delayed set with the entry's attempt
--   prefix incremented (a counted attempt only); the client's cap slot released (releaseClientSlot); HINCRBY
--   counters failed and retried (a yield: yielded). What follows it (include/follow.lua, move `retried`): a tracked task's index (while it
--   exists, and is a hash) becomes `delayed` (why `retry`) with its due time, and its entry key holds the new
--   entry; a task with a coalescing key retried becomes its key's waiting task (see include/coalesce.lua).
local entry = checkedCall('hash', 'HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
-- Checked before the first write; the retry is scheduled before the task leaves the processing hash.
expectTypes(KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'set', KEYS[6], 'list')
local counts = ARGV[5] or ''
local attempts, rest = string.match(entry, '^(%d+)|(.*)$')
if attempts and (counts == '' or counts == 'attempt') then
  entry = tostring(tonumber(attempts) + 1) .. '|' .. rest
end
local task = followOf(KEYS[8], KEYS[9], entry)
if followAsk(task, 'retried', KEYS[1], ARGV[1]) == 'drop' then
  countOutcome(KEYS[7], 'failed', 1)
  return -1
end
local due = redisMs() + (tonumber(ARGV[2]) or 0)
redis.call('ZADD', KEYS[2], due, entry)
redis.call('HDEL', KEYS[1], ARGV[1])
releaseClientSlot(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], false)
if counts == 'yield' then
  countOutcome(KEYS[7], 'yielded', 1)
else
  countOutcome(KEYS[7], 'failed', 1)
  countOutcome(KEYS[7], 'retried', 1)
end
followTask(task, 'retried', ARGV[1], ARGV[3] or '', ARGV[4] or '', entry, due)
return due
