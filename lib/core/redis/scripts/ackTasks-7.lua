-- ackTasks-7.lua
-- Purpose: settle tasks that succeeded, each fenced on its own: a task leaves the worker's processing
--   hash only if the worker still holds it under its fencing token; it frees its deduplication key; for a
--   send() task, its reply is stored and published. The acknowledgements of one worker and queue shard
--   that come in one event-loop turn share this call (the plain ones ride on the claim call instead).
--   Never fails after its first write: the keys it writes have their types checked first.
-- Includes: guard, finishTask, releaseClientSlot
-- Builds keys: a task's result key `<root>:result:<id>` and deduplication key `<root>:dedup:<key>` are
--   named from the root in KEYS[7] (as `QueueKeys` spells them; tests read them back through it); all
--   share the root's hash tag, hence its Cluster slot.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[3]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[4]: parked (set of clients taken off the ring at their cap)
-- KEYS[5]: ring (list of client ids with pending tasks)
-- KEYS[6]: counters (hash: outcome -> count, for the admin API and metrics)
-- KEYS[7]: the shard's key root, `prefix:{pattern...}` (not a key itself)
-- ARGV[1..]: per task, 6 fields: fencing token; task id; its deduplication key ('' = none); reply channel
--   ('' = not a send() task); reply (JSON, '' when none); result TTL in milliseconds
-- Returns: array with one element per task: 1 when acknowledged; 0 when the token is no longer held
--   (lease lost: nothing of that task is changed)
-- Side effects: per acknowledged task: HDEL from the processing hash; the client's cap slot released
--   (releaseClientSlot); DEL of the deduplication key if this task holds it; for a reply, SET with PX on
--   the result key and PUBLISH. HINCRBY counters completed by the number acknowledged.
-- Checked before the first write: nothing below can fail once a task starts to leave. Only where a
-- per-client cap is in use (its counted hash exists): otherwise releaseClientSlot finds no token in
-- counted and writes nothing (one EXISTS instead of four TYPEs per call).
if redis.call('EXISTS', KEYS[2]) == 1 then
  expectTypes(KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'set', KEYS[5], 'list')
end
local root = KEYS[7]
local results = {}
local acknowledged = 0
for a = 1, #ARGV, 6 do
  local token = ARGV[a]
  if redis.call('HEXISTS', KEYS[1], token) == 0 then
    results[#results + 1] = 0
  else
    local id, dedup, channel = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    local holder = ''
    local dedupKey = ''
    if dedup ~= '' then
      holder = id
      dedupKey = root .. ':dedup:' .. dedup
    end
    if channel == '' then
      channel = nil
    end
    finishTask(dedupKey, holder, root .. ':result:' .. id, channel, ARGV[a + 4], ARGV[a + 5])
    redis.call('HDEL', KEYS[1], token)
    releaseClientSlot(KEYS[2], KEYS[3], KEYS[4], KEYS[5], token, false)
    acknowledged = acknowledged + 1
    results[#results + 1] = 1
  end
end
if acknowledged > 0 then
  countOutcome(KEYS[6], 'completed', acknowledged)
end
return results
