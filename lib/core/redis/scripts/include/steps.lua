-- include/steps.lua — shared by the scripts whose header says "Includes: steps" (and by follow.lua).
-- Durable steps (`ctx.step`, `ctx.checkpoint`): a task's steps live in `<base>:steps:<id>` (hash; QueueKeys.steps
-- spells it), one per consumer group's copy: `r:<name>` a finished step's result, `f:<name>` its failures so far,
-- `cp` the checkpoint, `done` the number of finished steps. Written by saveStep-1.lua alone, only while the
-- worker holds the task under its fencing token, with a TTL of `keep` ms renewed at every write (the bound of a
-- task that ended on a path that never heard of its steps). The steps go when the task ends: completed,
-- dead-lettered, cancelled, dropped or superseded (follow.lua's end moves, revokeTask, startTasks, coalesceDrop).
-- stepsIdOf(entry)
--   The task id of an encoded entry: the first unescaped `,"id":"` of the envelope (a JSON string holds every
--   quote escaped, so no head field and no payload comes first), decoded when it holds escapes; nil when none.
-- stepsEnd(base, id)
--   The task `id` ended: its steps are deleted (DEL; nothing when it had none).
-- stepsEndEntry(base, entry)
--   The same, for the task of an encoded entry.
local function stepsIdOf(entry)
  local at = string.find(entry, ',"id":"', 1, true)
  if not at then
    return nil
  end
  local id = string.match(entry, '^,"id":"([^"\\]*)"', at)
  if id then
    return id
  end
  local bar = string.find(entry, '|', 1, true)
  local ok, envelope = pcall(cjson.decode, string.sub(entry, (bar or 0) + 1))
  if ok and type(envelope) == 'table' and type(envelope.id) == 'string' then
    return envelope.id
  end
  return nil
end

local function stepsEnd(base, id)
  if id and id ~= '' then
    redis.call('DEL', base .. ':steps:' .. id)
  end
end

local function stepsEndEntry(base, entry)
  if entry then
    stepsEnd(base, stepsIdOf(entry))
  end
end
