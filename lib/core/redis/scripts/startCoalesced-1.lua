-- startCoalesced-1.lua
-- Purpose: the step between a claim and the handler, for tasks with a coalescing key (latest wins): the
--   key's waiting task (its "slot") takes the newest entry emitted for the key (replaced while it
--   waited) into the worker's processing hash and is recorded running; a task older than its key's newest
--   (returned to its queue before a newer one came) leaves the worker without running, so an older payload
--   never runs after a newer one. See include/coalesce.lua for the record.
-- Includes: guard, pushTask, releaseClientSlot, coalesce
-- Builds keys: every key is named from the base in KEYS[1] (`<base>:processing:<worker>`,
--   `<base>:coalesce:<key>`, `<base>:counted`, `<base>:counters`, ... as `QueueKeys` spells them); all share the hash
--   tag, hence the Cluster slot. The result key of a task told it was replaced is named from the root the
--   key's record holds (`<root>:result:<id>`).
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- ARGV[1]: worker id; ARGV[2..]: per task, 2 fields: fencing token, the id of the task the worker claimed
-- Returns: array with one element per task: 1 run the task claimed; the entry to run instead (the key's
--   newest, now under the same token; also when a resent call finds it swapped already); 2 replaced: it
--   left the worker (do not run it); 0 no longer held (lease lost: nothing changed)
-- Side effects: HSET of the token's entry in the processing hash (the newest replaces the claimed one);
--   HDEL of the slot's fields and HSET of a runner field on the key's record; for a dropped task: HDEL
--   from the processing hash, its cap slot released (releaseClientSlot), HINCRBY counters replaced, its
--   send() caller told (SET of its result key, PUBLISH); a record of another type quarantined (see guard).
local base = KEYS[1]
local worker = ARGV[1]
local processing = base .. ':processing:' .. worker
local faults = base .. ':faults'
expectTypes(processing, 'hash')
if redis.call('EXISTS', base .. ':counted') == 1 then
  expectTypes(base .. ':counted', 'hash', base .. ':inflight', 'hash', base .. ':parked', 'set', base .. ':ring', 'list')
end
local results = {}
for i = 2, #ARGV, 2 do
  local token, claimed = ARGV[i], ARGV[i + 1]
  local entry = redis.call('HGET', processing, token)
  local c = entry and coalesceOf(entry)
  if not entry then
    results[#results + 1] = 0
  elseif not c then
    results[#results + 1] = 1
  else
    local record = coalesceKey(base, c.key)
    local fields = coalesceRead(faults, record)
    local run = entry
    if fields.id == c.id then
      -- The slot: it runs the newest entry of its key (its own, unless an emit replaced it meanwhile).
      if fields.latest and fields.last ~= c.id then
        run = fields.latest
        redis.call('HSET', processing, token, run)
      end
      redis.call('HDEL', record, unpack(COALESCE_SLOT))
      redis.call('HSET', record, 'r:' .. token, worker .. '\n' .. (fields.last or c.id) .. '\n' .. (fields.reply or c.reply) ..
        '\n' .. (fields.ttl or ''))
    elseif next(fields) == nil or fields.last == c.id then
      -- The newest of its key already (or its record is gone: it runs as claimed).
      if next(fields) ~= nil then
        redis.call('HSET', record, 'r:' .. token, worker .. '\n' .. c.id .. '\n' .. c.reply .. '\n' .. (fields.ttl or ''))
      end
    else
      coalesceDrop(base, processing, record, fields, c, token)
      run = nil
    end
    if not run then
      results[#results + 1] = 2
    elseif (run == entry and c.id or (coalesceOf(run) or {}).id) == claimed then
      results[#results + 1] = 1
    else
      results[#results + 1] = run
    end
  end
end
return results
