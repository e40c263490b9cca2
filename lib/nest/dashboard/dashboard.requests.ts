import { BadRequestException } from '@nestjs/common';
import type { DeadLetterFilter, DeadLetterSelection } from '../../core/admin/admin.js';
import { DEFAULT_GROUP } from '../../core/config/options.js';
import { validateClientId, validateGroup } from '../../core/config/rules.js';
import { DEAD_LETTER_REASONS, type DeadLetterReason } from '../../core/model/dead-letter.js';

/** The dashboard's requests read and checked: a bad value is a 400 naming it, before anything reaches Redis. */

/** Most dead letters an action may name by id. */
export const MAX_IDS = 1_000;

/** A consumer group named in a request (the default group when none). */
export function groupOf(value: unknown): string {
  if (value === undefined || value === '') return DEFAULT_GROUP;
  return checked(() => validateGroup('group', value), value as string);
}

/** A count named in a request: an integer from 0 to `max` (`fallback` when none). */
export function countOf(name: string, value: unknown, fallback: number, max: number): number {
  if (value === undefined || value === '') return fallback;
  const number = Number(value);
  if (!Number.isInteger(number) || number < 0 || number > max)
    throw new BadRequestException(`"${name}" must be an integer from 0 to ${max}`);
  return number;
}

/** A dead-letter filter named in a request (reason, client id). */
export function filterOf(source: Record<string, unknown>): DeadLetterFilter {
  const { reason, clientId } = source;
  if (reason !== undefined && reason !== '' && !DEAD_LETTER_REASONS.includes(reason as DeadLetterReason)) {
    throw new BadRequestException(`"reason" must be one of ${DEAD_LETTER_REASONS.join(', ')}`);
  }
  if (clientId !== undefined && clientId !== '') checked(() => validateClientId('clientId', clientId), clientId);
  return {
    ...(reason ? { reason: reason as DeadLetterReason } : {}),
    ...(clientId ? { clientId: clientId as string } : {}),
  };
}

/** `{ ids: [...] }`, `{ all: true }` (every dead letter) or `{ matching: { reason?, clientId? } }`. */
export function selectionOf(body: Record<string, unknown>): DeadLetterSelection {
  if (Array.isArray(body.ids)) {
    if (
      body.ids.length === 0 ||
      body.ids.length > MAX_IDS ||
      !body.ids.every((id) => typeof id === 'string' && id.length > 0 && id.length <= 200)
    ) {
      throw new BadRequestException(`"ids" must list 1 to ${MAX_IDS} task ids`);
    }
    return { ids: body.ids as string[] };
  }
  if (body.all === true) return 'all';
  if (typeof body.matching === 'object' && body.matching !== null) {
    const filter = filterOf(body.matching as Record<string, unknown>);
    return Object.keys(filter).length === 0 ? 'all' : { filter };
  }
  throw new BadRequestException('the request must name "ids", "all: true" or "matching"');
}

/** `value`, once `check` passed; its failure as a 400 (the library's prefix dropped). */
function checked<T>(check: () => void, value: T): T {
  try {
    check();
  } catch (error) {
    throw new BadRequestException((error as Error).message.replace(/^nestjs-redis-tasks: /, ''));
  }
  return value;
}
