/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/virtio.h>; its types are in vmlinux.h, and the
 * kernel's header brings the scatterlist helpers with it. */
#pragma once
#include <linux/scatterlist.h>
