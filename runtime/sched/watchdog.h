/* A watchdog for runs that stop making progress (a device-side wait that never lands, a
 * deadlock between the main thread, the planner and the recall engine): with
 * PULSE_STACKS_AFTER_S=N in the environment, a thread watches the progress that
 * watchdog_kick reports (the serving loop kicks once a step) and, after N seconds without a
 * kick, prints on stderr the call stack of every thread of the process (each thread is sent a
 * signal whose handler writes its own backtrace), then the process's executable mappings so
 * that addresses resolve offline (addr2line -e pulse -f ADDR - BASE), and keeps watching
 * (another dump after N more seconds). Without the variable nothing starts and kicks cost an
 * atomic store. Linux only (the threads come from /proc/self/task). */
#ifndef PULSE_WATCHDOG_H
#define PULSE_WATCHDOG_H

/* Starts the watchdog when PULSE_STACKS_AFTER_S is a positive number of seconds (once per
 * process; later calls do nothing). */
void watchdog_start(void);
/* Progress: resets the watchdog's clock. */
void watchdog_kick(void);
/* Writes every thread's call stack on stderr now (what the watchdog does when it fires). */
void watchdog_dump(void);

#endif
