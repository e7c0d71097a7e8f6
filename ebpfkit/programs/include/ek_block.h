/* The block layer's tracepoint records, for programs that include vmlinux.h first. Their
 * names changed in 5.11 (the events became classes), their fields did not. Local flavours,
 * so neither name has to be in the compile's vmlinux.h: CO-RE matches "name___x" to the
 * kernel's "name", and a branch on bpf_core_type_exists() drops the one that is missing. */
#ifndef __EK_BLOCK_H
#define __EK_BLOCK_H

#define EK_BLOCK_BIO_RECORD(name)                                                                 \
	struct name {                                                                             \
		dev_t dev;                                                                        \
		sector_t sector;                                                                  \
		unsigned int nr_sector;                                                           \
		char rwbs[8];                                                                     \
	} __attribute__((preserve_access_index))
#define EK_BLOCK_RQ_DONE_RECORD(name)                                                             \
	struct name {                                                                             \
		dev_t dev;                                                                        \
		sector_t sector;                                                                  \
		unsigned int nr_sector;                                                           \
		int error;                                                                        \
		char rwbs[8];                                                                     \
	} __attribute__((preserve_access_index))

EK_BLOCK_BIO_RECORD(trace_event_raw_block_bio___511);       /* block_bio_queue, 5.11+ */
EK_BLOCK_BIO_RECORD(trace_event_raw_block_bio_queue___510); /* block_bio_queue, before */
EK_BLOCK_RQ_DONE_RECORD(trace_event_raw_block_rq_completion___511); /* block_rq_complete, 5.11+ */
EK_BLOCK_RQ_DONE_RECORD(trace_event_raw_block_rq_complete___510);   /* block_rq_complete, before */

#endif
