-- enqueueTasks-7+n.lua
-- Purpose: enqueue tasks, all of one call or none: each goes to its client's pending tasks (list, or
--   priority set when it has a priority), or to the delayed set when it has a delay; a task with a
--   deduplication key is refused while another live task holds that key. When consumer groups other
--   than `default` are registered, every group gets its own copy (fan-out in the same call): a group's
--   keys are the shard's keys under `<root>:g:<group>` (`default`: the root itself), named here from
--   the root in ARGV[2] (same hash tag, so the same Cluster slot) because the groups are read in the script.
--   Never fails halfway (all or none holds even against broken data): the groups set is read before the
--   first write, and any key written that holds the wrong type (a client's list, the ring, the delayed
--   set, a deduplication key) is quarantined (see guard) and the write repeated; no extra command runs
--   unless a write fails.
-- Includes: guard, pushTask
-- Builds keys: a consumer group's keys are `<root>:g:<group>:...` (ARGV[2] is the root), named here because
--   the registered groups are read in this same atomic step; all share the tag, hence the Cluster slot.
-- KEYS[1]: ring (list of client ids with pending tasks)
-- KEYS[2]: delayed (sorted set: encoded entry -> due time, Redis time in milliseconds)
-- KEYS[3]: sequence (string counter; orders equal priorities)
-- KEYS[4]: placeholder for "no key" (any key of the queue; never touched)
-- KEYS[5]: prioritized (string counter of prioritized pending tasks)
-- KEYS[6]: groups (set of the consumer groups registered on the pattern shard)
-- KEYS[7]: faults (hash: broken data found and what was done; see guard)
-- KEYS[8..n+7]: pending lists, priority sets and deduplication keys the tasks use
-- ARGV[1]: channel told the due time of a delayed task that became the earliest
-- ARGV[2]: the shard's key root, `prefix:{pattern...}` (group keys are named from it)
-- ARGV[3..]: per task, 8 fields: index into KEYS of its client's pending list, index of its client's
--   priority set, client id, encoded entry, priority (0 = none), delay in ms (0 = none), index of its
--   deduplication key (4 = none), deduplication key TTL in ms; then its task id
-- Returns: array with one element per task: 0 when enqueued, or the id of the live task that holds its
--   deduplication key (the task was refused as a duplicate)
-- Side effects: (per group, with groups) RPUSH/ZADD onto pending lists and priority sets, ZADD onto the delayed set, SET NX PX of
--   deduplication keys, INCR of prioritized, RPUSH of a client id onto the ring when it had no pending task (waking blocked
--   workers); PUBLISH of a new earliest due time.
local results = {}
local earliest = nil
local now = nil
local n = 0
-- Groups other than `default` registered: each registered group gets a copy (keys named from the root).
local targets = nil
local bases = {}
for _, group in ipairs(redis.call('SMEMBERS', KEYS[6])) do
  if group == 'default' then
    bases[#bases + 1] = ARGV[2]
  else
    bases[#bases + 1] = ARGV[2] .. ':g:' .. group
    targets = bases
  end
end

local earliestByBase = {}
for a = 3, #ARGV, 9 do
  n = n + 1
  local dedup = tonumber(ARGV[a + 6])
  local holder = nil
  if dedup ~= 4 then
    if not redis.call('SET', KEYS[dedup], ARGV[a + 8], 'NX', 'PX', ARGV[a + 7]) then
      holder = redis.pcall('GET', KEYS[dedup])
      if type(holder) == 'table' then
        -- Not a deduplication key of ours (another type): set aside, then this task takes the key.
        quarantineKey(KEYS[7], KEYS[dedup], 'string')
        redis.call('SET', KEYS[dedup], ARGV[a + 8], 'NX', 'PX', ARGV[a + 7])
        holder = nil
      end
    end
  end
  if holder then
    results[n] = holder
  else
    results[n] = 0
    local delay = tonumber(ARGV[a + 5])
    if delay > 0 then
      if not now then
        local time = redis.call('TIME')
        now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      end
      local due = now + delay
      if targets then
        for _, base in ipairs(targets) do
          healingCall(base .. ':faults', 'zset', 'ZADD', base .. ':delayed', due, ARGV[a + 3])
          if not earliestByBase[base] or due < earliestByBase[base] then
            earliestByBase[base] = due
          end
        end
      else
        healingCall(KEYS[7], 'zset', 'ZADD', KEYS[2], due, ARGV[a + 3])
        if not earliest or due < earliest then
          earliest = due
        end
      end
    elseif targets then
      local client = ARGV[a + 2]
      for _, base in ipairs(targets) do
        pushTask(base .. ':pending:' .. client, base .. ':priority:' .. client, base .. ':ring', base .. ':sequence',
          base .. ':prioritized', client, ARGV[a + 3], tonumber(ARGV[a + 4]), false, base .. ':faults')
      end
    else
      pushTask(KEYS[tonumber(ARGV[a])], KEYS[tonumber(ARGV[a + 1])], KEYS[1], KEYS[3], KEYS[5], ARGV[a + 2], ARGV[a + 3],
        tonumber(ARGV[a + 4]), false, KEYS[7])
    end
  end
end
if earliest then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then
    redis.call('PUBLISH', ARGV[1], earliest)
  end
end
for base, due in pairs(earliestByBase) do
  local head = redis.call('ZRANGE', base .. ':delayed', 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= due then
    redis.call('PUBLISH', ARGV[1], due)
  end
end
return results
