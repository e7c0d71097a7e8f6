/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/kernfs.h>; every kernel type is already in vmlinux.h. */
#pragma once
