import { Test } from '@nestjs/testing';
import { RedisTaskClient, RedisTaskContext } from 'nestjs-redis-tasks';
import { AvatarService } from './avatar.service';
import { AvatarsController } from './avatars.controller';

describe('AvatarsController', () => {
  it('records the resized avatar and sums invoice lines (no Redis: the client is not used here)', async () => {
    const module = await Test.createTestingModule({
      controllers: [AvatarsController],
      providers: [AvatarService, { provide: RedisTaskClient, useValue: {} }],
    }).compile();
    const controller = module.get(AvatarsController);
    const context = new RedisTaskContext([
      { id: 't1', pattern: 'avatar.resize', clientId: 'default', attempt: 1, maxAttempts: 3, enqueuedAt: new Date(), workerId: 'w', group: 'default', signal: new AbortController().signal },
    ]);
    controller.resize({ userId: 7 }, context);
    expect(module.get(AvatarService).resized).toEqual([7]);
    expect(controller.total([1, 2, 3])).toBe(6);
  });
});
