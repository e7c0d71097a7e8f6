/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: <linux/scatterlist.h>'s inline helpers over struct scatterlist (vmlinux.h's):
 * the low two bits of page_link mark a chain link and the list's end. */
#pragma once
#define SG_CHAIN 0x01UL
#define SG_END 0x02UL
#define sg_is_chain(sg) ((sg)->page_link & SG_CHAIN)
#define sg_is_last(sg) ((sg)->page_link & SG_END)
#define sg_chain_ptr(sg) ((struct scatterlist *)((sg)->page_link & ~(SG_CHAIN | SG_END)))
