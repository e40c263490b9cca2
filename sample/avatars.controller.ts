import { Controller, Logger } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { RedisTaskContext } from '../lib/index.js';
import { Progress } from './progress.js';

/** The worker side: each pattern is a queue; handlers run with `concurrency` at a time. */
@Controller()
export class AvatarsController {
  private readonly logger = new Logger(AvatarsController.name);

  constructor(private readonly progress: Progress) {}

  @EventPattern<string>('avatar.resize')
  async resize(@Payload() task: { userId: number; size: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    this.logger.log(
      `resizing avatar of user ${task.userId} to ${task.size}px for client "${ctx.getClientId()}" (task ${ctx.getTaskId().slice(0, 8)}, attempt ${ctx.getAttempt()})`,
    );
    await new Promise((resolve) => setTimeout(resolve, 20)); // pretend to work
    this.progress.done();
  }

  @MessagePattern('invoice.render')
  render(@Payload() invoice: { number: string }, @Ctx() ctx: RedisTaskContext): { url: string } {
    this.logger.log(`rendering invoice ${invoice.number} for client "${ctx.getClientId()}"`);
    return { url: `https://files.example.com/invoices/${invoice.number}.pdf` };
  }
}
