/* The "barrier" map both XDP programs carry, for user space only: updating an element of
 * a map-in-map returns only after an RCU grace period, i.e. after every XDP program that
 * started before has finished. Writing it right after switching rule sets or Maglev
 * tables is how user space knows no packet still uses the old one. */
#ifndef __EBPFKIT_XDP_BARRIER_H
#define __EBPFKIT_XDP_BARRIER_H

struct barrier_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct barrier_inner);
} barrier SEC(".maps");

#endif
