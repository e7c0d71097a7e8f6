/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/netdevice.h>; its types are in vmlinux.h, and the
 * kernel's header brings the sk_buff helpers with it. */
#pragma once
#include <linux/skbuff.h>
