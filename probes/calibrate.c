/* Calibration target: functions whose first instruction is known, so the
 * cost of a uprobe hit can be measured for each way the kernel handles it:
 * emulated (push, nop), single-stepped out of line (most instructions) and
 * endbr64. mysqlprobe starts this helper, probes it, and compares timed runs.
 *
 * stdin: "run NAME N" -> calls NAME N times, prints "ns TOTAL_NS"; "quit". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* each does nothing and returns; only the first instruction differs. Three
 * copies of each: one unprobed, one with an entry probe, one with both, so one
 * set of probes serves interleaved runs of the three. */
#define NOTHING_FN(name, first) \
	".globl " name "\n.type " name ",@function\n" \
	name ":\n\t" first "\n\tret\n.size " name ",.-" name "\n"
#define PUSH "pushq %rbp\n\tpopq %rbp"
#define STEP "movq %rdi,%rax"
__asm__(
	".text\n"
	NOTHING_FN("cal_push", PUSH) NOTHING_FN("cal_push_entry", PUSH) NOTHING_FN("cal_push_both", PUSH)
	NOTHING_FN("cal_step", STEP) NOTHING_FN("cal_step_entry", STEP) NOTHING_FN("cal_step_both", STEP)
	".globl cal_endbr\n.type cal_endbr,@function\n"
	"cal_endbr:\n\t.byte 0xf3,0x0f,0x1e,0xfa\n\tret\n.size cal_endbr,.-cal_endbr\n"
	/* a probed function calling another: checks the nested correction */
	".globl cal_outer\n.type cal_outer,@function\n"
	"cal_outer:\n\tpushq %rbp\n\tcall cal_push\n\tpopq %rbp\n\tret\n.size cal_outer,.-cal_outer\n");

void cal_push(void), cal_push_entry(void), cal_push_both(void);
void cal_step(void), cal_step_entry(void), cal_step_both(void);
void cal_endbr(void);
void cal_outer(void);

#define TARGET(fn) { #fn, fn }
static const struct { const char *name; void (*fn)(void); } targets[] = {
	TARGET(cal_push), TARGET(cal_push_entry), TARGET(cal_push_both),
	TARGET(cal_step), TARGET(cal_step_entry), TARGET(cal_step_both),
	TARGET(cal_endbr), TARGET(cal_outer),
};

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void)
{
	char line[128], name[64];
	unsigned long n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "run %63s %lu", name, &n) != 2) {
			printf("error bad command\n");
			continue;
		}
		void (*volatile fn)(void) = NULL;
		for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
			if (strcmp(targets[i].name, name) == 0)
				fn = targets[i].fn;
		if (!fn) {
			printf("error no function %s\n", name);
			continue;
		}
		long long t0 = now_ns();
		for (unsigned long i = 0; i < n; i++)
			fn();
		printf("ns %lld\n", now_ns() - t0);
	}
	return 0;
}
