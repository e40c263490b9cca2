-- ackTasks-8.lua
-- Purpose: settle tasks that succeeded, each fenced on its own: a task leaves the worker's processing
--   hash only if the worker still holds it under its fencing token; it frees its deduplication key; for a
--   send() task, its reply is stored and published. The acknowledgements of one worker and queue shard
--   that come in one event-loop turn share this call (the plain ones ride on the claim call instead).
--   Never fails after its first write: the keys it writes have their types checked first.
-- Includes: ackHeld, finishTask, releaseClientSlot, follow
-- Builds keys: a task's result key `<root>:result:<id>` and deduplication key `<root>:dedup:<key>` are
--   named from the root in KEYS[8]; what follows the task (include/follow.lua) names its keys from the base in
--   KEYS[7] (as `QueueKeys` spells them; tests read them back through it); all share the root's hash tag,
--   hence its Cluster slot. One exception, never on a Cluster: a flow node's success on one Redis server (its
--   entry says `fold`) reads and writes its flow's keys and writes its released children into their queues
--   (include/flow.lua, flowRelease: keys named from the prefix of KEYS[7] and from each child's template).
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: counted (hash: fencing token -> client id, for tasks claimed under a per-client cap)
-- KEYS[3]: inflight (hash: client id -> tasks of it in flight under the cap)
-- KEYS[4]: parked (set of clients taken off the ring at their cap)
-- KEYS[5]: ring (list of client ids with pending tasks)
-- KEYS[6]: counters (hash: outcome -> count, for the admin API and metrics)
-- KEYS[7]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[8]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1..]: per task, 7 fields: fencing token; task id; its deduplication key ('' = none); reply channel
--   ('' = not a send() task); reply (JSON, '' when none); result TTL in milliseconds; its index key
--   (`<base>:task:<id>`, see include/track.lua) when tracked, else '' (its entry key went when it started)
-- Returns: array with one element per task: 1 when acknowledged; 0 when the token is no longer held
--   (lease lost: nothing of that task is changed), or came earlier in the same call
-- Side effects: HMGET of every token (heldOf: in slices of 1,000), then per acknowledged task: the deduplication key freed if this
--   task holds it (DEL); for a reply, SET with PX on the result key and PUBLISH; the client's cap slot
--   released (releaseClientSlot) where a cap is in use. Then HDEL of the acknowledged tokens from the
--   processing hash (removeSettled: in slices), and HINCRBY counters completed by their number. What
--   follows each (include/follow.lua, move `completed`): a tracked task's index (while it exists, and is a
--   hash) becomes `completed`, with its reply as `result`; a task with a coalescing key leaves its key's
--   record (a parked task of the key may go to its client's list, an empty record is deleted); a task of a
--   batch records its success for its batch.
-- Checked before the first write: nothing below can fail once a task starts to leave. Only where a
-- per-client cap is in use (its counted hash exists): otherwise no token is in counted, so no slot is
-- released (one EXISTS instead of four TYPEs and an HGET per task).
local capped = redis.call('EXISTS', KEYS[2]) == 1
if capped then
  expectTypes(KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'set', KEYS[5], 'list')
end
local base, root = KEYS[7], KEYS[8]
local tokens = {}
for a = 1, #ARGV, 7 do
  tokens[#tokens + 1] = ARGV[a]
end
if #tokens == 0 then
  return {}
end
-- Fails here, before any write, when the processing hash is not a hash.
local held = heldOf(KEYS[1], tokens)
local results = {}
local settled = {}
local seen = {}
for t = 1, #tokens do
  local token = tokens[t]
  if not held[t] or seen[token] then
    results[t] = 0
  else
    seen[token] = true
    local a = (t - 1) * 7 + 1
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
    if capped then
      releaseClientSlot(KEYS[2], KEYS[3], KEYS[4], KEYS[5], token, false)
    end
    followTask(followOf(base, root, held[t]), 'completed', token, ARGV[a + 6], '', ARGV[a + 4])
    settled[#settled + 1] = token
    results[t] = 1
  end
end
removeSettled(KEYS[1], settled, KEYS[6])
return results
