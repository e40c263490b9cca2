import { randomBytes } from 'node:crypto';
import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { App } from 'supertest/types.js';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, RedisTaskTransport } from 'nestjs-redis-tasks';
import { createRedisTaskTestingApp, deleteRedisTaskPrefix, RedisTaskTestingApp } from 'nestjs-redis-tasks/testing';
import { AppModule } from './../src/app.module.js';
import { AvatarService } from './../src/tasks/avatar.service.js';
import { AvatarsController } from './../src/tasks/avatars.controller.js';
import { OpsModule } from './../src/tasks/ops.module.js';

const connection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

describe('tasks, the whole app (e2e)', () => {
  let app: INestApplication<App>;

  beforeAll(async () => {
    // Its own prefix: a dev server on the same Redis never takes this test's tasks.
    process.env.TASKS_PREFIX = `e2e-${randomBytes(4).toString('hex')}`;
    const moduleFixture = await Test.createTestingModule({ imports: [AppModule, OpsModule] }).compile();
    app = moduleFixture.createNestApplication();
    app.connectMicroservice({ strategy: new RedisTaskTransport({ connection, prefix: process.env.TASKS_PREFIX }) });
    await app.startAllMicroservices();
    await app.init();
  });

  afterAll(async () => {
    await app.close();
    // The whole app ran on this test's own prefix: nothing of it stays in Redis.
    const { deleted } = await deleteRedisTaskPrefix({ connection, prefix: process.env.TASKS_PREFIX! });
    expect(deleted).toBeGreaterThan(0);
  });

  it('POST /avatars/:id/resize enqueues a task the worker handles', async () => {
    const response = await request(app.getHttpServer()).post('/avatars/42/resize').expect(201);
    expect(response.body.taskId).toMatch(/^[\w-]{8,64}$/);
    const avatars = app.get(AvatarService);
    for (let i = 0; i < 500 && !avatars.resized.includes(42); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(avatars.resized).toContain(42);
  });

  it('serves the public result types as they come (OpsController: receipts, stats, sweep)', async () => {
    const receipt = await request(app.getHttpServer()).post('/ops/emit').send({ userId: 1 }).expect(201);
    expect(receipt.body).toMatchObject({ duplicate: false });
    const batch = await request(app.getHttpServer()).post('/ops/batch').send({ userIds: [2, 3] }).expect(201);
    expect(batch.body).toHaveLength(2);
    const stats = await request(app.getHttpServer()).get('/ops/avatar.resize/stats').expect(200);
    expect(stats.body).toMatchObject({ queue: 'avatar.resize', paused: false });
    const sweep = await request(app.getHttpServer()).post('/ops/sweep').expect(201);
    expect(sweep.body).toHaveProperty('recovered');
  });

  it('send() returns the handler result', async () => {
    const total = await firstValueFrom(app.get(RedisTaskClient).send<number>('invoice.total', [10, 20, 12]));
    expect(total).toBe(42);
  });
});

describe('tasks, with the shipped testing helper (e2e)', () => {
  let tasks: RedisTaskTestingApp;

  beforeAll(async () => {
    tasks = await createRedisTaskTestingApp({ controllers: [AvatarsController], providers: [AvatarService], connection });
  });

  afterAll(async () => {
    await tasks.close();
  });

  it('emits, drains, and sees the handler ran', async () => {
    const receipt = await firstValueFrom(tasks.client.emit('avatar.resize', { userId: 7 }));
    expect(receipt.duplicate).toBe(false);
    await tasks.drain('avatar.resize');
    expect(tasks.module.get(AvatarService).resized).toEqual([7]);
  });
});
