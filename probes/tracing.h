/* What the tracepoint programs (offcpu.bpf.c, io.bpf.c) share: a map of
 * user and kernel stacks, and counters of the events their maps' limits
 * cost, read back to say so in the capture. Include after bpf_helpers.h,
 * with DROPPED_KINDS defined to how many kinds of drop the program counts
 * (its header's enum of them ends in that count). */

enum tracing_limits {
	MAX_STACKS = 16384,
	STACK_DEPTH = 127,   /* frames of a stack */
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DROPPED_KINDS);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

static __always_inline void count_drop(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&dropped, &what);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* A hash map's value for key, made from zero if new (another CPU may make it
 * meanwhile: then it is there to add to); NULL where the map is full, that
 * drop counted as `full`. */
static __always_inline void *value_for(void *map, const void *key, const void *zero, __u32 full)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		count_drop(full);
	return v;
}
