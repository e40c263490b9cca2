-- include/batch.lua — shared by the scripts whose header says "Includes: batch".
-- Needs: guard, eventSeq
-- A task of a batch (stored form version 2, its batch id first after `v`) reports each settle to its batch
-- through its own slot, in the same script call as the settle: an event on `<base>:batch-events` (list),
-- `<seq>\n<batch id>\n<task id>\n<outcome>`, outcome s (succeeded), d (dead-lettered), c (cancelled) or p
-- (waiting again: requeued from dead letters); seq from the shard's sequence (include/eventSeq.lua), so the
-- batch's record applies each task's events in order however often they are folded (foldBatch-3.lua; reapers fold them, see lib/core/batches). Only the
-- default consumer group's runs count (its base is the root).
-- batchOf(entry)
--   { batch, id } for a batch child's entry (`<attempts>|{"v":2,"batch":...`), else nil (other entries
--   cost one string match). Read by a string match in the producer's field order; written otherwise
--   (another producer, escapes), decoded.
-- batchEvent(base, root, child, outcome)
--   Records `child`'s settle (nothing for a consumer group's copy other than the default group's: its base
--   is not the root).
-- batchFollow(task, what)
--   Batches' handler of a move (include/follow.lua): completed s, dead d, cancelled and dropped c, revived p;
--   the other moves (retried, requeued) leave the task in its batch's count as it was.
local function batchOf(entry)
  local batch, id = string.match(entry, '^%d+|{"v":2,"batch":"([^"\\]*)","id":"([^"\\]*)"')
  if batch then
    return { batch = batch, id = id }
  end
  if not string.find(entry, '^%d+|{"v":2,"batch":') then
    return nil
  end
  local ok, envelope = pcall(cjson.decode, string.sub(entry, string.find(entry, '|', 1, true) + 1))
  if not ok or type(envelope) ~= 'table' or type(envelope.batch) ~= 'string' or type(envelope.id) ~= 'string' then
    return nil
  end
  return { batch = envelope.batch, id = envelope.id }
end

local function batchEvent(base, root, child, outcome)
  if base ~= root then
    return
  end
  healingCall(base .. ':faults', 'list', 'RPUSH', base .. ':batch-events',
    string.format('%d', nextEventSeq(base)) .. '\n' .. child.batch .. '\n' .. child.id .. '\n' .. outcome)
end

local function batchFollow(task, what)
  local outcome = nil
  if what == 'completed' then
    outcome = 's'
  elseif what == 'dead' then
    outcome = 'd'
  elseif what == 'cancelled' or what == 'dropped' then
    outcome = 'c'
  elseif what == 'revived' then
    outcome = 'p'
  end
  if outcome then
    batchEvent(task.base, task.root, task.head, outcome)
  end
end
