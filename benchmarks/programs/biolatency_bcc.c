// BCC dialect, biolatency-style: block request issue -> completion, a log2 histogram of
// microseconds per disk, from the block tracepoints (keyed by device and sector).
struct request_key {
	u32 dev;
	u64 sector;
};

struct disk_slot {
	u32 dev;
	u64 slot;
};

BPF_HASH(issued, struct request_key, u64, 10240);
BPF_HISTOGRAM(dist, struct disk_slot);

TRACEPOINT_PROBE(block, block_rq_issue)
{
	struct request_key key = {.dev = args->dev, .sector = args->sector};
	u64 now = bpf_ktime_get_ns();

	issued.update(&key, &now);
	return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete)
{
	struct request_key key = {.dev = args->dev, .sector = args->sector};
	u64 *since = issued.lookup(&key);

	if (!since)
		return 0;
	struct disk_slot slot = {.dev = args->dev, .slot = bpf_log2l((bpf_ktime_get_ns() - *since) / 1000)};
	issued.delete(&key);
	dist.increment(slot);
	return 0;
}
