/* Latency histogram slots, shared by the BPF programs and the test that
 * checks probes/abi.py's slot_of() against this very code (it compiles
 * this header into a user-space program).
 *
 * log2 octaves of ns split in 4 linear sub-buckets (at most 25% wide).
 * v < 4: slot v. v >= 4 with e = floor(log2 v): slot 4*(e-1) + ((v >> (e-2)) & 3),
 * covering [2^e + sub*2^(e-2), 2^e + (sub+1)*2^(e-2)). Slot 159 ends at 2^41 ns. */
#ifndef MYSQLPROBE_HISTOGRAM_H
#define MYSQLPROBE_HISTOGRAM_H

#include <linux/types.h>

enum histogram_layout {
	HIST_SUB_BITS = 2,
	MAX_SLOTS = 160,
};

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

static __always_inline __u32 log2_u32(__u32 v)
{
	__u32 r, shift;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? log2_u32(hi) + 32 : log2_u32((__u32)v);
}

static __always_inline __u64 hist_slot(__u64 v)
{
	__u64 e, slot;

	if (v < (1 << HIST_SUB_BITS))
		return v;
	e = log2_u64(v);
	slot = ((e - 1) << HIST_SUB_BITS) | ((v >> (e - HIST_SUB_BITS)) & ((1 << HIST_SUB_BITS) - 1));
	return slot < MAX_SLOTS ? slot : MAX_SLOTS - 1;
}

#endif
