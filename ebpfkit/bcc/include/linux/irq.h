/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/irq.h>; every kernel type is already in vmlinux.h. */
#pragma once
