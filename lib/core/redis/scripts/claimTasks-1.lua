-- claimTasks-1.lua
-- Purpose: acknowledge the worker's finished tasks, then claim up to N tasks round-robin over the
--   clients with pending tasks: each visit rotates the ring by one client and takes one task of it
--   (its highest priority first, then its oldest), so one claim spreads over many clients and its cost
--   does not depend on how many clients exist. Each task moves atomically into the worker's processing
--   hash under a fencing token made of the caller's per-call prefix, a counter this script increments,
--   and the task's position. The prefix keeps tokens unique across Redis rollbacks (the counter may go
--   back, the prefix never repeats); the counter keeps them unique when ioredis sends the same call
--   twice (a reply lost to a reconnection, then the command resent with the same prefix). Under a per-client cap, a client with `cap` tasks in flight is
--   taken off the ring (parked) until one of them leaves the worker. With client weights set, a visit
--   takes up to the client's weight in tasks before the ring moves on (the client stays at the head,
--   its use of the visit kept in the credit hash across calls), so clients share claims in proportion
--   to their weights; each task is still O(1). With rate limits set, a visited client whose token bucket
--   holds less than one task is taken off the ring until its next token is due (throttled set), so it
--   waits without blocking others and without polling.
--   Nothing is lost when a step fails: the loop runs protected (pcall), and every popped entry is written
--   to the processing hash whether the loop ended or failed midway (a failure leaves them there, where
--   the worker's orphan check returns them); if that write itself is refused, exactly what was taken goes
--   back (entries, priority members with their scores, counts, cap slots, ring places). A processing
--   hash of another type (it holds no task then) is set aside first; the keys of a feature that is on
--   (cap, weights, rate limits) are type-checked before the first write (a failed check changes
--   nothing); the ring, client keys and counters heal on the failing command. A client whose own keys
--   are broken (a stray SET on its pending list) has the bad key quarantined and recorded in faults;
--   a weight, rate or count that is not a number is recorded and read as its default.
-- Includes: guard, ackHeld, releaseClientSlot, tokenBucket, track
-- Builds keys: every key is named from the base in KEYS[1] (`<base>:ring`, `<base>:processing:<worker>`,
--   `<base>:pending:<client>`, ... as `QueueKeys` spells them; a test pins that both agree), so the call a
--   worker makes per wake-up is small; all share the base's hash tag, hence its Cluster slot. The keys:
--   ring (list of client ids with pending tasks); processing:<worker> (hash: fencing token -> encoded
--   entry); faults (hash: subject -> what was found broken and what was done); workers (sorted set: worker
--   id -> lease expiry); prioritized (string counter of prioritized pending tasks); counted (hash: token ->
--   client id, for tasks claimed under a per-client cap); inflight (hash: client id -> tasks of it in
--   flight under the cap); parked (set of clients taken off the ring at their cap); paused (string; while
--   it exists nothing is claimed, acknowledgements still go through); counters (hash: outcome -> count);
--   weights (hash: client id -> weight, 1 when absent; while empty, the plain one-task-per-visit rotation
--   runs); credit (hash: client id -> tasks taken in the visit under way); rates (hash: client id, or '*',
--   -> tasks started per second; while empty, no bucket is checked); throttled (sorted set: client id ->
--   when its next token is due, Redis time in ms); buckets (hash: client id -> "tokens:last refill ms");
--   sequence (string counter, incremented once per call that claims; part of every token); pending-count
--   (string counter of the shard's pending tasks, all clients; see pushTask); audit-wanted (string: the
--   Redis ms a claim found the count above what it reached, so the ring audit passes over the shard's keys;
--   see countUnreachable); bell (list holding at most one token: idle processes block on it, see guard's
--   ringBell); pending:<client> and priority:<client> (a client's pending list and priority set); task:<id>
--   and task-entry:<id> (a tracked task's index, and its entry kept beside it while it waits: include/track.lua).
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself, declared so the call goes to the node of its slot
-- ARGV[1]: maximum number of tasks to claim (0: only acknowledge); ARGV[2]: worker id
-- ARGV[3]: per-client cap on tasks in flight (0: none)
-- ARGV[4]: fencing token prefix, unique to this call: the k-th task claimed gets ARGV[4], the counter,
--   '.', then k as five digits (so one process's tokens sort in claim order)
-- ARGV[5]: the lease of a worker holding tasks, in milliseconds: a call that claims tasks under a later
--   lease expiry (an idle worker's longer lease, see heartbeatWorker) cuts it to now + ARGV[5], so tasks
--   of a worker that dies are recovered as soon as ever
-- ARGV[6..]: the succeeded tasks to acknowledge (tasks with no trait that settles on its own: plain, or
--   tracked and nothing else; model/task-traits.ts, ridesOnClaim), each its fencing token, or for a tracked
--   one its token, a tab (tokens have none) and its task id, then, when its claim recorded it running, a tab and the
--   keep that claim returned
-- Returns: array { lost, claimed, throttledUntil, drained, started, keeps }: throttledUntil is the earliest time (ms) a
--   client this call throttled has a token again, or 0; lost lists the tokens to acknowledge that the worker no longer held
--   (lease lost: nothing changed for them); claimed is a flat array token1, entry1, token2, entry2, ...,
--   or -1 when the worker is not registered or its lease has expired (it must register, then claim
--   again), or -2 when the queue is paused; drained is 1 when the ring is empty after this call (no
--   client is waiting: a claim now would find nothing, so the worker can block at once), else 0; started lists
--   the places (1-based, rising) of the claimed tasks recorded running here (tracked ones, include/track.lua,
--   trackClaimed: their worker starts them without a startTasks call; another tracked task goes through it); keeps
--   lists, in the same order, the `keep` each of their indexes holds ('' when not a positive integer), which the
--   worker sends back with the task's success
-- Side effects: HDEL of acknowledged tokens, HINCRBY counters completed by those still held; a tracked
--   one's index `<base>:task:<id>` (while it exists) becomes `completed`: sent with its keep (its claim recorded it
--   running), PEXPIRE to the keep, then HSET when the index is there; else include/track.lua's trackFollow (HMGET,
--   HSET, PEXPIRE; HDEL first only of a cancel mark or due time it holds); a tracked task claimed is recorded running in its index (trackClaimed: HMGET,
--   HDEL of `due` and `why` after a retry or a delay, HSET, PEXPIRE, DEL of its entry key); weighted:
--   HSET/HDEL of the client's credit; rate-limited: HSET of the client's bucket, and when it is empty
--   LREM from the ring and ZADD to throttled, and RPUSH to the ring and ZREM from throttled of clients
--   whose next token is due; LMOVE rotation of the ring, ZPOPMIN/LPOP of pending tasks
--   (LPOP with a count when one plain client waits: the same tasks a visit per task would take),
--   DECR of prioritized and DECRBY of the pending count, HSET into the processing hash, INCR of the sequence; a client with no pending task left leaves the
--   ring; RENAME of a client's broken key and HSET of faults (see guard). Under a cap: HINCRBY of inflight, HSET of counted, SADD to parked (and
--   LREM from the ring) at the cap; acknowledged tokens release their slot (releaseClientSlot). A pending
--   count set right when the ring is empty: SET of it, and SET of audit-wanted when it was above. A claim
--   that took tasks and left the ring non-empty rings the bell (RPUSH of its token unless it holds one); one
--   that asked for tasks and left the ring empty takes a token left on it (DEL). A claim that took tasks
--   under a lease ending after now + ARGV[5]: ZADD of the worker's lease, cut to that.
local base = KEYS[1]
local ring, processing, faults = base .. ':ring', base .. ':processing:' .. ARGV[2], base .. ':faults'
local workers, prioritizedKey, counters = base .. ':workers', base .. ':prioritized', base .. ':counters'
local counted, inflight, parked = base .. ':counted', base .. ':inflight', base .. ':parked'
local weights, rates, pendingCount = base .. ':weights', base .. ':rates', base .. ':pending-count'
local pendingPrefix, priorityPrefix = base .. ':pending:', base .. ':priority:'
local pausedKey, sequence = base .. ':paused', base .. ':sequence'
local credit, throttled, buckets = base .. ':credit', base .. ':throttled', base .. ':buckets'
-- At most this many throttled clients rejoin the ring per claim (the rest at the next).
local RELEASE_PER_CLAIM = 100
local lost = {}
local cap = tonumber(ARGV[3]) or 0
local wanted = tonumber(ARGV[1]) or 0
local prioritized = false
local weighted = false
local limited = false
local paused = false
-- The keys of a feature that is on (cap, weights, rate limits; EXISTS tells which are) are checked
-- before the first write: a failed check changes nothing. Then a processing hash of another type (it
-- holds no task of this worker) is set aside and recorded, so the claim goes on; the ring, client keys
-- and counters heal on the command that finds them broken.
local rawPrioritized = nil
local now, lease = nil, nil
if wanted > 0 then
  -- The lease is read here, before the acknowledgements write (it is checked after them).
  now = redisMs()
  lease = checkedCall('zset', 'ZSCORE', workers, ARGV[2])
  rawPrioritized = redis.pcall('GET', prioritizedKey)
  -- One EXISTS tells whether weights or rate limits are set at all, or the queue is paused (usually none).
  if redis.call('EXISTS', weights, rates, pausedKey) > 0 then
    weighted = redis.call('EXISTS', weights) == 1
    limited = redis.call('EXISTS', rates) == 1
    paused = redis.call('EXISTS', pausedKey) == 1
  end
end
if cap > 0 then
  expectTypes(counted, 'hash', inflight, 'hash', parked, 'set')
end
if weighted then
  expectTypes(weights, 'hash', credit, 'hash')
end
if limited then
  expectTypes(rates, 'hash', throttled, 'zset', buckets, 'hash')
end
usableKey(faults, processing, 'hash')
if wanted > 0 then
  -- A counter of another type is set aside, and counted as unknown (high), so priority sets are looked
  -- at rather than hidden.
  if type(rawPrioritized) == 'table' then
    quarantineKey(faults, prioritizedKey, 'string')
    redis.call('SET', prioritizedKey, UNKNOWN_COUNT)
    rawPrioritized = tostring(UNKNOWN_COUNT)
  end
  local count = tonumber(rawPrioritized or '0')
  prioritized = not count or count ~= math.floor(count) or count > 0
end
if prioritized then
  local count = tonumber(redis.call('GET', prioritizedKey) or '0')
  if not count or count ~= math.floor(count) then
    -- Not a count: reset it high, so priority sets are looked at from now on.
    recordFault(faults, prioritizedKey, 'was not an integer counter; reset to ' .. UNKNOWN_COUNT)
    redis.call('SET', prioritizedKey, UNKNOWN_COUNT)
  end
end
if #ARGV >= 6 then
  local acks = {}
  -- The task id of each tracked one, by its place in acks, and its index's keep when its claim recorded it running.
  local trackedIds, trackedKeeps = {}, {}
  for i = 6, #ARGV do
    local ack = ARGV[i]
    local tab = string.find(ack, '\t', 1, true)
    if tab then
      acks[#acks + 1] = string.sub(ack, 1, tab - 1)
      local id, keep = string.match(ack, '^([^\t]+)\t([1-9]%d*)$', tab + 1)
      trackedIds[#acks] = id or string.sub(ack, tab + 1)
      trackedKeeps[#acks] = keep
    else
      acks[#acks + 1] = ack
    end
  end
  -- One acknowledgement (a worker of concurrency 1): its HDEL alone says whether it was held (the processing
  -- hash is a hash or absent: see usableKey above); more are read first, so each is known held or lost.
  local single = #acks == 1
  local held = single and { redis.call('HDEL', processing, acks[1]) == 1 } or heldOf(processing, acks)
  local settled = {}
  for i = 1, #acks do
    if held[i] then
      settled[#settled + 1] = acks[i]
      if trackedKeeps[i] then
        -- Recorded running by the claim that took it (include/track.lua, trackClaimed), which read its keep: its index
        -- holds nothing an ended one drops, so no read; the PEXPIRE tells whether it still exists.
        local key = base .. ':task:' .. trackedIds[i]
        if redis.call('PEXPIRE', key, trackedKeeps[i]) == 1 then
          redis.pcall('HSET', key, 'state', 'completed', 'at', redisMs(), 'result', '')
        end
      elseif trackedIds[i] then
        -- Its index (while it exists) becomes completed, as ackTasks's move `completed` makes it.
        trackFollow(nil, 'completed', base .. ':task:' .. trackedIds[i], '', '')
      end
    else
      lost[#lost + 1] = acks[i]
    end
  end
  if not single then
    removeSettled(processing, settled, counters)
  elseif #settled == 1 then
    countOutcome(counters, 'completed', 1)
  end
  if cap > 0 then
    for i = 1, #settled do
      releaseClientSlot(counted, inflight, parked, ring, settled[i], false)
    end
  end
end
if wanted == 0 then
  return { lost, {}, 0, 0 }
end
-- A worker whose lease has expired claims nothing, as if unregistered: a reaper may be recovering its
-- tasks, and a claim it queued before it stalled (pipelined behind a blocking read, run by Redis while
-- the process is frozen) must not take tasks it cannot run.
if not lease or tonumber(lease) < now then
  return { lost, -1, 0, 0 }
end
if paused then
  return { lost, -2, 0, 0 }
end
-- Rate-limited clients whose next token is due rejoin the ring here too: while the worker is busy,
-- its claims bring them back on time, with no timer and no sweep between a token and its use (the
-- worker's timer still does it when nothing else claims). Back on the ring before they leave the set.
if limited then
  for _, client in ipairs(redis.call('ZRANGEBYSCORE', throttled, '-inf', now, 'LIMIT', 0, RELEASE_PER_CLAIM)) do
    wakeWorkers(ring, healingCall(faults, 'list', 'RPUSH', ring, client), 1)
    redis.call('ZREM', throttled, client)
  end
end

-- Where each claimed entry came from, so it can go back if holding it is refused.
local origins = {}

-- Writes every popped entry into the processing hash in one command (and, under a cap, its client into
-- counted). Called after the loop, also when the loop failed midway: nothing popped is left unrecorded.
-- If the write itself is refused (its type was checked first, so an ACL, say), exactly what was taken
-- goes back: each entry to where it came from (a priority member with its sequence and score, and the
-- prioritized count), each client's cap slot, and its place on the ring when it had left it.
local function holdAll(claimed, count, owners)
  if count == 0 then
    return
  end
  local written = redis.pcall('HSET', processing, unpack(claimed))
  if type(written) == 'table' and written.err then
    local clients = {}
    for i = count, 1, -1 do
      local origin = origins[i]
      if origin.score then
        redis.call('ZADD', origin.priority, origin.score, origin.member)
        redis.call('INCR', prioritizedKey)
      else
        redis.call('LPUSH', origin.list, claimed[2 * i])
      end
      if cap > 0 then
        redis.call('HINCRBY', inflight, origin.client, -1)
        redis.call('SREM', parked, origin.client)
      end
      clients[origin.client] = true
    end
    for client in pairs(clients) do
      if not redis.call('LPOS', ring, client) then
        wakeWorkers(ring, redis.call('RPUSH', ring, client), 1)
      end
    end
    error(written)
  end
  healingIncr(faults, pendingCount, -count, 0)
  if cap > 0 then
    local owned = {}
    for i = 1, count do
      owned[2 * i - 1] = claimed[2 * i - 1]
      owned[2 * i] = owners[i]
    end
    redis.call('HSET', counted, unpack(owned))
  end
end

local throttledUntil = 0
-- Set when a visit found the ring empty (then nothing is left to claim); the last visited client stayed
-- on the ring (then it is not empty either).
local ringEmpty = false
local stayed = false
-- This execution's number (the sequence), taken with the first task claimed.
local execution = nil
local claimed = {}
local owners = {}
local count = 0
-- Records a popped entry under this call's next fencing token (the sequence is taken with the first),
-- with where it came from (`origin`: client, list, priority set, and for a priority member its score
-- and the member as stored).
local function take(entry, origin)
  count = count + 1
  if not execution then
    execution = healingIncr(faults, sequence, 1, 1)
  end
  claimed[2 * count - 1] = ARGV[4] .. execution .. '.' .. string.format('%05d', count)
  claimed[2 * count] = entry
  origins[count] = origin
end
-- The loop runs protected: if any step fails (an ACL refusing a command, say), what it popped is still
-- held before the error is raised.
local completed, failure = pcall(function()
-- One client waiting, and no weights, rate limits, cap or priorities: a visit per task would pop its
-- list's head again and again, so those tasks come in one LPOP with a count (then the loop below finds
-- the ring empty, or is not needed). A key of the wrong type leaves this to the loop, which heals it.
local head = not weighted and not limited and cap == 0 and not prioritized and redis.pcall('LRANGE', ring, 0, 1)
if head and head[1] and not head[2] then
  local client = head[1]
  local list = type(client) == 'string' and pendingPrefix .. client
  local entries = list and redis.pcall('LPOP', list, wanted)
  if list and (entries == false or (type(entries) == 'table' and not entries.err)) then
    local origin = { list = list, priority = priorityPrefix .. client, client = client }
    for _, entry in ipairs(entries or {}) do
      take(entry, origin)
    end
    if redis.call('LLEN', list) == 0 then
      redis.call('LREM', ring, -1, client)
      ringEmpty = true -- it was the ring's one client
    else
      stayed = true
    end
  end
end
while count < wanted do
  stayed = false
  local client
  local weight = 1
  local used = 0
  if weighted then
    -- The client at the head keeps the visit until it has used its weight.
    client = healingCall(faults, 'list', 'LINDEX', ring, 0)
    if client then
      weight = math.max(1, math.floor(numberOr(faults, weights .. ' ' .. client, redis.call('HGET', weights, client), 1)))
      used = numberOr(faults, credit .. ' ' .. client, redis.call('HGET', credit, client), 0)
    end
  else
    client = healingCall(faults, 'list', 'LMOVE', ring, ring, 'LEFT', 'RIGHT')
  end
  if not client then
    -- No client waits (the ring is empty): unless some are parked or throttled, nothing is pending, so
    -- the pending count is set right if anything (a quarantined list, a hand edit) made it drift.
    -- (Set to what this call popped, which holdAll then takes off.)
    if redis.call('EXISTS', parked, throttled) == 0 then
      local recorded = redis.pcall('GET', pendingCount)
      if type(recorded) == 'table' then
        recordFault(faults, pendingCount, 'was not an integer counter; reset')
        redis.call('DEL', pendingCount)
        recorded = nil
      end
      if recorded ~= tostring(count) then
        -- More counted than any client in reach held: some may be stranded off the ring (a lost ring key,
        -- a hand edit); the reaper's ring audit looks (countUnreachable reads this).
        if (tonumber(recorded) or 0) > count then
          redis.call('SET', base .. ':audit-wanted', redisMs())
        end
        redis.call('SET', pendingCount, count)
      end
    end
    ringEmpty = true
    break
  end
  -- A rate-limited client takes a token per task; with none left it leaves the ring until one is due.
  local rate = 0
  local tokens = 0
  if limited then
    local configured = redis.call('HGET', rates, client) or redis.call('HGET', rates, '*')
    rate = numberOr(faults, rates .. ' ' .. client, configured, 0)
    if rate > 0 then
      tokens = bucketTokens(buckets, client, rate, now)
    end
  end
  if rate > 0 and tokens < 1 then
    local due = now + math.ceil((1 - tokens) * 1000 / rate)
    if weighted then
      redis.call('LREM', ring, 1, client)
      redis.call('HDEL', credit, client)
    else
      redis.call('LREM', ring, -1, client)
    end
    redis.call('ZADD', throttled, due, client)
    keepBucket(buckets, client, tokens, now)
    if throttledUntil == 0 or due < throttledUntil then
      throttledUntil = due
    end
  else
    local list = pendingPrefix .. client
    local priority = priorityPrefix .. client
    local inFlight = 0
    if cap > 0 then
      inFlight = numberOr(faults, inflight .. ' ' .. client, redis.call('HGET', inflight, client), 0)
    end
    local entry = nil
    if cap == 0 or inFlight < cap then
      local score = nil
      local member = nil
      if prioritized then
        local popped = healingCall(faults, 'zset', 'ZPOPMIN', priority)
        if popped[1] then
          member = popped[1]
          entry = string.sub(member, 16)
          score = popped[2]
        end
      end
      if not entry then
        entry = healingCall(faults, 'list', 'LPOP', list)
      end
      if entry then
        used = used + 1
        take(entry, { list = list, priority = priority, score = score, member = member, client = client })
        if score then
          redis.call('DECR', prioritizedKey)
        end
        if cap > 0 then
          owners[count] = client
          inFlight = inFlight + 1
          redis.call('HSET', inflight, client, inFlight)
        end
      end
    end
    -- The client was rotated to the tail (weighted: unless its visit goes on). It leaves the ring when it
    -- has nothing left (this also drops a stale entry, so the loop always ends), and is parked when it
    -- has tasks left but is at its cap.
    local left = healingCall(faults, 'list', 'LLEN', list)
    if prioritized and left == 0 then
      left = healingCall(faults, 'zset', 'ZCARD', priority)
    end
    local capped = cap > 0 and inFlight >= cap
    if weighted then
      if left == 0 or capped or not entry or used >= weight then
        redis.call('HDEL', credit, client)
        if left > 0 and not capped then
          redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
        end
      else
        redis.call('HSET', credit, client, used)
      end
    end
    if left == 0 then
      redis.call('LREM', ring, -1, client)
    elseif capped then
      redis.call('LREM', ring, -1, client)
      redis.call('SADD', parked, client)
    end
    stayed = left > 0 and not capped
    if rate > 0 and entry then
      keepBucket(buckets, client, tokens - 1, now)
    end
  end
end
end)
holdAll(claimed, count, owners)
if not completed then
  error(failure)
end
if count > 0 and tonumber(lease) > now + tonumber(ARGV[5]) then
  -- Tasks held under an idle worker's long lease: the lease a worker holding tasks has.
  redis.call('ZADD', workers, now + tonumber(ARGV[5]), ARGV[2])
end
-- A tracked task is recorded running here (include/track.lua, trackClaimed): its worker needs no start call.
local started, keeps = {}, {}
for i = 1, count do
  local keep = trackClaimed(faults, base, ARGV[2], claimed[2 * i - 1], claimed[2 * i])
  if keep then
    started[#started + 1] = i
    keeps[#started] = keep
  end
end
local drained = 0
if ringEmpty or (not stayed and redis.call('LLEN', ring) == 0) then
  drained = 1
  -- Nothing waits: a token left on the bell (rung for work this claim took) would only wake a process to
  -- find nothing, so it goes.
  if wanted > 0 then
    redis.pcall('DEL', base .. ':bell')
  end
elseif #claimed > 0 then
  -- Work is left behind: the bell wakes one more idle process to share it (which rings again if it leaves
  -- work too), instead of every idle process at once.
  ringBell(base .. ':bell')
end
return { lost, claimed, throttledUntil, drained, started, keeps }
