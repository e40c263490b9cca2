-- dropHeld-8.lua
-- Purpose: take a running task of a cancelled batch from the worker that holds it, through its fence: its
--   token leaves the worker's processing hash (its worker is told on `<base>:control` and aborts the run, its
--   heartbeat the backstop; its late settle is refused, and no recovery can return it), and its batch hears
--   it was cancelled.
-- Includes: releaseClientSlot, follow
-- Builds keys: the control channel `<base>:control`, and what follows the task (include/follow.lua: its
--   batch's event list and counter) from the base in KEYS[7] and the root in KEYS[8] (as `QueueKeys` spells
--   them); all share the hash tag, hence the Cluster slot.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[3]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[4]: parked (set of clients taken off the ring at their cap)
-- KEYS[5]: ring (list of client ids with pending tasks)
-- KEYS[6]: counters (hash: outcome -> count, for the admin API and metrics)
-- KEYS[7]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[8]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: fencing token; ARGV[2]: the batch id the task must belong to
-- Returns: 1 when taken; 0 when the token is no longer held, or holds a task of another batch
-- Side effects: HDEL from the processing hash; the client's cap slot released (releaseClientSlot); HINCRBY
--   counters cancelled; what follows it (include/follow.lua, move `dropped`: the batch event c); PUBLISH on `<base>:control` of `revoke\n<token>\nc\n<why>`.
local entry = checkedCall('hash', 'HGET', KEYS[1], ARGV[1])
local task = entry and followOf(KEYS[7], KEYS[8], entry)
if not task or task.kind ~= 'batch' or task.head.batch ~= ARGV[2] then
  return 0
end
expectTypes(KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'set', KEYS[5], 'list')
redis.call('HDEL', KEYS[1], ARGV[1])
releaseClientSlot(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], false)
countOutcome(KEYS[6], 'cancelled', 1)
followTask(task, 'dropped', ARGV[1], '', '', nil)
-- Its worker hears it now (its heartbeat is the backstop): the handler's signal aborts in milliseconds.
redis.call('PUBLISH', KEYS[7] .. ':control', 'revoke\n' .. ARGV[1] .. '\nc\nits batch ' .. ARGV[2] .. ' was cancelled')
return 1
