import { describe, expect, it } from '@jest/globals';
import { RpcException } from '@nestjs/microservices';
import { MAX_ERROR_DATA, toErrorRecord } from '../../lib/core/model/dead-letter.js';
import { isReplyError, replyErrorOf } from '../../lib/core/model/reply.js';
import { TaskFailedError } from '../../lib/core/model/errors.js';

class NoNameError extends Error {}

describe('toErrorRecord', () => {
  it('keeps name, message, a string or number code, and a stack head', () => {
    const error = Object.assign(new TypeError('bad'), { code: 'E_BAD' });
    expect(toErrorRecord(error)).toMatchObject({
      name: 'TypeError',
      message: 'bad',
      code: 'E_BAD',
      stack: expect.stringMatching(/^TypeError: bad\n/),
    });
    expect(toErrorRecord(Object.assign(new Error('x'), { code: 404 })).code).toBe('404');
    expect(toErrorRecord(Object.assign(new Error('x'), { code: { nested: true } })).code).toBeUndefined();
  });

  it('names a subclass that left name as Error by its class (RpcException among them)', () => {
    expect(toErrorRecord(new NoNameError('n')).name).toBe('NoNameError');
    expect(toErrorRecord(new RpcException('r')).name).toBe('RpcException');
  });

  it("keeps an RpcException's payload as data, lifting its code", () => {
    expect(toErrorRecord(new RpcException({ code: 'E_X', message: 'm', n: 1 }))).toMatchObject({
      message: 'm',
      code: 'E_X',
      data: { code: 'E_X', message: 'm', n: 1 },
    });
    expect(toErrorRecord(new RpcException('plain'))).toMatchObject({ message: 'plain', data: 'plain' });
  });

  it('keeps a thrown plain object as data, and replaces data that is too large or circular by a note', () => {
    expect(toErrorRecord({ status: 'error', message: 'filtered' })).toEqual({
      name: 'Error',
      message: 'filtered',
      data: { status: 'error', message: 'filtered' },
    });
    const big = new RpcException({ blob: 'x'.repeat(MAX_ERROR_DATA) });
    expect(toErrorRecord(big).data).toMatch(/over 16384: not kept/);
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(toErrorRecord(new RpcException(circular)).data).toMatch(/not serializable/);
  });
});

describe('reply errors', () => {
  it("leave the stack out unless asked, and become a TaskFailedError on the caller's side", () => {
    const record = toErrorRecord(Object.assign(new RangeError('r'), { code: 'E_R' }));
    const about = { taskId: 't1', pattern: 'p', attempt: 2, reason: 'failed' as const };
    const reply = replyErrorOf(record, about, false);
    expect(reply).not.toHaveProperty('stack');
    expect(replyErrorOf(record, about, true).stack).toBe(record.stack);
    const sent = JSON.parse(JSON.stringify(reply)) as unknown;
    expect(isReplyError(sent)).toBe(true);
    expect(isReplyError({ status: 'error', message: 'Internal server error' })).toBe(false);
    const error = new TaskFailedError(sent as typeof reply);
    expect(error).toMatchObject({
      name: 'RangeError',
      message: 'r',
      code: 'E_R',
      taskId: 't1',
      pattern: 'p',
      attempt: 2,
      reason: 'failed',
    });
    expect(new TaskFailedError({ ...reply, code: undefined }).code).toBe('TASK_FAILED');
  });
});
