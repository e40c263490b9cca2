import { Controller, Param, ParseIntPipe, Post } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, RedisTaskContext } from 'nestjs-redis-tasks';
import { AvatarService } from './avatar.service';

@Controller()
export class AvatarsController {
  constructor(
    private readonly tasks: RedisTaskClient,
    private readonly avatars: AvatarService,
  ) {}

  /** HTTP: enqueue a resize and answer at once with the task id. */
  @Post('avatars/:userId/resize')
  async requestResize(@Param('userId', ParseIntPipe) userId: number): Promise<{ taskId: string }> {
    const receipt = await firstValueFrom(this.tasks.emit('avatar.resize', { userId }));
    return { taskId: receipt.id };
  }

  /** A task: runs in the worker (this same app, or another process). */
  @EventPattern<string>('avatar.resize')
  resize(@Payload() task: { userId: number }, @Ctx() ctx: RedisTaskContext): void {
    this.avatars.resize(task.userId);
    if (ctx.getAttempt() > 1) console.warn(`avatar ${task.userId}: attempt ${ctx.getAttempt()}`);
  }

  /** A task whose result goes back to send(). */
  @MessagePattern<string>('invoice.total')
  total(@Payload() lines: number[]): number {
    return lines.reduce((sum, line) => sum + line, 0);
  }
}
