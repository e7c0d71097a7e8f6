/* Per-task state for a program with each hook twice (tp_btf and raw_tp, see
 * tools/session.py's choose_typed_tracepoints): in the task itself where the task pointers are
 * typed (task storage: a pointer away, no hashing, freed with the task), else in an LRU hash by
 * tid (threads that are gone make room). Include after vmlinux.h, bpf_helpers.h and
 * bpf_core_read.h and ebpfkit.h.
 *
 *   EK_TASK_LOCAL(waits, struct waiting, 10240);
 *   struct waiting *w = waits_of(task, create, typed);
 *
 * defines the maps `waits` (task storage) and `waits_by_tid` (the hash): the session leaves out
 * the one its set does not use (typed_maps=("waits",), raw_maps=("waits_by_tid",)). */
#ifndef __EK_TASK_LOCAL_H
#define __EK_TASK_LOCAL_H

#define EK_TASK_LOCAL(name, vtype, hash_entries)                                                  \
	struct {                                                                                  \
		__uint(type, EK_MAP_TYPE_TASK_STORAGE);                                          \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                             \
		__type(key, int);                                                                 \
		__type(value, vtype);                                                             \
	} name SEC(".maps");                                                                      \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                              \
		__uint(max_entries, hash_entries);                                                \
		__type(key, __u32); /* tid */                                                     \
		__type(value, vtype);                                                             \
	} name##_by_tid SEC(".maps");                                                             \
	static vtype name##_zero;                                                                 \
	/* t's entry; with ``create``, made (zeroed) if it has none. */                           \
	static __always_inline vtype *name##_of(struct task_struct *t, bool create, bool typed)   \
	{                                                                                         \
		vtype *v;                                                                         \
		__u32 tid;                                                                        \
                                                                                                  \
		if (typed)                                                                        \
			return bpf_task_storage_get(&name, t, 0,                                  \
						    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0); \
		tid = BPF_CORE_READ(t, pid);                                                      \
		v = bpf_map_lookup_elem(&name##_by_tid, &tid);                                    \
		if (v || !create)                                                                 \
			return v;                                                                 \
		bpf_map_update_elem(&name##_by_tid, &tid, &name##_zero, BPF_NOEXIST);             \
		return bpf_map_lookup_elem(&name##_by_tid, &tid);                                 \
	}

#endif /* __EK_TASK_LOCAL_H */
