/* SPDX-License-Identifier: GPL-2.0 */
/* How user space attached an XDP program, kept in its configuration map for `status` (the
 * programs never read it). tables.py names the modes from this enum, through BTF. */
#ifndef __EK_XDP_MODE_H
#define __EK_XDP_MODE_H

enum ek_xdp_mode {
	EK_XDP_MODE_AUTO = 0,
	EK_XDP_MODE_NATIVE = 1,
	EK_XDP_MODE_GENERIC = 2,
};

#endif /* __EK_XDP_MODE_H */
