-- startTasks-2.lua
-- Purpose: the step between a claim and the handler, for the tracked tasks the claim did not record running
--   (a flow's node; a cancel asked while it was between places; an entry whose payload precedes its head
--   fields; see include/track.lua, trackClaimed): each task the worker still
--   holds is recorded `running` in its index (worker, fencing token, attempt, start time), unless a
--   cancel was asked while the task was between places (claimed, not started; or returned to its queue
--   by a recovery): then the task leaves the worker at once, cancelled, and its handler never starts.
-- Includes: guard, ackHeld, finishTask, releaseClientSlot, track, flow, steps, body
-- Tracking's own step, not a move through the seam (include/follow.lua): a tracked task carries no other
--   feature's record but a flow's (model/task-traits.ts, TRAIT_CONFLICTS), so its cancel is handed to its flow
--   directly (include/flow.lua); the seam's whole dispatcher would cost every tracked start 2.5 µs (measured).
-- Builds keys: every key is named from the base in KEYS[1] (`<base>:processing:<worker>`,
--   `<base>:task:<id>`, `<base>:task-entry:<id>`, `<base>:counted`, ... as `QueueKeys` spells them) and the root in KEYS[2]
--   (`<root>:dedup:<key>`, `<root>:result:<id>`); all share the hash tag, hence the Cluster slot.
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[2]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: worker id; ARGV[2..]: per task, 3 fields: fencing token, task id, attempt (1-based)
-- Returns: array with one element per task: 1 run it (recorded running, or its index expired: it runs
--   untracked); 2 cancelled (it left the worker: do not run it; also when the token is gone and the index
--   says cancelled, as a resent call finds it); 0 no longer held (lease lost: nothing changed)
-- Side effects: HMGET of every token (heldOf, one for the call); HSET/PEXPIRE of the task's index (HDEL of
--   `due` and `why` when it waited for a retry or a delay), DEL of its entry key; for a task cancelled here: HDEL from the processing
--   hash, the client's cap slot released (releaseClientSlot), deduplication key freed, reply stored
--   and published, HINCRBY counters cancelled, its durable steps and out-of-line payload deleted (include/steps.lua, include/body.lua), a node of a flow's cancel on `<base>:flow-events`
--   (include/flow.lua); an index of another type quarantined (see guard).
local base, root = KEYS[1], KEYS[2]
local processing = base .. ':processing:' .. ARGV[1]
local counted, inflight, parked, ring = base .. ':counted', base .. ':inflight', base .. ':parked', base .. ':ring'
local faults, counters = base .. ':faults', base .. ':counters'
-- Checked before the first write.
expectTypes(processing, 'hash')
if redis.call('EXISTS', counted) == 1 then
  expectTypes(counted, 'hash', inflight, 'hash', parked, 'set', ring, 'list')
end
-- Which tasks the worker still holds: one HMGET for the call (heldOf), not a read per task.
local tokens = {}
for i = 2, #ARGV, 3 do
  tokens[#tokens + 1] = ARGV[i]
end
local held = heldOf(processing, tokens)
local seen = {}
local results = {}
for t = 1, #tokens do
  local i = 3 * t - 1
  local token, id = ARGV[i], ARGV[i + 1]
  local key, entryKey = base .. ':task:' .. id, base .. ':task-entry:' .. id
  -- { keep, live, state, token, cancel, due }
  local index = trackedIndex(faults, key, 'state', 'token', 'cancel', 'due')
  local entry = held[t]
  if seen[token] then
    -- The same token twice in one call: read again (the first may have cancelled it).
    entry = redis.call('HGET', processing, token)
  end
  seen[token] = true
  if not entry then
    if index and index[3] == 'cancelled' then
      results[#results + 1] = 2
    else
      results[#results + 1] = 0
    end
  elseif index and index[5] then
    redis.call('HDEL', processing, token)
    releaseClientSlot(counted, inflight, parked, ring, token, false)
    cancelledTask(key, index, root, 'pending', nil, '', entryKey)
    stepsEnd(base, id)
    bodyEnd(base, entry)
    countOutcome(counters, 'cancelled', 1)
    -- A node of a flow reports its cancel to its flow (its index is done above).
    local node = flowOf(entry)
    if node then
      flowFollow({ base = base, root = root, head = node }, 'cancelled', index[5])
    end
    results[#results + 1] = 2
  else
    -- Recorded already under this token (a resent call): left as it is.
    if index and not (index[3] == 'running' and index[4] == token) then
      -- Only a task that waited for a retry or a delay has `due` and `why` to drop (one HDEL fewer).
      index.dropsNothing = not index[6]
      trackState(key, index, 'running', entryKey, nil, 'worker', ARGV[1], 'token', token, 'attempt', ARGV[i + 2], 'started', redisMs())
    end
    results[#results + 1] = 1
  end
end
return results
