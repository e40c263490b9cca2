import { Body, Controller, Get, Param, Post } from '@nestjs/common';
import { firstValueFrom } from 'rxjs';
import { RedisTaskAdmin, RedisTaskClient, RedisTaskReaper } from 'nestjs-redis-tasks';

/**
 * Every result type of the public API, returned as it comes: no return type is written on purpose. With
 * the starter's `declaration: true`, `nest build` must name each inferred type in this file's .d.ts, which
 * it can only do for types the package exports (TS2883 otherwise).
 */
@Controller('ops')
export class OpsController {
  constructor(
    private readonly tasks: RedisTaskClient,
    private readonly admin: RedisTaskAdmin,
    private readonly reaper: RedisTaskReaper,
  ) {}

  @Post('emit')
  async emit(@Body() body: { userId: number }) {
    return firstValueFrom(this.tasks.emit('avatar.resize', body));
  }

  @Post('emit-observable')
  emitObservable(@Body() body: { userId: number }) {
    return this.tasks.emit('avatar.resize', body);
  }

  @Post('batch')
  async batch(@Body() body: { userIds: number[] }) {
    return this.tasks.emitBatch(
      'avatar.resize',
      body.userIds.map((userId) => ({ userId })),
    );
  }

  @Post('total')
  total(@Body() lines: number[]) {
    return this.tasks.send<number>('invoice.total', lines);
  }

  @Get('queues')
  queues() {
    return this.admin.queues();
  }

  @Get(':pattern/stats')
  stats(@Param('pattern') pattern: string) {
    return this.admin.stats(pattern);
  }

  @Get('workers')
  workers() {
    return this.admin.workers();
  }

  @Get(':pattern/groups')
  groups(@Param('pattern') pattern: string) {
    return this.admin.groups(pattern);
  }

  @Get(':pattern/dead')
  deadLetters(@Param('pattern') pattern: string) {
    return this.admin.listDeadLetters(pattern, { limit: 20 });
  }

  @Post(':pattern/dead/requeue')
  requeue(@Param('pattern') pattern: string) {
    return this.admin.requeueDeadLetters(pattern, 'all');
  }

  @Post(':pattern/dead/purge')
  purge(@Param('pattern') pattern: string) {
    return this.admin.purgeDeadLetters(pattern, 'all');
  }

  @Post(':pattern/groups/:group/remove')
  removeGroup(@Param('pattern') pattern: string, @Param('group') group: string) {
    return this.admin.removeGroup(pattern, group);
  }

  @Get(':pattern/weights')
  weights(@Param('pattern') pattern: string) {
    return this.admin.clientWeights(pattern);
  }

  @Post('sweep')
  sweep() {
    return this.reaper.sweep();
  }
}
