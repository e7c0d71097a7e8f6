/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/slab_def.h>; every kernel type is already in vmlinux.h. */
#pragma once
