-- enqueueTasks-1.lua
-- Purpose: enqueue tasks, all of one call or none: each goes to its client's pending tasks (list, or
--   priority set when it has a priority), or to the delayed set when it has a delay; a task with a
--   deduplication key is refused while another live task holds that key. When consumer groups other
--   than `default` are registered, every group gets its own copy (fan-out in the same call): a group's
--   keys are the shard's keys under `<root>:g:<group>` (`default`: the root itself).
--   Never fails halfway (all or none holds even against broken data): the groups set is read before the
--   first write, and any key written that holds the wrong type (a client's list, the ring, the delayed
--   set, a deduplication key) is quarantined (see guard) and the write repeated; no extra command runs
--   unless a write fails.
--   The producer's hottest call, so its request is small: one key, the shard's root, from which every
--   key is named here, and two fields per plain task (coalesced emits of one event-loop turn arrive as
--   one call). And its commonest call (plain tasks, no consumer group but `default`) takes a fast path
--   that runs before the helpers are defined (`-- @helpers` marks where they go) and builds no table
--   but the results: one RPUSH per task, one INCRBY and at most one ring RPUSH per call. At the first
--   task or reply it cannot take (a task with options, a key of the wrong type) it stops; the general
--   path, after the helpers, settles what the fast path owes for the tasks it pushed (the pending count,
--   ring entries, a priority set to quarantine) and goes on from that task. A call sent again (modes '2',
--   '3', '6' to '8' below; rare) skips the fast path: it is answered, or runs, after the helpers.
-- Includes: guard, pushTask, releaseClientSlot, coalesceEmit, track, body
-- Builds keys: every key is named from the root in KEYS[1] (`<base>:ring`, `<base>:pending:<client>`,
--   `<base>:priority:<client>`, `<root>:dedup:<key>`, `<root>:call:<id>`, ... as `QueueKeys` spells them; a test pins that
--   both agree) to keep the request small; all share the root's hash tag, hence its Cluster slot.
-- KEYS[1]: the shard's key root, `prefix:{pattern...}` (not a key itself; declared so the call goes to
--   the node of its slot)
-- ARGV[1] (optional; the Node producer always sends it): the call record, `{<mode><ttl>.<id>`: '{' (never
--   a client id's first character: client ids have no braces), the mode (one digit), the TTL of the record
--   in seconds, '.', and the call's id (unique to the call; the Node producer puts its deadline in it).
--   One field, a few dozen bytes: the hottest call stays small.
--   Mode '1': a first send: the tasks are written and the answer recorded under `<root>:call:<id>`.
--   Mode '2': the same call sent again (ioredis resends a command whose reply a reconnection lost): the
--   recorded answer is returned if the first send ran, else the call runs as a first send would.
--   Mode '3': written after the caller's deadline, again or first from a reconnection's queue (it was told
--   the call failed): the recorded answer, or -1 with nothing written.
--   Modes '4' to '8': a call of one connection, numbered in the order it was first written there (the Node
--   producer turns its mode '1' into these at the first write; see call-sequence.ts). The call id is
--   `<session>.<n>.<lowest>` (base 36): the connection's session, the call's number n, and the lowest number
--   of the session's calls to this root still unanswered when it was written. A first send that ran moves
--   the session's mark, `<root>:call:<session>`, to n when no lower call may still be sent again without
--   having run (lowest = n, or the mark at n - 1): one SET of a key that exists, not a key per call. Else,
--   and whenever an answer is not every task written, the answer is recorded under `<root>:call:<id>` as in
--   mode '1'. '4' a first send; '5' a first send that also renews the mark's TTL (EX the record's and 2 s;
--   the producer renews it at least every second);
--   '6' sent again, '7' sent again with a renewal: answered from the record, or as all written when n is at
--   or below the mark, else run as a first send; '8' written after the caller's deadline: answered so, or -1.
-- ARGV[1..] (or ARGV[2..]): per task, either 2 fields (a plain task): client id, encoded entry; or 8
--   fields (a task with options): '' (client ids are never empty), client id, encoded entry, priority
--   (0 = none), delay in ms (0 = none), deduplication key ('' = none), deduplication key TTL in ms, task id;
--   or 11 fields (a tracked task): ' ' (client ids have no spaces), the same 7, then how long its index is
--   kept once it ended (ms), while it waits or runs (ms), and a send() caller's reply channel ('' = none);
--   or 11 fields (a task with a coalescing key): '}' (client ids have no braces), client id, encoded entry,
--   priority, delay in ms (a debounce's delay), the coalescing key, task id, mode (r replace, d debounce,
--   k keep-last, s supersede), a debounce's longest wait in ms, a send() caller's reply channel ('' =
--   none), how long a reply is kept (ms); see include/coalesce.lua
-- Returns: array with one element per task: 0 when enqueued (or already enqueued: a deduplication key
--   held by the task's own id), or the id of the live task that holds its deduplication key (the task
--   was refused as a duplicate), or for a coalesced task '\1' and the id of the waiting task it replaced,
--   or '\2' and the id of the running task it superseded, or '\3' when the task's out-of-line payload
--   (include/body.lua) was gone (nothing of the task written); -1 (mode '3' only) when no answer is on record
-- Side effects: (per group, with groups) RPUSH/ZADD onto pending lists and priority sets, ZADD onto the delayed set, SET NX PX of
--   deduplication keys, INCR of prioritized, INCRBY of the pending count (once per call and group for the tasks pushed
--   inline), SET of a connection's mark (modes '4' to '7'), RPUSH of a client id onto the ring when it had no pending task (waking idle
--   workers: a token on `<base>:bell` unless it holds one, and PUBLISH on `<base>:wake` when the ring was empty); PUBLISH of a new earliest due time on `<root>:due`; SET EX of the call's record (with a
--   call record in ARGV[1]): the task count when every task was written, else 'j' and the results as JSON.
--   A tracked task written gets its index, `<base>:task:<id>` per group, and its entry key (trackCreate,
--   include/track.lua). A coalesced task writes its key's
--   record, `<base>:coalesce:<key>` per group (see include/coalesce.lua), and may replace the entry a
--   waiting task runs, or revoke a running task (HDEL from its worker's processing hash). A task whose entry
--   names an out-of-line payload (tasks with options and tracked ones only; include/body.lua): its body is
--   kept (PERSIST, COPY per group) when the task is written, deleted when it is refused as a duplicate.
local root = KEYS[1]
local count = #ARGV
-- Most clients named in one ring RPUSH (unpack's limit is a few thousand values).
local RING_SLICE = 1000
local a = 1
-- The call record's id and TTL (read from ARGV[1] where they are used, for a numbered call: see below).
local record = nil
local recordTtl = nil
-- A call numbered on its connection (modes '4' to '8'): its session's mark, its number and the lowest
-- unanswered one (base 36, as sent: equal numbers are equal strings), and whether it renews the mark's TTL.
local mark = nil
local seqText = nil
local lowestText = nil
local renews = false
-- The record's TTL and the call's id (a numbered call reads them only for a resend, a renewal or its own
-- record: each capture is a new string, and this runs on every emit).
local RECORD = '^{%d(%d+)%.(.+)$'
-- The record's mode (0: no record), and whether it is a resend: answered after the helpers are defined.
local mode = 0
local resent = false
if string.byte(ARGV[1] or '') == 123 then -- '{': a call record
  mode = (string.byte(ARGV[1], 2) or 0) - 48
  local session = nil
  if mode >= 4 and mode <= 8 then
    -- Three captures, no backtracking; the TTL and the whole call id are parsed later, where needed.
    session, seqText, lowestText = string.match(ARGV[1], '^{%d%d+%.(~[^.]+)%.(%w+)%.(%w+)$')
  elseif mode >= 1 and mode <= 3 then
    recordTtl, record = string.match(ARGV[1], RECORD)
  end
  if not (session or record) then
    error({ err = 'ERR nestjs-redis-tasks: ARGV[1] is no call record ({<mode><ttl seconds>.<call id>)' })
  end
  if session then
    mark = root .. ':call:' .. session
    renews = mode == 5 or mode == 7
  end
  a = 2
  resent = mode == 2 or mode == 3 or mode >= 6
end
-- Records the call's answer (a first send, or a resend whose first did not run), then returns it. A numbered
-- call moves its connection's mark to its number when every lower call that may still be sent again ran:
-- none was unanswered when it was written (its lowest is itself), or the mark holds the number just below.
-- That is one SET of a key that exists (its TTL kept; made, or renewed, with EX of the record's TTL and 2 s).
-- The call's own record is written when the mark may not move, or when not every task was written.
local function answer(results)
  if record or mark then
    local allWritten = true
    for i = 1, #results do
      if results[i] ~= 0 then
        allWritten = false
        break
      end
    end
    local moved = false
    if mark then
      if lowestText == seqText then
        moved = true
      else
        local at = redis.pcall('GET', mark)
        moved = type(at) == 'string' and (tonumber(at, 36) or -1) >= tonumber(seqText, 36) - 1
      end
      if moved and (renews or not redis.call('SET', mark, seqText, 'XX', 'KEEPTTL')) then
        -- No lower number can come after (every lower call ran, or was answered): the mark only rises. A key of
        -- another type there is replaced; one with no TTL gets it at the next renewal (at least every second).
        if not recordTtl then
          recordTtl, record = string.match(ARGV[1], RECORD)
        end
        redis.call('SET', mark, seqText, 'EX', tonumber(recordTtl) + 2)
      end
    end
    if not moved or not allWritten then
      if not recordTtl then
        recordTtl, record = string.match(ARGV[1], RECORD)
      end
      local value = allWritten and tostring(#results) or ('j' .. cjson.encode(results))
      redis.call('SET', root .. ':call:' .. record, value, 'EX', recordTtl)
    end
  end
  return results
end
local groups = redis.pcall('SMEMBERS', root .. ':groups')
if groups.err then
  -- Read before any write: name the key (a bare WRONGTYPE names none); nothing was changed.
  error({ err = string.sub(groups.err, 1, 9) == 'WRONGTYPE' and ('WRONGTYPE nestjs-redis-tasks: key ' .. root .. ':groups is not a set; nothing was changed (delete or rename the key to let the queue go on)') or groups.err })
end
local results = {}
local n = 0
-- What the fast path owes for the tasks it pushed: to the pending count, the clients that join the ring
-- (their first pending task), and the clients whose priority set holds another type.
local owedCount = 0
local owedRing = nil
local owedHeal = nil
if not resent and (groups[1] == nil or (groups[1] == 'default' and groups[2] == nil)) then
  local pending = root .. ':pending:'
  while a <= count do
    local client = ARGV[a]
    if client == '' or client == ' ' or client == '}' then
      break -- a task with options, tracked, or coalesced
    end
    local size = redis.pcall('RPUSH', pending .. client, ARGV[a + 1])
    if type(size) ~= 'number' then
      break -- the client's list holds another type (the failed push changed nothing)
    end
    if size == 1 then
      local queued = redis.pcall('ZCARD', root .. ':priority:' .. client)
      if type(queued) ~= 'number' then
        -- Quarantined below: then it is absent, so the client joins the ring.
        if owedHeal then owedHeal[#owedHeal + 1] = client else owedHeal = { client } end
        queued = 0
      end
      if queued == 0 then
        if owedRing then owedRing[#owedRing + 1] = client else owedRing = { client } end
      end
    end
    owedCount = owedCount + 1
    n = n + 1
    results[n] = 0
    a = a + 2
  end
  if a > count and not owedHeal then
    if type(redis.pcall('INCRBY', root .. ':pending-count', owedCount)) == 'number' then
      owedCount = 0
      if not owedRing then
        return answer(results)
      end
      local ringLength = #owedRing <= RING_SLICE and redis.pcall('RPUSH', root .. ':ring', unpack(owedRing))
      if type(ringLength) == 'number' then
        -- The ring was empty: its idle workers are told (what guard.lua's helper does, not defined yet).
        if ringLength == #owedRing then
          if redis.pcall('LLEN', root .. ':bell') == 0 then
            redis.call('RPUSH', root .. ':bell', '1')
          end
          redis.call('PUBLISH', root .. ':wake', '')
        end
        return answer(results)
      end
    end
  end
end
-- @helpers
-- How many fields of ARGV a task takes, by its first (see ARGV[1..] above): the general path steps by it, and
-- a resend answered from its connection's mark counts its tasks by it.
local function taskFields(marker)
  if marker == '' then
    return 8
  elseif marker == ' ' or marker == '}' then
    return 11
  end
  return 2
end
-- A call sent again (rare: it skipped the fast path, and nothing is written yet): answered from its record, or
-- from its connection's mark; else it runs as a first send, unless it came after its caller's deadline.
if resent then
  if mark then
    recordTtl, record = string.match(ARGV[1], RECORD)
  end
  local answered = redis.pcall('GET', root .. ':call:' .. record)
  if type(answered) ~= 'string' and mark then
    -- Its number at or below the connection's mark: it ran, and wrote every task (else its answer is on record).
    local at = redis.pcall('GET', mark)
    if type(at) == 'string' and (tonumber(at, 36) or -1) >= tonumber(seqText, 36) then
      local tasks = 0
      local i = 2
      while i <= count do
        i = i + taskFields(ARGV[i])
        tasks = tasks + 1
      end
      answered = tostring(tasks)
    end
  end
  if type(answered) == 'string' then
    if string.sub(answered, 1, 1) == 'j' then
      return cjson.decode(string.sub(answered, 2))
    end
    local written = {}
    for i = 1, tonumber(answered) do
      written[i] = 0
    end
    return written
  end
  if mode == 3 or mode == 8 then
    return -1
  end
end
-- The general path: whatever the fast path did not finish, from task `a` on.
local faults = root .. ':faults'
if owedHeal then
  for _, client in ipairs(owedHeal) do
    usableKey(faults, root .. ':priority:' .. client, 'zset')
  end
end
if owedCount > 0 then
  healingIncr(faults, root .. ':pending-count', owedCount, owedCount)
end
if owedRing then
  for i = 1, #owedRing, RING_SLICE do
    local slice = math.min(i + RING_SLICE - 1, #owedRing)
    local length = healingCall(faults, 'list', 'RPUSH', root .. ':ring', unpack(owedRing, i, slice))
    wakeWorkers(root .. ':ring', length, slice - i + 1)
  end
end
if a > count then
  return answer(results)
end
-- Every registered group gets a copy; with none registered yet, the tasks wait in the root's keys.
local bases = groupBases(root, groups)
-- Each base's keys that every call uses, named once per call (the others where they are needed).
local keysOf = {}
for i, base in ipairs(bases) do
  keysOf[i] = { base = base, ring = base .. ':ring', pendingCount = base .. ':pending-count', pending = base .. ':pending:',
    faults = base .. ':faults', owed = 0 }
end

local now = nil
local earliestByBase = {}
while a <= count do
  local client, entry, priority, delay, dedup, ttl, id
  local track = nil
  local coalesce = nil
  local body = nil
  local marker = ARGV[a]
  if marker == '}' then
    client, entry, priority, delay, dedup, id = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), '', ARGV[a + 6]
    coalesce = { key = ARGV[a + 5], mode = ARGV[a + 7], maxWait = tonumber(ARGV[a + 8]) or 0, reply = ARGV[a + 9], ttl = ARGV[a + 10] }
  elseif marker == '' or marker == ' ' then
    client, entry, priority, delay, dedup, ttl, id = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
    body = bodyOf(entry)
    if marker == ' ' then
      track = { keep = ARGV[a + 8], live = ARGV[a + 9], reply = ARGV[a + 10] }
    end
  else
    client, entry, priority, delay, dedup = ARGV[a], ARGV[a + 1], 0, 0, ''
  end
  a = a + taskFields(marker)
  n = n + 1
  local holder = nil
  if body and redis.call('EXISTS', root .. ':body:' .. body) == 0 then
    -- Its out-of-line payload is gone (its TTL ran out before this call ran): nothing of it is written.
    holder = '\3'
  elseif dedup ~= '' then
    local key = root .. ':dedup:' .. dedup
    if not redis.call('SET', key, id, 'NX', 'PX', ttl) then
      holder = redis.pcall('GET', key)
      if type(holder) == 'table' then
        -- Not a deduplication key of ours (another type): set aside, then this task takes the key.
        quarantineKey(root .. ':faults', key, 'string')
        redis.call('SET', key, id, 'NX', 'PX', ttl)
        holder = nil
      elseif holder == id then
        -- Held by this very task: the call ran before (sent again with no record of it). Written, once.
        holder = 0
      end
    end
  end
  if coalesce then
    if not now then
      now = redisMs()
    end
    for i, k in ipairs(keysOf) do
      local answer, due = coalesceEmit(k.base, root, coalesce, client, entry, priority, delay, id, now)
      if i == 1 then
        results[n] = answer
      end
      if due and (not earliestByBase[i] or due < earliestByBase[i]) then
        earliestByBase[i] = due
      end
    end
  elseif holder then
    results[n] = holder -- 0: this task, written before; '\3' its body is gone; else the live task that holds the key
    if body and holder ~= 0 and holder ~= '\3' then
      redis.call('DEL', root .. ':body:' .. body)
    end
  else
    results[n] = 0
    if body then
      bodyKeep(root, bases, body)
    end
    if delay > 0 then
      if not now then
        now = redisMs()
      end
      local due = now + delay
      for i, k in ipairs(keysOf) do
        healingCall(k.faults, 'zset', 'ZADD', k.base .. ':delayed', due, entry)
        if not earliestByBase[i] or due < earliestByBase[i] then
          earliestByBase[i] = due
        end
      end
    else
      for _, k in ipairs(keysOf) do
        local list = k.pending .. client
        -- The commonest task (no priority, its client's list sound) takes pushTask's tail push, inline: no
        -- key is named that it does not use (a tenth less Redis CPU per task). Anything else, pushTask.
        local size = priority == 0 and redis.pcall('RPUSH', list, entry)
        if type(size) == 'number' then
          if size == 1 then
            size = size + healingCall(k.faults, 'zset', 'ZCARD', k.base .. ':priority:' .. client)
          end
          k.owed = k.owed + 1
          if size == 1 then
            wakeWorkers(k.ring, healingCall(k.faults, 'list', 'RPUSH', k.ring, client), 1)
          end
        else
          -- A priority, or a client's list of another type (the failed RPUSH changed nothing).
          pushTask(list, k.base .. ':priority:' .. client, k.ring, k.base .. ':sequence', k.base .. ':prioritized', client, entry,
            priority, false, k.faults, k.pendingCount)
        end
      end
    end
    if track then
      if not now then
        now = redisMs()
      end
      for _, k in ipairs(keysOf) do
        trackCreate(k.base, k.faults, id, client, priority, delay, dedup, track, entry, now)
      end
    end
  end
end
-- The tasks pushed inline above, counted once per base (one INCRBY, not one per task).
for _, k in ipairs(keysOf) do
  if k.owed > 0 then
    healingIncr(k.faults, k.pendingCount, k.owed, k.owed)
  end
end
for i, due in pairs(earliestByBase) do
  local head = redis.call('ZRANGE', keysOf[i].base .. ':delayed', 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= due then
    redis.call('PUBLISH', root .. ':due', due)
  end
end
return answer(results)
